"""Checkpoints as units: writer profiles, completeness, and the commit API training scripts call.

`from storekit.checkpoint import commit` pulls in neither fsspec nor torch: only the standard
library, xxhash and storekit's small modules (durable writes, digests, the manifest format).
"""

from __future__ import annotations

from storekit.checkpoint.stage import CommitError, HashingWriter, Stage, commit

__all__ = ["CommitError", "HashingWriter", "Stage", "commit"]
