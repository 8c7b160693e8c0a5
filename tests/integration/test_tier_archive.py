"""Archive (POSIX -> the real Ceph RGW) and recall of whole units: exact trees, stubs, the action log,
read-back that catches a flipped bit, SIGKILL at every point then rerun and gc, refusals."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from storekit import faults
from storekit.config import SiteConfig, TierConfig
from storekit.errors import ExitCode, NotFoundError, StorekitError
from storekit.ops.s3transfer import DIGEST_META_KEY, S3Transfer, TransferConfig
from storekit.store import S3Store
from storekit.store.s3delete import delete_keys, list_keys
from storekit.tier.audit import gc, verify_stub
from storekit.tier.mover import archive_unit, recall_unit
from storekit.tier.stubfile import read_stub, stub_path
from storekit.tier.unitjournal import read_log
from tests.integration.s3_helpers import PrivateGateway, wait_for
from tests.unit.tier.helpers import (
    MiB,
    fork_with_faults,
    leftovers,
    make_small_unit,
    make_unit,
    memory_dir,
    point_names,
    run_killed,
    snapshot,
    unfinished,
)
from tests.unit.tier.kills import SEED, io_event_count, killed_at_event, moments

pytestmark = pytest.mark.ceph
SMALL = TransferConfig(min_part_size=5 * MiB, threads=4, max_in_flight_bytes=32 * MiB, range_size=4 * MiB)
RUN = "checkpoints/run_001"


@pytest.fixture
def site(s3_tier: TierConfig) -> SiteConfig:
    return SiteConfig(source="<test>", tiers={"archive": s3_tier}, default_tier="archive")


@pytest.fixture
def engine(s3_tier: TierConfig) -> Iterator[S3Transfer]:
    with S3Transfer.for_tier(s3_tier) as eng:
        yield eng


def _objects(engine: S3Transfer) -> list[str]:
    return sorted(k for k in list_keys(engine, "") if not k.endswith("/"))  # not the tier's root marker


def _uploads(engine: S3Transfer) -> list[str]:
    return [u["Key"] for u in engine.client.list_multipart_uploads(Bucket=engine.bucket).get("Uploads", [])]


def test_archive_then_recall_of_several_steps_is_exact(
    tmp_path: Path, s3_tier: TierConfig, site: SiteConfig, engine: S3Transfer
) -> None:
    root, journal = tmp_path / "lustre", tmp_path / "journal"
    steps = {f"{RUN}/step_{n}": n for n in (100, 200, 300)}
    for unit, n in steps.items():
        make_unit(root / unit, big=11 * MiB + 5 if n == 200 else 0, seed=n)
    (root / RUN / "latest").write_text("step_300\n")
    before = {unit: snapshot(root / unit) for unit in steps}
    for unit in steps:
        result = archive_unit(root, unit, s3_tier, journal_dir=journal, transfer=SMALL)
        assert (result.state, result.freed, result.resumed) == ("done", True, False)
        assert not os.path.lexists(root / unit)
        stub = read_stub(stub_path(root / unit))
        assert stub is not None and (stub.to_tier, stub.to_path) == ("archive", unit)
        assert stub.manifest == f"{unit}.storekit-archive.json" and stub.unit == unit.rsplit("/")[-1]
    assert sorted(os.listdir(root / RUN)) == ["latest"] + [f"step_{n}.storekit-stub" for n in (100, 200, 300)]
    keys = _objects(engine)
    assert f"storage/{RUN}/step_200/big.bin" in keys and f"storage/{RUN}/step_100/empty.bin" in keys
    assert len(keys) == 3 * 7 + 1 + 3  # every file (empty ones too) + the big one + 3 manifests
    # the digest travels in metadata only where it was known before the PUT (single-part objects)
    small = engine.client.head_object(Bucket=engine.bucket, Key=f"storage/{RUN}/step_100/model/rank0.pt")
    big = engine.client.head_object(Bucket=engine.bucket, Key=f"storage/{RUN}/step_200/big.bin")
    assert DIGEST_META_KEY in small["Metadata"] and DIGEST_META_KEY not in big["Metadata"]
    assert big["ETag"].endswith('-3"')
    for unit in steps:
        assert verify_stub(stub_path(root / unit), site=site).problems == []

    for unit in steps:
        back = recall_unit(root, unit, journal_dir=journal, site=site, transfer=SMALL)
        assert (back.state, back.freed) == ("done", True)
        assert snapshot(root / unit) == before[unit]
    assert sorted(os.listdir(root / RUN)) == ["latest", "step_100", "step_200", "step_300"]
    assert leftovers(root) == [] and unfinished(journal) == []
    assert _uploads(engine) == []
    log = read_log(journal)
    archived = [line for line in log if line["action"] == "archive.verified"]
    assert [line["bytes"] for line in archived] == [
        sum(len(v[3]) for v in before[u].values() if v[0] == "file") for u in steps
    ]


def test_readback_catches_a_flipped_bit_and_a_missing_object(
    tmp_path: Path, s3_tier: TierConfig, site: SiteConfig, engine: S3Transfer
) -> None:
    root, journal = tmp_path / "lustre", tmp_path / "journal"
    make_unit(root / RUN / "step_1", seed=3)
    archive_unit(root, f"{RUN}/step_1", s3_tier, journal_dir=journal, transfer=SMALL)
    key = f"storage/{RUN}/step_1/model/rank1.pt"
    data = bytearray(engine.client.get_object(Bucket=engine.bucket, Key=key)["Body"].read())
    data[7] ^= 0x10
    engine.client.put_object(Bucket=engine.bucket, Key=key, Body=bytes(data))
    engine.client.delete_object(Bucket=engine.bucket, Key=f"storage/{RUN}/step_1/.metadata")
    problems = verify_stub(stub_path(root / RUN / "step_1"), site=site).problems
    assert len(problems) == 2
    assert problems[0].endswith("step_1/.metadata: missing")
    assert "model/rank1.pt: expected 65536 bytes" in problems[1]
    with pytest.raises(StorekitError) as info:  # the recall refuses the damaged copy, stub kept
        recall_unit(root, f"{RUN}/step_1", journal_dir=journal, site=site, transfer=SMALL)
    assert info.value.exit_code in (ExitCode.MISMATCH, ExitCode.NOT_FOUND)
    assert stub_path(root / RUN / "step_1").exists() and not os.path.lexists(root / RUN / "step_1")
    gc(journal, roots=[root], site=site)
    assert leftovers(root) == []


def test_a_stub_whose_archive_is_gone(
    tmp_path: Path, s3_tier: TierConfig, site: SiteConfig, engine: S3Transfer
) -> None:
    root, journal = tmp_path / "lustre", tmp_path / "journal"
    make_unit(root / RUN / "step_1", seed=4)
    archive_unit(root, f"{RUN}/step_1", s3_tier, journal_dir=journal, transfer=SMALL)
    for key in _objects(engine):
        engine.client.delete_object(Bucket=engine.bucket, Key=key)
    with pytest.raises(NotFoundError, match=r"step_1.storekit-archive.json: the archive named by .* is gone"):
        recall_unit(root, f"{RUN}/step_1", journal_dir=journal, site=site)
    assert stub_path(root / RUN / "step_1").exists()
    assert "archive is gone" in verify_stub(stub_path(root / RUN / "step_1"), site=site).problems[0]


def test_wrong_credentials_name_the_tier_and_are_not_retryable(tmp_path: Path, s3_tier: TierConfig) -> None:
    root, journal = tmp_path / "lustre", tmp_path / "journal"
    make_unit(root / RUN / "step_1", seed=5)
    before = snapshot(root / RUN / "step_1")
    bad = TierConfig(
        name="archive",
        url=s3_tier.url,
        role="archive",
        options={**s3_tier.options, "secret": "wrong-secret-xyz"},
    )
    with pytest.raises(StorekitError) as info:
        archive_unit(root, f"{RUN}/step_1", bad, journal_dir=journal, transfer=SMALL)
    assert info.value.exit_code == ExitCode.ERROR
    assert "tier archive" in str(info.value) and "wrong-secret-xyz" not in str(info.value)
    assert "\n" not in str(info.value)
    assert snapshot(root / RUN / "step_1") == before


def test_a_versioned_bucket_is_refused(tmp_path: Path, s3_tier: TierConfig, engine: S3Transfer) -> None:
    root, journal = tmp_path / "lustre", tmp_path / "journal"
    make_unit(root / RUN / "step_1", seed=6)
    engine.client.put_bucket_versioning(Bucket=engine.bucket, VersioningConfiguration={"Status": "Enabled"})
    with pytest.raises(StorekitError, match="has versioning Enabled"):
        archive_unit(root, f"{RUN}/step_1", s3_tier, journal_dir=journal, transfer=SMALL)
    assert (root / RUN / "step_1").is_dir() and _objects(engine) == []


def _whole_somewhere(
    root: Path, unit: str, before: dict[str, Any], site: SiteConfig, engine: S3Transfer
) -> None:
    committed = f"storage/{unit}.storekit-archive.json" in _objects(engine)
    if os.path.lexists(root / unit):
        assert snapshot(root / unit) == before
    else:
        assert committed and read_stub(stub_path(root / unit)) is not None


# the matrix's representative: archive (the recall is marked slow, still in CI)
@pytest.mark.parametrize("phase", ["archive", pytest.param("recall", marks=pytest.mark.slow)])
def test_sigkill_at_every_point_then_rerun(
    tmp_path: Path, s3_tier: TierConfig, site: SiteConfig, engine: S3Transfer, phase: str
) -> None:
    base = memory_dir(tmp_path)
    try:
        total = _every_point(base, s3_tier, site, engine, phase)
        assert total >= (20 if phase == "archive" else 9)  # points killed at
    finally:
        if base != tmp_path:
            shutil.rmtree(base)


def _setup(
    where: Path, s3_tier: TierConfig, site: SiteConfig, engine: S3Transfer, phase: str
) -> tuple[Path, Path, Callable[[], object], dict[str, Any]]:
    unit = f"{RUN}/step_100"
    # the last round's archive belongs to a unit now deleted: a new source may not replace it
    delete_keys(engine, _objects(engine))
    root, journal = where / "lustre", where / "journal"
    make_small_unit(root / unit, big=5 * MiB + 1, seed=8)
    before = snapshot(root / unit)
    if phase == "recall":
        archive_unit(root, unit, s3_tier, journal_dir=journal, transfer=SMALL)

    def op() -> object:
        if phase == "archive":
            return archive_unit(root, unit, s3_tier, journal_dir=journal, transfer=SMALL)
        return recall_unit(root, unit, journal_dir=journal, site=site, transfer=SMALL)

    return root, journal, op, before


def _kill_then_rerun(
    where: Path,
    s3_tier: TierConfig,
    site: SiteConfig,
    engine: S3Transfer,
    phase: str,
    gc_first: bool,
    kill: Callable[[Callable[[], object]], bool],
) -> None:
    """One crash (`kill(op)` must report it), then: nothing lost or partly present, optionally gc,
    rerun, the move done, exactly the committed objects on the gateway, nothing left after gc."""
    unit = f"{RUN}/step_100"
    root, journal, op, before = _setup(where, s3_tier, site, engine, phase)
    assert kill(op), f"{where.name}: the kill was not reached"
    _whole_somewhere(root, unit, before, site, engine)
    if gc_first:
        gc(journal, roots=[root], site=site)
        _whole_somewhere(root, unit, before, site, engine)
    op()
    if phase == "archive":
        assert not os.path.lexists(root / unit)
        assert verify_stub(stub_path(root / unit), site=site).problems == []
    else:
        assert snapshot(root / unit) == before and not stub_path(root / unit).exists()
    report = gc(journal, roots=[root], site=site)
    assert report.left == [] and leftovers(where) == []
    assert unfinished(journal) == []
    assert _uploads(engine) == []
    files = [k for k, v in before.items() if v[0] == "file"]
    assert _objects(engine) == sorted(
        [f"storage/{unit}/{f}" for f in files] + [f"storage/{unit}.storekit-archive.json"]
    )
    shutil.rmtree(where)


def _every_point(base: Path, s3_tier: TierConfig, site: SiteConfig, engine: S3Transfer, phase: str) -> int:
    names = point_names(_setup(base / "probe", s3_tier, site, engine, phase)[2])
    total = len(names)
    killed = _distinct_states(names)
    for n in killed:

        def kill(op: Callable[[], object], n: int = n) -> bool:
            return run_killed(op, f"*@{n}=kill")

        _kill_then_rerun(base / f"k{n}", s3_tier, site, engine, phase, n % 2 == 1, kill)
    assert total > 0
    return len(killed)


RANDOM_KILLS = {"archive": 10, "recall": 6}  # beside the POSIX moves' 108: each costs ~2 s here


@pytest.mark.slow
@pytest.mark.parametrize("phase", ["archive", "recall"])
@pytest.mark.parametrize("seed", [SEED], ids=lambda s: f"seed={s}")
def test_sigkill_at_random_moments_then_rerun(
    tmp_path: Path, s3_tier: TierConfig, site: SiteConfig, engine: S3Transfer, phase: str, seed: int
) -> None:
    """Kills inside the steps: just before a seeded-random N-th file-system call or HTTP send of the
    move (between two blocks of a part, a ranged GET's request, a temp file's open, a rename...)."""
    base = memory_dir(tmp_path)
    try:
        total = io_event_count(_setup(base / "probe", s3_tier, site, engine, phase)[2])
        assert total >= 50
        for i, n in enumerate(moments(total, RANDOM_KILLS[phase], salt=phase)):

            def kill(op: Callable[[], object], n: int = n) -> bool:
                return killed_at_event(op, n)

            _kill_then_rerun(base / f"m{n}", s3_tier, site, engine, phase, i % 2 == 1, kill)
    finally:
        if base != tmp_path:
            shutil.rmtree(base, ignore_errors=True)


# Points that leave the same state as the first of their kind: a recall killed after its 2nd or 3rd
# ranged GET or fetched file leaves a partial temp copy exactly as after the 1st (the rerun removes
# it and fetches again), so only the first of each is killed at (saves 4 archive+recall rounds).
SAME_STATE_AS_FIRST = frozenset({"transfer.range-fetched", "tier.file-fetched"})


def _distinct_states(names: list[str]) -> list[int]:
    """The 1-based positions worth a kill: every point but the repeats of SAME_STATE_AS_FIRST."""
    return [
        n for n, name in enumerate(names, 1) if name not in SAME_STATE_AS_FIRST or name not in names[: n - 1]
    ]


def _private_tier(s3_tier: TierConfig, endpoint: str) -> TierConfig:
    return TierConfig(
        name="archive", url=s3_tier.url, role="archive", options={**s3_tier.options, "endpoint_url": endpoint}
    )


def test_gateway_restart_mid_archive_is_ridden_out(tmp_path: Path, s3_tier: TierConfig) -> None:
    """The gateway dies after the 2nd file is copied; a request meets the dead gateway and is
    retried; the gateway comes back and the same run completes. Ordered by pause points, not sleeps."""
    root, journal, events = tmp_path / "lustre", tmp_path / "journal", tmp_path / "events"
    events.mkdir()
    make_small_unit(root / RUN / "step_1", big=5 * MiB + 1, seed=9)
    before = snapshot(root / RUN / "step_1")
    gw = PrivateGateway(tmp_path)
    gw.start()
    tier = _private_tier(s3_tier, gw.endpoint)
    try:
        pid = fork_with_faults(
            lambda: archive_unit(root, f"{RUN}/step_1", tier, journal_dir=journal, transfer=SMALL),
            "tier.file-copied@2=pause,transfer.retry=pause",
            events=events,
        )
        wait_for("file 2 copied", (events / "tier.file-copied.reached").exists)
        gw.stop()
        (events / "tier.file-copied.go").touch()
        wait_for("a refused request to be retried", (events / "transfer.retry.reached").exists)
        gw.start()
        (events / "transfer.retry.go").touch()
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0
        site = SiteConfig(source="<test>", tiers={"archive": tier}, default_tier="archive")
        assert not os.path.lexists(root / RUN / "step_1")
        assert verify_stub(stub_path(root / RUN / "step_1"), site=site).problems == []
        recall_unit(root, f"{RUN}/step_1", journal_dir=journal, site=site, transfer=SMALL)
        assert snapshot(root / RUN / "step_1") == before
    finally:
        gw.stop()


def test_gateway_down_past_the_budget_is_exit_5_and_a_rerun_completes(
    tmp_path: Path, s3_tier: TierConfig
) -> None:
    from storekit.store.retry import RetryPolicy

    root, journal = tmp_path / "lustre", tmp_path / "journal"
    make_small_unit(root / RUN / "step_1", big=5 * MiB + 1, seed=10)
    before = snapshot(root / RUN / "step_1")
    gw = PrivateGateway(tmp_path)
    gw.start()
    tier = _private_tier(s3_tier, gw.endpoint)
    short = TransferConfig(
        min_part_size=5 * MiB, threads=2, max_in_flight_bytes=16 * MiB, retry=RetryPolicy(budget_s=1.0)
    )
    try:
        with faults.at("tier.file-copied", gw.stop), pytest.raises(StorekitError) as info:
            archive_unit(root, f"{RUN}/step_1", tier, journal_dir=journal, transfer=short)
        assert info.value.exit_code == ExitCode.RETRYABLE
        assert gw.endpoint in str(info.value) and "tier archive" in str(info.value)
        assert s3_tier.options["secret"] not in str(info.value)
        assert snapshot(root / RUN / "step_1") == before  # nothing freed
        gw.start()
        result = archive_unit(root, f"{RUN}/step_1", tier, journal_dir=journal, transfer=SMALL)
        assert result.resumed and result.freed
    finally:
        gw.stop()


def test_the_archive_sends_unsigned_payloads_and_an_md5_checked_manifest(
    tmp_path: Path, s3_tier: TierConfig, engine: S3Transfer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`storekit tier`'s own settings (transfer=None): file bodies go UNSIGNED-PAYLOAD (the read-back
    checks them), even over plain http; the manifest PUT carries a Content-MD5 the gateway checks."""
    sent: list[tuple[str, str, str, bool]] = []
    for_store = S3Transfer.for_store  # what a move's destination makes its engine with

    def recording(store: S3Store, **kwargs: Any) -> S3Transfer:
        eng = for_store(store, **kwargs)

        def record(request: Any, **_: Any) -> None:
            sha = request.headers.get("X-Amz-Content-SHA256", b"")
            sha = sha.decode() if isinstance(sha, bytes) else sha
            path = request.url.split("?")[0]
            sent.append((request.method, path, sha, "Content-MD5" in request.headers))

        eng.client.meta.events.register("before-send.s3", record)
        return eng

    monkeypatch.setattr(S3Transfer, "for_store", staticmethod(recording))
    root = tmp_path / "lustre"
    make_small_unit(root / RUN, big=6 * MiB + 1)
    result = archive_unit(root, RUN, s3_tier, journal_dir=tmp_path / "journal")
    assert (result.state, result.freed) == ("done", True)
    puts = [(path, sha, md5) for method, path, sha, md5 in sent if method == "PUT"]
    manifest = [p for p in puts if p[0].endswith(".storekit-archive.json")]
    files = [p for p in puts if p not in manifest]
    assert files and all(sha == "UNSIGNED-PAYLOAD" for _, sha, _ in files)
    assert len(manifest) == 1 and manifest[0][2]
    assert f"storage/{RUN}.storekit-archive.json" in _objects(engine)


