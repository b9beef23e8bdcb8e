"""Typed errors: every bad input the toolkit rejects raises one of these, with a message a user can act on."""


class AsymSpecError(Exception):
    """Base class of every error this toolkit raises on purpose."""


class ConfigError(AsymSpecError, ValueError):
    """A configuration field is out of its allowed range; the message names the field."""


class InputError(AsymSpecError, ValueError):
    """A request (image, question, prompt) cannot be served."""


class InvalidImageError(InputError):
    """The image is missing, corrupt, not an image, or has no pixels."""


class ImageTooLargeError(InvalidImageError):
    """The image has more pixels than allowed (decompression-bomb guard) or the file is too big."""


class EmptyQuestionError(InputError):
    """The question is empty or only whitespace."""


class PromptTooLongError(InputError):
    """A prompt does not fit in a model's context window."""


class ModelPairError(AsymSpecError, ValueError):
    """The drafter and verifier cannot be paired (e.g. different output vocabularies)."""


class VocabularyMismatchError(ModelPairError):
    """Drafter and verifier do not share one output vocabulary, so delta = a - b + t is undefined."""
