#!/bin/bash
# scripts/test.sh — THE test command: lint, type check and the whole test suite against real
# services (Ceph RGW for S3, single-host Slurm). Safe to rerun.
#
#   bash scripts/test.sh                 everything, on pytest-xdist workers (STOREKIT_TEST_WORKERS)
#   bash scripts/test.sh -k s3 -x        extra arguments go to pytest
#   bash scripts/test.sh --lint-only     ruff + mypy + lint-imports only     --no-lint   tests only
#   bash scripts/test.sh --fast          the inner loop: ruff, then the unit and conformance tests that
#                                        need no service and are not marked slow, on every core
#                                        (pytest-xdist); no Debian packages, no services, no mypy
#
# Steps: (1) as root with apt, install the Debian packages that are missing; (2) create .venv and
# `pip install -e '.[dev]'` (again only when pyproject.toml changed); (3) start Slurm and Ceph with
# scripts/services/ in the background unless they already run, and CephFS (an MDS and two ceph-fuse
# mounts) right after the Ceph it lives on (a running instance is reused and left running; what
# this script started is stopped again, also on failure or Ctrl-C); (4) ruff
# check, ruff format --check, mypy; (5) pytest with the STOREKIT_TEST_* service variables, on
# several workers (--dist loadgroup).
#
# Env:
#   CI=true                  missing services fail the tests instead of skipping them
#   STOREKIT_START_SERVICES  auto (reuse running services, else start ours) | always (start our own,
#                            e.g. beside a dev instance: set RGW_PORT, CEPH_MON_PORT, SLURMCTLD_PORT,
#                            SLURMD_PORT) | never (only use running ones)                   [auto]
#   STOREKIT_TEST_S3_ENDPOINT/_KEY/_SECRET, STOREKIT_TEST_SLURM=1   use these services as given
#   STOREKIT_TEST_CEPHFS_MOUNT1/_MOUNT2/_DIR                        the same for CephFS
#   CEPH_CONF                taken from the cluster's s3.env: lets tests run a private radosgw of it
#   RGW_PORT, S3_ACCESS_KEY, S3_SECRET_KEY, STOREKIT_CEPH_DIR, STOREKIT_SLURM_DIR, ...  see
#                            scripts/services/*-up.sh
#   PYTHON                   interpreter for the venv [python3]
#   STOREKIT_TEST_WORKERS    pytest-xdist workers of the full run [2 x nproc]; 0: one process. The
#                            tests of one service (Slurm, CephFS) run one after another on one worker
#                            (xdist_group, tests/conftest.py); `-n 0` among the pytest arguments too
set -uo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO" || exit 1
SVC=$REPO/scripts/services
LOGS=$REPO/.services/logs
T0=${EPOCHREALTIME/[.,]/}
MODE=${STOREKIT_START_SERVICES:-auto}
WORKERS=${STOREKIT_TEST_WORKERS:-$(($(nproc) * 2))}
PACKAGES=(slurmctld slurmd slurm-client munge ceph-mon ceph-osd radosgw ceph-common curl fio gcc libc6-dev prometheus
  debian-handbook strace ceph-mds ceph-fuse attr)  # debian-handbook: real text in ~28 languages (tokenizer tests); strace: jobs/test_scale
case ${CI:-} in 1 | true | TRUE | True | yes) IN_CI=1 ;; *) IN_CI=0 ;; esac

elapsed() { local now=${EPOCHREALTIME/[.,]/}; printf '%d.%01d' $(((now - T0) / 1000000)) $(((now - T0) / 100000 % 10)); }
log() { printf '[test.sh %6ss] %s\n' "$(elapsed)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
PHASES=()
phase_done() { PHASES+=("$(printf '%-22s %6ss' "$1" "$(elapsed)")"); }

LINT=1
TESTS=1
FAST=0
PYTEST_ARGS=()
for a in "$@"; do
  case $a in
  --lint-only) TESTS=0 ;;
  --fast) FAST=1 ;;
  --no-lint) LINT=0 ;;
  -h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "${BASH_SOURCE[0]}"; exit 0 ;;
  *) PYTEST_ARGS+=("$a") ;;
  esac
