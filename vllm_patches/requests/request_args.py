"""The per-request AsymSpec inputs carried by SamplingParams.extra_args["asymspec"]: build and validate.

Schema (all but `mode` optional):
  mode            "asymspec" (drafter on x_full, gate + delta-fusion), "floor" (no drafts: the verifier's
                  tokens, for servers that hold one engine), "sd" (drafter on x_comp, speculative
                  verification), "scd" (drafter on x_comp, contrastive target, Appendix B); each greedy, or
                  sampled by its method's sampled rule (asymspec_vl.core.sampling) when temperature >= 1e-5
  config          AsymSpecConfig fields (K at most the engine's num_speculative_tokens; default: that); the
                  budget, stop and sampling fields travel in SamplingParams itself (max_tokens,
                  stop_token_ids, stop, include_stop_str_in_output, min_tokens, temperature, top_p,
                  top_k, min_p, seed: sampling_params() below), where vLLM's scheduler, output processor and
                  per-request generators read them; in config they are refused
  x_full          the drafter's full prompt, token ids (mode "asymspec": required)
  pixel_values    [num_patches, C*T*P*P] float, the drafter's image inputs (Qwen-VL processor output)
  image_grid_thw  [num_images, 3] int
                  (tensors travel packed as {"dtype", "shape", "data": bytes}, which survives vLLM's
                  msgpack transport to the engine process; tensors, arrays and nested lists are accepted)
Through the OpenAI-compatible server, whose `vllm_xargs` values are flat, the same dict travels as a JSON
string (`serve_xargs`), packed tensor data base64-encoded.
  banned          token ids no argmax may pick (structural specials)
The verifier's prompt x_comp is the request's own prompt. Requests without the key are ordinary
speculative decoding. Every violation raises a typed error naming the field; the engine turns it into an
error finish of that request alone.

The scheduler parses a request's extra_args once, when it arrives (`parse_request`), into an `AsymSpecRequest`;
the workers read that object (it travels to them in the request's extra_args under REQUEST_KEY) and never
parse the wire format again.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import secrets
from dataclasses import dataclass

import torch

from asymspec_vl.core.config import SAMPLING_FIELDS, AsymSpecConfig
from asymspec_vl.core.errors import (
    ConfigError,
    InputError,
    InvalidImageError,
    PromptTooLongError,
)
from asymspec_vl.core.methods import METHODS, SPECULATIVE_ENGINE_MODES, Method

from .mrope import image_runs

KEY = "asymspec"
GREEDY_BELOW = (
    1e-5  # vLLM's sampler decodes a temperature below this greedily (_SAMPLING_EPS)
)
REQUEST_KEY = "asymspec_request"  # extra_args key of the parsed AsymSpecRequest, set by the scheduler for the workers
MODES = SPECULATIVE_ENGINE_MODES  # methods.py: the methods an asymspec engine runs per request
FIELDS = (
    "mode",
    "config",
    "x_full",
    "pixel_values",
    "image_grid_thw",
    "banned",
    "x_comp_drafter",  # a cross-family pair's x_comp in the drafter's own ids (docs/cross-family.md)
)
# a structured output travels as SamplingParams.structured_outputs (vLLM's scheduler applies it), never here
_CONFIG_FIELDS = {f.name for f in dataclasses.fields(AsymSpecConfig)} - {
    "structured_output"
}
_IN_PARAMS = (
    "max_new_tokens",
    "stop_token_ids",
    "structured_output",
) + SAMPLING_FIELDS  # in SamplingParams


class RequestArgsError(InputError):
    """extra_args["asymspec"] is malformed (a missing field, a wrong type or shape)."""


@dataclass(frozen=True)
class EngineFacts:
    """What validation needs to know about the engine's models."""

    K: int
    vocab_size: int
    max_model_len: int
    image_token_id: int | None = None  # None: the drafter reads no images
    patch_dim: int | None = None  # C * temporal_patch * patch * patch
    merge_size: int = 1
    verifier_vocab_size: int | None = (
        None  # the verifier's logits (banned ids are its); None: vocab_size
    )


