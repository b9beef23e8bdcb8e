"""`asymspec-vl toy train`: train the toy pair (a tiny Qwen3-VL drafter and a tiny Qwen3 verifier with one
shared tokenizer) from scratch, deterministically for a seed, in two processes (one per model, one thread
each); write two loadable model folders, a training log and a manifest. `--verifier-family llama` trains a
verifier of another family (toy/llama.py: its own tokenizer and template) for the toy drafter, with the same data
and training loop (train_family_verifier)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import multiprocessing as mp
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from ..core.errors import ConfigError
from ..inputs.vocab_map import build_vocab_map, describe
from . import world
from .batches import Encoder, drafter_batch, verifier_batch
from .llama import llama_model, train_llama_tokenizer, write_llama_model
from .lm import train_lm
from .tags import TagHead
from .tiny import (
    TinySizes,
    text_model,
    train_tokenizer,
    vl_model,
    write_text_model,
    write_vl_model,
)
from .vision import pretrain_vision

DRAFTER_SIZES = TinySizes(
    hidden=128,
    layers=2,
    heads=4,
    kv_heads=2,
    head_dim=32,
    intermediate=256,
    vision_hidden=64,
    vision_depth=2,
    max_position=4096,
)
VERIFIER_SIZES = TinySizes(
    hidden=128,
    layers=4,
    heads=4,
    kv_heads=2,
    head_dim=32,
    intermediate=384,
    max_position=4096,
)
# The Llama verifier's recipe (train_family_verifier): its tokenizer's requested size, widths and steps.
LLAMA_RECIPE = {
    "vocab_size": 300,
    "verifier_steps": 1800,
    "verifier_sizes": TinySizes(
        hidden=128,
        layers=4,
        heads=4,
        kv_heads=2,
        head_dim=32,
        intermediate=384,
        max_position=4096,
    ),
}
VERIFIER_FAMILIES = ("qwen3", "llama")


@dataclass(frozen=True)
class ToyTrainConfig:
    """Everything that determines the trained pair (with the code and the library versions)."""

    seed: int = 0
    vocab_size: int = 512
    drafter_sizes: TinySizes = DRAFTER_SIZES
    verifier_sizes: TinySizes = VERIFIER_SIZES
    vision_steps: int = 800
    vision_batch: int = 48
    vision_lr: float = 3e-3
    drafter_steps: int = 2000
    drafter_batch: int = 32
    drafter_lr: float = 2e-3
    per_scene: int = 4  # drafter questions per rendered scene
    drafter_views: tuple[float, float, float] = (
        0.45,
        0.35,
        0.20,
    )  # x_full, x_question, x_comp (image dropped)
    drafter_qtypes: tuple[float, float, float] = (
        0.485,
        0.485,
        0.03,
    )  # read, sum, mult: little arithmetic
    drafter_visual_lr: float = 0.1  # the pretrained vision tower learns 10x slower (else its features are lost)
    tag_weight: float = 1.0  # the tag head's loss (toy/tags.py)
    verifier_steps: int = 2500
    verifier_batch: int = 32
    verifier_lr: float = 2e-3
    curriculum: float = (
        0.5  # share of the verifier's rows that are arithmetic exercises
    )
    eval_n: int = 150  # held-out questions scored into the manifest (0: none)

    def __post_init__(self) -> None:
        for name in (
            "vision_steps",
            "drafter_steps",
            "verifier_steps",
            "vision_batch",
            "drafter_batch",
            "verifier_batch",
            "per_scene",
        ):
            if not isinstance(getattr(self, name), int) or getattr(self, name) < 1:
                raise ConfigError(
                    f"ToyTrainConfig.{name}={getattr(self, name)!r}: expected a positive integer"
                )
        if self.drafter_batch % self.per_scene:
            raise ConfigError(
                "ToyTrainConfig.drafter_batch must be a multiple of per_scene"
            )
        if not 0.0 <= self.curriculum <= 1.0:
            raise ConfigError(
                f"ToyTrainConfig.curriculum={self.curriculum!r}: expected a number in [0, 1]"
            )

    def scaled(self, factor: float) -> ToyTrainConfig:
        """The same recipe with every step count multiplied by factor (at least 1 step each)."""
        return dataclasses.replace(
            self,
            **{
                k: max(1, round(getattr(self, k) * factor))
                for k in ("vision_steps", "drafter_steps", "verifier_steps")
            },
        )

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ToyTrainConfig:
        """Inverse of to_dict (e.g. the "config" of a manifest.json)."""
        d = dict(d)
        for k in ("drafter_sizes", "verifier_sizes"):
            if isinstance(d.get(k), dict):
                d[k] = TinySizes(**d[k])
        for k in ("drafter_views", "drafter_qtypes"):
            if k in d:
                d[k] = tuple(d[k])
        return cls(**d)


def verifier_folder(family: str) -> str:
    """The verifier's folder name under a pair's directory: verifier/ (Qwen3, one tokenizer with the drafter),
    verifier-<family>/ otherwise."""
    if family not in VERIFIER_FAMILIES:
        raise ConfigError(
            f"verifier family {family!r}: expected one of {', '.join(VERIFIER_FAMILIES)}"
        )
    return "verifier" if family == "qwen3" else f"verifier-{family}"


def train_verifier(
    out: str, cfg: ToyTrainConfig, position: int = 1, family: str = "qwen3"
) -> None:
    """Train the verifier of `family` in this process; write its folder and <folder>_log.jsonl under out
    (the folder holds its tokenizer already)."""
    from transformers import AutoTokenizer  # lazy: loads transformers

    torch.set_num_threads(1)
    t0, c0 = time.perf_counter(), time.process_time()
    root, folder = Path(out), verifier_folder(family)
    tok = AutoTokenizer.from_pretrained(root / folder)
    enc = Encoder(tok)
    if family == "qwen3":
        model = text_model(tok, cfg.verifier_sizes, seed=cfg.seed + 2, wide_init=False)
    else:
        model = llama_model(tok, cfg.verifier_sizes, seed=cfg.seed + 4)
    log: list[dict] = []
    loss = train_lm(
        model,
        lambda s: verifier_batch(
            enc, cfg.seed, s, cfg.verifier_batch, cfg.per_scene, cfg.curriculum
        ),
        cfg.verifier_steps,
        cfg.verifier_lr,
        log,
        "verifier",
        position=position,
    )
    write_text_model(
        root / folder, tok, cfg.verifier_sizes, model=model
    )  # model given: any family's
    log.append(
        {
            "stage": "verifier",
            "final_loss": round(loss, 4),
            "wall_s": round(time.perf_counter() - t0, 1),
            "cpu_s": round(time.process_time() - c0, 1),
        }
    )
    (root / f"{folder}_log.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in log)
    )


def train_drafter(out: str, cfg: ToyTrainConfig, position: int = 0) -> list[dict]:
    """Pretrain the drafter's vision tower, then train the whole drafter; write its folder; return the log."""
    from transformers import AutoProcessor  # lazy: loads transformers

    torch.set_num_threads(1)
    t0, c0 = time.perf_counter(), time.process_time()
    root = Path(out)
    processor = AutoProcessor.from_pretrained(root / "drafter")
    enc = Encoder(processor.tokenizer, processor)
    model = vl_model(
        processor.tokenizer, cfg.drafter_sizes, seed=cfg.seed + 1, wide_init=False
    )
    log: list[dict] = []
    acc = pretrain_vision(
        model,
        enc,
        cfg.seed,
        cfg.vision_steps,
        cfg.vision_batch,
        cfg.vision_lr,
        log,
        position,
    )
    torch.manual_seed(cfg.seed + 3)
    tag_head = TagHead(cfg.drafter_sizes.hidden)
    loss = train_lm(
        model,
        lambda s: drafter_batch(
            enc,
            cfg.seed,
            s,
            cfg.drafter_batch,
            cfg.per_scene,
            cfg.drafter_views,
            cfg.drafter_qtypes,
        ),
        cfg.drafter_steps,
        cfg.drafter_lr,
        log,
        "drafter",
        position=position,
        lr_scale=lambda name: (
            cfg.drafter_visual_lr if name.startswith("model.visual.") else 1.0
        ),
        tag_head=tag_head,
        tag_weight=cfg.tag_weight,
    )
    write_vl_model(
        root / "drafter", processor.tokenizer, cfg.drafter_sizes, model=model
    )
    log.append(
        {
            "stage": "drafter",
            "final_loss": round(loss, 4),
            "vision_accuracy": acc,
            "wall_s": round(time.perf_counter() - t0, 1),
            "cpu_s": round(time.process_time() - c0, 1),
        }
    )
    return log