done
case $MODE in auto | always | never) ;; *) die "STOREKIT_START_SERVICES must be auto, always or never" ;; esac
mkdir -p "$LOGS"

IS_ROOT=0
[ "$(id -u)" = 0 ] && IS_ROOT=1
HAS_APT=0
command -v apt-get >/dev/null && command -v dpkg-query >/dev/null && HAS_APT=1

# ------------------------------------------------------------------ cleanup (on every exit)
SLURM_STARTED=0
CEPH_STARTED=0
CEPHFS_STARTED=0
SLURM_UP_PID=""
CEPH_UP_PID=""
CEPHFS_UP_PID=""
cleanup() {
  local rc=$? pid
  trap - EXIT INT TERM
  for pid in $SLURM_UP_PID $CEPH_UP_PID $CEPHFS_UP_PID; do
    # a bring-up still in progress runs in its own process group (setsid): stop all of it
    running_pid "$pid" && { kill -TERM -- "-$pid" 2>/dev/null; wait "$pid" 2>/dev/null; }
  done
  if [ $SLURM_STARTED = 1 ]; then
    log "stopping the Slurm cluster this run started"
    "$SVC/slurm-down.sh" >>"$LOGS/slurm-down.log" 2>&1 || log "warning: slurm-down.sh failed (see $LOGS/slurm-down.log)"
  fi
  if [ $CEPHFS_STARTED = 1 ]; then # before Ceph: the mounts and the MDS need its mon to stop cleanly
    log "stopping the CephFS mounts and MDS this run started"
    "$SVC/cephfs-down.sh" >>"$LOGS/cephfs-down.log" 2>&1 || log "warning: cephfs-down.sh failed (see $LOGS/cephfs-down.log)"
  fi
  if [ $CEPH_STARTED = 1 ]; then
    log "stopping the Ceph cluster this run started"
    "$SVC/ceph-down.sh" >>"$LOGS/ceph-down.log" 2>&1 || log "warning: ceph-down.sh failed (see $LOGS/ceph-down.log)"
  fi
  exit "$rc"
}
running_pid() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT
trap 'log "terminated"; exit 143' TERM

# ------------------------------------------------------------------ 1. Debian packages
if [ $FAST = 1 ]; then
  log "--fast: not checking Debian packages (no service is started)"
elif [ $IS_ROOT = 1 ] && [ $HAS_APT = 1 ]; then
  missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
  done
  python3 -c 'import venv, ensurepip' 2>/dev/null || missing+=(python3 python3-venv)
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing Debian packages: ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get -o DPkg::Lock::Timeout=600 update -qq &&
      apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing[@]}"; } \
      >"$LOGS/apt.log" 2>&1 || { tail -n 30 "$LOGS/apt.log" >&2; die "apt-get install failed (log: $LOGS/apt.log)"; }
  else
    log "Debian packages present"
  fi
else
  log "not root or no apt-get: not installing Debian packages (${PACKAGES[*]})"
fi
phase_done "packages"

# ------------------------------------------------------------------ 2. virtualenv
PY=${PYTHON:-python3}
command -v "$PY" >/dev/null || die "$PY not found (set PYTHON=/path/to/python3.11+)"
"$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))' || die "$PY is older than Python 3.11"
VPY=$REPO/.venv/bin/python
if ! "$VPY" -c 'import sys' 2>/dev/null; then
  log "creating .venv with $("$PY" --version 2>&1)"
  rm -rf "$REPO/.venv"
  "$PY" -m venv "$REPO/.venv" || die "python -m venv failed (Debian: apt-get install python3-venv)"
