"""vllm_patches.hooks.cpu_generators on a stand-in runner: a partial prefill's discarded draw is undone on a
seeded CPU generator as vLLM undoes it on a CUDA (Philox) one (`gen.set_offset(gen.get_offset() - 4)` in
GPUModelRunner._bookkeeping_sync): the request's stream goes on as if the draw had never been made, however its
prompt was chunked; rows that keep their token keep their draw; vLLM's offset rewind never sees a CPU generator."""

import types

import numpy as np
import pytest
import torch

from vllm_patches.hooks import cpu_generators
from vllm_patches.hooks._patching import is_patched


def gen(seed: int) -> torch.Generator:
    return torch.Generator(device="cpu").manual_seed(seed)


def runner(generators: dict, discard: list[bool], num_reqs: int):
    return types.SimpleNamespace(
        input_batch=types.SimpleNamespace(
            generators=dict(generators), num_reqs=num_reqs
        ),
        discard_request_mask=types.SimpleNamespace(np=np.array(discard)),
    )


def test_only_the_discarded_rows_cpu_generators_are_picked():
    cuda_like = types.SimpleNamespace(device=torch.device("cuda"))  # vLLM rewinds those
    g0, g3 = gen(1), gen(3)
    r = runner(
        {0: g0, 2: gen(2), 3: g3, 4: cuda_like, 5: gen(5)},
        # row 1 has no generator (greedy), row 2 keeps its token, row 5 is past num_reqs
        [True, True, False, True, True, True],
        num_reqs=5,
    )
    assert cpu_generators.discarded_cpu_generators(r) == {0: g0, 3: g3}


def draw_each(runner_, logits, spec_decode_metadata):
    """The sampler stand-in: one draw from every row's generator -> {row: value}."""
    return {
        i: float(torch.rand(1, generator=g))
        for i, g in runner_.input_batch.generators.items()
    }


def test_a_discarded_draw_is_undone_and_a_kept_one_is_not():
    r = runner({0: gen(7), 1: gen(8)}, [True, False], num_reqs=2)
    first = cpu_generators.sample(draw_each, r, None, None)
    assert first == {0: float(torch.rand(1, generator=gen(7))), 1: first[1]}
    again = draw_each(r, None, None)
    # the partial prefill's draw never happened: the next draw is the stream's first, as on a GPU
    assert again[0] == first[0]
    # the kept row's stream went on: its next draw is its second
    second = gen(8)
    torch.rand(1, generator=second)
    assert again[1] == float(torch.rand(1, generator=second))


def test_a_stream_does_not_depend_on_how_the_prompt_was_chunked():
    """A request prefilled in three chunks (two discarded draws) samples what one prefilled whole samples."""
    chunked = runner({0: gen(11)}, [True], num_reqs=1)
    cpu_generators.sample(draw_each, chunked, None, None)
    cpu_generators.sample(draw_each, chunked, None, None)
    chunked.discard_request_mask.np[0] = False  # the last chunk: its token is kept
    tail = [cpu_generators.sample(draw_each, chunked, None, None)[0] for _ in range(3)]
    whole = runner({0: gen(11)}, [False], num_reqs=1)
    assert tail == [
        cpu_generators.sample(draw_each, whole, None, None)[0] for _ in range(3)
    ]


def test_vllms_offset_rewind_runs_without_the_discarded_cpu_generators():
    g0, g1 = gen(1), gen(2)
    r = runner({0: g0, 1: g1}, [True, False], num_reqs=2)
    seen = []

    def bookkeeping(runner_, *args, **kwargs):
        """GPUModelRunner._bookkeeping_sync's rewind of the discarded rows' generators (a CPU one raises)."""
        seen.append((dict(runner_.input_batch.generators), args, kwargs))
        num_reqs = runner_.input_batch.num_reqs
        for i in np.nonzero(runner_.discard_request_mask.np[:num_reqs])[0]:
            g = runner_.input_batch.generators.get(int(i))
            if g is not None:
                g.set_offset(g.get_offset() - 4)

    with pytest.raises(RuntimeError, match="offset"):
        bookkeeping(r, None)  # (the stock path: the engine core died here)
    assert cpu_generators.bookkeeping_sync(bookkeeping, r, 5, k=6) is None
    assert seen[-1] == (
        {1: g1},
        (5,),
        {"k": 6},
    )  # the discarded row's generator was out
    assert r.input_batch.generators == {0: g0, 1: g1}  # put back after


