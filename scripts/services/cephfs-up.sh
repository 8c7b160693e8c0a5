#!/bin/bash
# cephfs-up.sh — a CephFS on the project's Ceph (scripts/services/ceph-up.sh), mounted twice with
# ceph-fuse: two mounts standing for two nodes of a cluster sharing one file system.
#
# Adds to the running cluster (never starts or stops it): pools cephfs.storekit.{meta,data} (8 PGs,
# the cluster's default size: 1 on ceph-up.sh's), the file system `storekit`, one ceph-mds, and a client made by `ceph fs authorize`. Mount
# 1 is client.admin, mount 2 that client. No ceph-mgr: statfs on these mounts reports 0 blocks
# (storekit shows that as unknown) except under a directory with a quota.
#
# Everything of ours (mds data, logs, sockets, pids, mount points) lives in $DIR. Idempotent: when
# the recorded MDS and both ceph-fuse are alive and both mounts answer, it only prints the env again.
# On success it prints export lines on stdout and writes them to $DIR/cephfs.env.
#
# Usage:   eval "$(scripts/services/cephfs-up.sh)"      ...      scripts/services/cephfs-down.sh
# Env:
#   STOREKIT_CEPH_DIR    the Ceph cluster's runtime dir (for its ceph.conf) [<repo>/.services/ceph]
#   CEPH_CONF            that cluster's config [$STOREKIT_CEPH_DIR/ceph.conf]
#   STOREKIT_CEPHFS_DIR  our runtime dir [<repo>/.services/cephfs]
# Prereq (Debian 12): apt-get install --no-install-recommends ceph-mds ceph-fuse attr (+ ceph-up.sh's)
set -euo pipefail
SVC_NAME=cephfs-up
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

CEPH_DIR=$(realpath -m "${STOREKIT_CEPH_DIR:-$REPO_ROOT/.services/ceph}")
export CEPH_CONF=${CEPH_CONF:-$CEPH_DIR/ceph.conf}
DIR=$(realpath -m "${STOREKIT_CEPHFS_DIR:-$REPO_ROOT/.services/cephfs}")
export STOREKIT_CEPHFS_DIR=$DIR # marks our daemons: cephfs-down.sh checks it in /proc/PID/environ
FS=storekit
MDS_ID=storekit
NODE2=client.storekit-node2
M1=$DIR/mnt1
M2=$DIR/mnt2

