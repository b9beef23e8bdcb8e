"""Structured outputs on an asymspec engine, on stand-ins: vLLM's runner masks the verifier's logits t with the
grammar bitmask before our sampler reads them, so no method's rule (the gate, the fused token argmax(t + βδ), the
bonus, SD's and SCD's targets, Floor's greedy token) can emit a token the grammar forbids; and the hidden tokens
never advance a request's grammar."""

import types

import numpy as np
import pytest
import torch

from asymspec_vl.core.config import AsymSpecConfig
from asymspec_vl.core.methods import METHODS
from vllm_patches.drafter.proposer import AsymSpecProposer
from vllm_patches.hooks import grammar_patch, runner_patch, scheduler_patch
from vllm_patches.hooks.runner_state import RunnerState
from vllm_patches.hooks.scheduler_patch import SchedulerState

V = 8
ALLOWED = (
    {3, 4, 6},
    {1, 2},
)  # the grammar's tokens at the first verified position, and after the first draft


class Sampled(Exception):
    """Raised by the stand-in right after _sample: carries our sampler's output out of vLLM's sample_tokens."""


def _row(*values):
    row = torch.zeros(V)
    for token, value in values:
        row[token] = value
    return row


# req_id -> (mode, drafts, t rows, b rows, a rows); each t row's unmasked argmax is a token the grammar forbids
CASES = {
    # d_1 = 3 rejected by the gate; unmasked, the fused argmax(t + βδ) would be 7 (t 10, δ +10): masked, 6 (δ 3)
    "fused": (
        "asymspec",
        [3],
        [_row((7, 10), (4, 1), (6, 0.5)), _row((0, 10), (1, 2))],
        [_row((3, 5)), _row()],
        [_row((3, 5), (7, 10), (6, 3))],
    ),
    # d_1 = 4 accepted; unmasked, the bonus argmax(t_2) would be 0: masked, 1
    "bonus": (
        "asymspec",
        [4],
        [_row((0, 9), (4, 8)), _row((0, 10), (1, 2), (2, 1))],
        [_row(), _row()],
        [_row()],
    ),
    # SD: d_1 = 6 is the masked argmax (unmasked it is 7: rejected), then the bonus 2 (unmasked 0)
    "sd": (
        "sd",
        [6],
        [_row((7, 10), (6, 5)), _row((0, 9), (2, 3))],
        [_row(), _row()],
        None,
    ),
    # SCD: only 7 is plausible unmasked; masked, 4 (accepted), then 1
    "scd": (
        "scd",
        [4],
        [_row((7, 10), (4, 6), (3, 5.9)), _row((0, 10), (1, 3), (2, 1))],
        [_row(), _row()],
        None,
    ),
    # Floor: no drafts, the verifier's greedy token: 6 (unmasked 7)
    "floor": ("floor", [], [_row((7, 10), (6, 2))], [_row()], None),
}
EXPECTED = {"fused": [6], "bonus": [4, 1], "sd": [6, 2], "scd": [4, 1], "floor": [6]}


class Drafter:
    """The proposer as the sampler reads it: rows, b at token indices, the stored a."""

    capture = step_capture = None
    world_size = 1
    step_logits = AsymSpecProposer.step_logits
    vmap = None  # one vocabulary

    def __init__(self):
        self.rows = {
            req_id: types.SimpleNamespace(
                request=types.SimpleNamespace(
                    cfg=AsymSpecConfig(K=2), num_draft_logits=len(drafts), stop_ids=()
                ),
                method=METHODS[mode],
                rule_cfg=AsymSpecConfig(K=2),
                failed=False,
                banned_ids=(),
                banned=None,
                reemit=None,
                prime=None,
            )
            for req_id, (mode, drafts, *_) in CASES.items()
        }
        self.b = torch.cat(
            [torch.stack(b) for _, _, _, b, _ in CASES.values()]
        )  # [num_rows, V]
        self.a = {
            req_id: torch.stack(a) for req_id, (*_, a) in CASES.items() if a is not None
        }
        self.comp = types.SimpleNamespace(
            logits=lambda token_index: self.b[token_index]
        )
        self.full = types.SimpleNamespace(
            logits=lambda req_ids, n: torch.stack([self.a[r][:n] for r in req_ids])
        )

    def row(self, req_id):
        return self.rows[req_id]


def bitmask() -> np.ndarray:
    """The scheduler's grammar bitmask: 1 + num_drafts rows per request, in request order; bit i allows token i."""
    rows = []
    for _, drafts, *_ in CASES.values():
        for allowed in ALLOWED[: 1 + len(drafts)]:
            rows.append([sum(1 << i for i in allowed)])
    return np.array(rows, dtype=np.int32)


