"""The vocabulary map of a drafter + verifier pair: string-identical tokens, answer ends read from chat templates.

Ordinary tokens are compared by their decoded byte strings, after each tokenizer's own normalisation:
byte-level BPE (Qwen, Llama-3, gpt-oss) maps its symbols back through GPT-2's byte table; SentencePiece
(Gemma, Llama-2) turns "▁" into a space and "<0xNN>" into that byte. Special tokens never match by string.

The answer's end: each tokenizer's own chat template renders a user + assistant exchange (answer_end) and the
special token right after the assistant's text is the one that closes the assistant's turn: Qwen <|im_end|>,
Llama-3 <|eot_id|>, Mistral (Tekken and SentencePiece) and Llama-2 </s>, Gemma <end_of_turn>. The two answer
ends pair first (VocabMap.specials["answer_end"]). A tokenizer without a chat template, or whose template cannot
render that exchange, takes its end from the role table ANSWER_END, then its EOS (the map's notes say why); a
template that renders no special token after the answer is a VocabularyMismatchError naming it.

Several EOS ids against one answer end (Llama-3's generation config ends on <|end_of_text|>, <|eom_id|> and
<|eot_id|>; Gemma's on <eos> and <end_of_turn>; Qwen's on <|im_end|> and <|endoftext|>): the map stays one-to-one
(its rules draw over the drafter's columns, vocab_sampling.py) and the verifier's other EOS ids are its end
aliases (VocabMap.end_aliases): off the shared set, their logits folded into its answer-end column
(VocabMap.fold_ends: logsumexp, so the verifier's whole end mass counts, in the gate, the fused and bonus picks,
SD's target and the logprobs) wherever core reads t across the map, one function both backends' rules call. The
drafter's other EOS ids stay off the map, unfolded: the drafter drafts its answer end (the verifier decides what
ends), and its logits are read outside core where they are picked (the draft picks on both backends, vLLM's own
sampler for the drafter alone), so a fold there would need a logits processor in vLLM's sampler.

Ids a model has no logit row for (a tokenizer longer than its embedding: a pad token added without resizing)
never enter the map, by string, by name or by role; an answer end without a row is a VocabularyMismatchError
naming the id. Other specials pair by name when both tokenizers have the same one (one family's specials, e.g.
<|image_pad|>, which stays banned), then by role (turn start, pad). Same-family pairs (one vocabulary) get
VocabMap.same_vocabulary and keep the unmapped path. The rules that use the map are in core/vocab_align.py;
docs/cross-family.md says what a user checks.
"""

from __future__ import annotations

import torch

from ..core.errors import VocabularyMismatchError
from ..core.vocab_align import VocabMap

# The fallback for a tokenizer without a usable chat template: the assistant turn's end by family (the first one a
# tokenizer has), else its EOS. Mistral's [/INST] closes the USER's turn: it is no answer end.
ANSWER_END = (
    "<|im_end|>",
    "<|eot_id|>",
    "<end_of_turn>",
    "<|end|>",
    "<｜end▁of▁sentence｜>",
)
# Chat turn openers by family, paired by role (the first one a tokenizer has).
TURN_START = (
    "<|im_start|>",
    "<|start_header_id|>",
    "<start_of_turn>",
    "<|start|>",
    "[INST]",
    "<｜User｜>",
)
# The one-turn exchange answer_end renders: plain words every template keeps verbatim (trimmed or not).
PROBE_QUESTION, PROBE_ANSWER = "asymspecProbeQuestion", "asymspecProbeAnswer"

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


def _special_ids(tok) -> set[int]:
    return set(tok.all_special_ids) | {
        i for i, t in tok.added_tokens_decoder.items() if t.special
    }


def token_bytes(tok, vocab: dict[str, int] | None = None) -> dict[int, bytes]:
    """Every ordinary (non-special) token id -> its decoded byte string (vocab: tok.get_vocab(), when read)."""
    special = _special_ids(tok)
    vocab = vocab if vocab is not None else tok.get_vocab()
    out: dict[int, bytes] = {}
    if _is_byte_level(tok):
        table = _byte_decoder()
        for piece, i in vocab.items():
            if i in special:
                continue
            if all(ch in table for ch in piece):
                out[i] = bytes(table[ch] for ch in piece)
            else:  # an added non-special token, stored as plain text
                out[i] = piece.encode("utf-8")
        return out
    for piece, i in vocab.items():
        if i in special:
            continue
        if len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            out[i] = bytes([int(piece[3:5], 16)])
        else:
            out[i] = piece.replace("▁", " ").encode("utf-8")
    return out


def special_names(tok) -> dict[str, int]:
    """Special token content -> id."""
    return {tok.convert_ids_to_tokens(i): i for i in _special_ids(tok)}


def _label(tok, i: int) -> str:
    return f"{tok.convert_ids_to_tokens(int(i))} {int(i)}"


def _as_set(x) -> set[int]:
    if x is None:
        return set()
    return {int(i) for i in x} if isinstance(x, (list, tuple, set)) else {int(x)}


