"""Directories and modes of what prepare writes on a tier, as the tier's layout wants them, not as the
umask leaves them: an area storekit is the first to need is made with the layout's mode, and in a
read-only area (datasets/ in llm-cluster: nothing below may be group- or world-writable) the dataset
and the parents made for it are not writable by others. So what prepare writes passes `storekit
layout check` under any umask (002 is the default for users on many clusters)."""

from __future__ import annotations

import os
import stat
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from storekit.layout.spec import AreaSpec
    from storekit.store import Store

OTHERS_WRITE = 0o022  # what a read-only area's entries must not have


def layout_area(store: Store, name: str) -> AreaSpec | None:
    """The area `name` of the tier's layout (None: no such area)."""
    from storekit.layout.spec import load_layout

    return load_layout(store.tier.layout).area(name)


def make_area(store: Store, name: str, fallback_mode: int) -> None:
    """The tier's area `name` (scratch/, logs/, datasets/), when missing, made with the layout's mode
    for it (or `fallback_mode`), not the umask's."""
    path = store.local_path(name)
    if path is None or os.path.isdir(path):
        return
    area = layout_area(store, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    try:
        os.mkdir(path, 0o700)  # opened up below, once it is a directory we made
    except FileExistsError:
        return  # another run made it first
    os.chmod(path, area.mode if area is not None else fallback_mode)


def make_parents(store: Store, rel: str) -> None:
    """The missing directories down to `rel` (tier-relative, e.g. datasets/text/web): its area with
    the layout's mode, the levels below it as the umask makes them, less write for others in a
    read-only area. A directory that exists is left as it is."""
    top, _, below = rel.partition("/")
    area = layout_area(store, top)
    local = store.local_path(rel)
    if area is None or local is None:
        if local is not None:
            store.makedirs(rel)
        return
    make_area(store, top, area.mode)
    path = store.local_path(top) or ""
    for part in [p for p in below.split("/") if p]:
        path = os.path.join(path, part)
        try:
            os.mkdir(path)
        except FileExistsError:
            continue
        if area.read_only:
            os.chmod(path, stat.S_IMODE(os.stat(path).st_mode) & ~OTHERS_WRITE)


def drop_others_write(store: Store, rel: str) -> None:
    """Every directory and file below `rel` (a staged dataset) without write for others, when `rel`
    is in a read-only area of the tier's layout. Links are left alone (never followed)."""
    area = layout_area(store, rel.partition("/")[0])
    local = store.local_path(rel)
    if area is None or not area.read_only or local is None:
        return
    for dirpath, _dirnames, filenames in os.walk(local):
        for path in [dirpath, *(os.path.join(dirpath, f) for f in filenames)]:
            st = os.lstat(path)
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & OTHERS_WRITE:
                os.chmod(path, stat.S_IMODE(st.st_mode) & ~OTHERS_WRITE)
