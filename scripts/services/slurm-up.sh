#!/bin/bash
# slurm-up.sh — a Slurm cluster on localhost for tests: munged + slurmctld + one slurmd per
# emulated node (own node name and port, as on a real cluster where each node runs one slurmd).
#
# Runs as root, without systemd. Idempotent: daemons it started earlier (recorded in
# $DIR/pids) are reused, a changed config restarts them. Waits until every node is idle.
# Partitions: `debug` (all nodes, default) and `cpu` (the second half of the nodes), so tests can
# target a partition as users do, and `urgent` (all nodes, a higher PriorityTier): a job there
# preempts jobs of the other two, which Slurm requeues (PreemptMode=REQUEUE), as on clusters where a
# high-priority partition takes nodes back. Finished jobs go to the jobcomp log $DIR/log/jobcomp.log.
# The config is written to $DIR/slurm.conf (the system's /etc/slurm is left alone); clients
# need `export SLURM_CONF=$DIR/slurm.conf`, which is printed on stdout and kept in $DIR/slurm.env.
#
# Usage:   eval "$(scripts/services/slurm-up.sh)"      ...      scripts/services/slurm-down.sh
# Env:
#   STOREKIT_SLURM_DIR  runtime dir (config, state, spool, logs, pids)  [<repo>/.services/slurm]
#   SLURMCTLD_PORT      slurmctld port [6817]
#   SLURMD_PORT         first slurmd port; node i listens on SLURMD_PORT+i-1 [6818]
#   SLURM_NODES         emulated nodes sk-node1..N [4]
#   SLURM_NODE_CPUS     CPUs each node advertises [nproc] (may exceed the real cores)
#   SLURM_MAX_ARRAY_SIZE  MaxArraySize: the highest array index + 1 [1001, Slurm's default]
#   SLURM_UP_TIMEOUT    seconds to wait for the nodes to become idle [60]
# Prereq (Debian 12): apt-get install --no-install-recommends slurmctld slurmd slurm-client munge
set -euo pipefail
SVC_NAME=slurm-up
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

DIR=$(realpath -m "${STOREKIT_SLURM_DIR:-$REPO_ROOT/.services/slurm}")
CTLD_PORT=${SLURMCTLD_PORT:-6817}
SLURMD_PORT=${SLURMD_PORT:-6818}
NCPUS=${SLURM_NODE_CPUS:-$(nproc)}
NNODES=${SLURM_NODES:-4}
MAX_ARRAY=${SLURM_MAX_ARRAY_SIZE:-1001}
[[ $NNODES =~ ^[1-9][0-9]*$ ]] || { echo "SLURM_NODES must be a positive number" >&2; exit 2; }
NODELIST=$(seq -f 'sk-node%g' 1 "$NNODES")
FIRST_CPU_NODE=$((NNODES / 2 + 1))
TIMEOUT=${SLURM_UP_TIMEOUT:-60}
CONF=$DIR/slurm.conf
MUNGE_KEY=/etc/munge/munge.key
SLURMCTLD=/usr/sbin/slurmctld
SLURMD=/usr/sbin/slurmd
MUNGED=/usr/sbin/munged

