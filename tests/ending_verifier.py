"""A verifier folder whose every position ends the answer: a tiny random model (toy/real_vocab.py's) with one
residual dimension held large and an untied output row reading it, so the chosen end token dominates every
position's logits (min_tokens holds it for a few tokens first). What a Mistral-vocabulary verifier that answers and
stops looks like, without training one."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM


def write_ending_verifier(src: Path, out: Path, end_id: int) -> Path:
    """The verifier at `src` (tied embeddings) with token `end_id` the argmax at every position, at `out`. Every
    input embedding gets a constant dimension 0 (the residual stream and its final norm keep it large) and an
    untied output embedding reads dimension 0 in row `end_id` only (other rows are the input embeddings with
    dimension 0 zeroed, so the other tokens keep their random order)."""
    out = Path(out)
    if (out / "config.json").is_file():
        return out
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    with torch.no_grad():
        emb = model.get_input_embeddings().weight  # [V, H]
        head = emb.detach().clone()
        head[:, 0] = 0.0
        head[end_id, 0] = 10.0
        emb[:, 0] = 100.0
        model.config.tie_word_embeddings = False
        model.lm_head.weight = torch.nn.Parameter(head)
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(tmp)
    for f in Path(src).iterdir():
        if (
            f.suffix != ".safetensors"
            and f.name not in ("config.json",)
            and f.is_file()
        ):
            shutil.copy(f, tmp / f.name)
    tmp.rename(out)
    return out
