#!/bin/bash
# host_cpu.sh CMD [ARGS...]: run CMD, then print its wall time and the whole host's busy and idle
# CPU-seconds meanwhile (/proc/stat), so a run's extra work and its idle cores show apart, including
# what other processes (Slurm's daemons, the elements it starts) did for it. Hold the bench lock.
#   benchmarks/host_cpu.sh sbatch --wait --array=0-3 --exclusive -c 1 -o /dev/null --wrap true
set -u
[ $# -ge 1 ] || { echo "usage: $0 CMD [ARGS...]" >&2; exit 2; }
hz=$(getconf CLK_TCK)
read -r _ u n s i w q sq st _ </proc/stat
t0=$(date +%s.%N)
"$@"
rc=$?
t1=$(date +%s.%N)
read -r _ u2 n2 s2 i2 w2 q2 sq2 st2 _ </proc/stat
busy=$(((u2 + n2 + s2 + q2 + sq2) - (u + n + s + q + sq)))
idle=$(((i2 + w2) - (i + w)))
awk -v a="$t0" -v b="$t1" -v busy="$busy" -v idle="$idle" -v hz="$hz" -v rc="$rc" 'BEGIN {
  printf "rc %d wall %.2f s busy %.2f CPU-s idle %.2f CPU-s\n", rc, b - a, busy / hz, idle / hz }' >&2
exit "$rc"
