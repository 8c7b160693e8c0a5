"""The job kind the tier runs through the job layer (storekit/executors/kinds.py): tier moves.

`storekit tier ... --executor slurm` runs a plan's units as the tasks of a "tier" job
(storekit/tier/job.py); its work dirs are `storekit-tier-*` in the shared tier's scratch/, where
`jobs status` finds them. `storekit tier --drain --executor slurm` is a "tier-drain" job: one
task per node, run as one job step (storekit/tier/drainjob.py). Only strings here: an element of
another kind imports none of the mover.
"""

from __future__ import annotations

from storekit.executors.kinds import JobKind, register

KIND = "tier"
WORK_DIR_PREFIX = "storekit-tier-"

DRAIN_KIND = "tier-drain"  # a drain on every node: one task per node, a step (storekit/tier/drainjob.py)
DRAIN_DIR_PREFIX = "storekit-tier-drain-nodes-"

register(JobKind(KIND, load="storekit.tier.job:load", dir_prefixes=(WORK_DIR_PREFIX,)))
register(
    JobKind(
        DRAIN_KIND,
        load="storekit.tier.drainjob:load",
        dir_prefixes=(DRAIN_DIR_PREFIX,),
        result="storekit.tier.drainjob:result_of",
    )
)
