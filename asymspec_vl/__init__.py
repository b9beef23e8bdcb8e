"""asymspec-vl: cross-modal AsymSpec speculative decoding (a VL drafter steers a text-only verifier)."""

from .api import AsymSpecVL, GenerationResult, TraceToken
from .config import AsymSpecConfig
from .conversation import Conversation
from .errors import (AsymSpecError, BatchInputError, ConfigError, EmptyQuestionError, ImageTooLargeError, InputError,
                     InvalidImageError, InvalidTextError, MalformedConversationError, ModelPairError, PromptTooLongError, RequestFailedError,
                     VocabularyMismatchError)
from .prompts import Request

__all__ = [
    "AsymSpecVL", "AsymSpecConfig", "GenerationResult", "TraceToken", "Request", "Conversation",
    "AsymSpecError", "ConfigError", "InputError", "InvalidImageError", "ImageTooLargeError",
    "EmptyQuestionError", "InvalidTextError", "MalformedConversationError", "PromptTooLongError", "BatchInputError", "RequestFailedError",
    "ModelPairError", "VocabularyMismatchError",
]
__version__ = "0.1.0"