def engine_facts(vllm_config) -> EngineFacts:
    """The facts of an asymspec engine's drafter, from its VllmConfig (the same in the scheduler's and the
    workers' processes once the KV cache config is final)."""
    spec = vllm_config.speculative_config
    draft = spec.draft_model_config
    hf = draft.hf_config
    vision = (
        getattr(hf, "vision_config", None)
        if draft.is_multimodal_model and getattr(hf, "image_token_id", None) is not None
        else None
    )
    return EngineFacts(
        K=spec.num_speculative_tokens,
        vocab_size=draft.get_vocab_size(),
        max_model_len=vllm_config.model_config.max_model_len,
        image_token_id=getattr(hf, "image_token_id", None)
        if vision is not None
        else None,
        patch_dim=(
            vision.in_channels * vision.temporal_patch_size * vision.patch_size**2
            if vision is not None
            else None
        ),
        merge_size=getattr(vision, "spatial_merge_size", 1),
        verifier_vocab_size=vllm_config.model_config.get_vocab_size(),
    )


@dataclass
class AsymSpecRequest:
    """One request's AsymSpec inputs, parsed once (`parse_request`): its method, config and views."""

    method: Method
    cfg: AsymSpecConfig  # cfg.K: the drafts per step (at most the engine's num_speculative_tokens)
    x_full: list[int] | None = None
    pixel_values: torch.Tensor | None = None  # [num_patches, patch_dim]
    image_grid_thw: torch.Tensor | None = None  # [num_images, 3] int64
    banned: tuple[int, ...] = ()
    stop_ids: tuple[
        int, ...
    ] = ()  # what ends the answer (vLLM's all_stop_token_ids): held below cfg.min_tokens
    # a cross-family pair's x_comp in the drafter's ids (its own KV view: the drafter's b, and SD / SCD drafts)
    x_comp_drafter: list[int] | None = None

    @property
    def K(self) -> int:
        return self.cfg.K

    @property
    def reads_full_view(self) -> bool:
        """The method's drafter drafts on x_full (the drafter's own cache and prompt)."""
        return self.method.draft_view == "x_full"

    @property
    def num_draft_logits(self) -> int:
        """The drafting source's logits per step: a_1..a_K, and a_{K+1} when it also reads d_K."""
        return self.K + self.method.drafts_last(self.cfg)

    @property
    def reads_drafter_comp(self) -> bool:
        """The method's drafter reads x_comp (its b, or its drafts)."""
        return "b" in self.method.reads or self.method.draft_view == "x_comp"


def make_extra_args(
    mode: str,
    cfg: AsymSpecConfig,
    x_full=None,
    pixel_values=None,
    image_grid_thw=None,
    banned=None,
    x_comp_drafter=None,
) -> dict:
    """The extra_args dict for one request (client side)."""
    args: dict = {
        "mode": mode,
        "config": {k: v for k, v in cfg.to_dict().items() if k not in _IN_PARAMS},
    }
    if x_full is not None:
        args["x_full"] = list(x_full)
    if pixel_values is not None:
        args["pixel_values"], args["image_grid_thw"] = (
            pack_tensor(pixel_values),
            pack_tensor(image_grid_thw),
        )
    if banned is not None:
        args["banned"] = sorted(int(b) for b in banned)
    if x_comp_drafter is not None:
        args["x_comp_drafter"] = list(x_comp_drafter)
    return {KEY: args}


def serve_xargs(extra_args: dict) -> dict:
    """extra_args as the OpenAI server's `vllm_xargs` accepts them: {"asymspec": "<json>"}."""

    def encode(v):
        if isinstance(v, dict):
            return {k: encode(x) for k, x in v.items()}
        return base64.b64encode(v).decode("ascii") if isinstance(v, bytes) else v

    return {KEY: json.dumps(encode(extra_args[KEY]))}