def machine() -> dict:
    """The platform the weights were trained on: float rounding (and so the weights) differ across CPUs."""

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next(
                (
                    line.split(":", 1)[1].strip()
                    for line in f
                    if line.startswith("model name")
                ),
                cpu,
            )
    except OSError:
        pass
    return {
        "platform": platform.platform(),
        "cpu": cpu,
        "cpu_count": os.cpu_count(),
        "torch_threads": 1,
    }


def train_pair(
    out_dir: str | Path,
    cfg: ToyTrainConfig = ToyTrainConfig(),
    workers: int = 2,
    heldout: Callable[[Path, Path, int], dict] | None = None,
) -> dict:
    """Train both models into out_dir/{drafter,verifier}; write train_log.jsonl and manifest.json.
    heldout(drafter_dir, verifier_dir, n), when given, scores cfg.eval_n held-out questions into the manifest
    (`asymspec-vl toy train` passes the toy eval's quick_heldout: the eval is a layer above the models)."""
    import transformers  # lazy: loads transformers

    if workers not in (1, 2):
        raise ConfigError(f"workers={workers!r}: expected 1 or 2")
    root = Path(out_dir)
    root.mkdir(parents=True, exist_ok=True)
    t0, c0 = time.perf_counter(), time.process_time()
    tok = train_tokenizer(
        world.tokenizer_corpus(), vocab_size=cfg.vocab_size, qwen_split=True
    )
    write_vl_model(
        root / "drafter", tok, cfg.drafter_sizes, seed=cfg.seed
    )  # folders first: processor files
    write_text_model(root / "verifier", tok, cfg.verifier_sizes, seed=cfg.seed)
    if workers == 2:
        child = mp.get_context("spawn").Process(
            target=train_verifier, args=(str(root), cfg, 1), daemon=True
        )
        child.start()
        try:
            log = train_drafter(str(root), cfg, position=0)
        except BaseException:
            child.terminate()  # an interrupted run leaves no orphan writing into out_dir
            raise
        child.join()
        if child.exitcode != 0:
            raise RuntimeError(
                f"the verifier's training process failed (exit code {child.exitcode})"
            )
    else:
        log = train_drafter(str(root), cfg, position=0)
        train_verifier(str(root), cfg, position=0)
    vlog = [
        json.loads(line)
        for line in (root / "verifier_log.jsonl").read_text().splitlines()
    ]
    (root / "verifier_log.jsonl").unlink()
    log += vlog
    (root / "train_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in log))
    train_wall = time.perf_counter() - t0
    cpu = time.process_time() - c0 + vlog[-1]["cpu_s"] * (workers == 2)
    manifest = {
        "what": "asymspec-vl toy pair: tiny Qwen3-VL drafter + tiny Qwen3 verifier, shared tokenizer",
        "config": cfg.to_dict(),
        "vocab_size": len(tok),
        "params": {
            "drafter": _count(root / "drafter"),
            "verifier": _count(root / "verifier"),
        },
        "data": {
            "vision_images": cfg.vision_steps * cfg.vision_batch,
            "drafter_rows": cfg.drafter_steps * cfg.drafter_batch,
            "drafter_scenes": cfg.drafter_steps * cfg.drafter_batch // cfg.per_scene,
            "verifier_rows": cfg.verifier_steps * cfg.verifier_batch,
        },
        "final_loss": {r["stage"]: r["final_loss"] for r in log if "final_loss" in r},
        "vision_accuracy": next(
            r["vision_accuracy"] for r in log if "vision_accuracy" in r
        ),
        "times": {
            "train_wall_s": round(train_wall, 1),
            "train_cpu_s": round(cpu, 1),
            "workers": workers,
            "drafter": {
                k: log[len(log) - len(vlog) - 1][k] for k in ("wall_s", "cpu_s")
            },
            "verifier": {k: vlog[-1][k] for k in ("wall_s", "cpu_s")},
        },
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },
        "machine": machine(),  # the weights are bit-reproducible on a machine like this one only
        "sha256": {
            f"{m}/model.safetensors": _sha256(root / m / "model.safetensors")
            for m in ("drafter", "verifier")
        },
    }
    if cfg.eval_n and heldout is not None:
        t1 = time.perf_counter()
        manifest["heldout"] = heldout(root / "drafter", root / "verifier", cfg.eval_n)
        manifest["times"]["eval_wall_s"] = round(time.perf_counter() - t1, 1)
    text = json.dumps(manifest, indent=2) + "\n"
    (root / "manifest.json").write_text(text)
    return json.loads(text)


