"""Where bundled declarative files (layouts/, pipelines/) and sample data are found.

In a source checkout they are the repo's top-level `layouts/` and `pipelines/`; in an installed wheel
they are copied to `storekit/_bundled/` (see pyproject's force-include). A name can also be a path.
"""

from __future__ import annotations

import os
from pathlib import Path

from storekit.errors import NotFoundError, refuse_not_regular

PACKAGE_DIR = Path(__file__).resolve().parent
ENV_SEARCH = "STOREKIT_PATH"  # extra directories holding layouts/ and pipelines/ (os.pathsep-separated)


def search_dirs(kind: str) -> list[Path]:
    """Directories searched for `kind` ('layouts' or 'pipelines'), most specific first."""
    dirs = [Path(p) / kind for p in os.environ.get(ENV_SEARCH, "").split(os.pathsep) if p]
    dirs += [Path.cwd() / kind, PACKAGE_DIR.parent / kind, PACKAGE_DIR / "_bundled" / kind]
    seen: list[Path] = []
    for d in dirs:
        if d.is_dir() and d.resolve() not in [s.resolve() for s in seen]:
            seen.append(d)
    return seen


def resolve_declarative(kind: str, name_or_path: str) -> Path:
    """A `.toml` path as given, or `<name>.toml` from the search dirs."""
    candidate = Path(name_or_path)
    if candidate.suffix == ".toml" or os.sep in name_or_path:
        if candidate.is_file():
            return candidate
        refuse_not_regular(name_or_path)
        if not candidate.is_absolute() and candidate.parts[0] == kind:
            # `layouts/llm-cluster.toml` as the README writes it, typed outside the source checkout:
            # the bundled file of that name
            for d in search_dirs(kind):
                bundled = d.joinpath(*candidate.parts[1:])
                if bundled.is_file():
                    return bundled
        raise NotFoundError(f"{kind[:-1]} file {name_or_path} does not exist")
    for d in search_dirs(kind):
        path = d / f"{name_or_path}.toml"
        if path.is_file():
            return path
    known = sorted({p.stem for d in search_dirs(kind) for p in d.glob("*.toml")})
    raise NotFoundError(
        f"no {kind[:-1]} named {name_or_path!r}",
        hint=f"known: {', '.join(known) or 'none'}; or pass a path to a .toml file",
    )
