"""The reference side of the stress test: the transformers backend (float32, CPU) on the same pair as the engine,
each request decoded alone, and the logits an engine step read recomputed from scratch on its tokens.

Pairs (PAIRS): "same" the tiny same-family models; "cross" the embedded cross-family pair (`embedded-llama`: the toy
Qwen3-VL drafter with the toy Llama verifier of another vocabulary, loaded by its shipped paths); the real-shape pairs
(REAL: "real-qwen3", "real-llama3", "real-tekken", "real-mistral-sp", asymspec_vl.toy.real_vocab.REAL_PAIRS): tiny
random models carrying the real tokenizers, vocabulary rows, special ids and chat templates (a Qwen3-VL drafter of
Qwen's 151,936 rows; a Qwen3, Llama-3, Mistral Tekken or SentencePiece verifier), built once per models folder
under its real/ (real_cache). Across the map
an engine step's y and drafts are verifier ids, t verifier-space logits and a, b, q drafter-space ones: the
reference drafter reads y and the drafts moved to its ids (VocabMap.to_drafter_ids), b and q after its own x_comp
(EncodedRequest.drafter_comp).

LOGIT_TOLERANCE: max |x_vllm - x_transformers| / max |x_transformers| accepted for a, b, q and t. Both sides
compute in float32 on the CPU with different kernels (vLLM's CPU paged attention and fused RMSNorm / rotary against
transformers' SDPA and eager modules, a cached incremental forward against one forward over the whole
sequence): summation order alone moves a tiny model's logits by about 1e-6 of their scale (float32's
epsilon is 1.2e-7; 184 stress cases, 8,457 checks: at most 3.7e-6; the toy Llama verifier's t across a map, 76
cases, 5,542 checks of a, b, q and t: at most 2.5e-5, a, b and q at most 3.2e-6). A step whose KV cache holds another
request's tokens, a stale position or the wrong view moves them by 1e-2 and more (test_vllm_asymspec: > 1e-2
with patch 4 or 5 off; the stale block-table tail the stress run found: 1e-1 to 6e-1). 1e-4 sits well
apart from each.
"""

from __future__ import annotations

from pathlib import Path

import torch

from asymspec_vl import AsymSpecVL
from asymspec_vl.core.loop import RowOutput
from asymspec_vl.core.methods import METHODS
from asymspec_vl.inputs.prompts import EncodedRequest
from asymspec_vl.pair.defaults import embedded_models
from asymspec_vl.pair.model_source import EMBEDDED_LLAMA

from .workload import RowSpec

LOGIT_TOLERANCE = 1e-4
# the real-shape pairs (asymspec_vl.toy.real_vocab.REAL_PAIRS's names; checked equal in tests/evals/stress)
REAL = ("real-qwen3", "real-llama3", "real-tekken", "real-mistral-sp")
PAIRS = ("same", "cross", *REAL)
# the pairs `--pairs real` draws in turn (by seed)
REAL_ROTATION = REAL


def real_cache(paths: dict) -> Path:
    """Where a run's real-shape models are written once (and read by its worker-process cases): paths["real"] if
    given (a test session's real-shape folder), else the models folder's real/."""
    return Path(paths.get("real") or Path(paths["root"]) / "real")


def pair_paths(paths: dict, pair: str) -> dict:
    """The drafter / verifier folders of a case's pair: the tiny models of `paths` ("same"), the embedded
    cross-family pair ("cross") or a real-shape pair (REAL: written under real_cache(paths) if missing); "root" stays
    the tiny models' folder (a worker-process case's --models)."""
    if pair == "same":
        return paths
    if pair in REAL:
        # lazy: the real-shape builders load transformers and the tokenizer sources
        from asymspec_vl.toy.real_vocab import REAL_PAIRS, real_model_dir

        drafter, verifier = REAL_PAIRS[pair]
        cache = real_cache(paths)
        # seeds 0 and 1, as the tests' real_shapes.pair builds them (one folder each per cache)
        return {
            **paths,
            "verifier": Path(real_model_dir(verifier, "verifier", cache, seed=1)),
            "vl_drafter": Path(real_model_dir(drafter, "drafter", cache, seed=0)),
        }
    if pair != "cross":
        raise ValueError(f"unknown pair {pair!r}: one of {PAIRS}")
    models = embedded_models(EMBEDDED_LLAMA)
    return {
        **paths,
        "verifier": Path(models["verifier"]),
        "vl_drafter": Path(models["drafter"]),
    }


def summary(row: RowOutput) -> tuple:
    """What must agree: tokens, their sources, finish reason and the acceptance counters."""
    s = row.stats
    return (
        row.token_ids,
        row.sources,
        row.finish_reason,
        s.steps,
        s.drafted,
        s.accepted,
        s.emitted,
        list(s.accepted_at),
    )


