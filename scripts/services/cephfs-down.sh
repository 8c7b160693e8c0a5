#!/bin/bash
# cephfs-down.sh — unmount the two ceph-fuse mounts cephfs-up.sh made and stop the MDS it started,
# by the pids recorded in $DIR/pids, never by name: a pid is signalled only while it still is a
# ceph-fuse / ceph-mds started with our STOREKIT_CEPHFS_DIR. The Ceph cluster itself, the file
# system and its pools are left alone (the cluster is ceph-down.sh's).
#
# Usage: scripts/services/cephfs-down.sh [--purge]      (--purge also deletes the runtime dir)
# Env:   STOREKIT_CEPHFS_DIR  [<repo>/.services/cephfs]
set -uo pipefail
SVC_NAME=cephfs-down
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DIR=$(realpath -m "${STOREKIT_CEPHFS_DIR:-$REPO_ROOT/.services/cephfs}")
purge_flag "$@"
[ -d "$DIR" ] || { svc_log "nothing recorded in $DIR"; exit 0; }

ours() { started_by_us "$1" "STOREKIT_CEPHFS_DIR=$DIR" ceph-mds ceph-fuse; }

# a stopped (SIGSTOP) MDS would keep every unmount waiting: let it run again first
pid=$(pid_of "$DIR/pids/mds.pid") && ours "$pid" && kill -CONT "$pid" 2>/dev/null
# the mounts first (lazily: a mount in use must not keep the rest running), the MDS last
for m in 1 2; do
  if mountpoint -q "$DIR/mnt$m" 2>/dev/null; then
    timeout --foreground 10 fusermount -u -z "$DIR/mnt$m" 2>/dev/null ||
      timeout --foreground 10 umount -l "$DIR/mnt$m" 2>/dev/null ||
      svc_log "warning: could not unmount $DIR/mnt$m"
  fi
done
for name in fuse1 fuse2 mds; do
  pf=$DIR/pids/$name.pid
  pid=$(pid_of "$pf") || continue
  if ours "$pid"; then
    # ceph-mds takes >10 s to act on TERM here; its journal is replayed at the next start
    stop_pid "$name" "$pid" 1
  elif [ "$name" = mds ]; then
    svc_log "$name: recorded pid $pid is not running (stale record)"
  fi
  rm -f "$pf"
done
rm -f "$DIR/cephfs.env"
if [ $PURGE = 1 ]; then
  mountpoint -q "$DIR/mnt1" 2>/dev/null || mountpoint -q "$DIR/mnt2" 2>/dev/null ||
    { rm -rf "$DIR" && svc_log "removed $DIR"; }
fi
exit 0
