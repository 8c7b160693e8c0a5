"""Missing paths raise NotFoundError (exit 3) naming the path, from every query."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from storekit.errors import ExitCode, NotFoundError
from storekit.store import Store

QUERIES: dict[str, Callable[[Store, str], Any]] = {
    "info": lambda s, rel: s.info(rel),
    "open_read": lambda s, rel: s.open_read(rel),
    "read_bytes": lambda s, rel: s.read_bytes(rel),
    "list": lambda s, rel: s.list(rel),
    "walk": lambda s, rel: list(s.walk(rel)),
    "get_metadata": lambda s, rel: s.get_metadata(rel),
}


@pytest.mark.parametrize("query", sorted(QUERIES))
def test_missing(store: Store, query: str) -> None:
    store.write_bytes("present.bin", b"x")
    for rel in ("nope.bin", "no/such/dir/file.bin", "present.bin/below"):
        with pytest.raises(NotFoundError) as info:
            QUERIES[query](store, rel)
        assert info.value.exit_code == ExitCode.NOT_FOUND == 3
        assert rel in str(info.value)
        assert not store.exists(rel)


def test_reading_a_directory_is_an_error(store: Store) -> None:
    store.write_bytes("d/f", b"x")
    with pytest.raises(Exception, match=r"(?i)directory"):
        store.read_bytes("d")
