"""The job commands over a job's work dir (its record: storekit/jobdir.py): running some of its
tasks here (run.py), status (status.py), finding work dirs (find.py) and reclaiming abandoned ones
(reclaim.py). What runs the tasks: storekit/executors/."""
