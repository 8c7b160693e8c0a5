"""Files shipped with storekit: the sample corpus and tokenizer (`bundled:NAME`), bundled pipelines.

`bundled:NAME` in a pipeline or on the command line names a file in `storekit/samples/`. Pipelines
are found by `storekit.resources` (the repository's `pipelines/`, or `storekit/_bundled/pipelines` in
an installed wheel).
"""

from __future__ import annotations

from pathlib import Path

from storekit.errors import NotFoundError
from storekit.resources import resolve_declarative

BUNDLED_PREFIX = "bundled:"
SAMPLE_PIPELINE = "sample"
_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def samples_dir() -> Path:
    return _PACKAGE_DIR / "samples"


def is_bundled(ref: str) -> bool:
    return ref.startswith(BUNDLED_PREFIX)


def bundled_path(ref: str) -> Path:
    """The local file for `bundled:NAME`."""
    name = ref[len(BUNDLED_PREFIX) :] if is_bundled(ref) else ref
    path = samples_dir() / name
    if "/" in name or name.startswith(".") or not path.is_file():
        known = ", ".join(sorted(p.name for p in samples_dir().iterdir() if not p.name.startswith(".")))
        raise NotFoundError(f"no bundled file {name!r}", hint=f"bundled files: {known}")
    return path


def find_pipeline(ref: str) -> Path:
    """A pipeline file: a path, or a bundled pipeline by name (`sample`)."""
    name = (
        ref[: -len(".toml")] if ref.endswith(".toml") and not Path(ref).exists() and "/" not in ref else ref
    )
    return resolve_declarative("pipelines", name)
