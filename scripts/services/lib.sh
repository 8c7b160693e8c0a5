# shellcheck shell=bash
# Helpers shared by the service scripts (sourced, not run).
# Every daemon we start is recorded as a pid file; we only ever signal a recorded pid after
# checking that it still is the program we started (pids get reused), never a process by name.
# `timeout --foreground` everywhere: plain timeout moves the command into a process group of its
# own, where stopping a half-finished bring-up (kill -- -PGID) would not reach it.

SERVICES_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SERVICES_HERE/../.." && pwd)
SVC_T0=${EPOCHREALTIME/[.,]/}

svc_log() {
  local now=${EPOCHREALTIME/[.,]/} ms
  ms=$(((now - SVC_T0) / 1000))
  printf '[%s %3d.%03ds] %s\n' "$SVC_NAME" $((ms / 1000)) $((ms % 1000)) "$*" >&2
}

# pid_of FILE -> the number in FILE, or nothing
pid_of() {
  local pid
  [ -s "$1" ] || return 1
  pid=$(tr -d ' \n' <"$1" 2>/dev/null) || return 1
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  echo "$pid"
}

# running PID -> the process exists and is not a zombie
running() {
  local st
  st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}

# alive PIDFILE EXE -> the recorded pid runs the executable EXE
alive() {
  local pid
  pid=$(pid_of "$1") || return 1
  running "$pid" || return 1
  [ "$(readlink -f "/proc/$pid/exe" 2>/dev/null)" = "$(readlink -f "$2")" ]
}

# started_by_us PID MARKER EXE... -> PID runs one of the executables EXE and was started with the
# environment entry MARKER (NAME=VALUE): a down script signals only its own daemons, never by name
started_by_us() {
  local pid=$1 marker=$2 exe name
  shift 2
  running "$pid" || return 1
  exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || return 1
  for name in "$@"; do
    if [ "${exe##*/}" = "$name" ]; then
      { tr '\0' '\n' <"/proc/$pid/environ"; } 2>/dev/null | grep -qxF "$marker"
      return
    fi
  done
  return 1
}

# purge_flag ARGS... -> sets PURGE=1 for --purge (a down script's one option), exit 2 on anything else
purge_flag() {
  PURGE=0
  local a
  for a in "$@"; do
    case $a in
    --purge) PURGE=1 ;;
    *) echo "usage: $0 [--purge]" >&2; exit 2 ;;
    esac
  done
}

# port_in_use PORT -> something listens on 127.0.0.1:PORT
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# stop_pid NAME PID [SECONDS]: TERM, wait, then KILL
stop_pid() {
  local name=$1 pid=$2 wait_s=${3:-15} i
  kill -TERM "$pid" 2>/dev/null || return 0
  for ((i = 0; i < wait_s * 10; i++)); do
    running "$pid" || { svc_log "stopped $name (pid $pid)"; return 0; }
    sleep 0.1
  done
  svc_log "$name (pid $pid) ignored TERM for ${wait_s}s: sending KILL"
  kill -KILL "$pid" 2>/dev/null || true
}