class Reference:
    def __init__(self, paths: dict, pair: str = "same"):
        # no text drafter: SD drafts with the VL drafter on x_comp, as the speculative engine does
        self.name, self.paths = pair, pair_paths(paths, pair)
        self.vl = AsymSpecVL.from_pretrained(
            drafter=str(self.paths["vl_drafter"]),
            verifier=str(self.paths["verifier"]),
            device="cpu",
            dtype="float32",
        )
        self.drafter = self.vl.backend.drafter
        self.pair = self.vl.pair
        self.vmap = self.pair.vmap

    def vocabulary(self) -> dict:
        """The pair's name and vocabularies as a case reports them (identity: one vocabulary, a same-family pair)."""
        m = self.vmap
        return {
            "pair": self.name,
            "drafter": m.drafter_size,
            "verifier": m.verifier_size,
            "shared": m.size,
            "identity": m.identity,
        }

    def _drafter_ids(self, ids: list[int]) -> list[int]:
        """Verifier ids an engine step read -> the drafter's (as they are for one vocabulary)."""
        if self.vmap.identity or not ids:
            return list(ids)
        return self.vmap.to_drafter_ids(torch.tensor(ids, dtype=torch.long)).tolist()

    def alone(self, row: RowSpec, enc: EncodedRequest) -> RowOutput:
        """The row's request decoded alone on the transformers backend; plain rows: the verifier's greedy output."""
        if row.mode != "plain":
            plan = self.vl.backend.plan_request(METHODS[row.mode], row.cfg())
            return self.vl.backend.run([enc], plan)[0]
        ids = torch.tensor([enc.comp.ids])
        with torch.no_grad():
            out = self.vl.backend.verifier.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                max_new_tokens=row.max_new,
                do_sample=False,
                eos_token_id=None,
                pad_token_id=0,
            )
        tokens = out[0, ids.shape[1] :].tolist()
        return RowOutput(tokens, ["verifier"] * len(tokens), finish_reason="length")

    @torch.no_grad()
    def b(self, enc: EncodedRequest, y: list[int], drafts: list[int]) -> torch.Tensor:
        """The drafter on x_comp + y + d_1..d_n (its own x_comp and ids across a map): its logits at the n+1
        verified positions. -> [n+1, Vd]"""
        comp = enc.drafter_comp if enc.drafter_comp is not None else enc.comp
        ids = torch.tensor([comp.ids + self._drafter_ids(y + drafts)])
        return (
            self.drafter(input_ids=ids, attention_mask=torch.ones_like(ids))
            .logits[0, -(len(drafts) + 1) :]
            .float()
        )

    @torch.no_grad()
    def t(self, enc: EncodedRequest, y: list[int], drafts: list[int]) -> torch.Tensor:
        """The verifier on x_comp + y + d_1..d_n (its own ids: verifier ids across a map too): its logits at the
        n+1 verified positions. -> [n+1, Vv]"""
        ids = torch.tensor([enc.comp.ids + y + drafts])
        return (
            self.vl.backend.verifier(input_ids=ids, attention_mask=torch.ones_like(ids))
            .logits[0, -(len(drafts) + 1) :]
            .float()
        )

    def q(self, enc: EncodedRequest, y: list[int], drafts: list[int]) -> torch.Tensor:
        """A sampling sd / scd row's drafting logits: the drafter on x_comp + y + d_1..d_{j-1} at the n draft
        positions, b's first n rows. -> [n, Vd]"""
        return self.b(enc, y, drafts)[: len(drafts)]

    @torch.no_grad()
    def a(
        self, enc: EncodedRequest, y: list[int], drafts: list[int], m: int
    ) -> torch.Tensor:
        """The drafter on x_full + y + d_1..d_{m-1}, image included (y and the drafts in its ids): its logits at
        the m draft positions. -> [m, Vd]"""
        ids = torch.tensor([enc.full.ids + self._drafter_ids(y + drafts[: m - 1])])
        images = {}
        if enc.full.pixel_values is not None:
            images = {
                "pixel_values": enc.full.pixel_values,
                "image_grid_thw": enc.full.image_grid_thw,
            }
        return (
            self.drafter(input_ids=ids, attention_mask=torch.ones_like(ids), **images)
            .logits[0, -m:]
            .float()
        )


def relative_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    """max |got - ref| / max |ref|; inf where the shapes differ or a value is not finite (no NaN passes a check)."""
    if got.shape != ref.shape or not (got.isfinite().all() and ref.isfinite().all()):
        return float("inf")
    return float((got - ref).abs().max() / ref.abs().max().clamp_min(1e-30))


def spread(n: int, k: int) -> list[int]:
    """At most k indices of range(n), evenly spread, first and last included."""
    if n <= k:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})
