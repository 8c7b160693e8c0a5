#!/bin/bash
# slurm-down.sh — stop exactly the daemons slurm-up.sh started (pids in $DIR/pids), never by name.
# Jobs are cancelled first: job step supervisors (slurmstepd) deliberately outlive slurmd.
# A munged that slurm-up.sh found running is left alone.
#
# Usage: scripts/services/slurm-down.sh [--keep-munge] [--wipe]
#   --keep-munge  leave our munged running (used by slurm-up.sh to restart slurm only)
#   --wipe        also delete the runtime dir
# Env: STOREKIT_SLURM_DIR  [<repo>/.services/slurm]
set -uo pipefail
SVC_NAME=slurm-down
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DIR=$(realpath -m "${STOREKIT_SLURM_DIR:-$REPO_ROOT/.services/slurm}")
KEEP_MUNGE=0
WIPE=0
for a in "$@"; do
  case $a in
  --keep-munge) KEEP_MUNGE=1 ;;
  --wipe) WIPE=1 ;;
  *) echo "usage: $0 [--keep-munge] [--wipe]" >&2; exit 2 ;;
  esac
done
[ -d "$DIR/pids" ] || { svc_log "nothing recorded in $DIR"; exit 0; }
export SLURM_CONF=$DIR/slurm.conf

# stop_recorded NAME EXE: stop the pid in $DIR/pids/NAME.pid if it still runs EXE
stop_recorded() {
  local pf=$DIR/pids/$1.pid pid
  pid=$(pid_of "$pf") || return 0
  if alive "$pf" "$2"; then
    stop_pid "$1" "$pid" 20
  else
    svc_log "$1: recorded pid $pid is not running (stale record)"
  fi
  rm -f "$pf"
}

if alive "$DIR/pids/slurmctld.pid" /usr/sbin/slurmctld; then
  jobs=$(timeout --foreground 10 squeue -h -o %A 2>/dev/null | sort -u | tr '\n' ' ')
  if [ -n "${jobs// /}" ]; then
    svc_log "cancelling jobs: $jobs"
    # shellcheck disable=SC2086
    timeout --foreground 10 scancel $jobs 2>/dev/null || true
    for _ in $(seq 150); do [ -z "$(timeout --foreground 5 squeue -h -o %A 2>/dev/null)" ] && break; sleep 0.1; done
  fi
fi

# each takes ~2 s to exit: stop them side by side
for pf in "$DIR"/pids/slurmd*.pid; do
  [ -e "$pf" ] || continue
  name=${pf##*/}
  stop_recorded "${name%.pid}" /usr/sbin/slurmd &
done
stop_recorded slurmctld /usr/sbin/slurmctld
wait
[ $KEEP_MUNGE = 1 ] || stop_recorded munged /usr/sbin/munged

# report, not kill: a job step supervisor that survived is a bug worth seeing
left=""
for p in /proc/[0-9]*; do
  [ "$(readlink "$p/exe" 2>/dev/null)" = /usr/sbin/slurmstepd ] || continue
  tr '\0' '\n' <"$p/environ" 2>/dev/null | grep -qx "SLURM_CONF=$DIR/slurm.conf" && left="$left ${p#/proc/}"
done
[ -n "$left" ] && svc_log "warning: slurmstepd of this cluster still running:$left"
if [ $WIPE = 1 ]; then
  rm -rf "$DIR"
  svc_log "removed $DIR"
fi
svc_log "done"
