"""The drafter's decode-shaped passes through vLLM's compilation of its model, replayed on CUDA as PIECEWISE
CUDA graphs for the engine's capture sizes, dispatched as vLLM's EAGLE proposer dispatches its drafter.

Decode-shaped passes: the x_full passes after a step's first (one token a row), the x_comp scoring pass
(the verifier step's tokens, K + 1 a row in decode) and the x_comp drafting passes. The first x_full pass
of a step (the feed, with the image embeddings and DeepStack features on a request's first step) stays eager.

How vLLM runs its drafters, mirrored here (v1/spec_decode/eagle.py, v1/cudagraph_dispatcher.py):
  - the model's `@support_torch_compile` language model (Qwen3-VL's Qwen3LLMModel, Qwen3's Qwen3Model) is
    compiled once, tracing a call with a dynamic token count; with the CPU platform that is
    DYNAMO_TRACE_ONCE with inductor (platforms/cpu.py), on CUDA vLLM's piecewise backend (VLLM_COMPILE);
  - the compiled code is traced once with its guards dropped, so every call must have the traced call's
    form: embeddings computed outside the compiled region (`inputs_embeds`, never `input_ids`), 3-D
    positions for an M-RoPE drafter, no DeepStack features but those of the model's own (zeroed) buffer;
  - a CudagraphDispatcher whose keys are PIECEWISE at the engine's capture sizes when the engine's
    cudagraph mode has PIECEWISE or FULL mixed batches and the speculative config does not ask for eager
    (eagle.py initialize_cudagraph_keys); a pass of n tokens runs padded to the dispatcher's next capture
    size (n <= the largest) and otherwise eagerly-compiled (mode NONE: never another size's graph);
  - persistent input buffers (embeddings, positions, slot mapping padded with PADDING_SLOT_ID) so that a
    replayed graph reads this pass's inputs; graphs are captured by `dummy_run` inside the runner's
    capture_model (attention metadata None: attention runs between the pieces, outside the graphs).
Off (every pass eager, as before): the engine's enforce_eager (no compilation at all), or the speculative
config's enforce_eager.
"""

from __future__ import annotations

import torch

PADDING_SLOT_ID = -1  # vllm/v1/spec_decode/utils.py: a token that writes no KV


def is_compiled(model: torch.nn.Module) -> bool:
    """Whether vLLM compiles some submodule of `model` (a `@support_torch_compile` class not turned off)."""
    return any(getattr(m, "do_not_compile", True) is False for m in model.modules())


def graph_mode(compilation_config, enforce_eager: bool):
    """The drafter's CUDA-graph mode from the engine's resolved one: PIECEWISE where the engine captures
    PIECEWISE or FULL graphs of mixed batches (eagle.py initialize_cudagraph_keys), and only where both the
    attention and the KV-cache writes run between the pieces: the x_full passes bind the pool's cache tensors
    to the attention layers (drafter_pass.bound_kv), which a graph holding the cache write would not see.
    Else NONE (compiled, never replayed)."""
    from vllm.config import CUDAGraphMode  # lazy: loads vLLM

    mode = compilation_config.cudagraph_mode
    if (
        not enforce_eager
        and mode is not None
        and mode.mixed_mode() in (CUDAGraphMode.PIECEWISE, CUDAGraphMode.FULL)
        and compilation_config.splitting_ops_contain_attention()
        and compilation_config.splitting_ops_contain_kv_cache_update()
        and not compilation_config.use_inductor_graph_partition
    ):
        return CUDAGraphMode.PIECEWISE
    return CUDAGraphMode.NONE


