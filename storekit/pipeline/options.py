"""The options of a dataset pipeline, each declared once (storekit.options): its flag on
`storekit prepare dataset`, its key in a pipeline file, its type, default, help and reader.

`storekit/cli/prepare.py` builds the command's parameters from `PIPELINE_OPTIONS`;
`storekit/pipeline/spec.py` reads a pipeline file's keys and the command line's overrides with each
option's reader and fills the PipelineSpec field of the same name, the default where neither gives it.
"""

from __future__ import annotations

import re
from dataclasses import replace
from functools import partial
from typing import Any

from storekit.options import TIER, WORKERS_HELP, Option
from storekit.readers import (
    Invalid,
    read_bool,
    read_choice,
    read_fraction,
    read_int,
    read_size,
    read_str,
    read_str_list,
)
from storekit.units import SIZE_HELP

KINDS = ("text", "code", "multimodal")
ON_ERROR = ("skip", "fail")
ENGINES = ("auto", "hf", "tiktoken")
SPECIAL_TOKENS = ("match", "text")  # match: as `tokenizers` does (the special id); text: plain text
DEFAULT_SHARD_BYTES = 1 << 30
DEFAULT_MAX_DOC_BYTES = 64 << 20
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_BARE_VERSION = re.compile(r"[0-9]+([._][0-9]+)*")


def _read_inputs(value: Any) -> tuple[str, ...]:
    try:
        return read_str_list(value, nonempty_items=True)
    except Invalid:
        raise Invalid("expected a list of paths, globs, directories or s3:// URLs") from None


def _read_keep_fields(value: Any) -> tuple[str, ...]:
    try:
        return tuple(i.strip() for i in read_str_list(value, split_commas=True) if i.strip())
    except Invalid:
        raise Invalid("expected a list of field names (or a,b,c on the command line)") from None


def _read_name(value: Any, what: str = "name") -> str:
    text = read_str(value)
    if not _NAME_RE.match(text):
        raise Invalid(f"{text!r} is not a valid {what}: use letters, digits, '.', '_' and '-'")
    return text


def _read_version(value: Any) -> str:
    text = _read_name(value, "version")
    # `--version 2` is v2: the layout names versions v1, v2, ... or dates
    return f"v{text}" if _BARE_VERSION.fullmatch(text) else text


def _choice(choices: tuple[str, ...]) -> partial[str]:
    return partial(read_choice, choices=choices)


def _read_format(value: Any) -> str:
    """--format: a discovery mode or a format's name (the formats load when a value is read, not
    when the command line is built)."""
    from storekit.pipeline import formats

    return read_choice(value, (*formats.DISCOVERY_MODES, *formats.FORMATS))


def _pipeline(name: str, key: str, **declared: Any) -> Option:
    """A pipeline option (read as a string unless it says): not given on the command line (None)
    leaves the file's value."""
    declared.setdefault("read", read_str)
    return Option(name=name, field=name, key=key, cli_default=None, **declared)


