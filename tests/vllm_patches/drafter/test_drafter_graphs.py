"""vllm_patches.drafter.drafter_graphs on stand-ins: which CUDA-graph mode the drafter gets, which size a pass is
dispatched to (a captured size, padded only up to the next captured one; never a graph of another size),
and what reaches the compiled model (embeddings computed outside, padded inputs, padding slots that write
no KV)."""

import pytest
import torch

CAPTURE_SIZES = [1, 2, 4, 8]


@pytest.fixture(scope="module")
def vllm_config():
    """A VllmConfig whose compilation config reads like a CUDA engine's with PIECEWISE graphs."""
    from vllm.config import (
        CompilationConfig,
        CompilationMode,
        CUDAGraphMode,
        VllmConfig,
    )

    config = VllmConfig()
    cc = config.compilation_config
    cc.mode, cc.cudagraph_mode = (
        CompilationMode.VLLM_COMPILE,
        CUDAGraphMode.FULL_AND_PIECEWISE,
    )
    cc.cudagraph_capture_sizes, cc.max_cudagraph_capture_size = (
        list(CAPTURE_SIZES),
        max(CAPTURE_SIZES),
    )
    cc.splitting_ops = list(CompilationConfig._attention_ops) + [
        "vllm::unified_kv_cache_update",
        "vllm::unified_mla_kv_cache_update",
    ]
    return config


class Compiled(torch.nn.Module):
    """A stand-in drafter: a 'compiled' submodule, embeddings = id + 0.5, hidden = embeddings * 2."""

    def __init__(self):
        super().__init__()
        self.language_model = torch.nn.Module()
        self.language_model.do_not_compile = False
        self.calls = []

    def embed_input_ids(self, ids):
        return (ids.float() + 0.5)[:, None].expand(-1, 4)

    def forward(self, input_ids, positions, inputs_embeds):
        from vllm.forward_context import get_forward_context

        ctx = get_forward_context()
        self.calls.append(
            {
                "input_ids": input_ids,
                "positions": positions.clone(),
                "n": inputs_embeds.shape[0],
                "positions_contiguous": positions.is_contiguous(),
                "mode": ctx.cudagraph_runtime_mode,
                "desc": ctx.batch_descriptor,
                "slots": {k: v.clone() for k, v in ctx.slot_mapping.items()},
            }
        )
        self.out = inputs_embeds * 2
        return self.out


def graphs_of(vllm_config, mode, model=None, enforce_eager=False):
    from vllm_patches.drafter.drafter_graphs import DrafterGraphs

    graphs = DrafterGraphs(
        model or Compiled(),
        vllm_config,
        4,
        torch.float32,
        True,
        torch.device("cpu"),
        enforce_eager,
    )
    graphs.dispatcher.initialize_cudagraph_keys(
        mode
    )  # what initialize_keys does on a CUDA device
    return graphs


@pytest.mark.parametrize(
    "mode, expected",
    [
        ("FULL_AND_PIECEWISE", "PIECEWISE"),
        ("PIECEWISE", "PIECEWISE"),
        ("FULL", "PIECEWISE"),
        ("FULL_DECODE_ONLY", "NONE"),
        ("NONE", "NONE"),
    ],
)
def test_the_drafter_captures_piecewise_graphs_where_the_engine_captures_mixed_batches(
    vllm_config, mode, expected
):
    """As vLLM's EAGLE drafter: PIECEWISE when the engine's mixed-batch mode is PIECEWISE or FULL."""
    from vllm.config import CUDAGraphMode

    from vllm_patches.drafter.drafter_graphs import graph_mode

    cc = vllm_config.compilation_config
    before = cc.cudagraph_mode
    try:
        cc.cudagraph_mode = CUDAGraphMode[mode]
        assert graph_mode(cc, enforce_eager=False) == CUDAGraphMode[expected]
        assert (
            graph_mode(cc, enforce_eager=True) == CUDAGraphMode.NONE
        )  # the speculative config's switch
    finally:
        cc.cudagraph_mode = before