fi
# reinstall only when the dependencies, the interpreter or the checkout path changed
STAMP=$( { cat pyproject.toml; "$VPY" --version; echo "$REPO"; } | sha256sum | cut -c1-16)
if [ "$(cat .venv/.storekit-stamp 2>/dev/null)" != "$STAMP" ] || ! "$VPY" -c 'import storekit' 2>/dev/null; then
  log "pip install -e '.[dev]' (log: $LOGS/pip.log)"
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$VPY" -m pip install -q --progress-bar off -e '.[dev]' >"$LOGS/pip.log" 2>&1 ||
    { tail -n 30 "$LOGS/pip.log" >&2; die "pip install failed"; }
  # test data only (Mistral's tekken tokenizer files, Apache-2.0): no code of it is imported, and its
  # numpy<2.4 pin would fight storekit's, so it cannot be in the dev extra
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$VPY" -m pip install -q --progress-bar off --no-deps 'mistral-common==1.13.1' \
    >>"$LOGS/pip.log" 2>&1 || { tail -n 30 "$LOGS/pip.log" >&2; die "pip install mistral-common failed"; }
  echo "$STAMP" >.venv/.storekit-stamp
else
  log ".venv is up to date"
fi
export PATH=$REPO/.venv/bin:$PATH
phase_done "venv"

# ------------------------------------------------------------------ 3. services (background)
# s3_answers ENDPOINT KEY SECRET: a signed ListBuckets succeeds
s3_answers() {
  curl -fsS --max-time 5 --aws-sigv4 "aws:amz:us-east-1:s3" --user "$2:$3" \
    -H "x-amz-content-sha256: UNSIGNED-PAYLOAD" -o /dev/null "$1/" 2>/dev/null
}
# slurm_answers CONF: a cluster configured by CONF has a usable node
slurm_answers() {
  [ -f "$1" ] && command -v sinfo >/dev/null || return 1
  SLURM_CONF=$1 timeout --foreground 5 sinfo -h -o '%T' 2>/dev/null | grep -qE '^(idle|mixed|allocated|completing)'
}
can_start() { [ $IS_ROOT = 1 ] && command -v "$1" >/dev/null; }
# ours_alive PIDFILE EXE: the daemon recorded by scripts/services still runs (a config file left
# behind by a failed start must not make another cluster on the same ports look like ours)
ours_alive() {
  local pid
  pid=$(cat "$1" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] && [ "$(readlink -f "/proc/$pid/exe" 2>/dev/null)" = "$(readlink -f "$2")" ]
}
SLURM_DIR=$(realpath -m "${STOREKIT_SLURM_DIR:-$REPO/.services/slurm}")
CEPH_DIR=$(realpath -m "${STOREKIT_CEPH_DIR:-$REPO/.services/ceph}")
CEPHFS_DIR=$(realpath -m "${STOREKIT_CEPHFS_DIR:-$REPO/.services/cephfs}")
SERVICES_STARTED_AT=$(elapsed)

SLURM_NOTE=""
if [ $TESTS = 0 ] || [ $FAST = 1 ]; then
  SLURM_NOTE="not needed (--lint-only or --fast)"
elif [ "${STOREKIT_TEST_SLURM:-}" = 1 ]; then
  SLURM_NOTE="given by STOREKIT_TEST_SLURM=1 (SLURM_CONF=${SLURM_CONF:-default})"
elif [ "$MODE" != always ] && ours_alive "$SLURM_DIR/pids/slurmctld.pid" /usr/sbin/slurmctld &&
  slurm_answers "$SLURM_DIR/slurm.conf"; then
  export SLURM_CONF=$SLURM_DIR/slurm.conf STOREKIT_TEST_SLURM=1
  SLURM_NOTE="reusing the running cluster of $SLURM_DIR (left running)"
elif [ "$MODE" != always ] && slurm_answers "${SLURM_CONF:-/etc/slurm/slurm.conf}"; then
  export STOREKIT_TEST_SLURM=1
  SLURM_NOTE="reusing the running cluster of ${SLURM_CONF:-/etc/slurm/slurm.conf} (left running)"