die() {
  svc_log "ERROR: $*"
  for f in "$DIR"/log/*.out; do [ -s "$f" ] && { echo "--- tail $f" >&2; tail -n 8 "$f" >&2; }; done
  echo "(full logs: $DIR/log/)" >&2
  "$SERVICES_HERE/cephfs-down.sh" >&2 || true
  exit 1
}

for b in ceph ceph-mds ceph-fuse getfattr setsid timeout mountpoint; do
  command -v "$b" >/dev/null || die "$b not found; install: apt-get install --no-install-recommends ceph-mds ceph-fuse attr"
done
[ "$(id -u)" = 0 ] || die "must run as root"
[ -c /dev/fuse ] || die "/dev/fuse is missing: ceph-fuse cannot mount"
[ -f "$CEPH_CONF" ] || die "no Ceph config at $CEPH_CONF: start scripts/services/ceph-up.sh first"

# a dead mon makes every ceph CLI call hang: never call it without a timeout
cephcli() { timeout --foreground "${CLI_TIMEOUT:-15}" ceph "$@"; }
# answers DIR: a metadata round trip on a mount finishes (a stuck mount blocks in D state: the
# probe runs in the background and is abandoned, never waited for without a limit)
answers() {
  mountpoint -q "$1" 2>/dev/null || return 1
  timeout --foreground 5 stat -c %i "$1/." >/dev/null 2>&1
}
write_env() {
  {
    printf 'export STOREKIT_TEST_CEPHFS_MOUNT1=%q\n' "$M1"
    printf 'export STOREKIT_TEST_CEPHFS_MOUNT2=%q\n' "$M2"
    printf 'export STOREKIT_TEST_CEPHFS_DIR=%q\n' "$DIR"
  } >"$DIR/cephfs.env.tmp"
  mv -f "$DIR/cephfs.env.tmp" "$DIR/cephfs.env"
  cat "$DIR/cephfs.env"
}
ours_alive() {
  local name
  for name in mds fuse1 fuse2; do running "$(pid_of "$DIR/pids/$name.pid")" || return 1; done
}

# ---- already up? -------------------------------------------------------------------------------
if [ -f "$DIR/cephfs.env" ] && ours_alive && answers "$M1" && answers "$M2"; then
  svc_log "already running in $DIR"
  write_env
  exit 0
fi
if compgen -G "$DIR/pids/*.pid" >/dev/null || mountpoint -q "$M1" 2>/dev/null || mountpoint -q "$M2" 2>/dev/null; then
  svc_log "stale instance in $DIR: tearing it down"
  "$SERVICES_HERE/cephfs-down.sh" >&2 || true
fi
case $DIR in / | /tmp | /root | /home | /usr | /var | /etc | "$REPO_ROOT") die "refusing to use $DIR as the runtime dir" ;; esac
CLI_TIMEOUT=5 cephcli mon stat >/dev/null 2>&1 || die "the Ceph mon of $CEPH_CONF does not answer: start scripts/services/ceph-up.sh"
mkdir -p "$DIR"/{pids,log,mds,run,mnt1,mnt2}
rm -f "$DIR"/log/*.out

# start NAME CMD...: run a daemon in the foreground (-f) in its own session; record its pid
start() {
  local name=$1
  shift
  setsid "$@" -f </dev/null >"$DIR/log/$name.out" 2>&1 &
  echo $! >"$DIR/pids/$name.pid"
}
# our own logs and sockets, whatever the cluster's config says
OWN=(--log-file "$DIR/log/\$name.log" --admin-socket "$DIR/run/\$name.asok" --run-dir "$DIR/run")

# ---- pools and file system (kept across restarts: the data is disposable, the bring-up is not) --
if ! cephcli fs ls 2>/dev/null | grep -q "name: $FS,"; then
  # size 1 comes from ceph-up.sh's defaults (osd pool default size = 1): one OSD
  for pool in meta data; do
    cephcli osd pool create "cephfs.$FS.$pool" 8 8 >>"$DIR/log/pools.out" 2>&1 || die "pool create cephfs.$FS.$pool failed"
  done
  cephcli fs new "$FS" "cephfs.$FS.meta" "cephfs.$FS.data" >"$DIR/log/fs-new.out" 2>&1 || die "ceph fs new failed"
  svc_log "file system $FS created"
fi

# ---- mds ---------------------------------------------------------------------------------------
# ticks of 1 s, not 5: a create or rename on one mount while the other reads the directory waits
# for the MDS's next tick (measured: a cross-mount test 5.6 s -> 0.3 s, a two-node prepare 25 -> 9 s)
start mds ceph-mds -i "$MDS_ID" --mds-data "$DIR/mds" "${OWN[@]}" --mds_tick_interval 1 --mds_scatter_nudge_interval 1
for _ in $(seq 300); do
  running "$(pid_of "$DIR/pids/mds.pid")" || die "ceph-mds exited"
  CLI_TIMEOUT=3 cephcli mds stat 2>/dev/null | grep -q "up:active" && break
  sleep 0.1
done
cephcli mds stat 2>/dev/null | grep -q "up:active" || die "the MDS did not become active"
svc_log "mds active (pid $(pid_of "$DIR/pids/mds.pid"))"

# ---- the second node's client: its own name and caps, as `ceph fs authorize` gives a node -------
cephcli fs authorize "$FS" "$NODE2" / rw >"$DIR/node2.keyring" 2>"$DIR/log/authorize.out" ||
  die "ceph fs authorize failed"

# ---- two mounts --------------------------------------------------------------------------------
start fuse1 ceph-fuse -n client.admin --client_fs "$FS" "${OWN[@]}" "$M1"
start fuse2 ceph-fuse -n "$NODE2" --keyring "$DIR/node2.keyring" --client_fs "$FS" "${OWN[@]}" "$M2"
for m in 1 2; do
  for _ in $(seq 200); do
    running "$(pid_of "$DIR/pids/fuse$m.pid")" || die "ceph-fuse for mount $m exited"
    answers "$DIR/mnt$m" && break
    sleep 0.1
  done
  answers "$DIR/mnt$m" || die "mount $m ($DIR/mnt$m) does not answer"
done
svc_log "mounted twice: $M1 (client.admin), $M2 ($NODE2)"

# ---- smoke test: a file written on one node is read back on the other ---------------------------
echo "smoke $$" >"$M1/.smoke"
[ "$(cat "$M2/.smoke")" = "smoke $$" ] || die "a file written on mount 1 reads back other bytes on mount 2"
rm -f "$M2/.smoke"
svc_log "cross-mount smoke ok; env in $DIR/cephfs.env"
write_env
