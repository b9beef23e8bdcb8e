"""Both backends implement the interface the API calls (backends/interface.py): every method of the Protocol,
with its parameters, in the transformers backend and the vLLM backend."""

import inspect

from asymspec_vl.backends.hf.hf_backend import HFBackend
from asymspec_vl.backends.interface import Backend
from asymspec_vl.backends.vllm.vllm_backend import VLLMBackend


def protocol_methods() -> dict[str, inspect.Signature]:
    return {
        n: inspect.signature(f)
        for n, f in vars(Backend).items()
        if callable(f) and not n.startswith("_")
    }


def test_each_backend_has_every_method_of_the_interface_with_its_parameters():
    methods = protocol_methods()
    assert {"context_length", "run", "close"} <= set(methods)
    for backend in (HFBackend, VLLMBackend):
        for name, signature in methods.items():
            own = inspect.signature(getattr(backend, name))
            assert list(own.parameters)[: len(signature.parameters)] == list(
                signature.parameters
            ), (backend, name)
        assert backend.name in ("hf", "vllm")
