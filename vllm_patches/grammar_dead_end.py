"""Dead ends of a structured output: a position where the grammar leaves no token the pair can commit.

vLLM's grammar bitmask (verifier ids) is already -inf in t when the sampler runs (gpu_model_runner.sample_tokens:
apply_grammar_bitmask, then _sample), so every rule chooses over the tokens the grammar allows; across a vocabulary
map every rule chooses over the shared set (core/vocab_align.py, vocab_sampling.py), so over shared ∩ allowed. A
dead end is a position where that set is empty (banned tokens and the stop tokens min_tokens holds excluded): a
grammar that needs a token only the verifier has, or one no token of the verifier spells. There the rule's argmax
(or draw) over an all -inf row is a token the grammar forbids, outside the shared set (the first cross-family run
committed verifier id 0, `<unk>`, and the drafter could not read it). So, for a row with a structured output whose
rule chose at a dead end (its position p = the drafts it accepted this step):
  p > 0   the step commits the accepted drafts d_1..d_p only (the grammar allowed each: vLLM cut the drafts to
          their longest prefix it accepts) and the row is noted as cut (rows.RequestRegistry.cut_steps: its
          statistics count p accepted drafts and no emitted token); the next step meets the dead end at p = 0
          (the grammar cuts every draft there: the drafter picks shared tokens only);
  p = 0   the request fails alone (GrammarDeadEndError naming the output position and the grammar; the client
          gets finish_reason "error" with every token committed before that position).
A step never commits a forbidden or unshared token, and every step before a dead end commits at least one token,
so a request cannot loop or stall there; the other rows of the batch are decided as they would be without it.
"""

from __future__ import annotations

import json

import torch

from asymspec_vl.core.errors import GrammarDeadEndError
from asymspec_vl.core.gate import select
from asymspec_vl.core.structured import KINDS

SPEC_CHARS = 80  # of the constraint, in the error message


def dead_ends(
    t: torch.Tensor, num_accepted: torch.Tensor, excluded: torch.Tensor | None
) -> torch.Tensor:
    """[G] bool: t [G, n+1, V] (the grammar's -inf applied) has no finite score outside `excluded` [V] bool (None:
    nothing excluded) at each row's position num_accepted [G]."""
    return no_choice(select(t, num_accepted.to(t.device)), excluded)  # [G]


def no_choice(scores: torch.Tensor, excluded: torch.Tensor | None) -> torch.Tensor:
    """[G] bool: scores [G, V] hold no finite score outside `excluded` [V] bool (None: nothing excluded)."""
    allowed = scores > float(
        "-inf"
    )  # NaN (a row all -inf under min_tokens' hold) is not allowed
    if excluded is not None:
        allowed &= ~excluded.to(scores.device)
    return ~allowed.any(dim=-1)


def constraint_text(params) -> str:
    """vLLM's StructuredOutputsParams as '<kind> <value>', the value cut to SPEC_CHARS characters."""
    for kind in (*KINDS, "structural_tag"):
        value = getattr(params, kind, None)
        if value is not None and value is not False:
            text = value if isinstance(value, str) else json.dumps(value)
            cut = text if len(text) <= SPEC_CHARS else text[:SPEC_CHARS] + "..."
            return f"{kind} {cut!r}"
    return "structured output"


def cut_dead_ends(
    proposer, batch, index, t, outcome, banned, committed
) -> list[list[int]]:
    """`committed` (a group's rows: outcome.committed(drafts)) with each row that has a structured output and chose
    at a dead end cut to its accepted drafts, or, none accepted, failed (an empty row). index: the group's batch
    rows; t [G, n+1, Vv] the logits its rule read; banned [Vv] bool or None: the group's banned tokens in the
    verifier's ids (across a map the tokens outside the shared set are excluded too, a mask built only for a group
    that holds a structured row)."""
    rows = [
        g
        for g, i in enumerate(index)
        if getattr(batch.params[i], "structured_outputs", None) is not None
    ]
    if not rows:
        return committed
    excluded = (
        banned
        if proposer.vmap is None
        else proposer.vmap.verifier_banned(banned, t.device)
    )  # [Vv] bool or None
    sel = torch.tensor(rows, device=t.device)
    n_acc = outcome.num_accepted.to(t.device)[sel]  # [G']
    ends = dead_ends(t[sel], n_acc, excluded)
    read = torch.stack([n_acc, ends.long()]).tolist()  # one device-to-host read
    for g, p, end in zip(rows, *read):
        if not end:
            continue
        req_id = batch.req_ids[index[g]]
        state = proposer.row(req_id)
        if state.failed:
            continue  # already failing: its step's tokens are dropped
        if p:
            committed[g] = committed[g][:p]
            proposer.registry.cut_steps.add(req_id)
            continue
        committed[g] = []
        params = batch.params[index[g]]
        position = state.num_committed(batch.outputs[index[g]])
        allowed = int((t[g, 0] > float("-inf")).sum())
        across = (
            f"no token of the {proposer.vmap.size} the drafter and the verifier share"
            if proposer.vmap is not None
            else "no token the request may commit"
        )
        proposer.fail(
            req_id,
            state,
            dead_end_error(
                params.structured_outputs, position, across, f"{allowed} verifier"
            ),
        )
    return committed


def dead_end_error(
    constraint, position: int, across: str, allowed: str, who: str = "the pair"
) -> GrammarDeadEndError:
    """The error a request ends with at a dead end: its constraint (vLLM's StructuredOutputsParams), its output
    position, what it may commit there (`across`: none of it), how many tokens of which model the grammar allows
    there, and who cannot continue."""
    return GrammarDeadEndError(
        f"the structured output ({constraint_text(constraint)}) allows {across} at output position {position} (it "
        f"allows {allowed} tokens there; banned tokens and stop tokens held by min_tokens excluded): {who} "
        f"cannot continue under this grammar. The answer so far ({position} tokens) is kept."
    )
