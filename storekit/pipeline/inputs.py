"""Input files are listed, stat'ed and read through stores: local paths through a `PosixStore`, `s3://`
through the bucket's store, `bundled:` through one on the package's samples.

Credentials for `s3://bucket/...` come from the site config's S3 tier on that bucket (else its first
S3 tier), are held in memory only and never written to the plan or the work dir.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

from storekit.config import SiteConfig, TierConfig, refuse_url_credentials
from storekit.errors import NotFoundError
from storekit.pipeline.bundled import bundled_path, is_bundled
from storekit.pipeline.inputlist import (
    GLOB_CHARS,
    Found,
    expand_local,
    folder_member,
    input_error,
    shown,
    split_glob,
)
from storekit.places import is_s3_url, resolve_place
from storekit.store import Entry, Store, open_store


class InputFS:
    """One place that knows which store lists, stats and reads each kind of input URL."""

    def __init__(self, site: SiteConfig | None) -> None:
        self.site = site
        self._s3: dict[str, Store] = {}
        self._local: dict[str, Store] = {}

    def s3(self, url: str) -> tuple[Store, str]:
        """The store of the URL's bucket (rooted at the bucket, one per bucket) and the key in it."""
        refuse_url_credentials(url, "input")
        parts = urlsplit(url)
        if parts.netloc not in self._s3:
            self._s3[parts.netloc] = resolve_place(f"s3://{parts.netloc}", self.site, what="input").store
        return self._s3[parts.netloc], parts.path.lstrip("/")

    def place(self, url: str) -> tuple[Store, str]:
        """The store that reads the file `url` names and its path there. A local file is read from
        the directory it really is in: which links may be followed was decided when listing."""
        if is_s3_url(url):
            return self.s3(url)
        path = str(bundled_path(url)) if is_bundled(url) else os.path.expanduser(url)
        parent, name = os.path.split(os.path.realpath(path))
        return self.local_store(parent), name

    def local_store(self, directory: str) -> Store:
        """A store rooted at a local directory (one per directory); symlinks may not lead out of it."""
        root = os.path.abspath(directory)
        if root not in self._local:
            self._local[root] = open_store(TierConfig(name="input", url=Path(root).as_uri()))
        return self._local[root]

    def local_path(self, url: str) -> str | None:
        """An OS path for readers that want one (Arrow's OSFile); None for `s3://`."""
        if is_s3_url(url):
            return None
        store, rel = self.place(url)
        return store.local_path(rel)

    def open(self, url: str, *, block_size: int = 8 << 20) -> IO[bytes]:
        try:
            store, rel = self.place(url)
            return store.open_read(rel, block_size=block_size)
        except Exception as exc:
            raise input_error(url, exc) from None

    def info(self, url: str) -> Entry:
        """Size and mtime of the file `url` names (a link named on its own: of its target)."""
        try:
            store, rel = self.place(url)
            return store.info(rel)
        except Exception as exc:
            raise input_error(url, exc) from None

    def expand(self, pattern: str) -> Found:
        """Every file an input names: a file, a directory (recursive) or a glob. Hidden names below
        the input are left out unless the glob spells their dot."""
        if is_bundled(pattern):
            entry = self.info(pattern)
            return [(pattern, entry.size, entry.mtime)]
        if is_s3_url(pattern):
            return self._expand_s3(pattern)
        try:
            return expand_local(self.local_store, os.path.expanduser(pattern))
        except Exception as exc:
            raise input_error(pattern, exc) from None

    def member(self, folder: str, name: str) -> Found:
        """The file `name` in the input folder `folder` (a `save_to_disk` shard): like a file of a
        directory input, a link is followed only while it stays inside the folder."""
        if is_s3_url(folder):
            return self.expand(f"{folder}/{name}")
        try:
            return folder_member(self.local_store, os.path.expanduser(folder), name)
        except Exception as exc:
            raise input_error(f"{folder}/{name}", exc) from None

    def _expand_s3(self, pattern: str) -> Found:
        store, key = self.s3(pattern)
        try:
            if any(c in key for c in GLOB_CHARS):
                root, rest = split_glob(key)
                entries = [e for e in store.glob(key) if shown(_below(e.path, root), rest)]
            elif (entry := store.info(key)).is_dir:
                entries = [e for e in store.walk(key) if not e.is_dir and shown(_below(e.path, key))]
            else:
                entries = [entry]
        except NotFoundError:
            return []
        except Exception as exc:
            raise input_error(pattern, exc) from None
        bucket = urlsplit(pattern).netloc
        return sorted((f"s3://{bucket}/{e.path}", e.size, None) for e in entries)


def _below(key: str, prefix: str) -> str:
    return key[len(prefix.rstrip("/")) :].lstrip("/")


def read_range(fs: InputFS, url: str, start: int, length: int) -> bytes:
    with fs.open(url, block_size=max(length, 1 << 16)) as fh:
        fh.seek(start)
        return fh.read(length)
