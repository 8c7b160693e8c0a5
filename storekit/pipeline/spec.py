"""`PipelineSpec`: a dataset pipeline (`pipelines/*.toml`) merged with command-line overrides.

Validation is eager: every problem names the file (or `<command line>`) and the key (or flag).
Relative input and tokenizer paths are taken relative to the current directory, as flags are.

    [dataset]   name, kind (text|code|multimodal), version
    [input]     paths (list), format, text_key, keep_fields
    [tokenizer] path, eos, bos, eos_token, bos_token, engine (auto|hf|tiktoken),
                special_tokens (match|text: what a literal special-token string in a document becomes)
    [filters]   dedup, min_chars, max_chars, max_doc_bytes
    [split]     holdout (fraction of documents, chosen by document hash)
    [output]    tier, path, shard_size | shard_tokens
    [run]       workers, on_error (skip|fail), work_dir, task_size
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from storekit.config import URL_CREDENTIALS_HINT, mask_url, url_has_credentials
from storekit.errors import ConfigError
from storekit.options import Option, defaults
from storekit.pipeline.options import PIPELINE_OPTIONS
from storekit.readers import Invalid
from storekit.tomlkeys import parse_toml

CLI_SOURCE = "<command line>"
# the dataset and version levels of the llm-cluster layout (datasets/<kind>/<name>/<version>)
_LAYOUT_NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")
_LAYOUT_VERSION = re.compile(r"v[0-9]+([._][0-9]+)*|[0-9]{4}-[0-9]{2}-[0-9]{2}")
# field -> its option (storekit/pipeline/options.py): flag, file key, reader and default
OPTIONS: dict[str, Option] = {o.name: o for o in PIPELINE_OPTIONS}
DEFAULTS = defaults(PIPELINE_OPTIONS)


@dataclass(frozen=True, kw_only=True)
class PipelineSpec:
    """A pipeline's options, every field given (its default: storekit/pipeline/options.py)."""

    source: str  # the pipeline file, or "<command line>"
    name: str
    kind: str
    version: str
    inputs: tuple[str, ...]
    input_format: str
    text_key: str
    keep_fields: tuple[str, ...]
    tokenizer: str
    eos: bool
    bos: bool
    eos_token: str | None
    bos_token: str | None
    tokenizer_engine: str  # not part of the plan: both engines give the same shards
    special_tokens: str
    dedup: bool
    min_chars: int | None
    max_chars: int | None
    max_doc_bytes: int
    holdout: float
    tier: str | None
    output: str | None  # tier-relative path, absolute path or URL; default below
    shard_bytes: int | None
    shard_tokens: int | None
    workers: int | None  # None: all cores. Not part of the plan: output never depends on it
    on_error: str
    work_dir: str | None
    task_bytes: int | None  # None: chosen from the corpus size
    allow_empty: bool  # commit a dataset that kept no document (else: nothing committed, exit 1)

    @property
    def default_output(self) -> str:
        return posixpath.join("datasets", self.kind, self.name, self.version)

    @property
    def output_location(self) -> str:
        return self.output or self.default_output

    def plan_options(self) -> dict[str, Any]:
        """The options the shards depend on (recorded in the manifest and in the plan id)."""
        return {
            "format": self.input_format,
            "text_key": self.text_key,
            "keep_fields": list(self.keep_fields),
            "eos": self.eos,
            "bos": self.bos,
            "special_tokens": self.special_tokens,
            "dedup": self.dedup,
            "min_chars": self.min_chars,
            "max_chars": self.max_chars,
            "max_doc_bytes": self.max_doc_bytes,
            "holdout": self.holdout,
            "shard_bytes": self.shard_bytes,
            "shard_tokens": self.shard_tokens,
            "on_error": self.on_error,
            # only when set: every plan id made before this option existed stays the same
            **({"allow_empty": True} if self.allow_empty else {}),
        }


def where(spec_source: str, field_name: str) -> tuple[str, str]:
    option = OPTIONS[field_name]
    return (spec_source, option.flag) if spec_source == CLI_SOURCE else (spec_source, str(option.key))