die() {
  svc_log "ERROR: $*"
  for f in "$DIR"/log/*.log; do [ -s "$f" ] && { echo "--- tail $f" >&2; tail -n 15 "$f" >&2; }; done
  exit 1
}

for b in munge unmunge sinfo scontrol squeue "$MUNGED" "$SLURMCTLD" "$SLURMD"; do
  command -v "$b" >/dev/null || die "$b not found; install: apt-get install --no-install-recommends slurmctld slurmd slurm-client munge"
done
[ "$(id -u)" = 0 ] || die "must run as root (slurmd runs jobs as their users)"
mkdir -p "$DIR"/{state,spool,log,pids}
export SLURM_CONF=$CONF

munge_ok() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

# ---------------------------------------------------------------- munge
if [ ! -s "$MUNGE_KEY" ]; then
  svc_log "creating munge key $MUNGE_KEY"
  install -d -o munge -g munge -m 0700 /etc/munge
  (umask 077 && dd if=/dev/urandom of="$MUNGE_KEY" bs=1024 count=1 status=none)
fi
# munged refuses a key (or key dir) that others can read or that it does not own
chown munge:munge /etc/munge "$MUNGE_KEY"
chmod 0700 /etc/munge
chmod 0400 "$MUNGE_KEY"
install -d -o munge -g munge -m 0755 /run/munge # systemd's RuntimeDirectory normally creates it
install -d -o munge -g munge -m 0700 /var/log/munge
install -d -o munge -g munge -m 0711 /var/lib/munge
if alive "$DIR/pids/munged.pid" "$MUNGED" && munge_ok; then
  svc_log "munged already running (ours, pid $(pid_of "$DIR/pids/munged.pid"))"
elif munge_ok; then
  svc_log "reusing a munged we did not start (slurm-down.sh leaves it alone)"
else
  rm -f /run/munge/munged.pid
  # --force: a stale socket or lock left by a killed munged would block the start
  runuser -u munge -- "$MUNGED" --force || die "munged failed to start"
  for _ in $(seq 100); do alive /run/munge/munged.pid "$MUNGED" && munge_ok && break; sleep 0.05; done
  munge_ok || die "munge round trip failed"
  cp /run/munge/munged.pid "$DIR/pids/munged.pid"
  svc_log "munged started (pid $(pid_of "$DIR/pids/munged.pid"))"
fi

# ---------------------------------------------------------------- slurm.conf
MEM_MB=$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.9}' /proc/meminfo)
NEW=$(mktemp "$DIR/.slurm.conf.XXXXXX")
cat >"$NEW" <<EOF
# written by storekit scripts/services/slurm-up.sh: $NNODES emulated nodes on one host
ClusterName=storekit
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# a job's launch credential lives cred_expire seconds, and a requeued job waits as long before it
# starts again (120 s by default, most of a preemption test, and the five requeue tests run one after
# another in CI); 15 s still leaves a launch on a loaded host room (Slurm's minimum is 5)
AuthInfo=cred_expire=15
CredType=cred/munge
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run-slurmctld.pid
SlurmdPidFile=$DIR/run-slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
# no cgroups (containers, CI VMs without delegation): track job processes by process tree
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# no slurmdbd: finished jobs stay visible to "scontrol show job" for MinJobAge seconds
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.log
MinJobAge=3600
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# the default batch_sched_delay (3 s) and bf_interval (30 s) make every test wait
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,bf_interval=1
DependencyParameters=kill_invalid_depend
MpiDefault=none
MailProg=/bin/true
SwitchType=switch/none
ReturnToService=2
# advertise SLURM_NODE_CPUS even when the machine has fewer cores
SlurmdParameters=config_overrides
InactiveLimit=0
KillWait=5
SlurmdTimeout=60
SlurmctldTimeout=60
MaxArraySize=$MAX_ARRAY
# a job in "urgent" (higher PriorityTier) preempts debug/cpu jobs; Slurm kills and requeues them
PreemptType=preempt/partition_prio
PreemptMode=REQUEUE
$(i=0; for n in $NODELIST; do
  echo "NodeName=$n NodeAddr=127.0.0.1 NodeHostname=localhost Port=$((SLURMD_PORT + i)) CPUs=$NCPUS RealMemory=$((MEM_MB / NNODES)) State=UNKNOWN"
  i=$((i + 1))
done)
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
PartitionName=cpu Nodes=sk-node[$FIRST_CPU_NODE-$NNODES] MaxTime=INFINITE State=UP OverSubscribe=NO
PartitionName=urgent Nodes=ALL MaxTime=INFINITE State=UP OverSubscribe=NO PriorityTier=10
EOF
CHANGED=1
if [ -f "$CONF" ] && cmp -s "$NEW" "$CONF"; then CHANGED=0; fi
mv -f "$NEW" "$CONF"
chmod 0644 "$CONF"
printf 'export SLURM_CONF=%q\n' "$CONF" >"$DIR/slurm.env"

ctld_alive() { alive "$DIR/pids/slurmctld.pid" "$SLURMCTLD"; }
slurmd_alive() { alive "$DIR/pids/slurmd-$1.pid" "$SLURMD"; }
any_slurmd_alive() {
  local pf
  for pf in "$DIR"/pids/slurmd-*.pid; do alive "$pf" "$SLURMD" && return 0; done
  return 1
}

# an interrupted earlier run may have started daemons before recording them: claim them
if ! ctld_alive && alive "$DIR/run-slurmctld.pid" "$SLURMCTLD"; then
  cp "$DIR/run-slurmctld.pid" "$DIR/pids/slurmctld.pid"
fi
for pf in "$DIR"/run-slurmd-*.pid; do
  [ -e "$pf" ] || continue
  n=${pf#"$DIR/run-slurmd-"}
  n=${n%.pid}
  if ! slurmd_alive "$n" && alive "$pf" "$SLURMD"; then cp "$pf" "$DIR/pids/slurmd-$n.pid"; fi
done
if [ $CHANGED = 1 ] && { ctld_alive || any_slurmd_alive; }; then
  svc_log "config changed: restarting our slurm daemons"
  "$SERVICES_HERE/slurm-down.sh" --keep-munge
fi

# ---------------------------------------------------------------- slurmctld
if ctld_alive; then
  svc_log "slurmctld already running (ours, pid $(pid_of "$DIR/pids/slurmctld.pid"))"
else
  port_in_use "$CTLD_PORT" && die "port $CTLD_PORT is in use (another slurmctld?); set SLURMCTLD_PORT/SLURMD_PORT"
  rm -f "$DIR/run-slurmctld.pid"
  "$SLURMCTLD" -f "$CONF" -c || die "slurmctld failed to start" # -c: start with a clean job state
  # the port can answer before the pid file is written: wait for both
  for _ in $(seq 300); do
    alive "$DIR/run-slurmctld.pid" "$SLURMCTLD" && timeout --foreground 5 scontrol ping 2>/dev/null | grep -q 'is UP' && break
    sleep 0.05
  done
  alive "$DIR/run-slurmctld.pid" "$SLURMCTLD" || die "slurmctld did not stay up"
  cp "$DIR/run-slurmctld.pid" "$DIR/pids/slurmctld.pid"
  timeout --foreground 5 scontrol ping 2>/dev/null | grep -q 'is UP' || die "slurmctld does not answer on port $CTLD_PORT"
  svc_log "slurmctld up on port $CTLD_PORT (pid $(pid_of "$DIR/pids/slurmctld.pid"))"
fi

# ---------------------------------------------------------------- slurmd (one per node)
i=0
for n in $NODELIST; do
  port=$((SLURMD_PORT + i))
  i=$((i + 1))
  if slurmd_alive "$n"; then
    svc_log "slurmd $n already running (ours, pid $(pid_of "$DIR/pids/slurmd-$n.pid"))"
    continue
  fi
  port_in_use "$port" && die "port $port is in use (another slurmd?); set SLURMD_PORT"
  mkdir -p "$DIR/spool/$n"
  rm -f "$DIR/run-slurmd-$n.pid"
  "$SLURMD" -f "$CONF" -N "$n" || die "slurmd $n failed to start"
  for _ in $(seq 100); do alive "$DIR/run-slurmd-$n.pid" "$SLURMD" && break; sleep 0.05; done
  alive "$DIR/run-slurmd-$n.pid" "$SLURMD" || die "slurmd $n did not stay up"
  cp "$DIR/run-slurmd-$n.pid" "$DIR/pids/slurmd-$n.pid"
  svc_log "slurmd $n up on port $port (pid $(pid_of "$DIR/pids/slurmd-$n.pid"))"
done

# ---------------------------------------------------------------- wait for idle
deadline=$((SECONDS + TIMEOUT))
while :; do
  states=$(timeout --foreground 5 sinfo -h -N -p debug -o '%N %T' 2>/dev/null | sort -u || true)
  ready=$(awk '$2 ~ /^(idle|mixed|allocated|completing)$/' <<<"$states" | wc -l)
  [ "$ready" -eq "$NNODES" ] && break
  # left down by an earlier run of this cluster: put them back to work
  for n in $(awk '$2 ~ /^(down|drain)/ {print $1}' <<<"$states"); do
    timeout --foreground 5 scontrol update NodeName="$n" State=RESUME 2>/dev/null || true
  done
  [ $SECONDS -ge $deadline ] && die "nodes not idle after ${TIMEOUT}s: $(echo $states)"
  sleep 0.1
done
svc_log "cluster ready: $NNODES nodes idle ($(echo $NODELIST)); SLURM_CONF=$CONF"
cat "$DIR/slurm.env"
