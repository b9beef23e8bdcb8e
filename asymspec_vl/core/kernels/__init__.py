"""Fused gate/fusion kernels: Triton on CUDA, the torch reference elsewhere (triton is imported lazily)."""

from .dispatch import asymspec_step, backend_for

__all__ = ["asymspec_step", "backend_for"]
