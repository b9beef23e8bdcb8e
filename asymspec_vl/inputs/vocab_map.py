"""The vocabulary map of a drafter + verifier pair: string-identical tokens and special tokens paired by role.

Ordinary tokens are compared by their decoded byte strings, after each tokenizer's own normalisation:
byte-level BPE (Qwen, Llama-3, gpt-oss) maps its symbols back through GPT-2's byte table; SentencePiece
(Gemma, Llama-2) turns "▁" into a space and "<0xNN>" into that byte. Special tokens never match by string:
they are paired by name when both tokenizers have the same one (one family's specials, e.g. <|image_pad|>,
which stays banned), and by role (EOS, chat turn start / end, pad), so Qwen's <|im_end|> pairs with Llama-3's
<|eot_id|>. Same-family pairs (one vocabulary) get VocabMap.same_vocabulary and keep the unmapped path.
The rules that use the map are in core/vocab_align.py; docs/cross-family.md says what a user checks.
"""

from __future__ import annotations

import torch

from ..core.errors import VocabularyMismatchError
from ..core.vocab_align import VocabMap

# Chat-template markers by role, across families (the first one a tokenizer has is its marker of that role).
TURN_START = (
    "<|im_start|>",
    "<|start_header_id|>",
    "<start_of_turn>",
    "<|start|>",
    "[INST]",
    "<｜User｜>",
)
TURN_END = (
    "<|im_end|>",
    "<|eot_id|>",
    "<end_of_turn>",
    "<|end|>",
    "[/INST]",
    "<｜end▁of▁sentence｜>",
)
# The shared set must hold at least this share of the verifier's most frequent tokens (the lowest ordinary
# ids: BPE numbers its merges by frequency), else answers in the verifier's words cannot be committed.
MIN_FREQUENT_SHARE = 0.5