elif [ "$MODE" = never ]; then
  SLURM_NOTE="none running and STOREKIT_START_SERVICES=never: Slurm tests will skip (fail in CI)"
elif can_start slurmctld; then
  SLURM_STARTED=1
  setsid "$SVC/slurm-up.sh" >"$LOGS/slurm-up.env" 2>"$LOGS/slurm-up.log" &
  SLURM_UP_PID=$!
else
  SLURM_NOTE="cannot start Slurm (needs root and: apt-get install slurmctld slurmd slurm-client munge); Slurm tests will skip (fail in CI)"
fi

# CephFS: decided first, so that a Ceph this run starts brings it up right after itself
CEPHFS_NOTE=""
CEPHFS_WANTED=0
cephfs_answers() { # ENV-FILE: both mounts it names answer a stat within 5 s
  [ -f "$1" ] && (. "$1" && for m in "$STOREKIT_TEST_CEPHFS_MOUNT1" "$STOREKIT_TEST_CEPHFS_MOUNT2"; do
    mountpoint -q "$m" && timeout --foreground 5 stat "$m/." >/dev/null 2>&1 || exit 1
  done)
}
if [ $TESTS = 0 ] || [ $FAST = 1 ]; then
  CEPHFS_NOTE="not needed (--lint-only or --fast)"
elif [ -n "${STOREKIT_TEST_CEPHFS_MOUNT1:-}" ]; then
  CEPHFS_NOTE="given by STOREKIT_TEST_CEPHFS_MOUNT1=$STOREKIT_TEST_CEPHFS_MOUNT1"
elif [ "$MODE" != always ] && cephfs_answers "$CEPHFS_DIR/cephfs.env"; then
  eval "$(grep -E '^export STOREKIT_TEST_CEPHFS_' "$CEPHFS_DIR/cephfs.env")"
  CEPHFS_NOTE="reusing the running mounts of $CEPHFS_DIR (left running)"
elif [ "$MODE" = never ]; then
  CEPHFS_NOTE="none running and STOREKIT_START_SERVICES=never: CephFS tests will skip (fail in CI)"
elif can_start ceph-mds && can_start ceph-fuse && [ -c /dev/fuse ]; then
  CEPHFS_WANTED=1
else
  CEPHFS_NOTE="cannot start CephFS (needs root, /dev/fuse and: apt-get install ceph-mds ceph-fuse attr); CephFS tests will skip (fail in CI)"
fi

CEPH_NOTE=""
DEFAULT_ENDPOINT=http://127.0.0.1:${RGW_PORT:-7480}
if [ $TESTS = 0 ] || [ $FAST = 1 ]; then
  CEPH_NOTE="not needed (--lint-only or --fast)"
elif [ -n "${STOREKIT_TEST_S3_ENDPOINT:-}" ]; then
  CEPH_NOTE="given by STOREKIT_TEST_S3_ENDPOINT=$STOREKIT_TEST_S3_ENDPOINT"
elif [ "$MODE" != always ] && [ -f "$CEPH_DIR/s3.env" ] &&
  (. "$CEPH_DIR/s3.env" && s3_answers "$STOREKIT_TEST_S3_ENDPOINT" "$STOREKIT_TEST_S3_KEY" "$STOREKIT_TEST_S3_SECRET"); then
  eval "$(grep -E '^export (STOREKIT_TEST_S3_|CEPH_CONF=)' "$CEPH_DIR/s3.env")"
  CEPH_NOTE="reusing the running cluster of $CEPH_DIR at $STOREKIT_TEST_S3_ENDPOINT (left running)"
elif [ "$MODE" != always ] && s3_answers "$DEFAULT_ENDPOINT" "${S3_ACCESS_KEY:-testkey}" "${S3_SECRET_KEY:-testsecret}"; then
  export STOREKIT_TEST_S3_ENDPOINT=$DEFAULT_ENDPOINT STOREKIT_TEST_S3_KEY=${S3_ACCESS_KEY:-testkey} \
    STOREKIT_TEST_S3_SECRET=${S3_SECRET_KEY:-testsecret}
  CEPH_NOTE="reusing the S3 gateway running at $DEFAULT_ENDPOINT (left running)"
