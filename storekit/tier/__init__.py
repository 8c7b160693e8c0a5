"""Tiering: moving whole units (checkpoints, datasets) between tiers without ever losing a byte.

The mover (tiermove): `unitjournal` (per-unit state machine and the append-only action log),
`unitmanifest` (what a unit is: files, digests, modes, mtimes, links, empty dirs), `stub` (what a
freed unit leaves behind), `dest` (where copies go: S3 or POSIX), `mover` (archive, drain, recall of
one unit), `audit` (tier verify, tier gc). Policies and plans (tierplan) call `mover`.
"""
