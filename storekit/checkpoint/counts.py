"""Completeness checks that count: every rank's file of a unit, against the rank count it records.

A profile names one of these with `count = "NAME"`; each returns None when every rank's file is
there, or a sentence saying which is missing. Only the standard library is used: a torch file is
read as the zip archive torch.save writes, and its pickle is walked opcode by opcode
(`pickletools.genops`), never unpickled, so nothing in a checkpoint is executed.
"""

from __future__ import annotations

import errno
import os
import pickletools
import re
import stat
import zipfile
from collections.abc import Callable, Iterable
from typing import IO

from storekit.errors import StorekitError
from storekit.store import Store

PICKLE_MAX = 16 * 1024 * 1024  # a model-states pickle without tensors is kilobytes; bound the read
_MEMO_OPS = {"BINPUT", "LONG_BINPUT", "PUT", "MEMOIZE"}
_INT_OPS = {"BININT", "BININT1", "BININT2", "INT", "LONG", "LONG1", "LONG4"}
_STR_OPS = {"BINUNICODE", "SHORT_BINUNICODE", "BINUNICODE8", "UNICODE"}


def top_values(data: bytes, keys: Iterable[str]) -> dict[str, object]:
    """For each key, the value that follows its first occurrence as a string in the pickle: an int,
    None for None, or True for anything else. Keys that never occur are absent."""
    wanted, found = set(keys), {}
    ops = pickletools.genops(data)
    pending: str | None = None
    for op, arg, _ in ops:
        name = op.name
        if pending is not None:
            if name in _MEMO_OPS:
                continue
            found[pending] = arg if name in _INT_OPS else (None if name == "NONE" else True)
            pending = None
            if len(found) == len(wanted):
                break
        if name in _STR_OPS and isinstance(arg, str) and arg in wanted and arg not in found:
            pending = arg
    return found


def torch_file_pickle(fh: IO[bytes]) -> bytes:
    """The object pickle of a torch.save file (its zip archive's */data.pkl)."""
    with zipfile.ZipFile(fh) as archive:
        name = next((n for n in archive.namelist() if n.endswith("/data.pkl") or n == "data.pkl"), None)
        if name is None:
            raise ValueError("no data.pkl in the archive")
        if archive.getinfo(name).file_size > PICKLE_MAX:
            raise ValueError("data.pkl is implausibly large")
        return archive.read(name)


_ZERO_OPTIM = re.compile(r"(?:bf16_)?zero_pp_rank_(?P<dp>[0-9]+)_mp_rank_(?P<mp>[0-9]+)_?optim_states\.pt")
_ZERO3_MODEL = re.compile(r"zero_pp_rank_(?P<dp>[0-9]+)_mp_rank_(?P<mp>[0-9]+)_model_states\.pt")
_MODEL_STATES = re.compile(r"(?:zero_pp_rank_[0-9]+_)?mp_rank_[0-9]+_model_states\.pt")


