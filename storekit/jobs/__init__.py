"""One job layer for long-running commands: a work dir with a plan and per-task records
(workdir.py), running some of its tasks here (run.py), status (status.py), finding work dirs
(find.py) and reclaiming abandoned ones (reclaim.py). What runs the tasks: storekit/executors/."""
