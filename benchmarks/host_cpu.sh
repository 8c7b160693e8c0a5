#!/bin/bash
# host_cpu.sh CMD [ARGS...]: run CMD, then print its wall time and the whole host's busy and idle
# CPU-seconds meanwhile (/proc/stat), so a run's extra work and its idle cores show apart, including
# what other processes (Slurm's daemons, the elements it starts) did for it. Hold the bench lock.
#   benchmarks/host_cpu.sh sbatch --wait --array=0-3 --exclusive -c 1 -o /dev/null --wrap true
# The accounting is _measure.host_cpu's, the one the Python benchmarks use.
set -u
[ $# -ge 1 ] || { echo "usage: $0 CMD [ARGS...]" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
exec python3 -c '
import subprocess, sys, time
sys.path.insert(0, sys.argv[1])
from _measure import host_cpu
before, t0 = host_cpu(), time.monotonic()
rc = subprocess.call(sys.argv[2:])
rc = rc if rc >= 0 else 128 - rc  # killed by a signal: 128+N, as bash reports it
wall, after = time.monotonic() - t0, host_cpu()
print(f"rc {rc} wall {wall:.2f} s busy {after.busy - before.busy:.2f} CPU-s "
      f"idle {after.idle - before.idle:.2f} CPU-s", file=sys.stderr)
sys.exit(rc)
' "$here" "$@"