def test_an_archive_of_another_unit_at_the_destination_is_refused_and_kept(
    tmp_path: Path, s3_tier: TierConfig, site: SiteConfig, engine: S3Transfer
) -> None:
    """Two source tiers with the same relative unit path: the second archive would replace the first
    one's objects and manifest, which the first one's stub still names. It is refused before anything
    is sent; the same unit archived again after a recall (its own old copy) is not."""
    first, second, journal = tmp_path / "lustre", tmp_path / "nvme", tmp_path / "journal"
    unit = f"{RUN}/step_1"
    make_unit(first / unit, seed=30)
    make_unit(second / unit, seed=31)
    archive_unit(first, unit, s3_tier, journal_dir=journal, transfer=SMALL)
    manifest_key = f"storage/{unit}.storekit-archive.json"
    old = engine.client.get_object(Bucket=engine.bucket, Key=manifest_key)["Body"].read()
    keys = _objects(engine)
    other = snapshot(second / unit)

    with pytest.raises(StorekitError, match="holds an archive of another unit") as info:
        archive_unit(second, unit, s3_tier, journal_dir=journal, transfer=SMALL)
    assert info.value.exit_code == ExitCode.ERROR and str(first / unit) in str(info.value)
    assert engine.client.get_object(Bucket=engine.bucket, Key=manifest_key)["Body"].read() == old
    assert _objects(engine) == keys and _uploads(engine) == []
    assert snapshot(second / unit) == other and not stub_path(second / unit).exists()
    assert verify_stub(stub_path(first / unit), site=site).problems == []

    recall_unit(first, unit, journal_dir=journal, site=site, transfer=SMALL)
    assert os.path.isdir(first / unit) and not stub_path(first / unit).exists()
    again = archive_unit(first, unit, s3_tier, journal_dir=journal, transfer=SMALL)
    assert (again.state, again.freed) == ("done", True)


