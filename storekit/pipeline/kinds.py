"""The job kinds the pipeline runs through the job layer (storekit/executors/kinds.py): prepare.

What a prepare job's elements run on a scheduler's node (node.py: the tokenizer copy, sources
checked and hashed), what `jobs rerun` redoes before resubmitting (resubmit.py: inputs fixed since
the plan), how its work dirs are named (prepare.work_dir_for) and what a dataset TARGET of
`jobs status` is (location.job_output). Imported by the job layer the
first time it looks a kind up; only strings here, so an element imports nothing it does not run.
"""

from __future__ import annotations

from storekit.executors.kinds import JobKind, register

PREPARE = "prepare"  # the kind prepare's job.json names (pipeline/workdir.py)
WORK_DIR_PREFIX = "storekit-prepare-"  # a work dir beside an output outside any tier: "." first

register(
    JobKind(
        PREPARE,
        load="storekit.pipeline.job:load",
        on_node="storekit.pipeline.node:on_node",
        before_resubmit="storekit.pipeline.resubmit:refresh_sources",
        dir_prefixes=(WORK_DIR_PREFIX, f".{WORK_DIR_PREFIX}"),
        locate="storekit.pipeline.location:job_output",
    )
)
