"""`status` on a tier whose file system keeps usage and quotas (the Lustre backend with recorded
`lfs` output here; CephFS for real in tests/integration/test_cephfs.py)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from storekit.fsfeatures import Lustre
from storekit.layout.spec import parse_layout
from storekit.layout.status import tier_status
from storekit.store import Store

LAYOUT = parse_layout(
    b'[layout]\nname = "t"\n[areas.data]\nmode = "0755"\n[areas.logs]\nmode = "0755"\n', source="t"
)


def lfs_for(root: str, fail: bool) -> Lustre:
    def run(cmd: Sequence[str]) -> str:
        if fail:
            raise OSError(5, f"{' '.join(cmd)} failed: Operation not supported")
        if cmd[:3] == ["lfs", "project", "-d"]:
            return f"   77 P {cmd[3]}\n" if cmd[3].endswith("/data") else f"    0 - {cmd[3]}\n"
        if cmd[:2] == ["lfs", "quota"]:
            return (
                "Disk quotas for prj 77 (pid 77):\n"
                "     Filesystem  kbytes   quota   limit   grace   files   quota   limit   grace\n"
                f"    {root}     300       0    1024       -      12       0     100       -\n"
            )
        return ""

    return Lustre(root, run=run)


@pytest.mark.parametrize("fail", [False, True])
def test_status_uses_the_file_systems_totals_and_walks_where_it_cannot(
    local_store: Store, monkeypatch: pytest.MonkeyPatch, fail: bool
) -> None:
    root = str(local_store.local_path(""))
    for area in ("data", "logs"):
        Path(root, area).mkdir()
        Path(root, area, "f.bin").write_bytes(b"x" * 10)
    monkeypatch.setattr("storekit.layout.fsapply.backend_for", lambda path: lfs_for(root, fail))
    st = tier_status(LAYOUT, local_store)
    assert st.reachable, st.error  # a failing lfs is not a tier that is down
    areas = {a.area: a for a in st.areas}
    if fail:
        assert [(a.usage_source, a.bytes, a.files) for a in areas.values()] == [("walk", 10, 1)] * 2
    else:
        data = areas["data"]  # the project's accounting, not the 10 bytes a walk would find
        assert (data.usage_source, data.bytes, data.files) == ("lustre", 300 * 1024, 12)
        assert (data.fs_quota_bytes, data.fs_quota_files) == (1024 * 1024, 100)
        assert (areas["logs"].usage_source, areas["logs"].bytes) == ("walk", 10)  # no project there
