"""The test harness inside a running asymspec engine (probe.py's recordings, for `asymspec-vl doctor`, evals/stress
and the tests): the drafter logits the engine computed, with the tokens they belong to, for a caller to recompute
with transformers.

Installed only while a recording is on, from outside, as the other hooks are (_patching.py): it wraps the
proposer's `propose` (this proposer's attribute) and the sampler's `_logits` (the module function, recording only
for proposers with a recording on), and takes both wrappers off when the last recording stops. The hot path
carries no capture code. Two recordings:

  proposals  the first MAX_PROPOSALS proposals of each request, float32 on the host:
             a  on x_full at the draft positions: the drafter read x_full's prompt + y, then d_1 .. d_{K-1}
             b  on x_comp at the verified positions: the verifier's tokens (x_comp + y) and the drafts
  steps      at every verification step of a request (not a prefill chunk vLLM samples and discards): y (the
             committed output before the step, Algorithm 1's y), the drafts it verifies (d_1..d_n) and what the
             rule read: t [n+1, Vv] the verifier's (x_comp + y + d_1..d_j, j = 0..n), b [n+1, V] (the drafter on
             x_comp + y + d_1..d_j, j = 0..n), a [m, V] (x_full + y + d_1..d_{j-1}, j = 1..m; m = n, or n+1 for a
             fused bonus), q [n, V] (a sampling sd / scd row: the x_comp drafting logits its drafts were drawn
             from, x_comp + y + d_1..d_{j-1}, j = 1..n)
             `keep` (record's) bounds the entries held per request: evenly spread steps, the first and the
             latest always among them (thin_steps). At real vocabularies each entry is several [n+1, V] float32
             rows (about 9 MB at K = 4, V = 151,936): every step of a 64-request batch would be gigabytes.
The copies to the host wait for the device: never on outside a test.
"""

from __future__ import annotations

import weakref

import torch

from .. import sampler
from . import _patching

MAX_PROPOSALS = 4  # per request and view
KINDS = ("proposals", "steps")


class Recording:
    """What one proposer recorded: `proposals` (req_id -> {"x_full", "view", "a": [...], "b": [...]}) and `steps`
    (req_id -> one entry per verification step), each None while off."""

    def __init__(self):
        self.proposals: dict[str, dict] | None = None
        self.steps: dict[str, list[dict]] | None = None
        # at most this many step entries held per request (None: every step); see thin_steps
        self.keep: int | None = None

    @property
    def on(self) -> bool:
        return self.proposals is not None or self.steps is not None

    def _proposal(self, req_id: str) -> dict:
        return self.proposals.setdefault(
            req_id, {"x_full": None, "view": None, "a": [], "b": []}
        )

    def record_a(
        self, req_id: str, state, view: list[int], y: list[int], a: torch.Tensor
    ) -> None:
        """a: [K, V] of the proposal state.drafts, drafted after the x_full prompt `view` (what the drafter read
        as x_full's prompt) + y."""
        row = self._proposal(req_id)
        row["x_full"], row["view"] = tuple(state.request.x_full), tuple(view)
        if len(row["a"]) < MAX_PROPOSALS:
            row["a"].append(
                {"y": list(y), "drafts": list(state.drafts), "a": a.float().cpu()}
            )

    def record_step(
        self,
        proposer,
        req_ids: list[str],
        drafts: torch.Tensor,
        logits: dict[str, torch.Tensor],
    ):
        """logits: what the sampler gathered for these rows (t [G, n+1, V], and a, b where the rule reads them, a
        sampling sd / scd group's drafting logits under its method's name: recorded as q); drafts [G, n]."""
        requests = proposer.runner.requests
        read = {  # recorded name -> the sampler's
            ("q" if name not in ("t", "a", "b") else name): name for name in logits
        }
        if self.proposals is not None and "b" in logits:
            for req_id, row_drafts, row_b in zip(req_ids, drafts.tolist(), logits["b"]):
                row = self._proposal(req_id)
                if len(row["b"]) < MAX_PROPOSALS:
                    request = requests[req_id]
                    tokens = (
                        list(request.prompt_token_ids)
                        + list(request.output_token_ids)
                        + row_drafts
                    )
                    row["b"].append({"tokens": tokens, "b": row_b.float().cpu()})
        if self.steps is None or not read:
            return
        host = {
            as_: logits[name].float().cpu() for as_, name in read.items()
        }  # [G, *, V]
        discarded = _discarded(proposer.runner)
        for j, (req_id, row_drafts) in enumerate(zip(req_ids, drafts.tolist())):
            if req_id in discarded:
                continue
            y = proposer.row(req_id).committed(requests[req_id].output_token_ids)
            entry = {"y": [int(t) for t in y], "drafts": [int(d) for d in row_drafts]}
            entry.update({name: host[name][j].clone() for name in read})
            held = self.steps.setdefault(req_id, [])
            entry["step"] = held[-1]["step"] + 1 if held else 0
            held.append(entry)
            if self.keep is not None:
                held[:] = thin_steps(held, self.keep)