def frequent_count(verifier_size: int) -> int:
    """How many of the verifier's lowest ordinary ids count as its most frequent tokens."""
    return max(256, verifier_size // 8)


def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level symbol -> byte (the inverse of bytes_to_unicode)."""
    bs = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def _is_byte_level(tok) -> bool:
    backend = getattr(tok, "backend_tokenizer", None)
    return backend is not None and "ByteLevel" in repr(backend.decoder)


def token_bytes(tok) -> dict[int, bytes]:
    """Every ordinary (non-special) token id -> its decoded byte string."""
    special = set(tok.all_special_ids) | {
        i for i, t in tok.added_tokens_decoder.items() if t.special
    }
    out: dict[int, bytes] = {}
    if _is_byte_level(tok):
        table = _byte_decoder()
        for piece, i in tok.get_vocab().items():
            if i in special:
                continue
            if all(ch in table for ch in piece):
                out[i] = bytes(table[ch] for ch in piece)
            else:  # an added non-special token, stored as plain text
                out[i] = piece.encode("utf-8")
        return out
    for piece, i in tok.get_vocab().items():
        if i in special:
            continue
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            out[i] = bytes([int(piece[3:5], 16)])
        else:
            out[i] = piece.replace("▁", " ").encode("utf-8")
    return out


def special_names(tok) -> dict[str, int]:
    """Special token content -> id."""
    special = set(tok.all_special_ids) | {
        i for i, t in tok.added_tokens_decoder.items() if t.special
    }
    return {tok.convert_ids_to_tokens(i): i for i in special}


def special_roles(tok, eos_ids: set[int] | None = None) -> dict[str, int]:
    """Role -> id of the tokenizer's special tokens: eos, turn_start, turn_end, pad (the roles it has)."""
    vocab = tok.get_vocab()
    roles: dict[str, int] = {}
    if tok.eos_token_id is not None:
        roles["eos"] = int(tok.eos_token_id)
    elif eos_ids:
        roles["eos"] = min(eos_ids)
    for role, names in (("turn_start", TURN_START), ("turn_end", TURN_END)):
        found = next((vocab[n] for n in names if n in vocab), None)
        if found is not None:
            roles[role] = found
    if tok.pad_token_id is not None:
        roles["pad"] = int(tok.pad_token_id)
    return roles


def _preferred(tok):
    """Sort key of (id, bytes) items: a SentencePiece byte-fallback token (`<0x61>`) after the ordinary piece of the
    same string (`a`), whatever their ids (Llama-2 and Gemma number the byte tokens first): the pair then commits
    the piece the verifier writes itself. Ties by id."""
    pieces = {i: piece for piece, i in tok.get_vocab().items()}
    sentencepiece = not _is_byte_level(tok)

    def key(item: tuple[int, bytes]) -> tuple[bool, int]:
        piece = pieces.get(item[0], "")
        fallback = (
            sentencepiece
            and len(piece) == 6
            and piece.startswith("<0x")
            and piece.endswith(">")
        )
        return fallback, item[0]

    return key


def build_vocab_map(
    drafter_tok,
    verifier_tok,
    drafter: str = "drafter",
    verifier: str = "verifier",
    drafter_size: int | None = None,
    verifier_size: int | None = None,
    drafter_eos: set[int] | None = None,
    verifier_eos: set[int] | None = None,
) -> VocabMap:
    """The pair's map (sizes: the models' logit rows, default the tokenizers' lengths). One vocabulary ->
    VocabMap.same_vocabulary. VocabularyMismatchError naming the numbers when the shared set holds under
    MIN_FREQUENT_SHARE of the verifier's most frequent tokens or the EOS tokens cannot be paired."""
    Vd = drafter_size or len(drafter_tok)
    Vv = verifier_size or len(verifier_tok)
    if drafter_tok.get_vocab() == verifier_tok.get_vocab() and Vd == Vv:
        return VocabMap.same_vocabulary(Vv)
    d_bytes, v_bytes = token_bytes(drafter_tok), token_bytes(verifier_tok)
    by_bytes = {}
    for i, s in sorted(d_bytes.items(), key=_preferred(drafter_tok)):
        by_bytes.setdefault(
            s, i
        )  # one string twice: the ordinary piece, else the lowest id
    pairs: dict[int, int] = {}  # verifier id -> drafter id
    paired: set[int] = set()  # the drafter ids in pairs
    for j, s in sorted(v_bytes.items(), key=_preferred(verifier_tok)):
        i = by_bytes.get(s)
        if i is not None and i not in paired and j < Vv and i < Vd:
            pairs[j] = i
            paired.add(i)
    d_roles, v_roles = (
        special_roles(drafter_tok, drafter_eos),
        special_roles(verifier_tok, verifier_eos),
    )
    specials: dict[str, tuple[int, int]] = {}
    used_d = set(pairs.values())
    d_special, v_special = special_names(drafter_tok), special_names(verifier_tok)
    for name, vi in sorted(
        v_special.items(), key=lambda kv: kv[1]
    ):  # the same special in both (one family's)
        di = d_special.get(name)
        if (
            di is not None
            and di not in used_d
            and vi not in pairs
            and vi < Vv
            and di < Vd
        ):
            pairs[vi] = di
            used_d.add(di)
    for role in (
        "turn_end",
        "eos",
        "turn_start",
        "pad",
    ):  # the chat answer's end first: it is what stops
        if role in d_roles and role in v_roles:
            di, vi = d_roles[role], v_roles[role]
            if pairs.get(vi) == di:
                specials[role] = (di, vi)  # paired by name already
            if vi in pairs or di in used_d:
                continue  # already paired (by name, or under another role: EOS = the turn end)
            pairs[vi], specials[role] = di, (di, vi)
            used_d.add(di)
    if not any(role in specials for role in ("turn_end", "eos")):
        raise VocabularyMismatchError(
            f"the special tokens of {drafter} and {verifier} cannot be paired: end of turn / EOS are "
            f"{d_roles.get('turn_end')} / {d_roles.get('eos')} in the drafter and {v_roles.get('turn_end')} / "
            f"{v_roles.get('eos')} in the verifier; one of them must exist in both to end an answer"
        )
    _check_frequent(pairs, v_bytes, Vv, Vd, drafter, verifier)
    vids = sorted(pairs)
    return VocabMap(
        torch.tensor([pairs[j] for j in vids], dtype=torch.long),
        torch.tensor(vids, dtype=torch.long),
        Vd,
        Vv,
        identity=False,
        specials=specials,
    )


def _check_frequent(
    pairs: dict[int, int],
    v_bytes: dict[int, bytes],
    Vv: int,
    Vd: int,
    drafter: str,
    verifier: str,
) -> None:
    ordinary = sorted(v_bytes)
    frequent = ordinary[: frequent_count(len(ordinary))]
    covered = sum(1 for j in frequent if j in pairs)
    if covered < MIN_FREQUENT_SHARE * len(frequent):
        raise VocabularyMismatchError(
            f"the shared vocabulary of {drafter} ({Vd} tokens) and {verifier} ({Vv} tokens) is too small: "
            f"{len(pairs)} shared tokens, {covered} of the verifier's {len(frequent)} most frequent tokens "
            f"({covered / max(len(frequent), 1):.0%}, under the {MIN_FREQUENT_SHARE:.0%} needed)"
        )


def describe(vmap: VocabMap) -> str:
    """One line: the shared set's size and the share of each vocabulary it covers."""
    if vmap.identity:
        return f"one vocabulary ({vmap.verifier_size} tokens)"
    sd, sv = vmap.share()
    roles = ", ".join(f"{r} {d}->{v}" for r, (d, v) in vmap.specials.items())
    return (
        f"{vmap.size} shared tokens: {sd:.1%} of the drafter's {vmap.drafter_size}, {sv:.1%} of the "
        f"verifier's {vmap.verifier_size}; specials paired by role: {roles or 'none beyond strings'}"
    )
