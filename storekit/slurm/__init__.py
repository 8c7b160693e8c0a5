"""Slurm: its client commands, sbatch scripts, cluster limits, and what array elements check."""