def test_the_generators_are_put_back_when_vllms_bookkeeping_fails():
    g0 = gen(1)
    r = runner({0: g0}, [True], num_reqs=1)

    def failing(runner_):
        raise ValueError("bookkeeping failed")

    with pytest.raises(ValueError):
        cpu_generators.bookkeeping_sync(failing, r)
    assert r.input_batch.generators == {0: g0}


def test_the_patch_wraps_the_cpu_runner_once():
    from vllm.v1.worker.cpu_model_runner import CPUModelRunner

    names = ("_sample", "_bookkeeping_sync")
    own = {n: CPUModelRunner.__dict__.get(n) for n in names}
    try:
        for n in (
            names
        ):  # inherited from GPUModelRunner (patched there by runner_patch, or not)
            if n in CPUModelRunner.__dict__:
                delattr(CPUModelRunner, n)
        stock = {n: getattr(CPUModelRunner, n) for n in names}
        cpu_generators.patch_cpu_generators()
        patched = {n: CPUModelRunner.__dict__[n] for n in names}
        cpu_generators.patch_cpu_generators()  # a second apply changes nothing
        for n in names:
            assert is_patched(patched[n]) and CPUModelRunner.__dict__[n] is patched[n]
            assert patched[n].__asymspec_original__ is stock[n]
    finally:
        for n in names:
            if own[n] is None:
                if n in CPUModelRunner.__dict__:
                    delattr(CPUModelRunner, n)
            else:
                setattr(CPUModelRunner, n, own[n])


@pytest.mark.parametrize("mode", ["raw_logprobs", "processed_logprobs"])
def test_a_seeded_row_beside_unseeded_ones_draws_from_its_generator(mode):
    """vLLM's CPU sampler drew every row unseeded unless every row had a generator: a seeded row batched with a
    greedy or unseeded one drew other tokens than alone. With the hook its draw is its generator's, whatever its
    neighbours; a batch with no generator and an all-seeded batch are vLLM's own."""
    from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler

    sampler = TopKTopPSampler(mode)
    stock = TopKTopPSampler.forward_cpu.__dict__.get(
        "__asymspec_original__", TopKTopPSampler.forward_cpu
    )
    logits = torch.randn(3, 500, generator=gen(0))
    k = torch.tensor([500, 20, 500])
    unseeded = 0
    for seed in range(8):
        alone, _ = stock(sampler, logits[1:2].clone(), {0: gen(seed)}, k[1:2], None)
        got, lps = cpu_generators.forward_cpu(
            stock, sampler, logits.clone(), {1: gen(seed)}, k, None
        )
        assert got.shape == (3,) and got[1] == alone[0], seed
        assert (lps is None) == (mode == "raw_logprobs")
        vllms, _ = stock(sampler, logits.clone(), {1: gen(seed)}, k, None)
        unseeded += int(vllms[1] != alone[0])
    assert unseeded > 0  # vLLM's own forward_cpu ignored the generator
    calls = []

    def original(*args):
        calls.append(args)
        return "vllm's"

    for gens in ({}, {0: gen(1), 1: gen(2), 2: gen(3)}):
        assert cpu_generators.forward_cpu(original, sampler, logits, gens, k, None)
    assert len(calls) == 2


def test_the_patch_wraps_the_cpu_sampler_once():
    from vllm.v1.sample.ops.topk_topp_sampler import TopKTopPSampler

    own = TopKTopPSampler.__dict__["forward_cpu"]
    stock = own.__dict__.get("__asymspec_original__", own)
    try:
        TopKTopPSampler.forward_cpu = stock
        cpu_generators.patch_cpu_generators()
        patched = TopKTopPSampler.__dict__["forward_cpu"]
        cpu_generators.patch_cpu_generators()
        assert (
            is_patched(patched) and TopKTopPSampler.__dict__["forward_cpu"] is patched
        )
        assert patched.__asymspec_original__ is stock
    finally:
        TopKTopPSampler.forward_cpu = own
