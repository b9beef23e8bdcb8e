"""asymspec-vl: cross-modal AsymSpec speculative decoding (a VL drafter steers a text-only verifier)."""

from .api import AsymSpecVL, GenerationResult, TraceToken
from .core.config import AsymSpecConfig
from .inputs.conversation import Conversation
from .core.errors import (AsymSpecError, BatchInputError, ConfigError, EmptyQuestionError, ImageTooLargeError,
                          InputError, InvalidImageError, InvalidTextError, MalformedConversationError, ModelPairError,
                          PromptTooLongError, RequestFailedError, VocabularyMismatchError)
from .inputs.prompts import Request

__all__ = [
    "AsymSpecVL", "AsymSpecConfig", "GenerationResult", "TraceToken", "Request", "Conversation",
    "AsymSpecError", "ConfigError", "InputError", "InvalidImageError", "ImageTooLargeError",
    "EmptyQuestionError", "InvalidTextError", "MalformedConversationError", "PromptTooLongError", "BatchInputError", "RequestFailedError",
    "ModelPairError", "VocabularyMismatchError",
]
__version__ = "0.1.0"