def test_no_graphs_where_a_captured_piece_would_hold_the_kv_cache_write(vllm_config):
    """The x_full passes bind other cache tensors to the layers: a graph that captured the cache write (KV
    update not split out, or inductor's graph partition) would write the cache bound at capture."""
    from vllm.config import CUDAGraphMode

    from vllm_patches.drafter.drafter_graphs import graph_mode

    cc = vllm_config.compilation_config
    ops = list(cc.splitting_ops)
    try:
        cc.splitting_ops = [op for op in ops if "kv_cache_update" not in op]
        assert graph_mode(cc, enforce_eager=False) == CUDAGraphMode.NONE
        cc.splitting_ops = ops
        cc.use_inductor_graph_partition = True
        assert graph_mode(cc, enforce_eager=False) == CUDAGraphMode.NONE
    finally:
        cc.splitting_ops, cc.use_inductor_graph_partition = ops, False


@pytest.mark.parametrize(
    "n, mode, padded",
    [
        (1, "PIECEWISE", 1),
        (3, "PIECEWISE", 4),
        (4, "PIECEWISE", 4),
        (5, "PIECEWISE", 8),
        (8, "PIECEWISE", 8),
        (9, "NONE", 9),
        (342, "NONE", 342),
    ],
)
def test_a_pass_runs_the_next_captured_size_or_no_graph(vllm_config, n, mode, padded):
    from vllm.config import CUDAGraphMode

    graphs = graphs_of(vllm_config, CUDAGraphMode.PIECEWISE)
    got, size, desc = graphs.dispatch(n)
    assert (got, size, desc.num_tokens) == (CUDAGraphMode[mode], padded, padded)
    assert graphs.dispatch(n, use_cudagraphs=False)[:2] == (
        CUDAGraphMode.NONE,
        n,
    )  # a dummy run outside capture


def test_without_graphs_every_size_runs_unpadded(vllm_config):
    from vllm.config import CUDAGraphMode

    graphs = graphs_of(vllm_config, CUDAGraphMode.NONE)
    assert [graphs.dispatch(n)[:2] for n in (1, 3, 8)] == [
        (CUDAGraphMode.NONE, n) for n in (1, 3, 8)
    ]


def test_a_cpu_drafter_compiles_but_never_captures(vllm_config):
    from vllm.config import CUDAGraphMode

    from vllm_patches.drafter.drafter_graphs import DrafterGraphs

    graphs = DrafterGraphs(
        Compiled(), vllm_config, 4, torch.float32, True, torch.device("cpu"), False
    )
    graphs.initialize_keys()
    assert graphs.enabled and graphs.dispatcher.cudagraph_mode == CUDAGraphMode.NONE


def test_the_switches_and_an_uncompiled_model_keep_the_drafter_eager(vllm_config):
    from vllm_patches.drafter.drafter_graphs import DrafterGraphs, is_compiled

    model = Compiled()
    assert is_compiled(model)
    assert not DrafterGraphs(
        model, vllm_config, 4, torch.float32, True, torch.device("cpu"), True
    ).enabled
    model.language_model.do_not_compile = (
        True  # engine enforce_eager: CompilationMode.NONE
    )
    assert not is_compiled(model)
    assert not DrafterGraphs(
        model, vllm_config, 4, torch.float32, True, torch.device("cpu"), False
    ).enabled


def test_a_replayed_pass_reads_padded_buffers_and_writes_no_kv_past_its_tokens(
    vllm_config,
):
    from vllm.config import CUDAGraphMode

    model = Compiled()
    graphs = graphs_of(vllm_config, CUDAGraphMode.PIECEWISE, model)
    graphs.forward(
        torch.arange(4),
        torch.arange(4).expand(3, -1),
        {},
        torch.arange(50, 54),
        ["layer.0"],
    )
    ids = torch.tensor([3, 5, 7])
    positions = torch.arange(3).expand(3, -1) + 10  # [3, n]
    slots = torch.tensor([40, 41, 42, -1, -1])  # the verifier's may run past n
    hidden = graphs.forward(
        ids, positions, {}, slots, ["layer.0", "layer.1"]
    )  # after a pass that wrote slot 53
    call = model.calls[-1]
    assert (
        call["input_ids"] is None and call["n"] == 4
    )  # embeddings outside, padded to the captured 4
    assert call["mode"] == CUDAGraphMode.PIECEWISE and call["desc"].num_tokens == 4
    assert torch.equal(call["positions"][:, :3], positions)
    for name in ("layer.0", "layer.1"):
        assert call["slots"][name].tolist() == [40, 41, 42, -1]
    assert torch.equal(hidden, model.embed_input_ids(ids) * 2)
    assert (
        hidden.data_ptr() != model.out.data_ptr()
    )  # the caller's own copy, not the graph pool's output


