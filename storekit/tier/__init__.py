"""Tiering: moving whole units (checkpoints, datasets) between tiers without ever losing a byte.

Policies (storekit/policies.py) and reviewed plans (plan.py, apply.py), stubs a moved unit leaves
(their format: storekit/stubs.py; read and written here: stubfile.py).
The mover: `unitjournal` (per-unit state machine and the append-only action log), `unitwalk`
(a unit's tree as storekit.manifest entries: files, modes, mtimes, links, empty dirs; its
fingerprint), `stubfile` (stubs on disk),
`dest` (where copies go: S3 or POSIX), `mover` (archive, drain, recall of one unit), `moveunit`
(a plan unit's entry point), `audit` (tier verify, tier gc).
"""
