"""vllm_patches.probes.phase_timing: the phase timer's device brackets ask nothing of the CUDA driver where CUDA does
not
run (there each query costs a driver probe per call, which the phase it closes would be charged)."""

import torch

from vllm_patches.probes import phase_timing


def test_a_phase_without_cuda_never_queries_the_driver(monkeypatch):
    def no_query():
        raise AssertionError("the timer asked the CUDA driver for its devices")

    monkeypatch.setattr(torch.cuda, "is_available", no_query)
    monkeypatch.setattr(torch.cuda, "device_count", no_query)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
    timer = phase_timing.PhaseTimer()
    with timer.phase("gate"):
        pass
    assert timer.seconds["gate"] >= 0


def test_a_phase_on_cuda_waits_for_the_device_on_both_sides(monkeypatch):
    waits = []
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: waits.append(1))
    timer = phase_timing.PhaseTimer()
    with timer.phase("verifier"):
        assert len(waits) == 1
    assert len(waits) == 2
