"""The toy world: a procedurally generated image-QA task and the trained tiny drafter/verifier pair for it."""

from pathlib import Path

from ..core.errors import ModelPairError

PAIR_DIR = (
    Path(__file__).resolve().parent / "pair"
)  # the shipped pair: drafter/, verifier/, manifest.json


def pair_paths(verifier_family: str = "qwen3") -> dict[str, str | None]:
    """The shipped pair's model folders (text_drafter None: the VL drafter reads text for SD); verifier_family
    "llama": the toy drafter with the Llama verifier of another vocabulary (pair/verifier-llama)."""

    manifest, verifier = (
        ("manifest.json", "verifier")
        if verifier_family == "qwen3"
        else (f"{verifier_family}_manifest.json", f"verifier-{verifier_family}")
    )
    flag = "" if verifier_family == "qwen3" else f" --verifier-family {verifier_family}"
    if not (PAIR_DIR / manifest).is_file():
        raise ModelPairError(
            f"the toy pair's {verifier} is missing from {PAIR_DIR}: reinstall asymspec-vl, or write "
            f"one with `asymspec-vl toy train DIR{flag}` and pass --drafter DIR/drafter "
            f"--verifier DIR/{verifier}"
        )
    return {
        "drafter": str(PAIR_DIR / "drafter"),
        "verifier": str(PAIR_DIR / verifier),
        "text_drafter": None,
    }