def _raw_args(extra_args: dict):
    """extra_args["asymspec"] as a dict (decoding the server's JSON-string form)."""
    raw = extra_args[KEY]
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError as e:
            raise RequestArgsError(
                f'extra_args["{KEY}"] is a string but not JSON: {e}'
            ) from e
    if not isinstance(raw, dict):
        raise RequestArgsError(
            f'extra_args["{KEY}"] must be a dict, got {type(raw).__name__}'
        )
    return raw


def pack_tensor(t) -> dict:
    t = torch.as_tensor(t).detach().cpu().contiguous()
    return {
        "dtype": str(t.dtype).removeprefix("torch."),
        "shape": list(t.shape),
        "data": t.view(torch.uint8).numpy().tobytes(),
    }


def unpack_tensor(value, name: str) -> torch.Tensor:
    """A tensor from a packed dict, a tensor, an array or nested lists."""
    if isinstance(value, dict):
        try:
            dtype, shape, data = (
                getattr(torch, value["dtype"]),
                [int(n) for n in value["shape"]],
                value["data"],
            )
            data = base64.b64decode(data) if isinstance(data, str) else data
            flat = torch.frombuffer(bytearray(data), dtype=torch.uint8)
            return flat.view(dtype).reshape(shape)
        except (
            KeyError,
            TypeError,
            ValueError,
            AttributeError,
            RuntimeError,
        ) as e:  # binascii.Error is a ValueError
            raise InvalidImageError(
                f"{name} is not a packed tensor ({{dtype, shape, data}}): {e}"
            ) from e
    try:
        return torch.as_tensor(value)
    except (TypeError, ValueError, RuntimeError) as e:
        raise InvalidImageError(f"{name} is not a tensor: {e}") from e


def has_request_args(extra_args) -> bool:
    return isinstance(extra_args, dict) and KEY in extra_args


def parse_request(params, facts: EngineFacts) -> AsymSpecRequest:
    """The request of SamplingParams `params` (whose extra_args hold KEY), parsed and checked once: its cfg takes
    the sampling fields and min_tokens from `params` (with_sampling_params), its stop_ids vLLM's (EOS unless
    ignore_eos, and stop_token_ids)."""
    request = parse_request_args(params.extra_args, facts)
    check_supported(params)
    request.cfg = with_sampling_params(request.cfg, params)
    request.stop_ids = tuple(sorted(params.all_stop_token_ids))
    return request


def with_sampling_params(cfg: AsymSpecConfig, params) -> AsymSpecConfig:
    """cfg with the SamplingParams' temperature, top_p, top_k, min_p, seed and min_tokens; a temperature below
    vLLM's greedy threshold (1e-5) decodes greedily (temperature 0, no seed), as vLLM's sampler does. A sampling
    request without a seed gets a fresh one here, once: every tensor-parallel rank then draws the same stream."""
    if params.temperature < GREEDY_BELOW:
        sampled = dict(temperature=0.0, top_p=1.0, top_k=0, min_p=0.0, seed=None)
    else:
        seed = params.seed if params.seed is not None else secrets.randbits(63)
        sampled = dict(
            temperature=float(params.temperature),
            top_p=float(params.top_p),
            top_k=max(int(params.top_k), 0),
            min_p=float(params.min_p),
            seed=seed,
        )
    return cfg.replace(
        **sampled,
        min_tokens=int(params.min_tokens),
        max_new_tokens=max(cfg.max_new_tokens, int(params.min_tokens)),
    )


