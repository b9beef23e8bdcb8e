"""Fused gate/fusion kernels: Triton on CUDA, the torch reference elsewhere (triton is imported lazily)."""

from .dispatch import asymspec_sample, asymspec_step, backend_for
from .layout import PLACEHOLDER_TOKEN_ID, FlatOutcome

__all__ = ["asymspec_step", "asymspec_sample", "backend_for", "FlatOutcome", "PLACEHOLDER_TOKEN_ID"]
