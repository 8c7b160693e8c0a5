#!/usr/bin/env python3
"""Build a deterministic real-text jsonl corpus from text already on this machine.

The corpus feeds benchmarks/bench_prepare.py. Every document is real text found on a Debian 12
machine; nothing is generated. Sources (interleaved by byte weight, so every prefix of the
corpus has the same mix):

  cpython      CPython 3.11.7 library sources (*.py) under the pyenv install
  python-docs  the Python 3.11 manual as reStructuredText (python3-doc: html/_sources/*.txt)
  handbook     The Debian Administrator's Handbook, HTML -> text, all its ~30 languages
  tech-html    PostgreSQL 15, SQLite and Debian Reference manuals, HTML -> text
  git-docs     git's asciidoc manual sources (git-doc: *.txt)
  man          English man pages rendered to plain text by man(1) (80 columns, no hyphenation)
  perl-pod     perl's own documentation (perl-doc: *.pod)
  usr-doc      README / NEWS / changelog / copyright files under /usr/share/doc

Documents longer than --max-doc-chars are split at paragraph (then line) boundaries into pieces of
about --piece-chars, as web-scale corpora do. Exact duplicates occur naturally (the same licence
text ships as many packages' copyright file; some changelogs repeat); their number is recorded in
the stats file, nothing is injected. If the sources run out before --size-mb is reached the stream
starts again from the beginning (every document of a later pass is an exact duplicate of one in
the first pass); the stats say how many passes were needed.

--giant N adds N giant documents (each --giant-mb MiB, a concatenation of CPython sources, never
split) at evenly spread positions, on top of --size-mb, for the bounded-memory check.

Output: OUT.jsonl with one {"id", "text", "source"} object per line (UTF-8, ensure_ascii=False),
and OUT.jsonl.stats.json (documents, bytes, per-source mix, duplicates, size distribution, a digest
of the ordered list of input files and of the output). Same machine state -> same bytes.

Setup: the doc packages below are installed with apt-get when they are missing and we are root
(--no-install to skip; missing sources are then just left out and the stats say so).

Examples:
  python3 benchmarks/make_corpus.py                # -> benchmarks/.work/corpus/corpus-120mb.jsonl
  python3 benchmarks/make_corpus.py --size-mb 360  # the 3x corpus for the memory check
  python3 benchmarks/make_corpus.py --size-mb 150 --giant 3 --giant-mb 64
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import html
import html.parser
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

HERE = Path(__file__).resolve().parent
WORK = HERE / ".work"
DOC_PACKAGES = [
    "python3-doc",
    "debian-reference-en",
    "debian-handbook",
    "git-doc",
    "perl-doc",
    "postgresql-doc-15",
    "glibc-doc",
    "sqlite3-doc",
]
CPYTHON = Path("/root/.pyenv/versions/3.11.7/lib/python3.11")
MIN_DOC_CHARS = 200
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


# ---------------------------------------------------------------- reading files


def read_text(path: Path) -> str:
    raw = path.read_bytes()
    if path.suffix == ".gz":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError):
            return ""
    text = raw.decode("utf-8", errors="replace").replace("\r\n", "\n")
    return _CONTROL.sub("", text)


class _HTMLText(html.parser.HTMLParser):
    """HTML -> readable text: block elements end lines, <pre> keeps its whitespace."""

    BLOCK: ClassVar[frozenset[str]] = frozenset(
        {"p", "div", "br", "li", "ul", "ol", "dl", "dt", "dd", "tr", "table", "section", "article", "pre"}
        | {"h1", "h2", "h3", "h4", "h5", "h6", "blockquote", "hr", "title", "header", "footer"}
    )
    SKIP: ClassVar[frozenset[str]] = frozenset({"script", "style", "head", "nav"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0
        self.pre = 0

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self.SKIP:
            self.skip += 1
        if tag == "pre":
            self.pre += 1
        if tag in self.BLOCK:
            self.parts.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in self.SKIP and self.skip:
            self.skip -= 1
        if tag == "pre" and self.pre:
            self.pre -= 1
        if tag in self.BLOCK:
            self.parts.append("\n")
        if tag in {"td", "th"}:
            self.parts.append(" ")

    def handle_data(self, data: str) -> None:
        if self.skip:
            return
        self.parts.append(data if self.pre else re.sub(r"\s+", " ", data))

    def text(self) -> str:
        joined = "".join(self.parts)
        lines = [line.rstrip() for line in joined.split("\n")]
        return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip() + "\n"


def html_to_text(path: Path) -> str:
    parser = _HTMLText()
    parser.feed(read_text(path))
    parser.close()
    return parser.text()


def render_man(path: Path) -> str:
    """man(1) output as plain text: fixed width, no hyphenation/justification, overstrikes removed."""
    env = {"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8", "MANWIDTH": "80", "MAN_KEEP_FORMATTING": ""}
    try:
        out = subprocess.run(
            ["man", "--no-hyphenation", "--no-justification", "-l", str(path)],
            env=env,
            capture_output=True,
            timeout=60,
            check=False,
        ).stdout
    except subprocess.TimeoutExpired:
        return ""
    text = re.sub(r".\x08", "", out.decode("utf-8", errors="replace"))
    return _CONTROL.sub("", text)


# ---------------------------------------------------------------- sources


def files(root: Path, pattern: str, exclude: Callable[[Path], bool] | None = None) -> list[Path]:
    if not root.exists():
        return []
    found = [p for p in root.rglob(pattern) if p.is_file() and not p.is_symlink()]
    return sorted(p for p in found if not (exclude and exclude(p)))


def interleave_subdirs(root: Path, pattern: str) -> list[Path]:
    """Files of each first-level subdirectory taken in turn (e.g. one chapter in every language)."""
    groups = [files(d, pattern) for d in sorted(root.iterdir()) if d.is_dir()] if root.exists() else []
    out: list[Path] = []
    for i in range(max((len(g) for g in groups), default=0)):
        out.extend(g[i] for g in groups if i < len(g))
    return out


def _not_usr_doc(p: Path) -> bool:
    skip_dirs = {"python3.11", "postgresql-doc-15", "sqlite3", "git-doc", "debian-handbook", "html"}
    return any(part in skip_dirs for part in p.parts)


def usr_doc_files() -> list[Path]:
    root = Path("/usr/share/doc")
    names = re.compile(
        r"^(README|NEWS|changelog|ChangeLog|copyright|CHANGES|HISTORY|TODO|FAQ)|\.(md|txt|rst)(\.gz)?$"
    )
    return [
        p for p in files(root, "*", _not_usr_doc) if names.search(p.name) and not p.name.endswith(".html")
    ]


def man_files() -> list[Path]:
    out: list[Path] = []
    for section in sorted(Path("/usr/share/man").glob("man[1-9]")):
        for p in files(section, "*"):
            if p.stat().st_size > 200:  # tiny ones are `.so other-page` redirects
                out.append(p)
    return out


@dataclass
class Source:
    name: str
    weight: float
    list_files: Callable[[], list[Path]]
    to_text: Callable[[Path], str] = read_text
    parallel: bool = False  # rendering spawns processes: use a thread pool, order kept


SOURCES = [
    Source("cpython", 0.36, lambda: files(CPYTHON, "*.py")),
    Source("python-docs", 0.08, lambda: files(Path("/usr/share/doc/python3.11/html/_sources"), "*.txt")),
    Source(
        "handbook",
        0.14,
        lambda: interleave_subdirs(Path("/usr/share/doc/debian-handbook/html"), "*.html"),
        html_to_text,
    ),
    Source(
        "tech-html",
        0.14,
        lambda: (
            files(Path("/usr/share/doc/postgresql-doc-15/html"), "*.html")
            + files(Path("/usr/share/doc/sqlite3"), "*.html")
            + files(Path("/usr/share/debian-reference"), "*.en.html")
        ),
        html_to_text,
    ),
    Source("git-docs", 0.04, lambda: files(Path("/usr/share/doc/git-doc"), "*.txt")),
    Source("man", 0.12, man_files, render_man, parallel=True),
    Source("perl-pod", 0.05, lambda: files(Path("/usr/share/perl"), "*.pod")),
    Source("usr-doc", 0.07, usr_doc_files),
]


def split_document(text: str, max_chars: int, piece_chars: int) -> list[str]:
    """Split at blank lines (then lines, then hard) into pieces of about piece_chars."""
    if len(text) <= max_chars:
        return [text]
    pieces: list[str] = []
    current: list[str] = []
    size = 0
    for para in re.split(r"(?<=\n\n)", text):
        units = [para] if len(para) <= piece_chars else para.splitlines(keepends=True)
        for unit in units:
            while len(unit) > piece_chars:  # one enormous line
                pieces.append(unit[:piece_chars])
                unit = unit[piece_chars:]
            current.append(unit)
            size += len(unit)
            if size >= piece_chars:
                pieces.append("".join(current))
                current, size = [], 0
    if current:
        tail = "".join(current)
        if pieces and len(tail) < MIN_DOC_CHARS:
            pieces[-1] += tail
        else:
            pieces.append(tail)
    return pieces


@dataclass
class SourceState:
    source: Source
    paths: list[Path]
    emitted: int = 0
    docs: int = 0
    files_used: int = 0
    exhausted: bool = False
    buffer: list[str] = field(default_factory=list)
    texts: Iterator[tuple[Path, str]] | None = None


def iter_texts(src: Source, paths: list[Path], pool: ThreadPoolExecutor) -> Iterator[tuple[Path, str]]:
    if not src.parallel:
        for p in paths:
            yield p, src.to_text(p)
        return
    chunk = 64
    for i in range(0, len(paths), chunk):
        batch = paths[i : i + chunk]
        yield from zip(batch, pool.map(src.to_text, batch), strict=True)


def iter_documents(args: argparse.Namespace, listing: hashlib._Hash) -> Iterator[tuple[str, str]]:
    """(source, text) in the weighted interleaved order; restarts after all sources ran dry."""
    pool = ThreadPoolExecutor(max_workers=os.cpu_count() or 2)
    states = []
    for src in SOURCES:
        paths = src.list_files()
        if not paths:
            print(f"make_corpus: source {src.name} has no files (left out)", file=sys.stderr)
            continue
        states.append(SourceState(src, paths))
    if not states:
        raise SystemExit("make_corpus: no source files found")
    args._states = states
    passes = 0
    while True:
        passes += 1
        args._passes = passes
        for st in states:
            st.texts, st.exhausted, st.buffer = iter_texts(st.source, st.paths, pool), False, []
        while True:
            live = [s for s in states if not s.exhausted]
            if not live:
                break
            # the source furthest below its share goes next (deterministic tie-break: list order)
            st = min(live, key=lambda s: s.emitted / s.source.weight)
            while not st.buffer:
                nxt = next(st.texts, None) if st.texts else None
                if nxt is None:
                    st.exhausted = True
                    break
                path, text = nxt
                if passes == 1:
                    listing.update(f"{path}\0{path.stat().st_size}\n".encode())
                    st.files_used += 1
                text = text.strip("\n")
                if len(text) >= MIN_DOC_CHARS:
                    st.buffer = split_document(text + "\n", args.max_doc_chars, args.piece_chars)
            if st.buffer:
                doc = st.buffer.pop(0)
                st.emitted += len(doc.encode())
                st.docs += 1
                yield st.source.name, doc


def giant_texts(count: int, mib: int) -> Iterator[str]:
    """Giant documents: CPython sources concatenated (no splitting), `mib` MiB each."""
    paths = files(CPYTHON, "*.py")
    target = mib * 1024 * 1024
    i = 0
    for _ in range(count):
        parts: list[str] = []
        size = 0
        while size < target:
            t = read_text(paths[i % len(paths)])
            i += 1
            parts.append(t)
            size += len(t.encode())
        yield "".join(parts)[:target]


# ---------------------------------------------------------------- setup


def ensure_doc_packages(install: bool) -> list[str]:
    missing = [
        p
        for p in DOC_PACKAGES
        if subprocess.run(["dpkg", "-s", p], capture_output=True, check=False).returncode != 0
    ]
    if missing and install and os.geteuid() == 0 and shutil.which("apt-get"):
        print(f"make_corpus: apt-get install {' '.join(missing)}", file=sys.stderr)
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=False)
        subprocess.run(
            [
                "apt-get",
                "install",
                "-y",
                "-q",
                "--no-install-recommends",
                "-o",
                "DPkg::Lock::Timeout=600",
                *missing,
            ],
            env=env,
            check=False,
        )
    versions = []
    for p in DOC_PACKAGES:
        r = subprocess.run(
            ["dpkg-query", "-W", "-f=${Package}=${Version}", p], capture_output=True, check=False
        )
        versions.append(r.stdout.decode() if r.returncode == 0 else f"{p}=MISSING")
    return versions


# ---------------------------------------------------------------- main


def percentile(sorted_values: list[int], q: float) -> int:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))] if sorted_values else 0


def build(args: argparse.Namespace) -> dict[str, object]:
    out: Path = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    packages = ensure_doc_packages(not args.no_install)
    target = int(args.size_mb * 1_000_000)
    listing = hashlib.sha256()
    digest = hashlib.sha256()
    seen: set[bytes] = set()
    dup_docs = dup_bytes = 0
    sizes: list[int] = []
    written = text_bytes = 0
    giants = list(giant_texts(args.giant, args.giant_mb)) if args.giant else []
    tmp = out.with_name(f"{out.name}.tmp{os.getpid()}")  # two builds of one corpus never share a temp
    n = regular = 0
    with open(tmp, "wb") as f:

        def emit(source: str, text: str) -> None:
            nonlocal n, written, regular, text_bytes, dup_docs, dup_bytes
            data = json.dumps({"id": f"doc-{n:08d}", "text": text, "source": source}, ensure_ascii=False)
            raw = data.encode() + b"\n"
            f.write(raw)
            digest.update(raw)
            written += len(raw)
            regular += len(raw) if source != "giant" else 0
            encoded = text.encode()
            text_bytes += len(encoded)
            sizes.append(len(encoded))
            h = hashlib.blake2b(encoded, digest_size=16).digest()
            if h in seen:
                dup_docs += 1
                dup_bytes += len(encoded)
            seen.add(h)
            n += 1

        # giants are spread evenly over the expected document count (~8 KB per jsonl line)
        giant_every = max(1, target // 8000 // (len(giants) + 1))
        for source, text in iter_documents(args, listing):
            if giants and n and n % giant_every == 0:
                emit("giant", giants.pop(0))
            emit(source, text)
            if regular >= target:  # giant documents come on top of --size-mb
                break
        for text in giants:
            emit("giant", text)
    os.replace(tmp, out)
    states = args._states
    sizes.sort()
    stats: dict[str, object] = {
        "path": str(out),
        "documents": n,
        "file_bytes": written,
        "text_bytes": text_bytes,
        "sha256": digest.hexdigest(),
        "input_listing_sha256": listing.hexdigest(),
        "passes_over_sources": args._passes,
        "exact_duplicate_docs": dup_docs,
        "exact_duplicate_fraction_docs": round(dup_docs / max(n, 1), 4),
        "exact_duplicate_fraction_bytes": round(dup_bytes / max(text_bytes, 1), 4),
        "doc_bytes": {
            "median": percentile(sizes, 0.5),
            "p10": percentile(sizes, 0.1),
            "p90": percentile(sizes, 0.9),
            "p99": percentile(sizes, 0.99),
            "max": sizes[-1] if sizes else 0,
            "mean": round(text_bytes / max(n, 1)),
        },
        "giant_docs": args.giant,
        "giant_mib": args.giant_mb if args.giant else 0,
        "max_doc_chars": args.max_doc_chars,
        "piece_chars": args.piece_chars,
        "sources": {
            s.source.name: {
                "weight": s.source.weight,
                "docs": s.docs,
                "bytes": s.emitted,
                "files_read": s.files_used,
                "files_available": len(s.paths),
            }
            for s in states
        },
        "doc_packages": packages,
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
    }
    Path(str(out) + ".stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    return stats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--size-mb", type=float, default=120, help="stop once the jsonl reaches this many MB (10^6)"
    )
    ap.add_argument(
        "--out", type=Path, help="output .jsonl (default benchmarks/.work/corpus/corpus-<size>mb.jsonl)"
    )
    ap.add_argument("--max-doc-chars", type=int, default=65536, help="split documents longer than this")
    ap.add_argument(
        "--piece-chars", type=int, default=32768, help="target size of the pieces of a split document"
    )
    ap.add_argument("--giant", type=int, default=0, help="add this many giant documents (memory check)")
    ap.add_argument("--giant-mb", type=int, default=40, help="size of each giant document in MiB")
    ap.add_argument("--no-install", action="store_true", help="never apt-get install the doc packages")
    ap.add_argument("--force", action="store_true", help="rebuild even if OUT and its stats exist")
    args = ap.parse_args()
    if args.out is None:
        tag = f"{args.size_mb:g}mb" + (f"-giant{args.giant}x{args.giant_mb}" if args.giant else "")
        args.out = WORK / "corpus" / f"corpus-{tag}.jsonl"
    stats_path = Path(str(args.out) + ".stats.json")
    if args.out.exists() and stats_path.exists() and not args.force:
        print(stats_path.read_text(), end="")
        print(f"make_corpus: {args.out} exists (--force to rebuild)", file=sys.stderr)
        return
    stats = build(args)
    print(json.dumps(stats, indent=2))


if __name__ == "__main__":
    main()