def thin_steps(held: list[dict], keep: int) -> list[dict]:
    """A request's step entries (their "step" indices ascending, the latest last) cut to at most `keep`: the latest
    always, and before it the steps at multiples of the smallest power-of-two stride that leaves at most keep - 1
    of them (step 0 always among them): evenly spread over the request however long it runs."""
    if len(held) <= keep:
        return held
    *before, latest = held
    if keep == 1:
        return [latest]
    stride = 1
    while sum(e["step"] % stride == 0 for e in before) > keep - 1:
        stride *= 2
    return [e for e in before if e["step"] % stride == 0] + [latest]


def _discarded(runner) -> set[str]:
    """This step's requests whose sample vLLM throws away (a prefill chunk that does not finish the prompt: the
    runner's discard_request_mask, gpu_model_runner.py `_prepare_inputs`): their t is read at a position inside the
    prompt and belongs to no verification step."""
    batch = runner.input_batch
    mask = runner.discard_request_mask.np[: batch.num_reqs]
    return {req_id for req_id, drop in zip(batch.req_ids, mask) if drop}


_recordings: weakref.WeakKeyDictionary = (
    weakref.WeakKeyDictionary()
)  # proposer -> Recording while one is on


def recording(proposer) -> Recording:
    """The proposer's recording (empty, off, when none is on)."""
    return _recordings.get(proposer) or Recording()


def record(proposer, kind: str, on: bool = True, keep: int | None = None) -> None:
    """Start (clearing) or stop one kind of recording on this proposer; the hooks are on while any is. keep: the
    step entries held per request (the steps recording; None: all)."""
    if kind not in KINDS:
        raise ValueError(f"unknown recording {kind!r}: one of {KINDS}")
    if keep is not None and keep < 1:
        raise ValueError(
            f"keep {keep}: at least 1 step entry per request, or None for all"
        )
    rec = _recordings.get(proposer) or Recording()
    setattr(rec, kind, {} if on else None)
    if kind == "steps":
        rec.keep = keep
    if rec.on:
        _recordings[proposer] = rec
        _install(proposer)
    else:
        _recordings.pop(proposer, None)
        proposer.__dict__.pop("propose", None)  # the class's propose again
    if not _recordings:
        _patching.unwrap(sampler, "_logits")


def hooked(proposer) -> bool:
    """Whether any harness hook reaches this proposer (its propose, or the sampler's _logits)."""
    return "propose" in proposer.__dict__ or _patching.is_patched(sampler._logits)


def _install(proposer) -> None:
    if "propose" not in proposer.__dict__:
        propose = proposer.propose

        def recorded_propose(plan, images=None):
            drafts = propose(plan, images)
            rec = _recordings.get(proposer)
            if rec is not None and rec.proposals is not None:
                for req_id, state, _ in plan.full_rows:
                    if req_id in drafts:
                        y = state.committed(
                            proposer.runner.requests[req_id].output_token_ids
                        )
                        rec.record_a(
                            req_id,
                            state,
                            proposer.full.rows[req_id].ledger.prompt,
                            y,
                            proposer.full.logits([req_id], state.K)[0],
                        )
            return drafts

        proposer.propose = recorded_propose
    _patching.install_function(sampler, "_logits", _recorded_logits)


def _recorded_logits(
    original, method, proposer, batch, logits, logits_indices, first, index, drafts, cfg
):
    out = original(
        method, proposer, batch, logits, logits_indices, first, index, drafts, cfg
    )
    rec = _recordings.get(proposer)
    if rec is not None:
        rec.record_step(proposer, [batch.req_ids[i] for i in index], drafts, out)
    return out
