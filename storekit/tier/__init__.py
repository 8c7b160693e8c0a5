"""Tiering: moving whole units (checkpoints, datasets) between tiers without ever losing a byte.

Policies and reviewed plans (policy.py, plan.py, apply.py), stubs a moved unit leaves (stub.py).
The mover: `unitjournal` (per-unit state machine and the append-only action log), `unitwalk`
(a unit's tree as storekit.manifest entries: files, modes, mtimes, links, empty dirs; its
fingerprint), `stubfile` (stubs on disk),
`dest` (where copies go: S3 or POSIX), `mover` (archive, drain, recall of one unit), `moveunit`
(a plan unit's entry point), `audit` (tier verify, tier gc).
"""
