"""The product's limits in one table: what the library, the server, the demo and the benchmarks accept by default."""

from __future__ import annotations

from dataclasses import dataclass

MIB = 2**20


@dataclass(frozen=True)
class Limits:
    """Defaults only: the server's and the demo's options lower or raise them; the library's image limits are the
    most any caller of load_image gets without passing its own."""

    image_bytes: int = 50 * MIB  # the largest image file load_image opens
    image_pixels: int = 64_000_000  # about 8000 x 8000; larger images are refused before they are decoded
    reduce_pixels: int = 4_000_000  # larger images are brought near the processor's size before it (image_fit.py)
    server_pixels: int = 128_000_000  # the images all of a server's requests may hold at once (two at the cap)
    body_bytes: int = 64 * MIB  # the largest request body the server reads
    images_per_request: int = (
        4  # images in one conversation (the drafter engine's limit_mm_per_prompt)
    )
    answer_tokens: int = (
        1024  # the largest max_tokens a server request may ask for (and its default)
    )
    speculative_tokens: int = 4  # a speculative engine's num_speculative_tokens: the most K a request may ask for
    demo_image_bytes: int = (
        10 * MIB
    )  # the demo page's upload (a public page: tighter than the library's)
    demo_image_pixels: int = 16_000_000
    demo_answer_tokens: int = (
        64  # the demo's max_new_tokens (answers on the page stay short)
    )


LIMITS = Limits()
