"""Warnings beside an answer that cannot mean anything: the embedded toy pair asked about an image that is no toy
scene (the demo warns the same way). The server sends them in the response's `asymspec.warnings` (a list of
sentences; absent when there is nothing to say) and logs each once per request."""

from __future__ import annotations

from ..inputs.image_fit import original_size
from ..pair.model_names import is_embedded
from ..toy.draw import looks_like_scene
from .settings import ServeSettings


def serves_toy_pair(settings: ServeSettings) -> bool:
    """Whether the server runs the embedded toy pair (both models)."""
    return is_embedded(settings.drafter) and is_embedded(settings.verifier, "verifier")


def answer_warnings(toy: bool, images: list) -> tuple[str, ...]:
    """The warnings about a request's images (PIL images, in order): with the toy pair, each image that is no toy
    scene."""
    if not toy:
        return ()
    sizes = [
        original_size(im) for im in images
    ]  # as sent, before any reduction to the processor's size
    return tuple(
        f"image {i + 1} is no toy scene ({sizes[i][0]}x{sizes[i][1]}): the embedded toy pair only reads its "
        "96x32 scenes of coloured shapes carrying digits, so this answer means nothing. Start the server "
        "with --drafter and --verifier (real models) to ask about other images."
        for i, im in enumerate(images)
        if not looks_like_scene(im)
    )
