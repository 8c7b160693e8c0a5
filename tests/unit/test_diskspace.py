from __future__ import annotations

import os
from pathlib import Path

from storekit.diskspace import free_bytes, nearest_existing, usage


def test_free_space_of_a_path_not_created_yet_is_its_nearest_existing_parents(tmp_path: Path) -> None:
    missing = tmp_path / "a" / "b" / "c"
    assert nearest_existing(str(missing)) == str(tmp_path)
    st = os.statvfs(tmp_path)
    free = free_bytes(str(missing))
    assert free is not None and free > 0
    # the same file system, read twice: equal up to what other processes wrote in between
    assert abs(free - st.f_bavail * st.f_frsize) < 1 << 30
    assert free_bytes(str(tmp_path)) is not None


def test_a_file_system_that_reports_no_blocks_says_nothing_rather_than_full() -> None:
    # /proc reports zero blocks in total, as ramfs does: "unknown", not "0 bytes free"
    assert os.statvfs("/proc").f_blocks == 0
    assert free_bytes("/proc") is None


def test_usage_is_free_and_total_of_the_same_reading(tmp_path: Path) -> None:
    known = usage(str(tmp_path / "not-yet"))
    st = os.statvfs(tmp_path)
    assert known is not None
    free, total = known
    assert total == st.f_blocks * st.f_frsize and 0 < free <= total
    assert usage("/proc") is None
