"""The loop's cache bookkeeping (RowLedger: pending, speculative, rollback) on scripted sources.

Each fake source's logits are a pseudo-random function of exactly the tokens its "cache" holds, holes
excluded - as attention sees them. If the ledger kept a wrong token or dropped a right one, the fake's
view would diverge from the true sequence and the loop's tokens from the recomputed reference.
Thousands of steps over a tiny vocabulary exercise every case: partial acceptance, all drafts accepted,
a fused token equal to the draft it replaced, stop tokens, uneven batches.
"""

import hashlib

import pytest
import torch

from asymspec_vl.core import loop, methods
from asymspec_vl.core.config import AsymSpecConfig
from asymspec_vl.core.gate import asymspec_step, greedy
from asymspec_vl.core.sources import RowLedger

V = 6


def scripted_logits(seq: list[int], salt: str) -> torch.Tensor:
    """Deterministic logits [V] for the next token after seq."""
    digest = hashlib.sha256((salt + ":" + ",".join(map(str, seq))).encode()).digest()
    return torch.tensor([b / 32.0 for b in digest[:V]])


class ScriptedSource:
    """A LogitSource whose 'KV cache' is a list of (token, valid) slots per row."""

    def __init__(self, prompts: list[list[int]], salt: str):
        self.salt = salt
        self.rows = [RowLedger(prompt=list(p)) for p in prompts]
        self.slots = [[(t, True) for t in p[:-1]] for p in prompts]
        for row in self.rows:
            row.n_cached = len(row.prompt) - 1
        self.forwards = 0

    def prefill(self):
        pass  # the prompts are in the slots from the start

    def pending(self, y):
        return [row.pending(yr) for row, yr in zip(self.rows, y)]

    def forward(self, tokens):
        self.forwards += 1
        n = max(len(t) for t in tokens)
        assert n > 0, "a forward with nothing to read"
        out = torch.zeros(len(tokens), n, V)
        for r, toks in enumerate(tokens):
            for k, tok in enumerate(toks):
                self.rows[r].speculative.append((len(self.slots[r]), tok))
                self.slots[r].append((tok, True))
                seen = [t for t, ok in self.slots[r] if ok]
                out[r, n - len(toks) + k] = scripted_logits(seen, self.salt)
        return out

    def commit(self, y):
        for r, (row, yr) in enumerate(zip(self.rows, y)):
            for slot in row.commit(yr):
                self.slots[r][slot] = (self.slots[r][slot][0], False)


def reference(
    prompts, cfg: AsymSpecConfig, stop: set[int], max_new: int
) -> list[list[int]]:
    """Algorithm 1 recomputed from the full sequence at every position."""
    outs = []
    for pf, pc in prompts:
        y: list[int] = []
        while True:
            drafts, a = [], []
            for i in range(cfg.K + (cfg.bonus == "fused")):
                a.append(scripted_logits(pf + y + drafts, "full"))
                if i < cfg.K:
                    drafts.append(int(greedy(a[-1])))
            b = torch.stack(
                [scripted_logits(pc + y + drafts[:i], "comp") for i in range(cfg.K + 1)]
            )
            t = torch.stack(
                [
                    scripted_logits(pc + y + drafts[:i], "verifier")
                    for i in range(cfg.K + 1)
                ]
            )
            if len(a) == cfg.K:
                a.append(b[-1])
            d = torch.tensor([drafts])
            new = asymspec_step(
                torch.stack(a)[None], b[None], t[None], d, cfg
            ).committed(d)[0]
            done = False
            for tok in new:
                y.append(tok)
                if tok in stop or len(y) >= max_new:
                    done = True
                    break
            if done:
                break
        outs.append(y)
    return outs


@pytest.mark.parametrize(
    "K, gate, gamma, beta, bonus",
    [
        (1, "cda", 0.5, 1.0, "verifier"),
        (2, "fixed", 1.0, 0.0, "verifier"),
        (3, "cda", 0.2, 1.0, "fused"),
        (4, "lambda", 0.5, 2.0, "verifier"),
        (2, "kl", 0.05, 1.0, "fused"),
    ],
)
def test_loop_matches_recomputation_on_scripted_sources(K, gate, gamma, beta, bonus):
    cfg = AsymSpecConfig(K=K, gate=gate, gamma=gamma, beta=beta, bonus=bonus)
    g = torch.Generator().manual_seed(K)
    prompts = [
        (
            torch.randint(0, V, (int(n),), generator=g).tolist(),
            torch.randint(0, V, (int(m),), generator=g).tolist(),
        )
        for n, m in torch.randint(2, 9, (12, 2), generator=g)
    ]
    stop, max_new = {5}, 40
    full = ScriptedSource([p for p, _ in prompts], "full")
    comp = ScriptedSource([c for _, c in prompts], "comp")
    ver = ScriptedSource([c for _, c in prompts], "verifier")
    sources = {
        methods.DRAFTER_FULL: full,
        methods.DRAFTER_COMP: comp,
        methods.VERIFIER: ver,
    }
    plan = loop.plan(methods.METHODS["asymspec"], cfg, sources.__getitem__, None)
    outs = loop.run(plan, len(prompts), [max_new] * len(prompts), stop)
    assert [o.token_ids for o in outs] == reference(prompts, cfg, stop, max_new)
    sources = {s for o in outs for s in o.sources}
    assert "fused" in sources and ("draft" in sources or gate == "fixed")


def test_fused_token_equal_to_rejected_draft_keeps_a_pending_token():
    """Gate rejects d (p_t(d) <= p_b(d)) but argmax t = d: the committed token equals the speculative one.
    The ledger must still leave it pending so that the next forward has something to read."""
    row = RowLedger(prompt=[1, 2, 3], n_cached=2)
    row.speculative = [(2, 3), (3, 4)]  # the last prompt token, then draft d = 4
    dropped = row.commit([4])  # the fused token equals the draft
    assert row.pending([4]) == [4] and row.n_cached == 3 and dropped == [3]
