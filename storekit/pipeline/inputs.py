"""Opening input files: local paths directly, `s3://` through the bucket's store, `bundled:` from the package.

Credentials for `s3://bucket/...` come from the site config's S3 tier on that bucket (else its first
S3 tier), are held in memory only and never written to the plan or the work dir.
"""

from __future__ import annotations

import glob as globmod
import os
from typing import IO
from urllib.parse import urlsplit

from storekit.config import SiteConfig, mask_url, refuse_url_credentials
from storekit.errors import InputError, NotFoundError, StorekitError, storage_error
from storekit.paths import resolves_outside
from storekit.pipeline.bundled import bundled_path, is_bundled
from storekit.places import is_s3_url, resolve_place
from storekit.store import Store

GLOB_CHARS = ("*", "?", "[")


class InputFS:
    """One place that knows how to list, stat and open every kind of input URL."""

    def __init__(self, site: SiteConfig | None) -> None:
        self.site = site
        self._s3: dict[str, Store] = {}

    def s3(self, url: str) -> tuple[Store, str]:
        """The store of the URL's bucket (rooted at the bucket, one per bucket) and the key in it."""
        refuse_url_credentials(url, "input")
        parts = urlsplit(url)
        if parts.netloc not in self._s3:
            self._s3[parts.netloc] = resolve_place(f"s3://{parts.netloc}", self.site, what="input").store
        return self._s3[parts.netloc], parts.path.lstrip("/")

    def local_path(self, url: str) -> str | None:
        if is_bundled(url):
            return str(bundled_path(url))
        return None if is_s3_url(url) else url

    def open(self, url: str, *, block_size: int = 8 << 20) -> IO[bytes]:
        try:
            path = self.local_path(url)
            if path is not None:
                return open(path, "rb")
            store, key = self.s3(url)
            return store.open_read(key, block_size=block_size)
        except StorekitError:
            raise
        except Exception as exc:
            raise _input_error(url, exc) from None

    def expand(self, pattern: str) -> list[tuple[str, int, float | None]]:
        """(url, size, mtime) of every file an input names: a file, a directory (recursive) or a glob."""
        if is_bundled(pattern):
            path = bundled_path(pattern)
            st = path.stat()
            return [(pattern, st.st_size, st.st_mtime)]
        if is_s3_url(pattern):
            return self._expand_s3(pattern)
        return _expand_local(os.path.expanduser(pattern))

    def _expand_s3(self, pattern: str) -> list[tuple[str, int, float | None]]:
        store, key = self.s3(pattern)
        try:
            if any(c in key for c in GLOB_CHARS):
                entries = store.glob(key)
            else:
                entry = store.info(key)
                entries = [e for e in store.walk(key) if not e.is_dir] if entry.is_dir else [entry]
        except NotFoundError:
            return []
        except StorekitError:
            raise
        except Exception as exc:
            raise _input_error(pattern, exc) from None
        bucket = urlsplit(pattern).netloc
        return sorted((f"s3://{bucket}/{e.path}", e.size, None) for e in entries if not _hidden(e.path))


def _input_error(url: str, exc: Exception) -> StorekitError:
    """Through the one translator; whatever it does not know is still bad input naming the URL."""
    where = f"input {mask_url(url)}"
    return storage_error(exc, where) or InputError(f"{where}: {type(exc).__name__}: {exc}")


def _hidden(rel: str) -> bool:
    return any(part.startswith(".") for part in rel.split("/") if part)


def _expand_local(pattern: str) -> list[tuple[str, int, float | None]]:
    """Files a local input names. A file named on its own is read even if it is a link (the user named
    it); inside a directory or a glob, a link is followed only while its target stays inside that
    input's root: one pointing out (`-> /etc/shadow`) is refused, so nobody's link can pull a file
    the user did not name into a dataset (which may be world-readable)."""
    if any(c in pattern for c in GLOB_CHARS):
        root = _glob_root(pattern)
        paths = sorted(
            p
            for p in globmod.glob(pattern, recursive=True)
            if os.path.isfile(p) or not os.path.exists(p)  # broken links: refused below
        )
    elif os.path.isdir(pattern):
        root = pattern
        paths = []
        for top, dirs, files in os.walk(pattern):  # never descends into linked directories
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for d in dirs:
                if os.path.islink(os.path.join(top, d)):
                    check_link(os.path.join(top, d), root)  # inside: walked where it really is
            paths.extend(os.path.join(top, f) for f in files if not f.startswith("."))
        paths.sort()  # the order of `find DIR | sort`, whatever order the file system lists in
    elif os.path.isfile(pattern):
        st = os.stat(pattern)
        return [(os.path.abspath(pattern), st.st_size, st.st_mtime)]
    else:
        return []
    out: list[tuple[str, int, float | None]] = []
    for path in paths:
        check_link(path, root)
        st = os.stat(path)
        out.append((os.path.abspath(path), st.st_size, st.st_mtime))
    return out


def _glob_root(pattern: str) -> str:
    """The directory a glob starts from: its leading components without wildcards."""
    parts = pattern.split(os.sep)
    fixed = []
    for part in parts[:-1]:
        if any(c in part for c in GLOB_CHARS):
            break
        fixed.append(part)
    return os.sep.join(fixed) or ("/" if pattern.startswith(os.sep) else ".")


def check_link(path: str, root: str) -> None:
    """Refuse a path that a symbolic link leads out of `root` (or nowhere)."""
    outside = resolves_outside(path, root)
    if outside is not None:
        raise InputError(
            f"input {root}: {path} is a symbolic link to {outside}, outside the input; links out of an "
            "input directory or glob are not followed",
            hint="give the target as its own --input if you mean to read it, or remove the link",
        )
    if not os.path.exists(path):
        raise InputError(f"input {root}: {path} is a broken symbolic link (to {os.path.realpath(path)})")


def read_range(fs: InputFS, url: str, start: int, length: int) -> bytes:
    with fs.open(url, block_size=max(length, 1 << 16)) as fh:
        fh.seek(start)
        return fh.read(length)
