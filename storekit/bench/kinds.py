"""The job kind bench registers with the job layer (storekit/executors/kinds.py): bench io across
nodes, kept as a job record (bench/cluster/record.py) that `storekit jobs status` finds and shows.
Only strings here: the job layer imports this module when it first looks a kind up.
"""

from __future__ import annotations

from storekit.executors.kinds import JobKind, register

BENCH_IO = "bench-io"  # bench/cluster/record.py's KIND
WORK_DIR_PREFIX = "storekit-bench-io-"

register(
    JobKind(
        BENCH_IO,
        load="storekit.bench.cluster.record:load",
        dir_prefixes=(WORK_DIR_PREFIX,),
        result="storekit.bench.cluster.record:result_of",
    )
)