def load_pipeline_file(path: Path) -> dict[str, Any]:
    """Read a pipeline TOML into a flat {field: value} mapping (validated later)."""
    source = str(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ConfigError(source, None, "pipeline file does not exist") from None
    raw = parse_toml(data, source)
    by_key = {tuple(str(o.key).split(".")): name for name, o in OPTIONS.items()}
    tables = {table for table, _ in by_key}
    flat: dict[str, Any] = {}
    for table, body in raw.items():
        if table == "slurm":  # the pipeline's Slurm defaults: read by storekit/slurmopts.py
            continue
        if table not in tables:
            raise ConfigError(source, table, f"unknown table; expected one of {', '.join(sorted(tables))}")
        if not isinstance(body, dict):
            raise ConfigError(source, table, "expected a table, e.g. [input]")
        for key, value in body.items():
            name = by_key.get((table, key))
            if name is None:
                known = sorted(k for t, k in by_key if t == table)
                raise ConfigError(
                    source, f"{table}.{key}", f"unknown key; expected one of {', '.join(known)}"
                )
            flat[name] = value
    flat.setdefault("name", path.stem)
    return flat


def build_spec(source: str, values: Mapping[str, Any], overrides: Mapping[str, Any]) -> PipelineSpec:
    """Merge file values with command-line overrides (None = not given) and validate everything."""
    merged: dict[str, Any] = dict(values)
    origin = dict.fromkeys(values, source)
    for name, value in overrides.items():
        if value is not None:
            merged[name] = value
            origin[name] = CLI_SOURCE
    _resolve_shard_target(source, values, overrides, merged)
    checked: dict[str, Any] = {}
    for name, value in merged.items():
        checked[name] = value if value is None else _check(name, value, origin.get(name, source))
    for required in ("inputs", "tokenizer", "name"):
        if not checked.get(required):
            file, key = where(origin.get(required, source), required)
            raise ConfigError(file, key, "is required", hint=_REQUIRED_HINTS[required])
    spec = PipelineSpec(source=source, **(DEFAULTS | checked))
    _check_relations(spec, origin)
    return spec


def _resolve_shard_target(
    source: str, values: Mapping[str, Any], overrides: Mapping[str, Any], merged: dict[str, Any]
) -> None:
    """Shards are sized by bytes or by tokens; a flag for one overrides the file's choice of the other."""
    for layer, origin in ((overrides, CLI_SOURCE), (values, source)):
        if layer.get("shard_bytes") is not None and layer.get("shard_tokens") is not None:
            file, key = where(origin, "shard_tokens")
            raise ConfigError(file, key, "give either a shard size in bytes or in tokens, not both")
    if overrides.get("shard_bytes") is not None:
        merged["shard_tokens"] = None
    elif merged.get("shard_tokens") is not None:
        merged["shard_bytes"] = None


_REQUIRED_HINTS = {
    "inputs": "give --input PATH|GLOB|s3://... (repeatable) or [input] paths in the pipeline file",
    "tokenizer": "give --tokenizer PATH/tokenizer.json, a tokenizer folder or a cached hub name",
    "name": "give --name NAME",
}


def _check(name: str, value: Any, origin: str) -> Any:
    """The value of one pipeline option, read with its option's reader; errors name the file and key
    (or the flag)."""
    if name not in OPTIONS:
        raise ConfigError(origin, name, "unknown option")
    file, key = where(origin, name)
    for text in [value] if isinstance(value, str) else value if isinstance(value, list | tuple) else ():
        if isinstance(text, str) and url_has_credentials(text):
            raise ConfigError(
                file, key, f"credentials in a URL are refused ({mask_url(text)})", hint=URL_CREDENTIALS_HINT
            )
    read = OPTIONS[name].read
    assert read is not None  # every pipeline option has its reader
    try:
        return read(value)
    except Invalid as exc:
        raise ConfigError(file, key, str(exc)) from None


def _check_relations(spec: PipelineSpec, origin: Mapping[str, str]) -> None:
    if spec.output is None:  # datasets/<kind>/<name>/<version>: names the layout check accepts
        for field_name, rule, wanted in (
            (
                "name",
                _LAYOUT_NAME,
                "lowercase letters, digits, '.', '_' and '-', starting with a letter or digit",
            ),
            ("version", _LAYOUT_VERSION, "v1, v2, v1.1, ... or a date such as 2026-01-31"),
        ):
            value = getattr(spec, field_name)
            if not rule.fullmatch(value):
                file, key = where(origin.get(field_name, spec.source), field_name)
                raise ConfigError(
                    file, key, f"{value!r} would fail `storekit layout check` (misnamed); expected {wanted}"
                )
    if spec.min_chars is not None and spec.max_chars is not None and spec.min_chars > spec.max_chars:
        file, key = where(origin.get("min_chars", spec.source), "min_chars")
        raise ConfigError(file, key, f"min_chars {spec.min_chars} is larger than max_chars {spec.max_chars}")
    if spec.text_key in spec.keep_fields:
        file, key = where(origin.get("keep_fields", spec.source), "keep_fields")
        raise ConfigError(file, key, f"{spec.text_key!r} is the text field; it is already in the shards")