ALLOW_EMPTY = Option(
    name="allow_empty",
    field="allow_empty",
    key="output.allow_empty",
    flags=("--allow-empty",),
    type=bool,
    default=False,  # commit a dataset that kept no document (else: nothing committed, exit 1)
    help="Commit the dataset even when no document was kept (default: nothing is committed, exit 1).",
    read=read_bool,
)
# in the order `prepare dataset --help` lists them
PIPELINE_OPTIONS: tuple[Option, ...] = (
    _pipeline(
        "inputs",
        "input.paths",
        flags=("--input", "-i"),
        type=list[str],
        metavar="GLOB|DIR|FILE|s3://...",
        help="Input files (repeatable). Inside a directory or glob, symbolic links are followed only "
        "while they stay inside it; a link out is refused.",
        read=_read_inputs,
    ),
    _pipeline(
        "input_format",
        "input.format",
        flags=("--format",),
        default="auto",
        metavar="FORMAT",
        help="auto, jsonl, parquet, arrow, hf-disk or text. auto: by file extension "
        "(.jsonl/.json/.ndjson[.gz|.zst], .parquet, .arrow/.feather, a save_to_disk folder; "
        "anything else is a text file). Default: auto.",
        read=_read_format,
    ),
    _pipeline(
        "text_key",
        "input.text_key",
        flags=("--text-key",),
        default="text",
        help="Field/column holding the text. Default: text.",
        read=partial(read_str, nonempty=True),
    ),
    _pipeline(
        "keep_fields",
        "input.keep_fields",
        flags=("--keep-fields",),
        default=(),
        metavar="a,b",
        help="Fields copied to a per-shard metadata sidecar "
        "(<shard>.meta.jsonl, one line per document). For text files: path.",
        read=_read_keep_fields,
    ),
    _pipeline(
        "tokenizer",
        "tokenizer.path",
        flags=("--tokenizer",),
        metavar="PATH|NAME",
        help="tokenizer.json, a Hugging Face tokenizer folder, a "
        "hub name already in the local HF cache (never downloaded), or bundled:NAME.",
    ),
    _pipeline(
        "eos",
        "tokenizer.eos",
        flags=("--eos/--no-eos",),
        type=bool,
        default=True,
        help="Append EOS to each document. Default: on.",
        read=read_bool,
    ),
    _pipeline(
        "bos",
        "tokenizer.bos",
        flags=("--bos/--no-bos",),
        type=bool,
        default=False,
        help="Prepend BOS to each document. Default: off.",
        read=read_bool,
    ),
    _pipeline(
        "eos_token",
        "tokenizer.eos_token",
        flags=("--eos-token",),
        help="The EOS token, when it cannot be guessed.",
    ),
    _pipeline(
        "bos_token",
        "tokenizer.bos_token",
        flags=("--bos-token",),
        help="The BOS token, when it cannot be guessed.",
    ),
    _pipeline(
        "tokenizer_engine",
        "tokenizer.engine",
        flags=("--tokenizer-engine",),
        default="auto",  # not part of the plan: both engines give the same shards
        metavar="auto|hf|tiktoken",
        help="auto (default): the compiled fast BPE engine where it gives the same ids as "
        "`tokenizers` (checked on a sample of the input), else `tokenizers`; hf: always "
        "`tokenizers`; tiktoken: the fast engine or exit 2.",
        read=_choice(ENGINES),
    ),
    _pipeline(
        "special_tokens",
        "tokenizer.special_tokens",
        flags=("--special-tokens",),
        default="match",
        metavar="match|text",
        help="A special token's text inside a document (e.g. a literal <|endoftext|>): match "
        "(default, as `tokenizers` does) makes it the special token; text encodes it as plain "
        "text. Occurrences are counted in the stats.",
        read=_choice(SPECIAL_TOKENS),
    ),
    _pipeline(
        "name",
        "dataset.name",
        flags=("--name",),
        help="Dataset name. Default: the pipeline file's name.",
        read=_read_name,
    ),
    _pipeline(
        "kind",
        "dataset.kind",
        flags=("--kind",),
        default="text",
        metavar="text|code|multimodal",
        help="Dataset kind. Default: text.",
        read=_choice(KINDS),
    ),
    _pipeline(
        "version",
        "dataset.version",
        flags=("--version",),
        default="v1",
        help="Dataset version. Default: v1.",
        read=_read_version,
    ),
    replace(TIER, field="tier", key="output.tier", read=read_str),
    _pipeline(
        "output",
        "output.path",
        flags=("--output", "-o"),
        metavar="REL|ABS-PATH|URL",
        help="Where the dataset goes. Default: datasets/<kind>/<name>/<version> on the tier.",
    ),
    _pipeline(
        "shard_bytes",
        "output.shard_size",
        flags=("--shard-size",),
        default=DEFAULT_SHARD_BYTES,
        metavar="SIZE",
        help=f"Target .bin size per shard, e.g. 1G (default: 1GiB). {SIZE_HELP}",
        read=partial(read_size, low=1),
    ),
    _pipeline(
        "shard_tokens",
        "output.shard_tokens",
        flags=("--shard-tokens",),
        type=int,
        metavar="N",
        help="Target tokens per shard (instead of --shard-size).",
        read=partial(read_int, low=1),
    ),
    _pipeline(
        "dedup",
        "filters.dedup",
        flags=("--dedup/--no-dedup",),
        type=bool,
        default=True,
        help="Drop exact duplicates (xxh3-128 of the stripped text; first occurrence wins). Default: on.",
        read=read_bool,
    ),
    _pipeline(
        "min_chars",
        "filters.min_chars",
        flags=("--min-chars",),
        type=int,
        metavar="N",
        help="Drop documents shorter than N characters.",
        read=partial(read_int, low=0),
    ),
    _pipeline(
        "max_chars",
        "filters.max_chars",
        flags=("--max-chars",),
        type=int,
        metavar="N",
        help="Drop documents longer than N characters.",
        read=partial(read_int, low=0),
    ),
    _pipeline(
        "max_doc_bytes",
        "filters.max_doc_bytes",
        flags=("--max-doc-bytes",),
        default=DEFAULT_MAX_DOC_BYTES,
        metavar="SIZE",
        help=f"Refuse single documents above this size (bad input). Default: 64MiB. {SIZE_HELP}",
        read=partial(read_size, low=1),
    ),
    _pipeline(
        "holdout",
        "split.holdout",
        flags=("--holdout",),
        type=float,
        default=0.0,
        metavar="FRACTION",
        help="Fraction of documents for a held-out split, chosen by document hash (deterministic).",
        read=read_fraction,
    ),
    _pipeline(
        "workers",
        "run.workers",
        flags=("--workers", "-w"),
        type=int,  # None: all cores. Not part of the plan: output never depends on it
        metavar="N",
        help=(
            f"{WORKERS_HELP} on this machine, one task and one core each (a forked process each "
            "with the fast engine, else threads of a few processes). Default: every core this "
            "process may run on. "
            "--executor slurm: each element runs --slurm-cpus workers."
        ),
        read=partial(read_int, low=1),
    ),
    _pipeline(
        "on_error",
        "run.on_error",
        flags=("--on-error",),
        default="skip",
        metavar="skip|fail",
        help="Bad records: skip and count them (default), or stop at the first, naming file and line.",
        read=_choice(ON_ERROR),
    ),
    _pipeline(
        "work_dir",
        "run.work_dir",
        flags=("--work-dir",),
        metavar="DIR",
        help="POSIX directory for task parts and completion records. Default: scratch/ of the output tier.",
    ),
    _pipeline(
        "task_bytes",
        "run.task_size",
        flags=("--task-size",),
        metavar="SIZE",  # None: chosen from the corpus size
        help=f"Input bytes per task. Default: chosen from the corpus size (1-64 MiB). {SIZE_HELP}",
        read=partial(read_size, low=1),
    ),
    ALLOW_EMPTY,
)
