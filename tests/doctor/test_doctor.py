"""`asymspec-vl doctor`: its tiny pair is valid for every attention backend it runs (as each backend class declares
it), drafter and verifier differ in query heads, a backend the machine cannot run is skipped with vLLM's reason
while a configuration the backend refuses fails, the logprobs and logits checks can fail, and on this machine (the
CPU build in CI) every check runs or is skipped with its reason, and the command exits 0."""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

HERE = Path(__file__).resolve().parents[1]


# -- the pair against each backend's own declarations ---------------------------------------------------
@pytest.fixture(scope="module")
def facts():
    """doctor_backend_facts.py's report: verdicts on a stand-in CUDA machine, what each backend class takes."""
    run = subprocess.run(
        [sys.executable, str(HERE / "doctor_backend_facts.py")],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_the_pair_is_valid_for_every_gpu_backend_the_doctor_runs(facts):
    from asymspec_vl.doctor.backends import RUNS

    gpu = [r.label for r in RUNS if r.on_gpu]
    assert {
        "TRITON_ATTN",
        "FLASH_ATTN (FA3)",
        "FLASH_ATTN (FA2)",
        "FLASHINFER",
        "FLASHINFER, block size 128",
    } <= set(gpu)
    for label in gpu:
        assert facts["runs"][label] == {"result": "run", "reason": ""}, label
        taken = facts["backends"][label]
        assert (
            taken["pair_head_sizes_taken"]
            and taken["dtype_taken"]
            and taken["block_size_taken"]
        ), (label, taken)
    assert facts["backends"]["FLASHINFER"]["declared_head_sizes"] == [
        64,
        128,
        256,
    ]  # read from vLLM's class


def test_the_old_head_dim_32_pair_is_refused_by_flashinfer_as_a_doctor_fault(facts):
    for label in ("FLASHINFER", "FLASHINFER, block size 128"):
        old = facts["old_pair"][label]
        assert (
            old["result"] == "failed" and "head_size not supported" in old["reason"]
        ), old
    assert facts["old_pair"]["TRITON_ATTN"]["result"] == "run"


def test_the_pair_is_valid_for_the_cpu_backend():
    from vllm.platforms import current_platform

    from asymspec_vl.doctor.backends import (
        DRAFTER_SIZES,
        RUNS,
        VERIFIER_SIZES,
        head_sizes,
        verdict,
    )

    cpu = next(r for r in RUNS if r.backend == "CPU_ATTN")
    assert (
        verdict(cpu, head_sizes(DRAFTER_SIZES, VERIFIER_SIZES), current_platform).result
        == "run"
    )


def test_drafter_and_verifier_differ_in_query_heads_and_share_one_head_size(tmp_path):
    from asymspec_vl.doctor.backends import DRAFTER_SIZES, VERIFIER_SIZES
    from asymspec_vl.doctor.cli import pair_check
    from asymspec_vl.toy.tiny import write_tiny_models

    assert DRAFTER_SIZES.heads != VERIFIER_SIZES.heads
    assert (
        DRAFTER_SIZES.kv_heads == VERIFIER_SIZES.kv_heads
    )  # one KV cache group, as Qwen3-32B with Qwen3-VL-2B
    assert DRAFTER_SIZES.head_dim == VERIFIER_SIZES.head_dim
    paths = write_tiny_models(
        tmp_path, sizes=DRAFTER_SIZES, verifier_sizes=VERIFIER_SIZES
    )
    check = pair_check(paths)
    assert (
        check.result == "ok"
        and "drafter 2 query / 1 KV heads, verifier 4 / 1" in check.detail
    )
    assert (
        pair_check(write_tiny_models(tmp_path / "same", sizes=DRAFTER_SIZES)).result
        == "failed"
    )


# -- skipped (the machine) against failed (the configuration) -----------------------------------------------
class FakePlatform:
    def __init__(self, cuda=True, capability=(9, 0), count=1):
        from vllm.platforms.interface import DeviceCapability

        self.cuda, self.count = cuda, count
        self.capability = DeviceCapability(*capability) if capability else None
        self.device_name = "fake-gpu" if cuda else "cpu"

    def is_cuda(self):
        return self.cuda

    def get_device_capability(self):
        return self.capability

    def device_count(self):
        return self.count


def fake_backend(
    head_sizes=(), capability_ok=True, dtypes=(torch.bfloat16, torch.float32)
):
    from vllm.v1.attention.backend import AttentionBackend

    class Fake(AttentionBackend):
        supported_dtypes = list(dtypes)

        @classmethod
        def get_supported_head_sizes(cls):
            return list(head_sizes)

        @classmethod
        def supports_compute_capability(cls, capability):
            return capability_ok

    return Fake


@pytest.fixture
def backends(monkeypatch):
    """AttentionBackendEnum[name].get_class() answers from a dict: a class, or an ImportError to raise."""
    from vllm.v1.attention.backends.registry import AttentionBackendEnum

    table = {}

    def get_class(self):
        found = table[self.name]
        if isinstance(found, ImportError):
            raise found
        return found

    monkeypatch.setattr(AttentionBackendEnum, "get_class", get_class)
    return table


def run(backend="FLASHINFER", dtype="bfloat16", block_size=16, fa=None):
    from asymspec_vl.doctor.backends import AttentionRun

    return AttentionRun(backend, backend, dtype, block_size, fa)


def test_a_backend_the_machine_lacks_is_skipped_with_the_reason(backends, monkeypatch):
    from asymspec_vl.doctor import backends as db

    backends["FLASHINFER"] = ImportError("No module named 'flashinfer'")
    skipped = db.verdict(run(), [64], FakePlatform())
    assert (
        skipped.result == "skipped" and "No module named 'flashinfer'" in skipped.reason
    )
    backends["FLASHINFER"] = fake_backend(capability_ok=False)
    skipped = db.verdict(run(), [64], FakePlatform(capability=(7, 0)))
    assert skipped.result == "skipped" and "compute capability 7.0" in skipped.reason
    assert db.verdict(
        run(), [64], FakePlatform(cuda=False, capability=None)
    ).reason.startswith("needs a CUDA GPU")
    backends["FLASH_ATTN"] = fake_backend()
    monkeypatch.setattr(
        db,
        "flash_attn_unsupported",
        lambda v: f"FA{v} is only supported on 9.x" if v == 3 else None,
    )
    fa3 = db.verdict(run("FLASH_ATTN", fa=3), [64], FakePlatform(capability=(8, 0)))
    assert fa3.result == "skipped" and fa3.reason == "FA3 is only supported on 9.x"
    assert (
        db.verdict(
            run("FLASH_ATTN", fa=2), [64], FakePlatform(capability=(8, 0))
        ).result
        == "run"
    )


def test_a_configuration_the_backend_refuses_fails(backends):
    from asymspec_vl.doctor import backends as db

    backends["FLASHINFER"] = fake_backend(
        head_sizes=(64, 128, 256), dtypes=(torch.bfloat16,)
    )
    assert db.verdict(run(), [64], FakePlatform()).result == "run"
    wrong_heads = db.verdict(run(), [32, 64], FakePlatform())
    assert (
        wrong_heads.result == "failed"
        and "head_size not supported" in wrong_heads.reason
    )
    wrong_dtype = db.verdict(run(dtype="float32"), [64], FakePlatform())
    assert (
        wrong_dtype.result == "failed" and "dtype not supported" in wrong_dtype.reason
    )


def test_tensor_parallel_needs_two_cuda_gpus():
    from asymspec_vl.doctor.backends import tensor_parallel_verdict

    assert (
        tensor_parallel_verdict(FakePlatform(count=1)).reason
        == "needs two CUDA GPUs; this machine has 1"
    )
    assert tensor_parallel_verdict(FakePlatform(cuda=False)).result == "skipped"
    assert tensor_parallel_verdict(FakePlatform(count=2)).result == "run"


# -- the logprobs check ----------------------------------------------------------------------------------
def output(tokens, logprobs, finish="length"):
    return SimpleNamespace(
        outputs=[
            SimpleNamespace(token_ids=tokens, logprobs=logprobs, finish_reason=finish)
        ]
    )


def test_logprobs_that_come_back_empty_fail_with_a_clear_message():
    from vllm.logprobs import Logprob

    from asymspec_vl.doctor.row_checks import logprobs_verdict

    empty = logprobs_verdict(output([5, 6], []), "plain", "X")
    assert (
        empty.result == "failed"
        and "no logprobs came back for 2 sampled tokens" in empty.detail
    )
    good = [{5: Logprob(-0.5), 7: Logprob(-1.0)}, {6: Logprob(-0.1)}]
    assert logprobs_verdict(output([5, 6], good), "plain", "X").result == "ok"
    assert logprobs_verdict(output([5, 6], good[:1]), "plain", "X").result == "failed"
    assert (
        logprobs_verdict(output([5, 8], good), "plain", "X").result == "failed"
    )  # the sampled token absent
    assert (
        logprobs_verdict(output([5, 6], good, finish="abort"), "plain", "X").result
        == "failed"
    )


# -- the doctor on this machine ------------------------------------------------------------------------
@pytest.mark.vllm
@pytest.mark.timeout(1800)  # its subprocess may take up to 1500 s
def test_doctor_passes_on_the_cpu_build_and_skips_what_needs_a_gpu(tmp_path):
    out = tmp_path / "doctor.json"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("TRITON_INTERPRET", None)  # the doctor sets it for its kernel check itself
    run = subprocess.run(
        [sys.executable, "-m", "asymspec_vl.cli", "doctor", "--json", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=1500,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    report = json.loads(out.read_text())
    versions = dict(map(tuple, report["environment"]))
    assert versions["vllm"].startswith("0.19") and "torch" in versions
    assert versions["float32 precision (pinned)"].startswith(
        "TRITON_F32_DEFAULT=ieee, VLLM_FLOAT32_MATMUL_PRECISION"
    )
    assert (
        "doctor [" in run.stderr and "CPU_ATTN: every method" in run.stderr
    )  # progress lines, on stderr only
    assert "doctor [" not in run.stdout
    checks = {(c["name"], c["backend"]): c for c in report["checks"]}
    assert not [c for c in report["checks"] if c["result"] == "failed"]
    for name in (
        "asymspec K=2",
        "asymspec K=4 (same engine)",
        "scd K=2",
        "sd K=2",
        "floor",
        "drafter alone",
        "drafter x_full logits a",
        "drafter x_comp logits b",
        "mixed sd/scd/asymspec waves (rows reused)",
        "forced preemption",
        "attention backend vLLM selected",
        "drafter graphs: tokens == eager",
        "drafter graphs: a and b == eager",
    ):
        assert checks[(name, "CPU_ATTN")]["result"] == "ok", (
            name,
            checks[(name, "CPU_ATTN")],
        )
    assert (
        checks[("attention backend vLLM selected", "CPU_ATTN")]["detail"] == "CPU_ATTN"
    )
    assert "6/6 requests equal" in checks[("asymspec K=2", "CPU_ATTN")]["detail"]
    graphs = checks[("drafter graphs: tokens == eager", "CPU_ATTN")]["detail"]
    assert "6/6 requests equal" in graphs and "compiled, no CUDA graphs" in graphs, (
        graphs
    )
    assert (
        "18/18 requests equal"
        in checks[("mixed sd/scd/asymspec waves (rows reused)", "CPU_ATTN")]["detail"]
    )
    for label in (
        "TRITON_ATTN",
        "FLASH_ATTN (FA3)",
        "FLASH_ATTN (FA2)",
        "FLASHINFER",
        "FLASHINFER, block size 128",
    ):
        skipped = checks[("attention backend runs here", label)]
        assert skipped["result"] == "skipped" and skipped["detail"].startswith(
            "needs a CUDA GPU"
        ), skipped
    by_name = {c["name"]: c for c in report["checks"]}
    assert by_name["tensor parallel (TP=2) asymspec K=2"]["result"] == "skipped"
    assert by_name["plain request: sampling + logprobs"]["result"] == "skipped"
    assert by_name["asymspec-vl serve: one chat request"]["result"] == "ok"
    assert by_name["tiny pair: different query heads"]["result"] == "ok"
    assert by_name["gate kernel == torch reference"]["result"] == "ok"
    assert (
        "| check | backend | result | detail |" in run.stdout
        and "skipped (not possible on this machine)" in run.stdout
    )


@pytest.mark.vllm
def test_the_logits_checks_catch_a_fault_in_b_alone(tmp_path, monkeypatch):
    """The x_comp pass run one position off (b wrong, a right): tokens may absorb it, the b check does not."""
    from asymspec_vl import AsymSpecVL
    from asymspec_vl.doctor.backends import DRAFTER_SIZES, RUNS, VERIFIER_SIZES
    from asymspec_vl.doctor.logits import logits_checks
    from asymspec_vl.toy.tiny import write_tiny_models
    from vllm_patches.drafter.comp_view import CompView

    paths = write_tiny_models(
        tmp_path, sizes=DRAFTER_SIZES, verifier_sizes=VERIFIER_SIZES
    )
    run = next(r for r in RUNS if r.backend == "CPU_ATTN")
    names = dict(drafter=str(paths["vl_drafter"]), verifier=str(paths["verifier"]))
    hf = AsymSpecVL.from_pretrained(**names, device="cpu")
    vl = AsymSpecVL.from_pretrained(**names, backend="vllm", **run.engine_kwargs())
    try:
        assert [c.result for c in logits_checks(vl, hf, run, max_new_tokens=8)] == [
            "ok",
            "ok",
        ]
        score = CompView.score
        monkeypatch.setattr(
            CompView,
            "score",
            lambda self, input_ids, positions: score(self, input_ids, positions + 1),
        )
        a, b = logits_checks(vl, hf, run, max_new_tokens=8)
    finally:
        vl.backend.close()
    assert a.result == "ok" and b.result == "failed", (a, b)
