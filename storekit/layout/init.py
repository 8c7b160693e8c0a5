"""`storekit init`: plan (pure, from spec + what exists) and apply (exactly that plan).

Idempotent: a tier that already matches yields an empty plan. Nothing is ever deleted or moved;
unknown entries are left for `layout check` to report. A root that another user owns, or that exists,
is not empty and holds none of the layout's areas, is someone else's directory (a home, a shared 1777
dir): init refuses it, in a dry run too, unless `adopt` says to lay it out anyway.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict, dataclass

from storekit.errors import NotFoundError, StorekitError
from storekit.layout import fsapply
from storekit.layout.spec import AreaSpec, LayoutSpec
from storekit.paths import join_rel
from storekit.store import Store


@dataclass(frozen=True)
class LayoutAction:
    action: str  # create-root | mkdir | chmod | fs-set (quotas and striping, layout/fsapply.py)
    path: str  # relative to the tier root ('' is the root)
    mode: str | None = None  # octal string, for mkdir/chmod
    detail: str = ""

    def to_dict(self) -> dict[str, str | None]:
        return asdict(self)


@dataclass(frozen=True)
class LayoutPlan:
    tier: str
    url: str
    layout: str
    actions: tuple[LayoutAction, ...]
    skipped: tuple[str, ...]  # what could not be applied on this backend, and why

    def to_dict(self) -> dict[str, object]:
        return {
            "tier": self.tier,
            "url": self.url,
            "layout": self.layout,
            "actions": [a.to_dict() for a in self.actions],
            "skipped": list(self.skipped),
        }


def _octal(mode: int) -> str:
    return f"{mode:04o}"


# entries a filesystem makes by itself in a fresh mount: they do not make a root "someone's"
_FILESYSTEM_ENTRIES = {"lost+found", ".snapshot", ".snapshots", ".zfs"}


def refuse_foreign_root(spec: LayoutSpec, store: Store) -> None:
    """Raise unless the root is missing, empty, or already holds at least one of the layout's areas;
    and, unless missing, it is owned by the running user or root: init chmods it, and a directory of
    someone else's with one area-named subdirectory (their `logs/`) is not a tier."""
    try:
        entries = [e for e in store.list("") if e.name not in _FILESYSTEM_ENTRIES]
    except NotFoundError:
        return
    owner = _owner(store)
    if owner is not None and owner not in (os.geteuid(), 0):
        raise StorekitError(
            f"{store.display_url} is owned by uid {owner}, not by you (uid {os.geteuid()}); init "
            f"would change its mode to {_octal(spec.root_mode)} and add areas to it",
            hint="run init as the directory's owner, or pass --adopt to lay out this one "
            "(nothing in it is moved or deleted)",
        )
    areas = {a.name for a in spec.areas}
    if not entries or any(e.is_dir and not e.is_link and e.name in areas for e in entries):
        return
    if any(e.name in areas for e in entries):
        return  # a file where an area belongs: plan_init refuses that with its own, precise message
    shown = ", ".join(e.name for e in entries[:3]) + (", ..." if len(entries) > 3 else "")
    raise StorekitError(
        f"{store.display_url} is not empty ({len(entries)} entries: {shown}) and holds no storekit "
        f"layout; init would change its mode to {_octal(spec.root_mode)} and add areas beside them",
        hint="point the tier at a new or empty directory, or pass --adopt to lay out this one "
        "(nothing in it is moved or deleted)",
    )


def _owner(store: Store) -> int | None:
    local = store.local_path("")
    if local is None:
        return None
    try:
        return os.stat(local).st_uid
    except OSError:
        return None


def plan_init(spec: LayoutSpec, store: Store, *, adopt: bool = False) -> LayoutPlan:
    caps = store.capabilities
    if not adopt:
        refuse_foreign_root(spec, store)
    actions: list[LayoutAction] = []
    skipped: list[str] = []
    if not caps.posix_modes:
        skipped.append(f"permissions: {store.display_url} has no POSIX modes (object store)")

    def want_dir(rel: str, mode: int) -> None:
        try:
            entry = store.info(rel)
        except NotFoundError:
            entry = None
        if entry is not None and not entry.is_dir:
            raise StorekitError(
                f"{store.display_url}/{rel} exists and is not a directory; the layout needs one there",
                hint="move it away, then run storekit init again",
            )
        if entry is None:
            actions.append(LayoutAction("create-root" if not rel else "mkdir", rel, _octal(mode)))
        elif caps.posix_modes and entry.mode is not None and entry.mode != mode:
            actions.append(LayoutAction("chmod", rel, _octal(mode), f"was {_octal(entry.mode)}"))

    want_dir("", spec.root_mode)
    for area in spec.areas:
        want_dir(area.name, area.mode)
        for child in area.create:
            want_dir(join_rel(area.name, child), _child_mode(area))
    settings, fs_skipped = fsapply.plan_settings(spec, store)
    actions += [LayoutAction(fsapply.ACTION, area, None, detail) for area, detail in settings]
    skipped += fs_skipped
    return LayoutPlan(
        tier=store.name,
        url=store.display_url,
        layout=spec.name,
        actions=tuple(actions),
        skipped=tuple(skipped),
    )


def _child_mode(area: AreaSpec) -> int:
    # sticky belongs to the area directory only; setgid is inherited as Linux does for new dirs
    return area.mode & ~0o1000


def apply_init(
    plan: LayoutPlan, store: Store, on_action: Callable[[LayoutAction], None] | None = None
) -> None:
    for action in plan.actions:
        if action.action in ("create-root", "mkdir"):
            store.makedirs(action.path, int(action.mode or "0755", 8))
        elif action.action == "chmod":
            store.chmod(action.path, int(action.mode or "0755", 8))
        elif action.action == fsapply.ACTION:
            fsapply.apply_settings(store, action.path, action.detail)
        if on_action:
            on_action(action)
