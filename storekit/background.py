"""One call on a daemon thread, its answer (or its exception) collected later in the caller's."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Background(Generic[T]):
    """Runs `call()` at once on a daemon thread: a process that exits on an error meanwhile does not
    wait for it. result() waits for it and returns what it returned or raises what it raised."""

    def __init__(self, call: Callable[[], T], name: str) -> None:
        self._call = call
        self._value: T | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._value = self._call()
        except BaseException as exc:  # re-raised by result(), in the caller's thread
            self._error = exc

    def result(self) -> T:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._value  # type: ignore[return-value]  # set: the call returned
