"""Executors run the tasks of a plan: `local` (one process per core); Slurm array tasks later."""
