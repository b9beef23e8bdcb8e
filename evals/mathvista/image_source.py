"""MathVista images: the hub (AI4Math/MathVista testmini, `decoded_image`), or a local folder of image files or
of a parquet copy of the split; a clear error says where to put them when they are missing."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from asymspec_vl.pair.defaults import cache_dir

from .data import (
    HUB_ID,
    SPLIT,
    MathVistaDataError,
    Problem,
    read_annotation_file,
    sha256_file,
)

IMAGE_EXTS = (".jpg", ".png", ".jpeg", ".webp", ".gif", ".bmp")
ANNOTATION_FILES = (
    "testmini.json",
    "data/testmini.json",
    "annotations.json",
    "testmini.jsonl",
    "annotations.jsonl",
)


class MissingImagesError(MathVistaDataError):
    """The images of some selected problems are not where the run looks for them."""


def default_image_dir() -> Path:

    return cache_dir() / "mathvista"


def where_to_put(folder: Path) -> str:
    """Where the testmini images can come from, in short lines (the first starts a new line)."""
    return (
        f"\nThe MathVista text data ships with asymspec-vl; only the testmini images must come from elsewhere."
        f"\nPut them in {folder}, then pass --images {folder}:"
        f"\n  - as images/<pid>.png (the images/ folder of MathVista's data release), or flat as <pid>.png"
        f"\n    (.jpg works too; the `decoded_image` field of the {HUB_ID} {SPLIT} split holds them),"
        f"\n  - or as a parquet copy of that split anywhere under the folder."
        f"\nOr, with access to the Hugging Face hub, pass --images hub."
    )


class FolderImages:
    """Image files under a folder: <base>/<problem.image>, <root>/images/<pid>.<ext> or <root>/<pid>.<ext>."""

    kind = "folder"

    def __init__(self, root: Path, base: Path | None = None):
        self.root, self.base = Path(root), Path(base or root)

    def locate(self, p: Problem) -> Path | None:
        candidates = [self.base / p.image, self.root / p.image] if p.image else []
        for folder in (self.root / "images", self.root):
            candidates += [folder / f"{p.pid}{ext}" for ext in IMAGE_EXTS]
        return next((c for c in candidates if c.is_file()), None)

    def get(self, p: Problem):
        path = self.locate(p)
        if path is None:
            raise MissingImagesError(
                f"no image for pid {p.pid} under {self.root}." + where_to_put(self.root)
            )
        return path

    def missing(self, problems: list[Problem]) -> list[str]:
        return [p.pid for p in problems if self.locate(p) is None]

    def describe(self, problems: list[Problem]) -> dict:
        h = hashlib.sha256()
        for p in problems:
            path = self.locate(p)
            h.update(f"{p.pid}:{sha256_file(path) if path else '-'}\n".encode())
        return {"source": "folder", "path": str(self.root), "sha256": h.hexdigest()}


class TableImages:
    """Images in a `datasets` table with pid and decoded_image columns (the hub split or local parquet)."""

    def __init__(self, dataset, kind: str, info: dict):
        self.dataset, self.kind, self.info = dataset, kind, info
        self.index = {str(pid): i for i, pid in enumerate(dataset["pid"])}

    def get(self, p: Problem):
        if p.pid not in self.index:
            raise MissingImagesError(f"pid {p.pid} is not in the {self.kind} table")
        image = self.dataset[self.index[p.pid]]["decoded_image"]
        if image is None:
            raise MissingImagesError(
                f"pid {p.pid} has no decoded_image in the {self.kind} table"
            )
        return image

    def missing(self, problems: list[Problem]) -> list[str]:
        return [p.pid for p in problems if p.pid not in self.index]

    def describe(self, problems: list[Problem]) -> dict:
        return {"source": self.kind, **self.info}


def _table_records(dataset) -> list[dict]:
    drop = [c for c in ("decoded_image",) if c in dataset.column_names]
    return dataset.remove_columns(drop).to_list()


def load_local(root: Path) -> tuple[list[dict] | None, FolderImages | TableImages]:
    """Annotations (None: use the vendored ones) and images from a local folder."""
    if not root.is_dir():
        raise MissingImagesError(
            f"image folder not found: {root}." + where_to_put(root)
        )
    parquet = sorted(root.rglob("*.parquet"))
    if parquet:
        import datasets  # lazy: loads datasets

        try:
            ds = datasets.load_dataset(
                "parquet", data_files=[str(p) for p in parquet], split="train"
            )
        except (ValueError, OSError) as e:
            raise MathVistaDataError(
                f"cannot read the parquet files under {root}: {e}"
            ) from e
        if "pid" not in ds.column_names or "decoded_image" not in ds.column_names:
            raise MathVistaDataError(
                f"the parquet files under {root} need pid and decoded_image columns "
                f"(found {ds.column_names})"
            )
        info = {"path": str(root), "sha256": {p.name: sha256_file(p) for p in parquet}}
        return _table_records(ds), TableImages(ds, "parquet", info)
    for name in ANNOTATION_FILES:
        if (root / name).is_file():
            return read_annotation_file(root / name), FolderImages(
                root, (root / name).parent
            )
    return None, FolderImages(root)


def load_hub() -> tuple[list[dict], TableImages]:
    """The testmini split from the hub (refused up front in offline mode, where it cannot work)."""
    folder = default_image_dir()
    if any(
        os.environ.get(v, "").strip().lower() in ("1", "true", "yes", "on")
        for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    ):
        raise MissingImagesError(
            f"cannot load {HUB_ID} from the hub in offline mode (HF_HUB_OFFLINE / "
            f"HF_DATASETS_OFFLINE is set)." + where_to_put(folder)
        )
    import datasets  # lazy: loads datasets

    try:
        ds = datasets.load_dataset(HUB_ID, split=SPLIT)
    except Exception as e:  # noqa: BLE001 - connection, auth and cache errors all mean: no hub images
        raise MissingImagesError(
            f"could not load {HUB_ID} ({SPLIT}) from the hub: {type(e).__name__}: {e}."
            + where_to_put(folder)
        ) from e
    info = {
        "dataset": HUB_ID,
        "split": SPLIT,
        "fingerprint": getattr(ds, "_fingerprint", None),
    }
    return _table_records(ds), TableImages(ds, "hub", info)


def open_images(
    spec: str | Path | None,
) -> tuple[list[dict] | None, FolderImages | TableImages]:
    """spec: a folder, "hub", or None (the default folder ~/.cache/asymspec-vl/mathvista when it exists,
    else the hub). Returns (local annotation records or None, the image store)."""
    if spec is None:
        folder = default_image_dir()
        return load_local(folder) if folder.is_dir() else load_hub()
    if str(spec) == "hub":
        return load_hub()
    return load_local(Path(spec))


def check_images(store, problems: list[Problem]) -> None:
    """Raise MissingImagesError naming how many are missing, the first pids, and where to put them."""
    missing = store.missing(problems)
    if missing:
        where = getattr(store, "root", default_image_dir())
        raise MissingImagesError(
            f"images are missing for {len(missing)} of {len(problems)} selected problems "
            f"(pids {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''})."
            + where_to_put(Path(where))
        )
