"""Files shipped with storekit: the sample corpus and tokenizer, and the bundled pipelines.

`bundled:NAME` in a pipeline or on the command line names a file in `storekit/samples/`. Pipelines
are looked up in the repository's `pipelines/` directory (a source checkout) and in
`storekit/_bundled/pipelines` (an installed wheel).
"""

from __future__ import annotations

from pathlib import Path

from storekit.errors import NotFoundError

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


def pipeline_dirs() -> list[Path]:
    return [_PACKAGE_DIR.parent / "pipelines", _PACKAGE_DIR / "_bundled" / "pipelines"]


def find_pipeline(ref: str) -> Path:
    """A pipeline file: an existing path, else a bundled pipeline by name (`sample` or `sample.toml`)."""
    path = Path(ref)
    if path.is_file():
        return path
    name = ref if ref.endswith(".toml") else f"{ref}.toml"
    if "/" not in name:
        for directory in pipeline_dirs():
            candidate = directory / name
            if candidate.is_file():
                return candidate
    known = sorted({p.stem for d in pipeline_dirs() if d.is_dir() for p in d.glob("*.toml")})
    raise NotFoundError(
        f"pipeline {ref!r} does not exist",
        hint=f"give a path to a .toml file; bundled pipelines: {', '.join(known) or 'none'}",
    )