def parse_request_args(extra_args: dict, facts: EngineFacts) -> AsymSpecRequest:
    raw = _raw_args(extra_args)
    unknown = set(raw) - set(FIELDS)
    if unknown:
        raise RequestArgsError(
            f'extra_args["{KEY}"] has unknown field(s) {sorted(unknown)}; known: {FIELDS}'
        )
    mode = raw.get("mode")
    if mode not in MODES:
        raise RequestArgsError(
            f'extra_args["{KEY}"]["mode"]={mode!r} must be one of {MODES}'
        )
    cfg = _config(raw.get("config", {}), facts)
    banned = tuple(
        _token_ids(
            raw.get("banned", []),
            "banned",
            facts.verifier_vocab_size or facts.vocab_size,
        )
    )
    x_full = raw.get("x_full")
    method = METHODS[mode]
    if x_full is None and "x_full" in method.views:
        raise RequestArgsError(
            f'mode "{mode}" needs extra_args["asymspec"]["x_full"] (the drafter prompt)'
        )
    if x_full is not None:
        x_full = _token_ids(x_full, "x_full", facts.vocab_size)
        if not x_full:
            raise RequestArgsError("x_full is empty")
        if len(x_full) >= facts.max_model_len:
            raise PromptTooLongError(
                f"x_full has {len(x_full)} tokens; the engine's max_model_len is "
                f"{facts.max_model_len}"
            )
    pixel_values, grid = _image_inputs(raw, x_full, facts)
    request = AsymSpecRequest(method, cfg, x_full, pixel_values, grid, banned)
    x_comp_drafter = raw.get("x_comp_drafter")
    if x_comp_drafter is not None:
        request.x_comp_drafter = _token_ids(
            x_comp_drafter, "x_comp_drafter", facts.vocab_size
        )
        if not request.x_comp_drafter:
            raise RequestArgsError("x_comp_drafter is empty")
        if len(request.x_comp_drafter) >= facts.max_model_len:
            raise PromptTooLongError(
                f"x_comp_drafter has {len(request.x_comp_drafter)} tokens; the engine's max_model_len is "
                f"{facts.max_model_len}"
            )
    return request


def _config(raw, facts: EngineFacts) -> AsymSpecConfig:
    if not isinstance(raw, dict):
        raise RequestArgsError(
            f"config must be a dict of AsymSpecConfig fields, got {type(raw).__name__}"
        )
    unknown = set(raw) - _CONFIG_FIELDS
    if unknown:
        raise ConfigError(f"unknown AsymSpecConfig field(s) {sorted(unknown)}")
    in_params = sorted(set(raw) & set(SAMPLING_FIELDS))
    if in_params:
        raise ConfigError(
            f"AsymSpecConfig.{in_params[0]} travels in SamplingParams, not in "
            f'extra_args["{KEY}"]["config"]: set SamplingParams({", ".join(in_params)}=...)'
        )
    try:
        cfg = AsymSpecConfig(**{"K": facts.K, **raw})
    except TypeError as e:  # e.g. a list where a number belongs
        raise ConfigError(f"invalid AsymSpecConfig: {e}") from e
    if cfg.K > facts.K:
        raise ConfigError(
            f"config K={cfg.K} exceeds the engine's num_speculative_tokens={facts.K}: start the "
            f"engine with num_speculative_tokens >= {cfg.K} (it serves every K up to its own)"
        )
    return cfg


def _token_ids(ids, name: str, vocab_size: int) -> list[int]:
    if isinstance(ids, torch.Tensor):
        ids = ids.tolist()
    if not isinstance(ids, (list, tuple)) or not all(
        isinstance(i, int) and not isinstance(i, bool) for i in ids
    ):
        raise RequestArgsError(f"{name} must be a list of token ids")
    bad = [i for i in ids if not 0 <= i < vocab_size]
    if bad:
        raise RequestArgsError(
            f"{name} holds token ids outside [0, {vocab_size}): {bad[:5]}"
        )
    return list(ids)


