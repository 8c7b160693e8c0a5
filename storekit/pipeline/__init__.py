"""Dataset preparation: raw corpora -> tokenized, deduplicated, sharded Megatron `.bin`/`.idx` + manifest.

spec (`PipelineSpec` from pipelines/*.toml + flags) -> plan (`plan_tasks`: a pure function of the input
files and options) -> apply (`run_task` per task, anywhere; `finalize` once: dedup across tasks, shards,
manifest written last).
"""
