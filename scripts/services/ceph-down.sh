#!/bin/bash
# ceph-down.sh — stop exactly the daemons ceph-up.sh recorded in $DIR/pids (rgw, osd, mon), never
# by name: a pid is signalled only while it still is a Ceph daemon started with our CEPH_CONF.
#
# Usage: scripts/services/ceph-down.sh [--purge]      (--purge also deletes the runtime dir)
# Env:   STOREKIT_CEPH_DIR  [<repo>/.services/ceph]
set -uo pipefail
SVC_NAME=ceph-down
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DIR=$(realpath -m "${STOREKIT_CEPH_DIR:-$REPO_ROOT/.services/ceph}")
purge_flag "$@"
[ -d "$DIR/pids" ] || { svc_log "nothing recorded in $DIR"; exit 0; }

ours() { started_by_us "$1" "CEPH_CONF=$DIR/ceph.conf" ceph-mon ceph-osd radosgw; }

# the gateway first (clients see a clean refusal), the mon last (the others talk to it)
for name in rgw osd.0 mon.a; do
  pf=$DIR/pids/$name.pid
  pid=$(pid_of "$pf") || continue
  if ours "$pid"; then
    stop_pid "$name" "$pid" 10
  else
    svc_log "$name: recorded pid $pid is not running (stale record)"
  fi
  rm -f "$pf"
done
rm -f "$DIR/s3.env"
if [ $PURGE = 1 ]; then
  run=$(readlink "$DIR/run" 2>/dev/null || true)
  [ -n "$run" ] && case $run in /tmp/storekit-ceph-*) rm -rf "$run" ;; esac
  rm -rf "$DIR"
  svc_log "removed $DIR"
fi
exit 0
