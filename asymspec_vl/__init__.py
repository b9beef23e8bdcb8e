"""asymspec-vl: cross-modal AsymSpec speculative decoding (a VL drafter steers a text-only verifier).

The public names load on first use (PEP 562), so that `asymspec-vl --help` and other light imports of the
package do not import torch."""

from __future__ import annotations

import importlib

_ERRORS = (
    "AsymSpecError",
    "BatchInputError",
    "ChatTemplateError",
    "ConfigError",
    "EmptyQuestionError",
    "HeadSizeError",
    "ImageTooLargeError",
    "InputError",
    "InvalidImageError",
    "InvalidTextError",
    "MalformedConversationError",
    "ModelFilesError",
    "ModelPairError",
    "PromptTooLongError",
    "RequestFailedError",
    "TooManyImagesError",
    "UnsupportedModelError",
    "VocabularyMismatchError",
)
_HOMES = {  # public name -> the module that defines it
    "AsymSpecVL": ".api",
    "GenerationResult": ".api",
    "TraceToken": ".api",
    "AsymSpecConfig": ".core.config",
    "Conversation": ".inputs.conversation",
    "Request": ".inputs.prompts",
    **{name: ".core.errors" for name in _ERRORS},
}

__all__ = list(_HOMES)
__version__ = "0.1.0"


def __getattr__(name: str):
    if name not in _HOMES:
        raise AttributeError(f"module 'asymspec_vl' has no attribute {name!r}")
    value = getattr(importlib.import_module(_HOMES[name], __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
