"""`datasets` save_to_disk folders: a `state.json` naming Arrow IPC stream shards, read as `arrow`.

Not a file format of its own: it decides which files an input folder means, and in what order.
"""

from __future__ import annotations

import json

from storekit.config import mask_url
from storekit.errors import InputError, NotFoundError, StorekitError
from storekit.pipeline.inputs import InputFS

NAME = "hf-disk"


def save_to_disk_files(pattern: str, fs: InputFS) -> list[tuple[str, int, float | None]] | None:
    """The arrow files of a `Dataset.save_to_disk` folder, in the order state.json lists them."""
    if any(c in pattern for c in "*?[") or pattern.startswith("bundled:"):
        return None
    base = pattern.rstrip("/")
    try:
        with fs.open(f"{base}/state.json") as fh:
            state = json.loads(fh.read())
    except (NotFoundError, InputError, OSError, ValueError):
        if _is_file(fs, f"{base}/dataset_dict.json"):
            raise InputError(
                f"{pattern} is a DatasetDict (several splits)",
                hint=f"point --input at one split folder, e.g. {base}/train",
            ) from None
        return None
    names = [f["filename"] for f in state.get("_data_files", []) if isinstance(f, dict)]
    if not names:
        raise InputError(f"{mask_url(base)}/state.json lists no _data_files")
    out = []
    for name in names:
        if "/" in name or name in ("", ".", "..") or any(c in name for c in "*?["):
            raise InputError(f"{mask_url(base)}/state.json names {name!r}, which is not a file name in it")
        files = fs.member(base, name)
        if not files:
            raise InputError(f"{mask_url(base)}/state.json names {name}, which does not exist")
        out.extend(files)
    return out


def _is_file(fs: InputFS, url: str) -> bool:
    try:
        return not fs.info(url).is_dir
    except StorekitError:
        return False
