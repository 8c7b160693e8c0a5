#!/usr/bin/env python3
"""Build the bundled sample corpus `storekit/samples/cpython-stdlib-sample.jsonl.gz`.

One JSON line per source file of CPython's standard library (PSF licence, shipped next to the corpus
as LICENSE.cpython.txt): {"text": <file contents>, "path": "Lib/<relative path>"}. Files are taken in
sorted order from a fixed list of top-level modules and packages until the raw text reaches
--max-bytes, so the same Python version always produces the same bytes (gzip mtime is 0).

    python scripts/make_sample_corpus.py --stdlib /usr/lib/python3.11 \
        --out storekit/samples/cpython-stdlib-sample.jsonl.gz
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

# Packages and modules with plain, readable source; tests and vendored code are left out.
INCLUDE = (
    "argparse.py",
    "ast.py",
    "base64.py",
    "bisect.py",
    "calendar.py",
    "collections",
    "configparser.py",
    "contextlib.py",
    "csv.py",
    "dataclasses.py",
    "datetime.py",
    "difflib.py",
    "email",
    "enum.py",
    "fractions.py",
    "functools.py",
    "gzip.py",
    "heapq.py",
    "html",
    "http",
    "inspect.py",
    "json",
    "logging",
    "pathlib.py",
    "pprint.py",
    "queue.py",
    "random.py",
    "shutil.py",
    "statistics.py",
    "string.py",
    "subprocess.py",
    "tarfile.py",
    "textwrap.py",
    "threading.py",
    "tomllib",
    "typing.py",
    "urllib",
    "uuid.py",
    "wave.py",
    "zipfile.py",
    "asyncio",
    "concurrent",
    "importlib",
    "multiprocessing",
    "xml",
    "unittest",
    "sqlite3",
    "wsgiref",
    "xmlrpc",
    "pydoc_data",
    "_pydecimal.py",
    "doctest.py",
    "pickle.py",
    "pdb.py",
    "socket.py",
    "ssl.py",
    "tempfile.py",
    "traceback.py",
    "turtle.py",
)


def iter_sources(stdlib: Path) -> list[Path]:
    files: list[Path] = []
    for name in INCLUDE:
        path = stdlib / name
        if path.is_dir():
            files.extend(sorted(p for p in path.rglob("*.py") if "__pycache__" not in p.parts))
        elif path.is_file():
            files.append(path)
    return files


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--stdlib", type=Path, required=True, help="CPython's Lib/ directory")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--max-bytes", type=int, default=6_000_000, help="stop after this much raw text")
    args = parser.parse_args()
    total = 0
    lines = []
    for path in iter_sources(args.stdlib):
        text = path.read_text(encoding="utf-8")
        rel = path.relative_to(args.stdlib).as_posix()
        lines.append(json.dumps({"text": text, "path": f"Lib/{rel}"}, ensure_ascii=False))
        total += len(text.encode("utf-8"))
        if total >= args.max_bytes:
            break
    data = ("\n".join(lines) + "\n").encode("utf-8")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with (
        open(args.out, "wb") as raw,
        gzip.GzipFile(filename="", fileobj=raw, mode="wb", compresslevel=9, mtime=0) as gz,
    ):
        gz.write(data)
    print(f"{len(lines)} documents, {total} bytes of text -> {args.out} ({args.out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