elif [ "$MODE" = never ]; then
  CEPH_NOTE="none running and STOREKIT_START_SERVICES=never: Ceph tests will skip (fail in CI)"
elif can_start radosgw && can_start ceph-mon; then
  CEPH_STARTED=1
  setsid "$SVC/ceph-up.sh" >"$LOGS/ceph-up.env" 2>"$LOGS/ceph-up.log" &
  CEPH_UP_PID=$!
  if [ $CEPHFS_WANTED = 1 ]; then # after Ceph, in the background too: one job, one process group
    CEPHFS_STARTED=1
    CEPH_WAIT=$CEPH_UP_PID
    setsid bash -c 'while [ "$(awk "{print \$3}" "/proc/$1/stat" 2>/dev/null || echo Z)" != Z ]; do sleep 0.2; done
      grep -q "^export CEPH_CONF=" "$2/ceph-up.env" && exec "$3/cephfs-up.sh"
      echo "CephFS not started: Ceph did not come up" >&2; exit 1' \
      cephfs-after-ceph "$CEPH_WAIT" "$LOGS" "$SVC" >"$LOGS/cephfs-up.env" 2>"$LOGS/cephfs-up.log" &
    CEPHFS_UP_PID=$!
  fi
else
  CEPH_NOTE="cannot start Ceph (needs root and: apt-get install ceph-mon ceph-osd radosgw ceph-common curl); Ceph tests will skip (fail in CI)"
fi
# a Ceph that runs already (reused): CephFS on it now
if [ $CEPHFS_WANTED = 1 ] && [ $CEPH_STARTED = 0 ] && [ -n "${CEPH_CONF:-}" ] && [ -f "${CEPH_CONF:-}" ]; then
  CEPHFS_STARTED=1
  STOREKIT_CEPH_DIR=$(dirname "$CEPH_CONF") setsid "$SVC/cephfs-up.sh" >"$LOGS/cephfs-up.env" 2>"$LOGS/cephfs-up.log" &
  CEPHFS_UP_PID=$!
elif [ $CEPHFS_WANTED = 1 ] && [ $CEPH_STARTED = 0 ]; then
  CEPHFS_NOTE="no Ceph cluster whose config is known (CEPH_CONF) to add CephFS to; CephFS tests will skip (fail in CI)"
fi
[ -n "$SLURM_UP_PID" ] && log "starting Slurm in the background (log: $LOGS/slurm-up.log)"
[ -n "$CEPH_UP_PID" ] && log "starting Ceph in the background (log: $LOGS/ceph-up.log)"
[ -n "$CEPHFS_UP_PID" ] && log "starting CephFS in the background (log: $LOGS/cephfs-up.log)"

# ------------------------------------------------------------------ 4. lint and types
FAILED=()
if [ $FAST = 1 ] && [ $LINT = 1 ]; then
  log "ruff check"
  ruff check --no-cache . || FAILED+=("ruff check")
elif [ $LINT = 1 ]; then
  log "ruff check"
  ruff check --no-cache . || FAILED+=("ruff check")
  log "ruff format --check"
  ruff format --check --no-cache . || FAILED+=("ruff format --check")
  log "mypy (strict, config in pyproject.toml)"
  mypy || FAILED+=("mypy")
  log "lint-imports (layers and no cycles, .importlinter)"
  lint-imports --no-cache || FAILED+=("lint-imports")
  phase_done "lint + mypy"
fi