def deepspeed(store: Store, unit: str, rels: list[str]) -> str | None:
    """deepspeed/runtime/engine.py (0.19.8): `mp_rank_MM_model_states.pt` (or ZeRO-3's
    `zero_pp_rank_R_mp_rank_MM_model_states.pt`) records dp_world_size and mp_world_size;
    load_checkpoint opens `zero_pp_rank_R_mp_rank_MM_optim_states.pt` for every R < dp_world_size
    (`_get_mp_rank_zero_checkpoint_names`), so each must be there, and whole: each rank's
    torch.save writes under the final name (runtime/checkpoint_engine/torch_checkpoint_engine.py)."""
    top = set(rels)
    ref = next(
        (r for r in ("mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_model_states.pt") if r in top),
        None,
    )
    if ref is None:
        return "no mp_rank_00_model_states.pt (rank 0's model states)"
    try:
        with store.open_read(f"{unit}/{ref}") as fh:
            values = top_values(torch_file_pickle(fh), ("dp_world_size", "mp_world_size", "param_shapes"))
    except (StorekitError, OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        return f"{ref} cannot be read as a torch checkpoint ({exc})"
    dp, mp = values.get("dp_world_size"), values.get("mp_world_size", 1)
    if not isinstance(dp, int) or not isinstance(mp, int) or dp < 1 or mp < 1:
        return f"{ref} records no dp_world_size/mp_world_size: not a DeepSpeed model-states file"
    zero3 = ref.startswith("zero_pp_rank_")
    optim = {(int(g["dp"]), int(g["mp"])) for r in top if (g := _ZERO_OPTIM.fullmatch(r))}
    uses_zero = bool(optim) or values.get("param_shapes") is not None
    missing = []
    for tp in range(mp):
        for d in range(dp):
            if zero3 and f"zero_pp_rank_{d}_mp_rank_{tp:02d}_model_states.pt" not in top:
                missing.append(f"zero_pp_rank_{d}_mp_rank_{tp:02d}_model_states.pt")
            if uses_zero and (d, tp) not in optim:
                missing.append(f"zero_pp_rank_{d}_mp_rank_{tp:02d}_optim_states.pt")
        if not zero3 and f"mp_rank_{tp:02d}_model_states.pt" not in top:
            missing.append(f"mp_rank_{tp:02d}_model_states.pt")
    if missing:
        more = f" (+{len(missing) - 1} more)" if len(missing) > 1 else ""
        return (
            f"{ref} records dp_world_size={dp}, mp_world_size={mp}, but {missing[0]}{more} is missing: "
            "a rank did not finish its save"
        )
    # a rank killed inside its torch.save leaves the file cut short of the zip end record torch.load needs
    ranks = sorted(r for r in top if r != ref and (_ZERO_OPTIM.fullmatch(r) or _MODEL_STATES.fullmatch(r)))
    cut = _first_cut(store, unit, ranks)
    return None if cut is None else f"{cut[0]} {cut[1]}: a rank did not finish its save"


_ZIP_HEAD, _ZIP_END = b"PK\x03\x04", b"PK\x05\x06"
_ZIP_END_MAX = 22 + 65535  # the end record and the longest comment it may carry


def _first_cut(store: Store, unit: str, names: list[str]) -> tuple[str, str] | None:
    """The first of `names` (files directly in `unit`) that is cut short, and why. A scan checks
    every rank's file of every step, so on a POSIX tier the unit directory is resolved inside the
    tier once and each file opened relative to it, never blocking on a FIFO, regular files only,
    a link followed only through Store.open_read: what open_read does, at a tenth of its cost."""
    local = store.local_path(unit) if names else None
    if local is None:
        found = ((name, _cut_short(store, f"{unit}/{name}")) for name in names)
        return next(((name, why) for name, why in found if why is not None), None)
    try:
        dfd = os.open(local, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        return names[0], f"cannot be read ({exc.strerror})"
    try:
        for name in names:
            why = _local_cut(dfd, name)
            if why == _LINK:  # a link: followed as Store.open_read follows it, inside the tier only
                why = _cut_short(store, f"{unit}/{name}")
            if why is not None:
                return name, why
        return None
    finally:
        os.close(dfd)


_LINK = "a symbolic link"


def _local_cut(dfd: int, name: str) -> str | None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
    except OSError as exc:
        return _LINK if exc.errno == errno.ELOOP else f"cannot be read ({exc.strerror})"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "is not a regular file"
        return _zip_cut(st.st_size, lambda at, n: os.pread(fd, n, at))
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    finally:
        os.close(fd)


def _cut_short(store: Store, rel: str) -> str | None:
    try:
        with store.open_read(rel) as fh:  # a regular file inside the tier only (FIFOs refused)
            size = fh.seek(0, 2)

            def read(at: int, n: int) -> bytes:
                fh.seek(at)
                return fh.read(n)

            return _zip_cut(size, read)
    except (StorekitError, OSError) as exc:
        return f"cannot be read ({exc})"


def _zip_cut(size: int, read: Callable[[int, int], bytes]) -> str | None:
    """Why a torch.save file of `size` bytes is cut short (empty, or a zip archive without its end
    record: torch.load fails on both), or None. A file that is no zip archive at all (torch's
    legacy format, another engine's) is not judged. Usually one read, of the last 22 bytes."""
    if size == 0:
        return "is empty"
    last = read(max(0, size - 22), 22)  # torch writes no archive comment: its end record ends the file
    if last[:4] == _ZIP_END and last[20:] == b"\0\0":
        return None
    if read(0, len(_ZIP_HEAD)) != _ZIP_HEAD:
        return None
    start = max(0, size - _ZIP_END_MAX)
    tail = read(start, size - start)
    at = tail.rfind(_ZIP_END)
    if at >= 0 and at + 22 + int.from_bytes(tail[at + 20 : at + 22], "little") == len(tail):
        return None  # an end record followed by exactly its comment
    return f"is cut short ({size} bytes, no zip end record)"


_DCP_RANK_META = re.compile(r"__(?P<rank>[0-9]+)\.metadata")
_DCP_DATA = re.compile(r"__(?P<rank>[0-9]+)_[0-9]+\.distcp")


def dcp_ranks(store: Store, unit: str, rels: list[str]) -> str | None:
    """torch/distributed/checkpoint/filesystem.py (torch 2.13.0): with use_collectives=False every
    rank renames its own `__R.metadata.tmp` to `__R.metadata` after writing `__R_*.distcp`, and
    dcp.load reads the loading rank's; with collectives the coordinator's `.metadata` covers all."""
    if ".metadata" in rels:
        return None
    meta = {int(m["rank"]) for r in rels if (m := _DCP_RANK_META.fullmatch(r))}
    data = {int(m["rank"]) for r in rels if (m := _DCP_DATA.fullmatch(r))}
    if not meta:
        return "no .metadata nor __R.metadata"
    missing = sorted(set(range(max(meta | data) + 1)) - meta)
    if missing:
        return f"no __{missing[0]}.metadata: rank {missing[0]} did not finish its save (no collectives)"
    return None


COUNTS: dict[str, Callable[[Store, str, list[str]], str | None]] = {
    "deepspeed": deepspeed,
    "dcp-ranks": dcp_ranks,
}