def _image_inputs(raw: dict, x_full: list[int] | None, facts: EngineFacts):
    """Validate pixel_values against image_grid_thw and the image_pad runs of x_full."""
    pv, grid = raw.get("pixel_values"), raw.get("image_grid_thw")
    n_pad = (
        x_full.count(facts.image_token_id)
        if (x_full and facts.image_token_id is not None)
        else 0
    )
    if pv is None and grid is None:
        if n_pad:
            raise InvalidImageError(
                f"x_full holds {n_pad} image tokens but no pixel_values were given"
            )
        return None, None
    if pv is None or grid is None:
        raise RequestArgsError("pixel_values and image_grid_thw must be given together")
    if facts.image_token_id is None:
        raise InvalidImageError(
            "the engine's drafter is a text model: it cannot read pixel_values"
        )
    if x_full is None:
        raise RequestArgsError(
            "pixel_values need x_full, the drafter prompt that places the image"
        )
    pv, grid = unpack_tensor(pv, "pixel_values"), unpack_tensor(grid, "image_grid_thw")
    if not pv.is_floating_point() or pv.dim() != 2 or pv.shape[1] != facts.patch_dim:
        raise InvalidImageError(
            f"pixel_values must be float [num_patches, {facts.patch_dim}], got "
            f"{pv.dtype} {list(pv.shape)}"
        )
    if (
        grid.dim() != 2
        or grid.shape[1] != 3
        or grid.is_floating_point()
        or len(grid) == 0
    ):
        raise InvalidImageError(
            f"image_grid_thw must be int [num_images, 3], got {grid.dtype} {list(grid.shape)}"
        )
    grid = grid.long()
    m = facts.merge_size
    if (grid <= 0).any() or (grid[:, 0] != 1).any() or (grid[:, 1:] % m != 0).any():
        raise InvalidImageError(
            f"image_grid_thw {grid.tolist()} is not a grid of images (t = 1, h and w "
            f"positive multiples of {m})"
        )
    if int(grid.prod(-1).sum()) != pv.shape[0]:
        raise InvalidImageError(
            f"image_grid_thw {grid.tolist()} covers {int(grid.prod(-1).sum())} patches; "
            f"pixel_values has {pv.shape[0]}"
        )
    if not torch.isfinite(pv).all():
        raise InvalidImageError("pixel_values hold NaN or infinite values")
    per_image = (grid.prod(-1) // (m * m)).tolist()
    runs = [n for _, n in image_runs(x_full, facts.image_token_id)]
    if runs != per_image:
        raise InvalidImageError(
            f"x_full's image token runs {runs} do not match image_grid_thw, which needs "
            f"{per_image}"
        )
    return pv, grid


def sampling_params(cfg: AsymSpecConfig) -> dict:
    """The SamplingParams keywords of cfg's budget-free stop and sampling fields (vLLM's meanings; top_k 0
    is vLLM's "off"): the engine's scheduler, output processor and sampler read them there."""
    return dict(
        temperature=float(cfg.temperature),
        top_p=float(cfg.top_p),
        top_k=int(cfg.top_k),
        min_p=float(cfg.min_p),
        seed=cfg.seed,
        stop=list(cfg.stop),
        include_stop_str_in_output=cfg.include_stop_str_in_output,
        min_tokens=int(cfg.min_tokens),
        logprobs=cfg.logprobs,
        prompt_logprobs=cfg.prompt_logprobs,
    )


def decodes_greedily(params) -> bool:
    """Greedy decoding without logits processing: the verifier's argmax decides (logprobs may be asked)."""
    return (
        params is not None
        and params.temperature < 1e-5
        and not params.logit_bias
        and not params.bad_words
        and not params.allowed_token_ids
        and params.presence_penalty == 0
        and params.frequency_penalty == 0
        and params.repetition_penalty == 1
        and not params.min_tokens
    )


def check_supported(params) -> None:
    """RequestArgsError for what the methods' rules do not define: penalties and logits processing (temperature,
    top_p, top_k, min_p, seed and min_tokens are the rules' own: with_sampling_params; logprobs are served, each
    token's under the distribution it was chosen from, asymspec_vl/core/logprobs.py)."""
    if (
        params.logit_bias
        or params.bad_words
        or params.allowed_token_ids
        or params.presence_penalty != 0
        or params.frequency_penalty != 0
        or params.repetition_penalty != 1
    ):
        raise RequestArgsError(
            "asymspec requests take temperature, top_p, top_k, min_p, seed, min_tokens and "
            "logprobs; not penalties, logit_bias, bad_words or allowed_token_ids"
        )