def run_sample_tokens(apply_mask=True):
    """vLLM's GPUModelRunner.sample_tokens (the CPU runner's too) on a stand-in runner whose _sample is our hook:
    the tokens our sampler commits for each case."""
    from vllm.v1.core.sched.output import GrammarOutput
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    req_ids = list(CASES)
    num_drafts = [len(drafts) for _, drafts, *_ in CASES.values()]
    logits = torch.cat(
        [torch.stack(t) for _, _, t, _, _ in CASES.values()]
    )  # [num_rows, V]
    spec_meta = types.SimpleNamespace(
        num_draft_tokens=num_drafts,
        draft_token_ids=torch.tensor(
            [d for _, drafts, *_ in CASES.values() for d in drafts]
        ),
    )
    scheduler_output = types.SimpleNamespace(
        scheduled_spec_decode_tokens={
            r: list(CASES[r][1]) for r in req_ids if CASES[r][1]
        }
    )

    def update_states_after(sampled, *args):
        raise Sampled(sampled)

    runner = types.SimpleNamespace(
        vllm_config=types.SimpleNamespace(
            speculative_config=types.SimpleNamespace(method="asymspec")
        ),
        drafter=Drafter(),
        asymspec=RunnerState(logits_indices=torch.arange(logits.shape[0])),
        input_batch=types.SimpleNamespace(
            req_ids=req_ids,
            num_reqs=len(req_ids),
            max_num_logprobs=None,
            num_logprobs={},
            update_async_output_token_ids=lambda: None,
        ),
        sampler=None,
        requests={
            r: types.SimpleNamespace(output_token_ids=[5], sampling_params=None)
            for r in req_ids
        },
        execute_model_state=(scheduler_output, logits, spec_meta) + (None,) * 7,
        _update_states_after_model_execute=update_states_after,
    )
    runner._sample = lambda lg, meta: runner_patch.sample(None, runner, lg, meta)
    grammar = GrammarOutput(req_ids, bitmask()) if apply_mask else None
    with pytest.raises(Sampled) as sampled:
        GPUModelRunner.sample_tokens(runner, grammar)
    out = sampled.value.args[0].tolist()
    return {r: [x for x in row if x >= 0] for r, row in zip(req_ids, out)}


def test_every_rule_reads_the_grammar_masked_logits_and_never_emits_a_forbidden_token():
    """Each case's unmasked choice is a forbidden token (the fused token: δ = +10 on it): masked before our sampler
    (apply_grammar_bitmask, then _sample), the gate, fusion, bonus, SD, SCD and Floor all choose allowed ones."""
    got = run_sample_tokens()
    assert got == EXPECTED
    for req_id, tokens in got.items():
        drafts = CASES[req_id][1]
        for j, token in enumerate(tokens):
            assert token in ALLOWED[j if j < len(drafts) + 1 else -1]


def test_without_the_mask_the_stand_ins_choose_forbidden_tokens():
    """The same batch with no grammar: every case emits a forbidden token, so the test above can fail."""
    got = run_sample_tokens(apply_mask=False)
    assert got == {"fused": [7], "bonus": [4, 0], "sd": [7], "scd": [7], "floor": [7]}


def test_fused_scores_stay_minus_infinity_where_the_grammar_masks_t():
    """t + βδ at a masked entry (t = -inf) is -inf for every finite δ, and for δ = ±inf (undefined: -inf), never
    NaN (which argmax would pick)."""
    from asymspec_vl.core import gate

    t = torch.tensor([[-float("inf"), -float("inf"), -float("inf"), 0.0]])
    delta = torch.tensor([[float("inf"), -float("inf"), 1e30, 0.0]])
    fused = gate.fuse(
        t, gate.context_delta(delta, torch.zeros_like(delta), t, "contrastive"), 2.0
    )
    assert fused[0, :3].tolist() == [-float("inf")] * 3
    assert gate.greedy(fused).item() == 3


# -- the hidden tokens and the grammar (scheduler side) ------------------------------------------------
class Manager:
    """vLLM's StructuredOutputManager as update_from_output uses it."""

    def should_advance(self, request):
        return request.use_structured_output


