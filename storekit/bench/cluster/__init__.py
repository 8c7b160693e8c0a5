"""`bench io --executor slurm --nodes N`: one agent per node, a coordinator that drives them over TCP.

launch.py starts the agents with srun; coordinator.py (the `Cluster`) accepts them, measures clock
offsets, runs each phase behind a two-level barrier and merges the results; agent.py is what runs on
a node; wire.py is the message format both speak.
"""