def _rendered(tok) -> tuple[str | None, str | None]:
    """(the one-turn exchange in tok's chat template, None), or (None, why it cannot be rendered)."""
    if not getattr(tok, "chat_template", None):
        return None, "has no chat template"
    from jinja2 import TemplateError  # lazy: transformers' template engine

    exchange = [
        {"role": "user", "content": PROBE_QUESTION},
        {"role": "assistant", "content": PROBE_ANSWER},
    ]
    try:
        return tok.apply_chat_template(exchange, tokenize=False), None
    except TemplateError as e:
        return (
            None,
            f"has a chat template that cannot render a user + assistant exchange ({e})",
        )


def _end_after_answer(text: str, specials: dict[str, int], name: str) -> int:
    """The id of the special token right after the assistant's text in `text` (whitespace between allowed)."""
    at = text.find(PROBE_ANSWER)
    if at < 0:
        raise VocabularyMismatchError(
            f"the chat template of {name} drops the assistant's message (it renders {text!r}): the answer's "
            "end cannot be read from it; give the model a template that renders assistant turns"
        )
    tail = text[at + len(PROBE_ANSWER) :].lstrip()
    found = max(
        (s for s in specials if s and tail.startswith(s)), key=len, default=None
    )
    if found is None:
        raise VocabularyMismatchError(
            f"the chat template of {name} closes the assistant's turn with no special token (after the "
            f"answer it renders {tail[:40]!r}): the pair could never tell an answer's end; give the model a "
            "template that ends each assistant turn with its end token"
        )
    return specials[found]


def _table_end(
    tok, eos_ids: set[int] | None, size: int, vocab: dict[str, int]
) -> tuple[int | None, list[int]]:
    """(the role table's answer end: the first ANSWER_END name, else the EOS, with a logit row; the candidates
    that had none)."""
    candidates = [vocab[n] for n in ANSWER_END if n in vocab]
    candidates += sorted(_as_set(tok.eos_token_id)) + sorted(_as_set(eos_ids))
    rowless = [i for i in candidates if i >= size]
    return next((i for i in candidates if i < size), None), rowless


def answer_end(
    tok,
    name: str,
    size: int,
    eos_ids: set[int] | None = None,
    vocab: dict[str, int] | None = None,
) -> tuple[int, str | None]:
    """(id, note) of the special token that closes the assistant's turn in `tok`'s chat template (size: the
    model's logit rows). note is None when the template gave it, else says why the role table did.
    VocabularyMismatchError when the template renders no special token after the answer, or the end found has
    no logit row."""
    text, why = _rendered(tok)
    if text is not None:
        end = _end_after_answer(text, special_names(tok), name)
        if end >= size:
            raise VocabularyMismatchError(
                f"{name} closes the assistant's turn with {_label(tok, end)}, but the model has {size} logit "
                f"rows (ids 0..{size - 1}): it could never end an answer; resize its embedding to the tokenizer "
                "(model.resize_token_embeddings(len(tokenizer)))"
            )
        return end, None
    vocab = vocab if vocab is not None else tok.get_vocab()
    end, rowless = _table_end(tok, eos_ids, size, vocab)
    if end is None:
        rows = (
            f" (ids {rowless} have no logit row: the model has {size})"
            if rowless
            else ""
        )
        raise VocabularyMismatchError(
            f"{name} {why} and no answer end in the role table ({', '.join(ANSWER_END)}) nor an EOS with a "
            f"logit row{rows}: the pair could never end an answer; give the model its chat template"
        )
    return end, f"{name} {why}: its answer end {_label(tok, end)} is the role table's"


def _turn_roles(tok, vocab: dict[str, int]) -> dict[str, int]:
    """Role -> id of the tokenizer's chat-turn opener and pad (the roles it has)."""
    roles = {}
    start = next((vocab[n] for n in TURN_START if n in vocab), None)
    if start is not None:
        roles["turn_start"] = start
    if tok.pad_token_id is not None:
        roles["pad"] = int(tok.pad_token_id)
    return roles


def _preferred(tok, vocab: dict[str, int]):
    """Sort key of (id, bytes) items: a SentencePiece byte-fallback token (`<0x61>`) after the ordinary piece of the
    same string (`a`), whatever their ids (Llama-2 and Gemma number the byte tokens first): the pair then commits
    the piece the verifier writes itself. Ties by id."""
    pieces = {i: piece for piece, i in vocab.items()}
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


