"""Typed errors: every bad input the toolkit rejects raises one of these, with a message a user can act on."""


class AsymSpecError(Exception):
    """Base class of every error this toolkit raises on purpose."""


class ConfigError(AsymSpecError, ValueError):
    """A configuration field is out of its allowed range; the message names the field."""


class UnenforcedSchemaError(ConfigError):
    """A JSON schema holds keywords the engine's grammar (xgrammar) would compile but not enforce
    (backends/vllm/schema_keywords.py). `keywords`: [(JSON pointer of the keyword, why)]."""

    def __init__(self, message: str, keywords: list[tuple[str, str]]):
        super().__init__(message)
        self.keywords = list(keywords)


class ParallelismError(ConfigError):
    """A parallel layout the pair cannot run on (pipeline parallelism); the message names the setting and what to
    use instead."""


class InterpreterNumpyError(AsymSpecError, RuntimeError):
    """Triton's CPU interpreter (TRITON_INTERPRET=1) cannot run with the installed numpy; the message names the
    versions that can."""


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


class InvalidTextError(InputError):
    """A text argument (question, caption, ocr, a context) is not a str, or is not valid Unicode."""


class MalformedConversationError(InputError):
    """A conversation's messages are not of the shape it takes (roles, parts, ending with a user turn)."""


class TooManyImagesError(InputError):
    """A request holds more images than one request may (LIMITS.images_per_request: the drafter engine's
    limit_mm_per_prompt; the server's --max-images)."""


class GrammarDeadEndError(InputError):
    """A structured output's grammar allows, at some output position, no token the pair can commit (across a
    vocabulary map: no token of the shared set): the request ends there, its answer so far kept."""


class BatchInputError(InputError):
    """Some requests of a batch are invalid; nothing has run. `errors` maps each bad request's index to its
    own typed error."""

    def __init__(self, errors: dict[int, InputError], total: int):
        self.errors = dict(sorted(errors.items()))
        listed = "; ".join(
            f"request {i}: {type(e).__name__}: {e}" for i, e in self.errors.items()
        )
        super().__init__(
            f"{len(self.errors)} of {total} requests are invalid (nothing was run): {listed}"
        )


class RequestFailedError(AsymSpecError, RuntimeError):
    """A model run failed on some requests (after they were validated). `results` holds every request's
    GenerationResult, the failed ones with finish_reason "error" and their message in `error`;
    `failed` lists their indices."""

    def __init__(self, results: list, failed: list[int]):
        self.results, self.failed = results, failed
        listed = "; ".join(f"request {i}: {results[i].error}" for i in failed)
        super().__init__(f"{len(failed)} of {len(results)} requests failed: {listed}")


class ModelPairError(AsymSpecError, ValueError):
    """The drafter and verifier cannot be paired (e.g. different output vocabularies)."""


class ChatTemplateError(ModelPairError):
    """A model's chat template cannot frame a user message (it must hold the message verbatim, once)."""


class VocabularyMismatchError(ModelPairError):
    """Drafter and verifier do not share one output vocabulary, so delta = a - b + t is undefined."""


class ModelFilesError(ModelPairError):
    """A model folder lacks a file its role needs (a complete tokenizer, the drafter's image processor config);
    the message names the file and where it comes from."""


class UnsupportedModelError(ModelPairError):
    """A model cannot take its role: a drafter that is not Qwen3-VL (docs/models.md says what another family
    would need)."""


class HeadSizeError(ModelPairError):
    """A model's attention head size is one the chosen backend's attention cannot run (vLLM's CPU build runs a
    fixed list); the message names the sizes it runs and the backend that runs this one."""