@pytest.mark.parametrize("how", ["removed", "file-removed"])
def test_a_rolled_back_archive_removes_every_object_it_uploaded(
    tmp_path: Path, s3_tier: TierConfig, engine: S3Transfer, how: str
) -> None:
    """The source deleted (`ckpt prune`, `rm -rf`) or a file of it removed while its archive runs:
    the rollback removes every object the archive put, and says that nothing was left."""
    from storekit.tier.mover import UnitChanged

    root, journal = tmp_path / "lustre", tmp_path / "journal"
    unit = f"{RUN}/step_7"
    make_unit(root / unit, seed=7)

    def meddle() -> None:
        if how == "removed":
            shutil.rmtree(root / unit, ignore_errors=True)
        else:
            (root / unit / "model/rank0.pt").unlink(missing_ok=True)

    with faults.at("tier.file-copied", meddle), pytest.raises(UnitChanged) as info:
        archive_unit(root, unit, s3_tier, journal_dir=journal, transfer=SMALL)
    assert _objects(engine) == [] and _uploads(engine) == []
    assert "rolled back, nothing left on the destination" in info.value.message
    assert unfinished(journal) == [] and not stub_path(root / unit).exists()
    assert gc(journal, roots=[root]).rolled_back == []


def test_a_purge_trusting_verify_max_age_reads_back_an_object_rewritten_since(
    tmp_path: Path, s3_tier: TierConfig, engine: S3Transfer
) -> None:
    """One object of a copy-only archive rewritten with one bit flipped (same size): its ETag and date
    differ from the verification's stamp, so the purge reads back, finds it, and frees nothing."""
    from storekit.errors import MismatchError
    from storekit.tier.purge import purge_unit

    root, journal = tmp_path / "lustre", tmp_path / "journal"
    unit = f"{RUN}/step_8"
    make_unit(root / unit, seed=8)
    before = snapshot(root / unit)
    archive_unit(root, unit, s3_tier, journal_dir=journal, free_source=False, transfer=SMALL)
    key = f"storage/{unit}/model/rank1.pt"
    data = bytearray(engine.client.get_object(Bucket=engine.bucket, Key=key)["Body"].read())
    data[len(data) // 2] ^= 1
    engine.client.put_object(Bucket=engine.bucket, Key=key, Body=bytes(data))
    with pytest.raises(MismatchError, match="does not read back") as info:
        purge_unit(root, unit, s3_tier, journal_dir=journal, verify_max_age_s=7 * 86400.0, transfer=SMALL)
    assert info.value.exit_code == ExitCode.MISMATCH and "model/rank1.pt" in info.value.message
    assert snapshot(root / unit) == before and not stub_path(root / unit).exists()
    assert unfinished(journal) == []
