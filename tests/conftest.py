"""Shared fixtures: tiny random Qwen3 / Qwen3-VL models written once per session, the real-shape folders, and
stand-in images."""

import os
import shutil

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
if (
    shutil.which("nvidia-smi") is None
):  # no GPU: Triton kernels run in triton's interpreter (set before import)
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """Paths of tiny verifier/, text_drafter/, vl_drafter/ folders (shared tokenizer), built locally."""
    from asymspec_vl.toy.tiny import write_tiny_models

    return write_tiny_models(tmp_path_factory.mktemp("tiny-models"), seed=0)


@pytest.fixture(scope="session")
def real_shapes(tmp_path_factory):
    """The real-shape folders (real tokenizers, rows, special ids, chat templates; tiny random weights):
    real_shapes.pair("real-llama3") -> (drafter, verifier), .model_dir(family, role), .tokenizer_dir(family),
    .tokenizer(family); each built on first ask, once per run (tests/real_shapes_support.py)."""
    from real_shapes_support import RealShapes

    # ASYMSPEC_REAL_SHAPES_CACHE: a folder kept between runs (each folder is checked before reuse)
    kept = os.environ.get("ASYMSPEC_REAL_SHAPES_CACHE")
    return RealShapes(kept or tmp_path_factory.mktemp("real-shapes"))


@pytest.fixture(scope="session")
def tiny_vl(tiny_models):
    """An AsymSpecVL pipeline on the tiny models (transformers backend, float32, on TEST_DEVICE: the CPU
    unless ASYMSPEC_TEST_DEVICE says otherwise)."""
    from helpers import ON_TEST_DEVICE

    from asymspec_vl import AsymSpecVL

    return AsymSpecVL.from_pretrained(
        drafter=str(tiny_models["vl_drafter"]),
        verifier=str(tiny_models["verifier"]),
        text_drafter=str(tiny_models["text_drafter"]),
        **ON_TEST_DEVICE,
    )


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch thread for a module (use it with pytest.mark.usefixtures): on 2 shared cores OpenMP
    threads spin against other processes (a tiny forward took 300 ms instead of 8 ms)."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