def test_a_hidden_token_leaves_the_grammar_alone_and_the_manager_is_restored():
    manager = Manager()
    scheduler = types.SimpleNamespace(structured_output_manager=manager)
    primed, other = (
        types.SimpleNamespace(use_structured_output=True) for _ in range(2)
    )
    with grammar_patch.hidden_tokens_skip_grammar(scheduler, [primed, None]):
        assert not manager.should_advance(primed)
        assert manager.should_advance(other)
    assert "should_advance" not in vars(manager) and manager.should_advance(primed)


def test_update_from_output_skips_the_grammar_for_a_step_that_emits_a_hidden_token(
    monkeypatch,
):
    """scheduler_patch.update_from_output: while vLLM's update_from_output runs, a request whose output starts
    with its prime (or re-emitted) token does not advance its grammar; the others do."""
    from vllm_patches.requests import hidden_tokens

    seen = {}
    manager = Manager()

    def original(scheduler, scheduler_output, runner_output):
        seen.update(
            {
                r: manager.should_advance(scheduler.requests[r])
                for r in scheduler.requests
            }
        )
        return {}

    def request(prime=False, reemit=False):
        state = scheduler_patch.RequestState(2, "asymspec", prime, 0)
        state.hidden.reemit = reemit
        return types.SimpleNamespace(
            use_structured_output=True,
            num_output_tokens=1,
            sampling_params=types.SimpleNamespace(min_tokens=0),
            **{scheduler_patch.STATE_ATTR: state},
        )

    scheduler = types.SimpleNamespace(
        vllm_config=types.SimpleNamespace(
            speculative_config=types.SimpleNamespace(method="asymspec")
        ),
        structured_output_manager=manager,
        asymspec=SchedulerState(facts=None, pool=None),
        requests={
            "primed": request(prime=True),
            "resumed": request(reemit=True),
            "decoding": request(),
        },
    )
    scheduler_output = types.SimpleNamespace(
        num_scheduled_tokens={r: 1 for r in scheduler.requests},
        scheduled_spec_decode_tokens={},
    )
    runner_output = types.SimpleNamespace(sampled_token_ids=[], req_id_to_index={})
    monkeypatch.setattr(
        hidden_tokens, "prime_passes_stop_check", lambda requests: _null()
    )
    scheduler_patch.update_from_output(
        original, scheduler, scheduler_output, runner_output
    )
    assert seen == {"primed": False, "resumed": False, "decoding": True}


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


# -- the fused Triton gate kernel (the GPU path of decide_asymspec) on grammar-masked t ---------------------------
@pytest.mark.usefixtures("one_torch_thread")
@pytest.mark.filterwarnings(
    "ignore:Conversion of an array with ndim:DeprecationWarning"
)
@pytest.mark.parametrize("bonus", ["verifier", "fused"])
def test_the_kernel_on_a_grammar_mask_equals_the_reference_and_emits_allowed_tokens(
    bonus,
):
    """A grammar leaves a handful of tokens per position (t = -inf elsewhere, across blocks and chunks) while δ
    favours forbidden ones: the kernel (Triton's interpreter here, compiled on a GPU) decides as gate.asymspec_step
    does and emits only allowed tokens."""
    from asymspec_vl.core import gate
    from tests.core.kernels.test_kernels import run_padded

    g = torch.Generator().manual_seed(3)
    B, K, V = 4, 3, 300
    a, b, t = (torch.randn(B, K + 1, V, generator=g) * 2 for _ in range(3))
    allowed = torch.zeros(B, K + 1, V, dtype=torch.bool)
    for i in range(B):
        for j in range(K + 1):
            allowed[i, j, torch.randperm(V, generator=g)[:3]] = True
    t = t.masked_fill(~allowed, float("-inf"))
    a = a + 20.0 * (~allowed)  # δ = a - b: +20 on every forbidden token
    drafts = torch.stack(
        [
            torch.multinomial(allowed[i, :K].float(), 1, generator=g)[:, 0]
            for i in range(B)
        ]
    )
    drafts[0, 0] = int(
        (~allowed[0, 0]).nonzero()[0]
    )  # one forbidden draft (vLLM's scheduler would cut it)
    cfg = AsymSpecConfig(K=K, bonus=bonus, beta=1.0)
    ref = gate.asymspec_step(a, b, t, drafts, cfg)
    out = run_padded(a, b, t, drafts, cfg, None, None, block=64, chunks=2)
    assert torch.equal(out.num_accepted, ref.num_accepted) and torch.equal(
        out.token, ref.token
    )
    assert int(ref.num_accepted[0]) == 0  # the forbidden draft is rejected
    for i in range(B):
        assert allowed[i, int(ref.num_accepted[i]), int(ref.token[i])]
