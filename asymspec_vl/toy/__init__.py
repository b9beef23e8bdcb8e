"""The toy world: a procedurally generated image-QA task and the trained tiny drafter/verifier pair for it."""

from pathlib import Path

PAIR_DIR = Path(__file__).resolve().parent / "pair"  # the shipped pair: drafter/, verifier/, manifest.json


def pair_paths() -> dict[str, str | None]:
    """The shipped pair's model folders (text_drafter None: the VL drafter reads text for SD)."""
    from ..core.errors import ModelPairError

    if not (PAIR_DIR / "manifest.json").is_file():
        raise ModelPairError(f"the toy pair is missing from {PAIR_DIR}: reinstall asymspec-vl, or write one "
                             "with `asymspec-vl toy train DIR` and pass --drafter DIR/drafter --verifier DIR/verifier")
    return {"drafter": str(PAIR_DIR / "drafter"), "verifier": str(PAIR_DIR / "verifier"), "text_drafter": None}
