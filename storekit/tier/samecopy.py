"""Is the unit here the very unit a copy's manifest describes? Entries, types, modes, sizes, mtimes,
link targets, and every file's bytes (xxh3-128): a purge frees a source only then, and a recall
that finds the unit back beside its stub drops the stub only then."""

from __future__ import annotations

from pathlib import Path

from storekit.manifest import FILE, LINK, UnitEntry, UnitManifest
from storekit.ops import FileDigest, hash_local


def differs(src: Path, entries: list[UnitEntry], manifest: UnitManifest) -> str | None:
    """What makes the unit at `src` (walked as `entries`) other than the copy's manifest says
    (None: the same unit, byte for byte)."""
    want = {e.path: e for e in manifest.entries}
    got = {e.path: e for e in entries}
    if set(want) != set(got):
        odd = sorted(set(want) ^ set(got))
        where = "the copy" if odd[0] in want else "the source"
        return f"{odd[0]} is only in {where}; {len(odd)} entries differ"
    for path, w in want.items():
        g = got[path]
        if (g.type, g.target) != (w.type, w.target) or (w.type != LINK and g.mode != w.mode):
            return f"{path}: type, mode or link target differs"
        if w.type == FILE and (g.size, g.mtime_ns) != (w.size, w.mtime_ns):
            return f"{path}: size or mtime differs"
    for path, w in want.items():
        if w.type == FILE:
            got_digest = hash_local(src if path == "." else src / path, drop_cache=True)
            if got_digest != FileDigest(size=w.size, xxh3_128=w.xxh3_128):
                return f"{path}: its bytes differ from the copy's"
    return None