# ------------------------------------------------------------------ 5. wait for services, pytest
service_failed() { # NAME LOG
  tail -n 25 "$2" >&2
  if [ $IN_CI = 1 ]; then die "$1 did not come up (log: $2)"; fi
  log "warning: $1 did not come up (log: $2); its tests will skip"
}
if [ -n "$SLURM_UP_PID" ]; then
  if wait "$SLURM_UP_PID"; then
    eval "$(grep '^export SLURM_CONF=' "$LOGS/slurm-up.env")"
    export STOREKIT_TEST_SLURM=1
    SLURM_NOTE="started by this run in $SLURM_DIR (stopped at exit)"
  else
    SLURM_NOTE="failed to start"
    service_failed Slurm "$LOGS/slurm-up.log"
  fi
  SLURM_UP_PID=""
fi
if [ -n "$CEPH_UP_PID" ]; then
  if wait "$CEPH_UP_PID"; then
    eval "$(grep -E '^export (STOREKIT_TEST_S3_|CEPH_CONF=)' "$LOGS/ceph-up.env")"
    CEPH_NOTE="started by this run in $CEPH_DIR at $STOREKIT_TEST_S3_ENDPOINT (stopped at exit)"
  else
    CEPH_NOTE="failed to start"
    service_failed Ceph "$LOGS/ceph-up.log"
  fi
  CEPH_UP_PID=""
fi
if [ -n "$CEPHFS_UP_PID" ]; then
  if wait "$CEPHFS_UP_PID"; then
    eval "$(grep -E '^export STOREKIT_TEST_CEPHFS_' "$LOGS/cephfs-up.env")"
    CEPHFS_NOTE="started by this run in $CEPHFS_DIR: two ceph-fuse mounts (stopped at exit)"
  else
    CEPHFS_NOTE="failed to start"
    service_failed CephFS "$LOGS/cephfs-up.log"
  fi
  CEPHFS_UP_PID=""
fi
[ $TESTS = 1 ] && phase_done "services ready"
log "Slurm: $SLURM_NOTE"
log "Ceph:  $CEPH_NOTE"
log "CephFS: $CEPHFS_NOTE"

PYTEST_RC=0
if [ $TESTS = 1 ]; then
  if [ $FAST = 1 ]; then
    # the services' tests are deselected, not skipped: --fast must not fail for want of them in CI
    FAST_ARGS=(-q -m "not slow and not ceph and not cephfs and not slurm")
    # twice the CPUs, as the full run: many tests wait on fsyncs and child processes (2 cores: -n 2
    # took 135 s, -n 4 114 s)
    python -c 'import xdist' 2>/dev/null && FAST_ARGS+=(-n "$((2 * $(nproc)))")
    [ ${#PYTEST_ARGS[@]} -eq 0 ] && FAST_ARGS+=(tests/unit tests/conformance)
    PYTEST_ARGS=("${FAST_ARGS[@]}" "${PYTEST_ARGS[@]}")
  elif [ "$WORKERS" != 0 ] && python -c 'import xdist' 2>/dev/null; then
    # every test, on $WORKERS workers; the tests of one shared service (Slurm, CephFS) run one after
    # another on one of them (xdist_group, set in tests/conftest.py), the rest wherever a worker is free
    PYTEST_ARGS=(-n "$WORKERS" --dist loadgroup "${PYTEST_ARGS[@]}")
  fi
  log "pytest ${PYTEST_ARGS[*]}"
  python -m pytest --durations=10 "${PYTEST_ARGS[@]}"
  PYTEST_RC=$?
  case $PYTEST_RC in
  0) ;;
  5) FAILED+=("pytest collected no tests (exit 5)") ;;
  *) FAILED+=("pytest (exit $PYTEST_RC)") ;;
  esac
  phase_done "pytest"
fi

log "timings (elapsed at end of each phase; services started at ${SERVICES_STARTED_AT}s in the background):"
for p in "${PHASES[@]}"; do printf '    %s\n' "$p" >&2; done
if [ ${#FAILED[@]} -gt 0 ]; then
  log "FAILED: $(IFS=,; echo "${FAILED[*]}")"
  [ $PYTEST_RC -ne 0 ] && exit "$PYTEST_RC"
  exit 1
fi
log "all passed"
