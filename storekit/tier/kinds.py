"""The job kind the tier runs through the job layer (storekit/executors/kinds.py): tier moves.

`storekit tier ... --executor slurm` runs a plan's units as the tasks of a "tier" job
(storekit/tier/job.py); its work dirs are `storekit-tier-*` in the shared tier's scratch/, where
`jobs status` finds them. Only strings here: an element of another kind imports none of the mover.
"""

from __future__ import annotations

from storekit.executors.kinds import JobKind, register

KIND = "tier"
WORK_DIR_PREFIX = "storekit-tier-"

register(JobKind(KIND, load="storekit.tier.job:load", dir_prefixes=(WORK_DIR_PREFIX,)))
