"""The heavy verifier: the embedded verifier's exact logits at R times its decoder cost, for speed in the real regime.

AsymSpec pays off when the verifier costs far more per forward than the drafter (Qwen3-32B against Qwen3-VL-2B:
about 16x the weights); the embedded pair's verifier costs about 2x. `write_heavy_verifier` writes a copy of a
Qwen3-style verifier with R x L decoder layers instead of L: the first L are the verifier's own, each extra
layer copies the attention / MLP weights of a real one but has `o_proj` and `down_proj` all zero, so it adds
exactly 0 to the residual stream (the logits are bit-identical) while its attention, MLP and KV cache cost are
real. The folder (config, safetensors, tokenizer files) loads in transformers and vLLM like the original.

Cost ratios: a number R with 1 <= R <= MAX_COST_RATIO and R x L a whole number of layers (for the embedded
4-layer verifier: multiples of 0.25). What this module does not know: how much slower the result really is
per forward (per-call overhead does not grow with layers; bench_speed measures it).
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

from ..core.errors import ConfigError
from . import pair_paths

MAX_COST_RATIO = (
    64  # the embedded verifier at R = 64: 256 layers, about 200 MB of float32 weights
)
ZEROED = (
    ".o_proj.",
    ".down_proj.",
)  # the output projections of attention and MLP: zero in every extra layer
_LAYER = re.compile(r"^(?P<head>.*\.layers\.)(?P<index>\d+)\.(?P<tail>.+)$")


def parse_cost_ratio(text) -> float:
    """The cost ratio R as a float: a finite number >= 1 and <= MAX_COST_RATIO, else ConfigError."""
    try:
        ratio = float(text)
    except (TypeError, ValueError):
        raise ConfigError(
            f"--cost-ratio must be a number, got {text!r} (e.g. 4 or 16)"
        ) from None
    if not math.isfinite(ratio):
        raise ConfigError(f"--cost-ratio must be a finite number, got {text!r}")
    if ratio < 1:
        raise ConfigError(
            f"--cost-ratio must be at least 1 (the verifier itself), got {text!r}"
        )
    if ratio > MAX_COST_RATIO:
        raise ConfigError(
            f"--cost-ratio must be at most {MAX_COST_RATIO}, got {text!r} "
            f"(a {MAX_COST_RATIO}x verifier is already slower than any benchmark needs)"
        )
    return ratio


def heavy_layer_count(num_layers: int, cost_ratio) -> int:
    """R x L decoder layers for a verifier of L layers; ConfigError unless that is a whole number."""
    ratio = parse_cost_ratio(cost_ratio)
    layers = ratio * num_layers
    if abs(layers - round(layers)) > 1e-9:
        below, above = math.floor(layers) / num_layers, math.ceil(layers) / num_layers
        raise ConfigError(
            f"--cost-ratio {cost_ratio!r} is not a whole number of layers: the verifier has "
            f"{num_layers} decoder layers, so R must be a multiple of 1/{num_layers} "
            f"(nearest: {below:g} or {above:g})"
        )
    return round(layers)


def source_folder(verifier: str | Path | None = None) -> Path:
    """The verifier a heavy copy is made of: `verifier`, or the embedded toy verifier."""

    return Path(verifier or pair_paths()["verifier"])


def layer_count(cost_ratio, verifier: str | Path | None = None) -> int:
    """The heavy copy's decoder layers (R x L); ConfigError for a bad ratio or a verifier it cannot copy."""
    source = source_folder(verifier)
    config = json.loads((source / "config.json").read_text())
    if "num_hidden_layers" not in config or "text_config" in config:
        raise ConfigError(
            f"{source} is not a text-only decoder (no top-level num_hidden_layers): the heavy "
            "verifier is built from a Qwen3-style verifier"
        )
    return heavy_layer_count(int(config["num_hidden_layers"]), cost_ratio)


def write_heavy_verifier(
    out_dir: str | Path, cost_ratio, verifier: str | Path | None = None
) -> Path:
    """Write the heavy copy of `verifier` (a local Qwen3-style folder; default: the embedded toy verifier) with
    R x its decoder layers into out_dir; returns out_dir. Files other than config and weights are copied."""
    from safetensors.torch import load_file, save_file  # lazy: loads safetensors

    source, out = source_folder(verifier), Path(out_dir)
    total = layer_count(cost_ratio, source)
    if out.exists() and out.resolve() == source.resolve():
        raise ConfigError(
            f"the heavy verifier cannot be written over its source {source}: choose another folder"
        )
    config = json.loads((source / "config.json").read_text())
    real = int(config["num_hidden_layers"])
    weights = {}
    for f in sorted(source.glob("*.safetensors")):
        weights.update(load_file(f))
    prefix, layers = _layers(weights, real, source)
    heavy = {k: v for k, v in weights.items() if not _LAYER.match(k)}
    for i in range(total):
        for tail, tensor in layers[i % real].items():
            extra = i >= real and any(z in f".{tail}" for z in ZEROED)
            heavy[f"{prefix}{i}.{tail}"] = (
                tensor.new_zeros(tensor.shape) if extra else tensor.clone()
            )
    config["num_hidden_layers"] = total
    if config.get("layer_types"):
        config["layer_types"] = [config["layer_types"][i % real] for i in range(total)]
    out.mkdir(parents=True, exist_ok=True)
    for f in source.iterdir():
        if (
            f.is_file()
            and f.suffix != ".safetensors"
            and f.name not in ("config.json", "model.safetensors.index.json")
        ):
            shutil.copy2(f, out / f.name)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    save_file(heavy, str(out / "model.safetensors"), metadata={"format": "pt"})
    return out


def _layers(weights: dict, real: int, source: Path) -> tuple[str, list[dict]]:
    """The weight-name prefix before a layer index ("model.layers.") and, per real layer, {name after the
    index: tensor}."""
    prefix, layers = "", [{} for _ in range(real)]
    for name, tensor in weights.items():
        m = _LAYER.match(name)
        if m and int(m["index"]) < real:
            prefix = m["head"]
            layers[int(m["index"])][m["tail"]] = tensor
    for i in range(real):
        missing = [
            z.strip(".")
            for z in ZEROED
            if not any(z in f".{tail}" for tail in layers[i])
        ]
        if missing:
            raise ConfigError(
                f"layer {i} of {source} has no {' / '.join(missing)} weights: the heavy verifier "
                "needs attention and MLP output projections to zero"
            )
    return prefix, layers
