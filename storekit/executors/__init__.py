"""Executors: what runs a job's tasks (base.py: the interface and registry; local.py; slurm.py)."""
