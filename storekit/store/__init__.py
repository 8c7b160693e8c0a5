"""Stores: one rooted view of a tier, with the operations every command needs.

base (Store, Entry, Capabilities), posix (PosixStore), s3 (S3Store), s3client (the one botocore
client factory), retry (the one retry rule), registry (which store a URL scheme gets: open_store),
probe (what a POSIX directory's file system can do) and scan (the streaming tree scanner:
scan_tree, ScanEntry). Everything is importable from `storekit.store` as before.
"""

from storekit.durable import TMP_MARK
from storekit.store.base import XATTR_PREFIX, Capabilities, Entry, Store, check_metadata, temp_name
from storekit.store.posix import PosixStore
from storekit.store.registry import SCHEMES, open_store
from storekit.store.s3 import (
    S3_BLOCK_SIZE,
    S3_MAX_PARTS,
    S3Store,
    decode_s3_metadata,
    encode_s3_metadata,
)
from storekit.store.scan import ScanEntry, scan_tree

__all__ = [
    "S3_BLOCK_SIZE",
    "S3_MAX_PARTS",
    "SCHEMES",
    "TMP_MARK",
    "XATTR_PREFIX",
    "Capabilities",
    "Entry",
    "PosixStore",
    "S3Store",
    "ScanEntry",
    "Store",
    "check_metadata",
    "decode_s3_metadata",
    "encode_s3_metadata",
    "open_store",
    "scan_tree",
    "temp_name",
]
