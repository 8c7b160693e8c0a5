"""Defaults for Slurm submissions: the `[slurm]` table of storekit.toml (the site's) and of a
pipeline TOML (that pipeline's).

    [slurm]
    partition = "cpu"
    account = "proj42"
    time = "4:00:00"
    mem_per_cpu = "2G"
    extra = ["--constraint=avx2"]

A `--slurm-*` flag given on the command line wins over the pipeline's table, which wins over the
site's; those win over Slurm's own defaults. Keys are checked when read (exit 2 naming the file and
key).
"""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path
from typing import Any

from storekit.errors import ConfigError
from storekit.slurm.script import SlurmOptions

# key -> (SlurmOptions field, type)
KEYS: dict[str, tuple[str, type]] = {
    "partition": ("partition", str),
    "time": ("time", str),
    "cpus": ("cpus_per_task", int),
    "mem": ("mem", str),
    "mem_per_cpu": ("mem_per_cpu", str),
    "account": ("account", str),
    "qos": ("qos", str),
    "extra": ("extra", list),
    "container": ("container", str),
    "setup": ("setup", str),
    "max_concurrent": ("max_concurrent", int),
    "tasks_per_element": ("tasks_per_element", int),
    "log_dir": ("log_dir", str),
    "requeue": ("requeue", bool),
}


def parse_slurm_table(body: Any, source: str) -> dict[str, Any]:
    """The `[slurm]` table as SlurmOptions field values."""
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise ConfigError(source, "slurm", 'expected a table, e.g. [slurm] with partition = "cpu"')
    out: dict[str, Any] = {}
    for key, value in body.items():
        if key not in KEYS:
            raise ConfigError(
                source, f"slurm.{key}", f"unknown key; expected one of {', '.join(sorted(KEYS))}"
            )
        name, kind = KEYS[key]
        ok = isinstance(value, kind) and not (kind is int and isinstance(value, bool))
        if kind is list:
            ok = ok and all(isinstance(v, str) for v in value)
            value = tuple(value) if ok else value
        if not ok:
            raise ConfigError(
                source, f"slurm.{key}", f"expected {'a list of strings' if kind is list else kind.__name__}"
            )
        out[name] = value
    try:
        SlurmOptions(**out).check()
    except Exception as exc:  # the flag's wording, named where it came from
        raise ConfigError(source, "slurm", getattr(exc, "message", str(exc))) from None
    return out


def with_site_defaults(options: SlurmOptions, defaults: dict[str, Any]) -> SlurmOptions:
    """`options` with each field still at its default taken from the site's table."""
    blank = SlurmOptions()
    given = {f.name: defaults[f.name] for f in fields(SlurmOptions) if f.name in defaults}
    keep = {k: v for k, v in given.items() if getattr(options, k) == getattr(blank, k)}
    return replace(options, **keep)


def pipeline_slurm_table(path: Path) -> dict[str, Any]:
    """The `[slurm]` table of a pipeline TOML, checked like the site's (exit 2 naming file and key)."""
    from storekit.tomlkeys import parse_toml

    source = str(path)
    try:
        raw = parse_toml(path.read_bytes(), source)
    except OSError:
        return {}
    return parse_slurm_table(raw.get("slurm"), source)