def train_family_verifier(
    out_dir: str | Path,
    cfg: ToyTrainConfig,
    family: str,
    drafter: str | Path,
    heldout: Callable[[Path, Path, int], dict] | None = None,
) -> dict:
    """Train a verifier of another family for the drafter folder `drafter`, on the verifier's data of train_pair
    (cfg's verifier_* fields; the family's tokenizer trained on the same toy text, vocabulary size
    cfg.vocab_size): write out_dir/verifier-<family>/, <family>_train_log.jsonl and <family>_manifest.json (the
    vocabulary map's size and shares, and heldout(drafter, verifier, cfg.eval_n) when given)."""
    import transformers  # lazy: loads transformers
    from transformers import AutoTokenizer  # lazy: loads transformers

    folder = verifier_folder(family)
    if family == "qwen3":
        raise ConfigError(
            "the qwen3 verifier shares the drafter's tokenizer: train it with the pair (train_pair)"
        )
    root, drafter = Path(out_dir), Path(drafter)
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    tok = train_llama_tokenizer(world.tokenizer_corpus(), vocab_size=cfg.vocab_size)
    write_llama_model(
        root / folder, tok, cfg.verifier_sizes, seed=cfg.seed
    )  # the folder holds the tokenizer
    train_verifier(str(root), cfg, position=0, family=family)
    log_file = root / f"{folder}_log.jsonl"
    log = [json.loads(line) for line in log_file.read_text().splitlines()]
    log_file.unlink()
    (root / f"{family}_train_log.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in log)
    )
    vmap = build_vocab_map(AutoTokenizer.from_pretrained(drafter), tok)
    manifest = {
        "what": f"asymspec-vl toy verifier of another family: tiny {family} verifier, its own tokenizer, for the "
        f"toy drafter",
        "family": family,
        "config": cfg.to_dict(),
        "vocab_size": len(tok),
        "vocab_map": {
            "shared": vmap.size,
            "drafter_share": round(vmap.share()[0], 4),
            "verifier_share": round(vmap.share()[1], 4),
            "describe": describe(vmap),
        },
        "params": {"verifier": _count(root / folder)},
        "data": {"verifier_rows": cfg.verifier_steps * cfg.verifier_batch},
        "final_loss": {"verifier": log[-1]["final_loss"]},
        "times": {
            "train_wall_s": round(time.perf_counter() - t0, 1),
            "workers": 1,
            "verifier": {k: log[-1][k] for k in ("wall_s", "cpu_s")},
        },
        "versions": {
            "torch": torch.__version__,
            "transformers": transformers.__version__,
        },
        "machine": machine(),
        "sha256": {
            f"{folder}/model.safetensors": _sha256(root / folder / "model.safetensors"),
            f"{folder}/tokenizer.json": _sha256(root / folder / "tokenizer.json"),
            "drafter/model.safetensors": _sha256(drafter / "model.safetensors"),
        },
    }
    if cfg.eval_n and heldout is not None:
        t1 = time.perf_counter()
        manifest["heldout"] = heldout(drafter, root / folder, cfg.eval_n)
        manifest["times"]["eval_wall_s"] = round(time.perf_counter() - t1, 1)
    text = json.dumps(manifest, indent=2) + "\n"
    (root / f"{family}_manifest.json").write_text(text)
    return json.loads(text)


def _count(folder: Path) -> int:
    """Parameters stored in a model folder."""
    from safetensors import safe_open  # lazy: loads safetensors

    with safe_open(str(folder / "model.safetensors"), "pt") as f:
        return sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