class DrafterGraphs:
    """The compiled drafter's buffers and CUDA-graph dispatch (one per AsymSpecProposer)."""

    def __init__(
        self,
        model: torch.nn.Module,
        vllm_config,
        hidden_size: int,
        dtype: torch.dtype,
        uses_mrope: bool,
        device: torch.device,
        enforce_eager: bool,
    ):
        from vllm.v1.cudagraph_dispatcher import CudagraphDispatcher  # lazy: loads vLLM

        self.model, self.vllm_config, self.device = model, vllm_config, device
        self.enforce_eager = enforce_eager
        self.enabled = not enforce_eager and is_compiled(model)
        self.dispatcher = CudagraphDispatcher(
            vllm_config
        )  # keys: initialize_keys, once modes are resolved
        if not self.enabled:
            return
        n = vllm_config.scheduler_config.max_num_batched_tokens
        self.inputs_embeds = torch.zeros(
            n, hidden_size, dtype=dtype, device=device
        )  # [N_max, H]
        # M-RoPE positions [3, N_max + 1]: vLLM's own layout (v1/spec_decode/eagle.py, `mrope_positions`, and
        # v1/worker/gpu_model_runner.py, `self.mrope_positions = self._make_buffer((3, self.max_num_tokens + 1)`):
        # the spare column keeps every slice [:, :n] non-contiguous, row stride N_max + 1 != n. A (3, N_max)
        # buffer is contiguous at n = N_max, the GPU profile run's size and so the compiled drafter's first
        # trace; Dynamo would bake stride == n with its guards dropped, and every shorter pass would read the
        # H and W rows at the wrong offsets.
        self.positions = torch.zeros(
            (3, n + 1) if uses_mrope else (n,), dtype=torch.int64, device=device
        )
        self.slot_mapping = torch.full(
            (n,), PADDING_SLOT_ID, dtype=torch.int64, device=device
        )  # [N_max]

    def initialize_keys(self) -> None:
        """After the runner resolved its cudagraph mode and capture sizes (initialize_attn_backend)."""
        from vllm.config import CUDAGraphMode  # lazy: loads vLLM

        config = self.vllm_config.compilation_config
        captures = (
            self.enabled
            and self.device.type == "cuda"
            and bool(config.cudagraph_capture_sizes)
        )
        mode = (
            graph_mode(config, self.enforce_eager) if captures else CUDAGraphMode.NONE
        )
        self.dispatcher.initialize_cudagraph_keys(mode)

    def dispatch(self, num_tokens: int, use_cudagraphs: bool = True):
        """(runtime mode, padded token count, batch descriptor) of a pass of num_tokens tokens."""
        from vllm.config import CUDAGraphMode  # lazy: loads vLLM

        mode, desc = self.dispatcher.dispatch(
            num_tokens, valid_modes=None if use_cudagraphs else {CUDAGraphMode.NONE}
        )
        return mode, desc.num_tokens, desc

    def replays(self, num_tokens: int) -> bool:
        """Whether a pass of num_tokens tokens replays a CUDA graph."""
        from vllm.config import CUDAGraphMode  # lazy: loads vLLM

        return self.enabled and self.dispatch(num_tokens)[0] != CUDAGraphMode.NONE

    def keep_verifier_output(self, output, num_tokens: int):
        """The verifier forward's output, copied out of the CUDA-graph pool when the x_comp scoring pass that
        follows it (before the runner computes the verifier's logits) replays a graph: graphs captured in one
        pool reuse each other's memory, so the replay may overwrite it. Otherwise `output` itself."""
        if not self.replays(num_tokens):
            return output
        if isinstance(output, torch.Tensor):
            return output.clone()
        if isinstance(output, tuple):
            return tuple(
                t.clone() if isinstance(t, torch.Tensor) else t for t in output
            )
        raise TypeError(
            f"the verifier's forward returned {type(output).__name__}; the drafter's CUDA graphs "
            "need a tensor or a tuple of tensors (set the speculative config's enforce_eager)"
        )

    def forward(
        self,
        token_ids: torch.Tensor,
        positions: torch.Tensor,
        metadata: dict | None,
        slot_mapping: torch.Tensor | None,
        layer_names,
    ) -> torch.Tensor:
        """The compiled drafter on token_ids [n] at positions [3, n] / [n] (on the device); metadata and the
        pass's slot mapping [n] from DrafterAttention.build. -> hidden states [n, H], the caller's own (a
        replayed graph's output lives in the graph pool, which the next replay overwrites)."""
        from vllm.config import CUDAGraphMode  # lazy: loads vLLM
        from vllm.forward_context import set_forward_context  # lazy: loads vLLM

        n = token_ids.shape[0]
        mode, padded, desc = self.dispatch(n)
        self.inputs_embeds[:n] = self.model.embed_input_ids(
            token_ids
        )  # outside the compiled region
        self.positions[..., :n] = positions
        if slot_mapping is not None:
            self.slot_mapping[:n] = slot_mapping[
                :n
            ]  # the verifier's may run past n (its padding)
        self.slot_mapping[n:padded] = PADDING_SLOT_ID
        slots = {name: self.slot_mapping[:padded] for name in layer_names}
        with set_forward_context(
            metadata,
            self.vllm_config,
            num_tokens=padded,
            slot_mapping=slots,
            cudagraph_runtime_mode=mode,
            batch_descriptor=desc,
        ):
            hidden = self.model(
                input_ids=None,
                positions=self.positions[..., :padded],
                inputs_embeds=self.inputs_embeds[:padded],
            )
        hidden = hidden[:n]
        return hidden.clone() if mode != CUDAGraphMode.NONE else hidden

    def dummy_run(
        self, num_tokens: int, layer_names, use_cudagraphs: bool = True
    ) -> None:
        """One pass of num_tokens tokens without attention metadata: the first call traces the compiled
        model; inside the runner's capture_model (use_cudagraphs) it captures that size's graphs. Layers in
        layer_names get padding slots (no KV written), the others none (before the KV cache exists)."""
        from vllm.forward_context import set_forward_context  # lazy: loads vLLM

        mode, padded, desc = self.dispatch(num_tokens, use_cudagraphs)
        self.slot_mapping[:padded] = PADDING_SLOT_ID
        slots = {name: self.slot_mapping[:padded] for name in layer_names}
        with set_forward_context(
            None,
            self.vllm_config,
            num_tokens=padded,
            slot_mapping=slots,
            cudagraph_runtime_mode=mode,
            batch_descriptor=desc,
        ):
            self.model(
                input_ids=None,
                positions=self.positions[..., :padded],
                inputs_embeds=self.inputs_embeds[:padded],
            )