def _ordinary_pairs(drafter_tok, verifier_tok, Vd: int, Vv: int, vocabs: tuple):
    """({verifier id: drafter id} of the string-identical ordinary tokens with a logit row in both, the verifier's
    ordinary bytes with a row). vocabs: (drafter_tok.get_vocab(), verifier_tok.get_vocab())."""
    d_vocab, v_vocab = vocabs
    d_bytes = {i: s for i, s in token_bytes(drafter_tok, d_vocab).items() if i < Vd}
    v_bytes = {j: s for j, s in token_bytes(verifier_tok, v_vocab).items() if j < Vv}
    by_bytes = {}
    for i, s in sorted(d_bytes.items(), key=_preferred(drafter_tok, d_vocab)):
        # one string twice: the ordinary piece, else the lowest id
        by_bytes.setdefault(s, i)
    pairs: dict[int, int] = {}  # verifier id -> drafter id
    paired: set[int] = set()  # the drafter ids in pairs
    for j, s in sorted(v_bytes.items(), key=_preferred(verifier_tok, v_vocab)):
        i = by_bytes.get(s)
        if i is not None and i not in paired:
            pairs[j] = i
            paired.add(i)
    return pairs, v_bytes


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
    """The pair's map (sizes: the models' logit rows, default the tokenizers' lengths; eos: each model's generation
    config EOS ids). One vocabulary -> VocabMap.same_vocabulary. VocabularyMismatchError naming the numbers when
    the shared set holds under MIN_FREQUENT_SHARE of the verifier's most frequent tokens, or naming the model
    whose answer end cannot be read or has no logit row."""
    Vd = drafter_size or len(drafter_tok)
    Vv = verifier_size or len(verifier_tok)
    # each tokenizer's vocabulary read once: a fast tokenizer rebuilds the dict at every get_vocab (~0.3 s at 150k)
    d_vocab, v_vocab = drafter_tok.get_vocab(), verifier_tok.get_vocab()
    if d_vocab == v_vocab and Vd == Vv:
        return VocabMap.same_vocabulary(Vv)
    pairs, v_bytes = _ordinary_pairs(
        drafter_tok, verifier_tok, Vd, Vv, (d_vocab, v_vocab)
    )
    # the answer's end first: it is what stops (a special, so no ordinary pair holds it)
    d_end, d_note = answer_end(drafter_tok, drafter, Vd, drafter_eos, d_vocab)
    v_end, v_note = answer_end(verifier_tok, verifier, Vv, verifier_eos, v_vocab)
    pairs = {j: i for j, i in pairs.items() if j != v_end and i != d_end}
    pairs[v_end] = d_end
    specials: dict[str, tuple[int, int]] = {"answer_end": (d_end, v_end)}
    used_d = set(pairs.values())
    d_special = {n: i for n, i in special_names(drafter_tok).items() if i < Vd}
    v_special = {n: j for n, j in special_names(verifier_tok).items() if j < Vv}
    # the same special in both (one family's)
    for name, vi in sorted(v_special.items(), key=lambda kv: kv[1]):
        di = d_special.get(name)
        if di is not None and di not in used_d and vi not in pairs:
            pairs[vi] = di
            used_d.add(di)
    d_roles, v_roles = (
        _turn_roles(drafter_tok, d_vocab),
        _turn_roles(verifier_tok, v_vocab),
    )
    for role in ("turn_start", "pad"):
        di, vi = d_roles.get(role), v_roles.get(role)
        if di is None or vi is None or di >= Vd or vi >= Vv:
            continue  # an id without a logit row never enters the map
        if pairs.get(vi) == di:
            specials[role] = (di, vi)  # paired by name already
        elif vi not in pairs and di not in used_d:
            pairs[vi], specials[role] = di, (di, vi)
            used_d.add(di)
    # every other EOS of the verifier ends its answer too: its logits fold into the answer end's column
    v_eos = _as_set(verifier_eos) | _as_set(verifier_tok.eos_token_id)
    aliases = tuple(sorted(j for j in v_eos if j < Vv and j not in pairs))
    d_eos = _as_set(drafter_eos) | _as_set(drafter_tok.eos_token_id)
    d_off = sorted(i for i in d_eos if i not in used_d)
    notes = [
        f"answer end {_label(drafter_tok, d_end)} -> {_label(verifier_tok, v_end)}"
    ]
    if aliases:
        notes.append(
            f"the verifier's EOS {', '.join(_label(verifier_tok, j) for j in aliases)} end its answer as "
            f"{_label(verifier_tok, v_end)} (their logits fold into it)"
        )
    if d_off:
        notes.append(
            f"the drafter's EOS {', '.join(_label(drafter_tok, i) for i in d_off)} stay off the map (it drafts "
            f"{_label(drafter_tok, d_end)})"
        )
    notes += [n for n in (d_note, v_note) if n]
    _check_frequent(pairs, v_bytes, Vv, Vd, drafter, verifier)
    vids = sorted(pairs)
    return VocabMap(
        torch.tensor([pairs[j] for j in vids], dtype=torch.long),
        torch.tensor(vids, dtype=torch.long),
        Vd,
        Vv,
        identity=False,
        specials=specials,
        end_aliases=aliases,
        notes=tuple(notes),
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
    """One line: the shared set's size, the share of each vocabulary it covers, the answer-end pair and the
    specials paired by role, and why any end came from the role table."""
    if vmap.identity:
        return f"one vocabulary ({vmap.verifier_size} tokens)"
    sd, sv = vmap.share()
    roles = ", ".join(
        f"{r} {d}->{v}" for r, (d, v) in vmap.specials.items() if r != "answer_end"
    )
    return "; ".join(
        [
            f"{vmap.size} shared tokens: {sd:.1%} of the drafter's {vmap.drafter_size}, {sv:.1%} of the "
            f"verifier's {vmap.verifier_size}",
            *vmap.notes,
            f"specials paired by role: {roles or 'none beyond the answer end'}",
        ]
    )
