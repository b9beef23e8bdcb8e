"""Verifier folders of another vocabulary made from a tiny verifier: its token ids permuted (same strings, other
ids; embedding and output rows permuted alike) and, optionally, some merged tokens removed (their merges and
rows dropped). The metamorphic oracle of the cross-family path: the permuted verifier must answer exactly as the
original."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from tokenizers import Tokenizer
from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen2TokenizerFast


def removable_tokens(tok_json: dict, count: int) -> list[str]:
    """Merged tokens no other merge builds on (dropping them and their merges keeps the BPE model valid)."""
    merges = [
        m.split(" ") if isinstance(m, str) else m for m in tok_json["model"]["merges"]
    ]
    used = {p for m in merges for p in m}
    results = ["".join(m) for m in merges]
    return [r for r in results if r not in used and r.isalpha()][:count]


def write_other_vocabulary(
    src: Path, out: Path, seed: int, remove: int = 0
) -> tuple[Path, dict[int, int]]:
    """The verifier at `src` with its ids permuted (and `remove` merged tokens dropped) -> (folder, {old id:
    new id} of the tokens kept)."""
    tok = AutoTokenizer.from_pretrained(src)
    data = json.loads(tok.backend_tokenizer.to_str())
    gone = set(removable_tokens(data, remove))
    vocab = data["model"]["vocab"]
    old_ids = sorted(
        i for t, i in vocab.items() if t not in gone
    )  # the BPE model's tokens (specials included)
    perm = torch.randperm(
        len(old_ids), generator=torch.Generator().manual_seed(seed)
    ).tolist()
    new_of = {old: perm[k] for k, old in enumerate(old_ids)}
    tail = sorted(
        a["id"] for a in data["added_tokens"] if a["id"] not in new_of
    )  # added after it (<think>):
    new_of.update(
        {old: len(old_ids) + k for k, old in enumerate(tail)}
    )  # kept after it, in order
    data["model"]["vocab"] = {t: new_of[i] for t, i in vocab.items() if t not in gone}
    data["model"]["merges"] = [
        m
        for m in data["model"]["merges"]
        if "".join(m.split(" ") if isinstance(m, str) else m) not in gone
    ]
    for a in data["added_tokens"]:
        a["id"] = new_of[a["id"]]
    special = [a["content"] for a in data["added_tokens"] if a["special"]]
    wrapped = Qwen2TokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(data)),
        bos_token=None,
        eos_token=tok.eos_token,
        pad_token=tok.pad_token,
        unk_token=None,
        additional_special_tokens=[
            s for s in special if s not in (tok.eos_token, tok.pad_token)
        ],
    )
    wrapped.chat_template = tok.chat_template
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    order = sorted(new_of, key=new_of.get)  # new id k holds old row order[k]
    for w in {
        id(m.weight): m.weight
        for m in (model.get_input_embeddings(), model.get_output_embeddings())
    }.values():
        w.data = w.data[order].clone()  # in place: tied rows stay one tensor
    model.config.vocab_size = len(order)
    # the special ids of the config and the generation config, where set (a real Qwen3 config has no pad id; an
    # EOS may be a list)
    for config in filter(None, (model.config, model.generation_config)):
        for key in ("eos_token_id", "pad_token_id", "bos_token_id"):
            v = getattr(config, key, None)
            if isinstance(v, int):
                setattr(config, key, new_of[v])
            elif isinstance(v, list):
                setattr(config, key, [new_of[x] for x in v])
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    wrapped.save_pretrained(out)
    return out, new_of


def write_renamed_token(src: Path, out: Path, old: str, new: str) -> Path:
    """The verifier at `src` (a copy: weights, config, tokenizer) with its vocabulary entry `old` spelled `new`
    (same id, same rows; `old` in no merge): a token the drafter does not have, so outside the shared set."""
    out.mkdir(parents=True, exist_ok=True)
    for f in Path(src).iterdir():
        if f.is_file():
            shutil.copy(f, out / f.name)
    data = json.loads((out / "tokenizer.json").read_text())
    merges = data["model"]["merges"]
    assert not any(old in (m.split(" ") if isinstance(m, str) else m) for m in merges)
    vocab = data["model"]["vocab"]
    vocab[new] = vocab.pop(old)
    (out / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False))
    return out


def permuted_real_qwen3(real_shapes, seed: int = 5) -> tuple[Path, dict[int, int]]:
    """The real-shape Qwen3 verifier (real_shapes.pair("real-qwen3")'s: Qwen's real tokenizer, 151,936 rows) with its
    ids permuted by write_other_vocabulary -> (folder, {old id: new id}); written once per session folder (the
    rows past the tokenizer, 151,669 to 151,935, are banned in the original pair and left out of the permuted
    one)."""
    out = Path(real_shapes.cache) / f"permuted-qwen3-{seed}"
    index = out / "new_of.json"
    if not index.is_file():
        _, verifier = real_shapes.pair("real-qwen3")
        _, new_of = write_other_vocabulary(verifier, out, seed)
        index.write_text(json.dumps(new_of))
    return out, {int(k): v for k, v in json.loads(index.read_text()).items()}