def test_a_shape_without_a_graph_runs_compiled_unpadded(vllm_config):
    from vllm.config import CUDAGraphMode

    model = Compiled()
    graphs = graphs_of(vllm_config, CUDAGraphMode.PIECEWISE, model)
    ids = torch.arange(9)
    hidden = graphs.forward(
        ids, torch.arange(9).expand(3, -1), {}, torch.arange(9), ["layer.0"]
    )
    call = model.calls[-1]
    assert (
        call["mode"] == CUDAGraphMode.NONE
        and call["n"] == 9
        and call["desc"].num_tokens == 9
    )
    assert torch.equal(hidden, model.embed_input_ids(ids) * 2)


def test_capture_runs_each_size_in_the_compiled_form(vllm_config):
    from vllm.config import CUDAGraphMode

    model = Compiled()
    graphs = graphs_of(vllm_config, CUDAGraphMode.PIECEWISE, model)
    for n in sorted(CAPTURE_SIZES, reverse=True):
        graphs.dummy_run(n, ["layer.0"], use_cudagraphs=True)
    assert [(c["mode"], c["n"], c["input_ids"]) for c in model.calls] == [
        (CUDAGraphMode.PIECEWISE, n, None) for n in (8, 4, 2, 1)
    ]
    assert all(c["slots"]["layer.0"].eq(-1).all() for c in model.calls)


def test_the_verifiers_output_leaves_the_graph_pool_before_a_drafter_replay(
    vllm_config,
):
    """The x_comp scoring pass runs between the verifier's forward and its logits: a replayed drafter graph
    may reuse the pool memory that holds the verifier's hidden states."""
    from vllm.config import CUDAGraphMode

    graphs = graphs_of(vllm_config, CUDAGraphMode.PIECEWISE)
    out = torch.randn(3, 4)
    kept = graphs.keep_verifier_output(out, 3)  # 3 tokens: replays the graph of 4
    assert torch.equal(kept, out) and kept.data_ptr() != out.data_ptr()
    pair = graphs.keep_verifier_output((out, [out]), 3)
    assert pair[0].data_ptr() != out.data_ptr() and pair[1][0] is out
    assert (
        graphs.keep_verifier_output(out, 9) is out
    )  # no graph of 9 tokens: nothing replays
    assert (
        graphs_of(vllm_config, CUDAGraphMode.NONE).keep_verifier_output(out, 3) is out
    )


def test_dummy_runs_before_the_kv_cache_write_nothing(vllm_config):
    from vllm.config import CUDAGraphMode

    model = Compiled()
    graphs_of(vllm_config, CUDAGraphMode.NONE, model).dummy_run(
        16, (), use_cudagraphs=False
    )
    assert model.calls[-1]["slots"] == {} and model.calls[-1]["n"] == 16


def test_mrope_positions_reach_the_compiled_model_non_contiguous_at_every_size(
    vllm_config,
):
    """vLLM's (3, N + 1) M-RoPE layout: a pass of the whole budget N (the GPU profile run, the compiled
    drafter's first trace) must not see a contiguous buffer, or Dynamo bakes row stride == N into every
    shorter pass."""
    from vllm.config import CUDAGraphMode

    model = Compiled()
    graphs = graphs_of(vllm_config, CUDAGraphMode.NONE, model)
    budget = vllm_config.scheduler_config.max_num_batched_tokens
    graphs.dummy_run(budget, (), use_cudagraphs=False)
    graphs.forward(torch.arange(3), torch.arange(3).expand(3, -1), {}, None, ())
    assert [(c["n"], c["positions_contiguous"]) for c in model.calls] == [
        (budget, False),
        (3, False),
    ]
