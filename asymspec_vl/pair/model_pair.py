"""A drafter + verifier pair's tokenizers and vocabulary facts, read from their folders before any weights: the
drafter -> verifier vocabulary map, the verifier's logit size, stop tokens and banned ids."""

from __future__ import annotations

from functools import cached_property

import torch

from ..core.config import AsymSpecConfig
from ..core.errors import ConfigError, ModelPairError, VocabularyMismatchError
from ..core.vocab_align import VocabMap
from ..inputs.vocab import (
    STRUCTURAL_TOKENS,
    THINK_MARKERS,
    check_same_vocabulary,
    token_mask,
)
from ..inputs.vocab_map import build_vocab_map
from . import map_cache, preflight
from .shared_vocab import SharedVocabulary, shared_vocabulary


def _read_config(path: str, trust_remote_code: bool) -> dict:
    from transformers import AutoConfig  # lazy: loads transformers

    return AutoConfig.from_pretrained(
        path, trust_remote_code=trust_remote_code
    ).to_dict()


def output_dim(config: dict) -> int:
    text = config.get("text_config") or config
    return int(text["vocab_size"])


class ModelPair:
    """Tokenizers and vocabulary facts of a drafter + verifier pair (no weights loaded)."""

    def __init__(
        self,
        drafter_processor,
        verifier_tokenizer,
        vocab_size: int,
        eos_ids: set[int],
        vmap: VocabMap | None = None,
    ):
        self.processor = drafter_processor
        self.tokenizer = verifier_tokenizer
        self.vocab_size = vocab_size  # the verifier's logit rows: the ids of y, stop tokens and answers
        self.eos_ids = eos_ids
        # the drafter -> verifier map; identity for one vocabulary (core/vocab_align.py for the rules across it)
        self.vmap = vmap if vmap is not None else VocabMap.same_vocabulary(vocab_size)
        # a pad token added past the model's rows (add_special_tokens without resizing) has no embedding: 0 pads
        pad = verifier_tokenizer.pad_token_id
        self.pad_id = pad if pad is not None and pad < vocab_size else 0
        self._banned: list[int] | None = (
            None  # banned_ids, read from the tokenizer once
        )

    @classmethod
    def load(
        cls,
        drafter: str,
        verifier: str,
        text_drafter: str | None = None,
        trust_remote_code: bool = False,
        backend: str = "hf",
        images: bool = True,
    ) -> ModelPair:
        """The pair's tokenizers and map, read from the folders; preflight.py's checks run first (backend: the
        one whose attention must run the models' head sizes; images=False: a text-only drafter may serve
        text-only requests), so a gap is one typed error before any weight."""
        from transformers import (
            AutoProcessor,
            AutoTokenizer,
        )  # lazy: loads transformers

        preflight.check_folders(drafter, verifier, text_drafter, backend, images)
        d_cfg, v_cfg = (
            _read_config(drafter, trust_remote_code),
            _read_config(verifier, trust_remote_code),
        )
        is_vl = "vision_config" in d_cfg
        proc = (AutoProcessor if is_vl else AutoTokenizer).from_pretrained(
            drafter, trust_remote_code=trust_remote_code
        )
        tok = AutoTokenizer.from_pretrained(
            verifier, trust_remote_code=trust_remote_code
        )
        for name, t in ((drafter, getattr(proc, "tokenizer", proc)), (verifier, tok)):
            if not t.is_fast:
                raise ModelPairError(
                    f"{name} has no fast tokenizer (tokenizer.json): it is needed to read user "
                    "text as ordinary text"
                )
        d_tok = getattr(proc, "tokenizer", proc)
        preflight.check_tokenizers(proc, tok, drafter, verifier)
        dims = {drafter: output_dim(d_cfg), verifier: output_dim(v_cfg)}
        eos_of = {
            path: _generation_eos(path)
            or _as_set(
                cfg.get("eos_token_id")
                or (cfg.get("text_config") or {}).get("eos_token_id")
            )
            for path, cfg in ((drafter, d_cfg), (verifier, v_cfg))
        }
        cached = map_cache.key(drafter, verifier, trust_remote_code)
        vmap = map_cache.recall(cached) or build_vocab_map(
            d_tok,
            tok,
            drafter,
            verifier,
            dims[drafter],
            dims[verifier],
            eos_of[drafter],
            eos_of[verifier],
        )
        map_cache.remember(cached, vmap)
        if text_drafter:  # SD's text drafter drafts in the drafter's ids: one vocabulary with the drafter
            check_same_vocabulary(
                AutoTokenizer.from_pretrained(text_drafter),
                d_tok,
                text_drafter,
                drafter,
            )
            dims[text_drafter] = output_dim(
                _read_config(text_drafter, trust_remote_code)
            )
            if dims[text_drafter] != dims[drafter]:
                raise VocabularyMismatchError(
                    f"drafter and text drafter logits differ in size: {dims}"
                )
        if vmap.identity and len(set(dims.values())) != 1:
            raise VocabularyMismatchError(
                f"drafter and verifier logits differ in size: {dims}"
            )
        if (
            vmap.identity
        ):  # one vocabulary: either model's end tokens stop (today's path)
            eos = eos_of[drafter] | eos_of[verifier]
        else:  # y is in verifier ids: the verifier's end tokens, and the drafter's that the map pairs
            d2v = dict(zip(vmap.drafter_ids.tolist(), vmap.verifier_ids.tolist()))
            eos = eos_of[verifier] | {d2v[i] for i in eos_of[drafter] if i in d2v}
            # the verifier's answer end, read from its chat template, ends an answer whatever its config says
            eos |= (
                {vmap.specials["answer_end"][1]}
                if "answer_end" in vmap.specials
                else set()
            )
        eos |= _as_set(tok.eos_token_id)
        return cls(proc, tok, dims[verifier], eos, vmap)

    @cached_property
    def vocabulary(self) -> SharedVocabulary:
        """What the two vocabularies share (shared_vocab.py): one family, or the cross-family shared set."""
        d_tok = getattr(self.processor, "tokenizer", self.processor)
        return shared_vocabulary(self.vmap, d_tok, self.tokenizer)

    def __repr__(self) -> str:
        return f"ModelPair({self.vocabulary.line()})"

    @property
    def cross_map(self) -> VocabMap | None:
        """The map of a cross-family pair (what encode() needs for the drafter's x_comp); None for one vocabulary."""
        return None if self.vmap.identity else self.vmap

    def check_output_dims(self, drafter, verifier, text_drafter=None) -> None:
        for m, want in (
            (drafter, self.vmap.drafter_size),
            (verifier, self.vocab_size),
            (text_drafter, self.vmap.drafter_size),
        ):
            if m is not None and m.get_output_embeddings().weight.shape[0] != want:
                raise VocabularyMismatchError(
                    f"{type(m).__name__} has {m.get_output_embeddings().weight.shape[0]} output logits, "
                    f"its vocabulary has {want}"
                )

    def check_stop_ids(self, cfg: AsymSpecConfig) -> None:
        """Refuse stop tokens decoding can never emit (generation would silently run to its budget): ids
        outside the vocabulary, banned ones (vision placeholders, thinking markers, padding rows), and across a
        vocabulary map the verifier ids off its shared set (only shared tokens are committed; the pair's own end
        ids stay: an end alias folds into the answer end, which is shared)."""
        ids = cfg.stop_token_ids or ()
        outside = sorted(i for i in ids if i >= self.vocab_size)
        if outside:
            raise ConfigError(
                f"AsymSpecConfig.stop_token_ids holds {outside}, outside the vocabulary of "
                f"{self.vocab_size} tokens (ids 0..{self.vocab_size - 1})"
            )
        never = sorted(set(ids) & set(self.banned_ids()))
        if never:
            names = [self.tokenizer.convert_ids_to_tokens(i) for i in never]
            raise ConfigError(
                f"AsymSpecConfig.stop_token_ids holds {never} ({names}): tokens decoding never emits "
                "(vision placeholders, thinking markers, padding rows)"
            )
        unshared = self.unshared_ids(ids)
        if unshared:
            names = [self.tokenizer.convert_ids_to_tokens(i) for i in unshared]
            raise ConfigError(
                f"AsymSpecConfig.stop_token_ids holds {unshared} ({names}): verifier tokens the drafter's "
                f"vocabulary lacks; across this pair's vocabulary map only its {self.vmap.size} shared "
                "tokens are ever committed, so these can never stop an answer"
            )

    def unshared_ids(self, ids) -> list[int]:
        """The verifier ids among `ids` a cross-family pair never commits: off the map's shared set, and not one of
        the pair's end ids. [] for one vocabulary."""
        if self.vmap.identity:
            return []
        shared = set(self.vmap.verifier_ids.tolist()) | set(self.eos_ids)
        return sorted(set(ids) - shared)

    def stop_ids(self, cfg: AsymSpecConfig) -> set[int]:
        if cfg.stop_token_ids is not None:
            return set(cfg.stop_token_ids)
        return set() if cfg.ignore_eos else set(self.eos_ids)

    def decode(self, token_ids: list[int]) -> str:
        """The answer's text: special tokens (the end token) dropped, as vLLM's detokenizer drops them."""
        return self.tokenizer.decode(token_ids, skip_special_tokens=True)

    def banned_ids(self) -> list[int]:
        """Structural special tokens, the thinking markers (thinking is disabled in every prompt), plus logit
        rows past the tokenizer (padding of the lm_head). Read once: get_vocab copies the whole vocabulary into a
        dict (about a second for Llama-3's 128,256 tokens on a busy CPU), and requests ask for these on every call."""
        if self._banned is None:
            vocab = self.tokenizer.get_vocab()
            ids = [vocab[t] for t in STRUCTURAL_TOKENS + THINK_MARKERS if t in vocab]
            self._banned = sorted(
                set(ids) | set(range(len(self.tokenizer), self.vocab_size))
            )
        return list(self._banned)

    def banned_mask(self, device) -> torch.Tensor:
        return token_mask(self.banned_ids(), self.vocab_size, device)


def _generation_eos(path: str) -> set[int]:
    from transformers import GenerationConfig  # lazy: loads transformers

    try:
        return _as_set(GenerationConfig.from_pretrained(path).eos_token_id)
    except OSError:  # no generation_config.json: the model config's eos applies
        return set()


def _as_set(x) -> set[int]:
    if x is None:
        return set()
    return {int(i) for i in x} if isinstance(x, (list, tuple, set)) else {int(x)}
