"""`asymspec-vl toy ...`: train the toy pair (`toy train OUT_DIR`), write toy-world examples (`toy example`) and
the heavy verifier (`toy heavy OUT_DIR --cost-ratio R`). The eval is `asymspec-vl eval toy` (evals/toy/cli.py)."""

from __future__ import annotations

import dataclasses
import json
import shlex
from pathlib import Path

from ..commands import invocation
from ..core.errors import ConfigError
from ..evals.jobs import writable_folder
from ..evals.toy.eval import quick_heldout
from . import PAIR_DIR, world
from .heavy import layer_count, write_heavy_verifier


def register(sub) -> None:
    p = sub.add_parser(
        "toy",
        help="the toy image-QA world: train its drafter/verifier pair, write examples",
    )
    tsub = p.add_subparsers(dest="toy_command", required=True, metavar="TOY")

    t = tsub.add_parser(
        "train", help="train a tiny Qwen3-VL drafter + tiny Qwen3 verifier into OUT_DIR"
    )
    t.add_argument("out_dir", help="output folder: drafter/, verifier/, manifest.json")
    t.add_argument(
        "--seed", type=int, default=0, help="seed of the data and the weights"
    )
    t.add_argument(
        "--workers",
        type=int,
        choices=(1, 2),
        default=2,
        help="2: the drafter and the verifier train at once in two processes (one core each)",
    )
    t.add_argument(
        "--scale",
        type=float,
        default=1.0,
        help="multiply every step count (e.g. 0.05 for a quick smoke run; 1 = the shipped recipe)",
    )
    t.add_argument(
        "--eval-n",
        type=int,
        default=150,
        help="held-out questions scored into the manifest",
    )
    t.add_argument(
        "--verifier-family",
        choices=("qwen3", "llama"),
        default="qwen3",
        help="llama: train only a Llama verifier with its own tokenizer (OUT_DIR/verifier-llama) for "
        "the drafter OUT_DIR/drafter, or the embedded drafter when OUT_DIR has none",
    )
    t.set_defaults(func=_train)

    e = tsub.add_parser(
        "example",
        help="write held-out toy scenes (PNG + JSON with caption and question) and "
        "print the commands that answer them",
    )
    e.add_argument("out_dir", help="output folder: one PNG and one JSON per scene")
    e.add_argument("--n", type=int, default=3, help="number of scenes")
    e.set_defaults(func=_example)

    h = tsub.add_parser(
        "heavy",
        help="write a verifier with the embedded verifier's exact logits and R x its cost "
        "(extra decoder layers that add exactly 0), for speed figures in the real regime",
    )
    h.add_argument(
        "out_dir",
        help="output folder of the heavy verifier (config, weights, tokenizer)",
    )
    h.add_argument(
        "--cost-ratio",
        required=True,
        metavar="R",
        help="layers x R: a number from 1 to 64 that gives a whole number of layers "
        "(multiples of 0.25 for the embedded 4-layer verifier)",
    )
    h.add_argument(
        "--verifier",
        default=None,
        help="a local Qwen3-style verifier folder (default: the embedded one)",
    )
    h.set_defaults(func=_heavy)


def _train(args) -> int:

    from .train import ToyTrainConfig, train_pair  # lazy: loads torch

    if args.scale <= 0 or args.eval_n < 0:
        raise ConfigError("--scale must be > 0 and --eval-n >= 0")

    base = ToyTrainConfig(seed=args.seed, eval_n=args.eval_n)
    if args.verifier_family != "qwen3":
        return _train_family(args, base, quick_heldout)
    cfg = base.scaled(args.scale)  # the pair's own recipe: ToyTrainConfig's defaults
    manifest = train_pair(
        args.out_dir, cfg, workers=args.workers, heldout=quick_heldout
    )
    print(
        json.dumps(
            {
                k: manifest[k]
                for k in ("final_loss", "vision_accuracy", "times", "heldout")
                if k in manifest
            },
            indent=2,
        )
    )
    print(
        f"models: {args.out_dir}/drafter {args.out_dir}/verifier\nmanifest: {args.out_dir}/manifest.json"
    )
    return 0


def _train_family(args, cfg, heldout) -> int:
    """`toy train OUT --verifier-family llama`: the family's recipe (train.LLAMA_RECIPE) scaled like the pair's."""

    from .train import (
        LLAMA_RECIPE,
        train_family_verifier,
        verifier_folder,
    )  # lazy: loads torch

    cfg = dataclasses.replace(cfg, **LLAMA_RECIPE).scaled(args.scale)
    own = Path(args.out_dir) / "drafter"
    drafter = own if (own / "config.json").is_file() else PAIR_DIR / "drafter"
    family = args.verifier_family
    manifest = train_family_verifier(
        args.out_dir, cfg, family, drafter, heldout=heldout
    )
    print(
        json.dumps(
            {
                k: manifest[k]
                for k in ("vocab_map", "final_loss", "times", "heldout")
                if k in manifest
            },
            indent=2,
        )
    )
    print(
        f"models: {drafter} {args.out_dir}/{verifier_folder(family)}\n"
        f"manifest: {args.out_dir}/{family}_manifest.json"
    )
    return 0


def _heavy(args) -> int:

    layers = layer_count(
        args.cost_ratio, args.verifier
    )  # a bad ratio is refused before anything is written
    out = write_heavy_verifier(
        writable_folder(args.out_dir), args.cost_ratio, args.verifier
    )

    print(
        f"heavy verifier ({layers} decoder layers, cost ratio {float(args.cost_ratio):g}): {out}"
    )
    command = [
        *invocation(),
        "eval",
        "toy",
        "--drafter",
        "embedded",
        "--verifier",
        str(out),
        "--batch",
        "1",
        "--variants",
        "floor,asymspec-K2-b1,asymspec-K4-b1",
        "--out",
        f"{out}-eval",
    ]
    print(
        f"# the toy table with it (batch 1, tokens/s against the Floor's):\n{shlex.join(command)}"
    )
    return 0


def _example(args) -> int:

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    for ex in world.heldout(args.n):
        ex.image().save(out / f"{ex.uid}.png")
        (out / f"{ex.uid}.json").write_text(
            json.dumps(
                {
                    "image": f"{ex.uid}.png",
                    "qtype": ex.qtype,
                    "caption": ex.caption,
                    "question": ex.question,
                    "answer": ex.answer,
                },
                indent=2,
            )
            + "\n"
        )
        command = [
            *invocation(),
            "generate",
            "--image",
            str(out / f"{ex.uid}.png"),
            "--caption",
            ex.caption,
            "--question",
            ex.question,
            "--methods",
            "asymspec,floor,drafter",
        ]
        print(f"# expected answer: {ex.answer}\n{shlex.join(command)}")
    return 0
