"""The doctor's float32 rows run at IEEE float32 in every process that computes them (issue 32, finding 3): vLLM's
Triton attention calls tl.dot without a precision (TF32 on a GPU unless TRITON_F32_DEFAULT says otherwise), and
vLLM's workers take torch's matmul precision from VLLM_FLOAT32_MATMUL_PRECISION. A user's own TF32 settings are
replaced while the doctor runs and restored after."""

import os

import pytest
import torch

from asymspec_vl.doctor.precision import PINNED, describe, exact_float32

USER_TF32 = {"TRITON_F32_DEFAULT": "tf32", "VLLM_FLOAT32_MATMUL_PRECISION": "medium"}


def test_the_pin_replaces_a_users_tf32_settings_and_restores_them(monkeypatch):
    for k, v in USER_TF32.items():
        monkeypatch.setenv(k, v)
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        with exact_float32():
            assert {k: os.environ[k] for k in PINNED} == {
                "TRITON_F32_DEFAULT": "ieee",
                "VLLM_FLOAT32_MATMUL_PRECISION": "highest",
            }
            assert torch.get_float32_matmul_precision() == "highest"
        assert {k: os.environ[k] for k in USER_TF32} == USER_TF32
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision(before)
    monkeypatch.delenv("TRITON_F32_DEFAULT")
    with exact_float32():
        pass
    assert "TRITON_F32_DEFAULT" not in os.environ  # unset before: unset after
    assert describe().startswith(
        "TRITON_F32_DEFAULT=ieee, VLLM_FLOAT32_MATMUL_PRECISION=highest"
    )


def test_triton_reads_the_pin_as_its_float32_dot_precision_and_keys_its_cache_on_it(
    monkeypatch,
):
    """What tl.dot without input_precision reads (triton/language/core.py dot) and triton's compile-cache key."""
    import triton
    from triton._C.libtriton import get_cache_invalidating_env_vars

    monkeypatch.setenv("TRITON_F32_DEFAULT", "tf32")
    with exact_float32():
        assert triton.knobs.language.fp32_default == "ieee"
        assert get_cache_invalidating_env_vars().get("TRITON_F32_DEFAULT") == "ieee"


@pytest.mark.vllm
@pytest.mark.timeout(900)
def test_the_pin_reaches_the_engine_core_the_doctor_starts(tmp_path, monkeypatch):
    """An engine started under the pin, its engine core in a process of its own (as on a GPU): the worker there
    reads IEEE float32 although the user's environment asked for TF32."""
    from asymspec_vl import AsymSpecVL
    from asymspec_vl.doctor.backends import DRAFTER_SIZES, RUNS, VERIFIER_SIZES
    from asymspec_vl.toy.tiny import write_tiny_models

    def worker_precision(worker):
        """Inside vLLM's worker (pickled by value, a nested function): its process id, the pinned variables and
        torch's matmul precision and triton's float32 dot default there."""
        import os as _os

        import torch as _torch
        import triton as _triton

        env = {
            k: _os.environ.get(k)
            for k in ("TRITON_F32_DEFAULT", "VLLM_FLOAT32_MATMUL_PRECISION")
        }
        return (
            _os.getpid(),
            env,
            _torch.get_float32_matmul_precision(),
            _triton.knobs.language.fp32_default,
        )

    for k, v in USER_TF32.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv(
        "VLLM_ENABLE_V1_MULTIPROCESSING", "1"
    )  # the engine core in its own process
    monkeypatch.setenv(
        "VLLM_ALLOW_INSECURE_SERIALIZATION", "1"
    )  # collective_rpc with a function
    paths = write_tiny_models(
        tmp_path, sizes=DRAFTER_SIZES, verifier_sizes=VERIFIER_SIZES
    )
    run = next(r for r in RUNS if r.backend == "CPU_ATTN")
    before = torch.get_float32_matmul_precision()
    with exact_float32():
        vl = AsymSpecVL.from_pretrained(
            drafter=str(paths["vl_drafter"]),
            verifier=str(paths["verifier"]),
            backend="vllm",
            dtype=run.dtype,
            **run.engine_kwargs(),
        )
        try:
            llm = vl.backend.engine(vl.backend.engine_for("asymspec", 2)[0])
            ((pid, env, precision, fp32_default),) = llm.collective_rpc(
                worker_precision
            )
        finally:
            vl.backend.close()
    torch.set_float32_matmul_precision(before)
    assert pid != os.getpid(), (
        "the engine core ran in this process: the test shows nothing about a child's env"
    )
    assert env == {
        "TRITON_F32_DEFAULT": "ieee",
        "VLLM_FLOAT32_MATMUL_PRECISION": "highest",
    }, env
    assert precision == "highest" and fp32_default == "ieee", (precision, fp32_default)


def test_the_pin_holds_cudnns_float32_convolutions_at_ieee_and_restores_a_users_tf32():
    """cuDNN's float32 convolutions (the drafter's patch embedding in the transformers reference) default to TF32
    on a GPU: the pin sets them to IEEE with torch's new API and puts the user's value back."""
    from asymspec_vl.doctor.precision import CONV_PRECISION

    conv = torch.backends.cudnn.conv
    before = conv.fp32_precision
    conv.fp32_precision = "tf32"
    try:
        with exact_float32():
            assert conv.fp32_precision == CONV_PRECISION == "ieee"
        assert conv.fp32_precision == "tf32"
    finally:
        conv.fp32_precision = before
    assert "cuDNN conv fp32_precision=ieee" in describe()
