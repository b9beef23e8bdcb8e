"""Dead ends of a structured output on a plain engine (vLLM's own Sampler): a structured row whose sampler has no
token left to choose fails that request alone with grammar_dead_end.py's GrammarDeadEndError.

vLLM's runner applies the grammar's bitmask to the logits, then samples (gpu_model_runner.sample_tokens:
apply_grammar_bitmask, then _sample); its Sampler casts them to float32 and runs apply_logits_processors: the
allowed_token_ids mask, bad words, the processors that can change an argmax (min_tokens' held stop tokens,
logit_bias) and the penalties (v1/sample/sampler.py). What they leave finite is the row's choice; temperature, min_p,
top-k and top-p never empty it (each keeps the row's best token). A row with nothing finite left is a dead end: its
greedy argmax is id 0 (the first same-family Floor run under min_tokens and a choice committed [91, 92, 0, 0, 0, 2],
finish_reason "stop"), a token the grammar forbids and, for the drafter alone across a map, one outside the shared
set its allowed_token_ids keep. The test reads those processed logits (no processor re-implemented: a hook on
Sampler.apply_logits_processors, hooks/plain_sampler_patch.py) and only on a step whose batch holds a structured row
(vLLM's GrammarOutput lists them; none: no grammar, nothing runs). Its result, [2, B] integers, is copied to the
host without blocking and read after vLLM's own step has synchronised (see `Watch.look`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..grammar_dead_end import dead_end_error, no_choice

WATCH_ATTR = "asymspec_dead_end_watch"  # vLLM Sampler attribute: the Watch of the step being sampled


@dataclass
class Watch:
    """A step's structured rows on a plain engine and, once sampled, which of them met a dead end."""

    rows: list[int]  # their batch indices (logits rows: a plain engine has no drafts)
    req_ids: list[str]
    positions: list[int]  # each one's output position: the tokens it has committed
    constraints: list  # each one's StructuredOutputsParams
    # [2, B] int64 on the host: dead end (0/1), tokens the grammar allows
    read: torch.Tensor | None = None

    def look(self, logits: torch.Tensor, process) -> torch.Tensor:
        """`process(logits)`: vLLM's processors on the step's logits [B, V] (in place); returns the processed
        logits, noting which rows have no finite score left. Every row is tested and the structured ones are
        picked on the host: no index tensor goes to the device (a blocking copy that would stall async
        scheduling). The note's copy to the host does not block: without async scheduling vLLM's bookkeeping
        reads the sampled tokens later on the same stream (a sync), with it AsyncGPUModelRunnerOutput's copy
        stream waits on this stream before its event (vLLM copies its sampled tokens to the host the same way)."""
        allowed = (logits > float("-inf")).sum(dim=-1)  # [B], the grammar's
        processed = process(logits)
        ends = no_choice(processed, None)  # [B]
        self.read = torch.stack([ends.long(), allowed]).to("cpu", non_blocking=True)
        return processed

    def errors(self) -> dict[str, str]:
        """req_id -> "GrammarDeadEndError: ..." for each structured row that met a dead end this step."""
        if self.read is None:
            return {}
        ends, allowed = self.read.tolist()
        errors = {}
        for row, req_id, position, constraint in zip(
            self.rows, self.req_ids, self.positions, self.constraints
        ):
            if ends[row]:
                err = dead_end_error(
                    constraint,
                    position,
                    "no token the request may commit",
                    f"{allowed[row]} of the engine's",
                    "the engine",
                )
                errors[req_id] = f"{type(err).__name__}: {err}"
        return errors


def watch(runner, grammar_output) -> Watch | None:
    """The Watch of a plain engine's step, set on its Sampler; None (and none set) when no row of the batch has
    a grammar this step (grammar_output: vLLM's GrammarOutput or None), or when vLLM's own speculative decoding runs
    (EAGLE, ngram: the plugin is installed in every vLLM process; its rejection sampler's logits rows are not
    the batch's rows, and its bonus rows hold no dead-end rule here)."""
    setattr(runner.sampler, WATCH_ATTR, None)
    if grammar_output is None or not grammar_output.structured_output_request_ids:
        return None
    if runner.speculative_config is not None:
        return None
    index = runner.input_batch.req_id_to_index
    req_ids = [
        r for r in grammar_output.structured_output_request_ids if r in index
    ]  # the rows sampled this step
    if not req_ids:
        return None
    states = [runner.requests[r] for r in req_ids]
    found = Watch(
        [index[r] for r in req_ids],
        req_ids,
        [len(s.output_token_ids) for s in states],
        [s.sampling_params.structured_outputs for s in states],
    )
    setattr(runner.sampler, WATCH_ATTR, found)
    return found


def unwatch(runner) -> None:
    setattr(runner.sampler, WATCH_ATTR, None)
