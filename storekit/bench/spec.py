"""BenchSpec: what `storekit bench io` measures, validated eagerly, plus model presets.

Sizes follow fio and IOR: `k`, `M`, `G`, `T` (and `KiB`, `MiB`...) are binary; write `KB`, `MB`, `GB`
for decimal. Every rule broken here is a usage error (exit 2) that names the option.

Checkpoint sizes come from a model description. A preset gives the parameter count; the bytes per
parameter default to bf16 weights (2) and the optimizer state to mixed-precision Adam (12: an fp32
master copy plus the two fp32 moments), the usual layout of Megatron/DeepSpeed/FSDP checkpoints.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any, TypeVar

from storekit.bench.options import IO_OPTIONS, PATTERNS
from storekit.errors import UsageError
from storekit.options import defaults
from storekit.readers import Invalid, read_number, read_size

T = TypeVar("T")
DIRECT_ALIGN = 4096  # O_DIRECT offsets, lengths and buffers are multiples of this
# Parameter counts of common open models (Llama family sizes); `--model 3.2b` works too.
MODEL_PRESETS: dict[str, float] = {
    "1b": 1.24e9,
    "3b": 3.21e9,
    "7b": 6.74e9,
    "8b": 8.03e9,
    "13b": 13.0e9,
    "34b": 34.4e9,
    "70b": 70.6e9,
    "405b": 405.9e9,
}
# Sustained training throughput of one GPU, used when --gpu-tokens-per-s is not given: about an H100
# at 40% MFU on bf16 (400 TFLOP/s effective), with 6 FLOPs per parameter per token.
EFFECTIVE_GPU_FLOPS = 400e12
# The defaults of `storekit bench io` (storekit/bench/options.py): small enough to finish in well
# under a minute on one disk.
DEFAULTS: dict[str, Any] = defaults(IO_OPTIONS)
_MODEL_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([mMbB])\s*$")


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    name: str
    params: float
    bytes_per_param: float = 2.0
    optimizer_bytes_per_param: float = 12.0

    @property
    def checkpoint_bytes(self) -> int:
        return int(self.params * (self.bytes_per_param + self.optimizer_bytes_per_param))

    def default_gpu_tokens_per_s(self) -> float:
        return EFFECTIVE_GPU_FLOPS / (6.0 * self.params)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "params": self.params,
            "bytes_per_param": self.bytes_per_param,
            "optimizer_bytes_per_param": self.optimizer_bytes_per_param,
            "checkpoint_bytes": self.checkpoint_bytes,
        }


@dataclass(frozen=True, kw_only=True)
class TargetSpec:
    """Where to benchmark: a POSIX directory or an S3 bucket/prefix. Credentials are never shown."""

    kind: str  # "posix" | "s3"
    root: str  # posix: absolute directory; s3: "bucket" or "bucket/prefix"
    endpoint_url: str | None = None
    tier: str | None = None
    s3_options: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def display(self) -> str:
        return self.root if self.kind == "posix" else f"s3://{self.root}"

    @property
    def bucket(self) -> str:
        return self.root.split("/", 1)[0]

    @property
    def prefix(self) -> str:
        return self.root.split("/", 1)[1] if "/" in self.root else ""


@dataclass(frozen=True, kw_only=True)
class BenchSpec:
    patterns: tuple[str, ...]
    target: TargetSpec
    size: int  # bytes per phase: shard data set, checkpoint sample, token data set
    file_size: int
    workers: tuple[int, ...]
    block_sizes: tuple[int, ...]
    queue_depths: tuple[int, ...]
    duration: float  # seconds per time-based point (tokens)
    repeat: int
    direct: bool
    drop_caches: bool
    model: ModelSpec
    ranks: int
    full_checkpoint: bool
    seq_len: int
    token_bytes: int
    files: int  # meta: small files per worker
    small_file_size: int
    seed: int
    gpu_tokens_per_s: float
    gpus: int
    target_checkpoint_s: float
    nodes: int = 1  # > 1: --workers per node, --ranks spread over the nodes (bench/cluster)

    @property
    def window_bytes(self) -> int:
        return self.seq_len * self.token_bytes

    @property
    def shard_files(self) -> int:
        return self.size // self.file_size

    def checkpoint_rank_bytes(self, block_size: int) -> int:
        """Bytes each rank writes: its full share, or its share of the --size sample, in whole blocks."""
        if self.full_checkpoint:
            share = -(-self.model.checkpoint_bytes // self.ranks)
            return -(-share // block_size) * block_size
        return (self.size // self.ranks) // block_size * block_size

    def parameters(self) -> dict[str, Any]:
        """Everything that shapes the numbers, JSON-ready and free of credentials."""
        # "nodes" only when > 1: a one-node run keeps the config hash it always had
        return ({"nodes": self.nodes} if self.nodes > 1 else {}) | {
            "patterns": list(self.patterns),
            "target": self.target.display,
            "target_kind": self.target.kind,
            "endpoint_url": self.target.endpoint_url,
            "size": self.size,
            "file_size": self.file_size,
            "workers": list(self.workers),
            "block_sizes": list(self.block_sizes),
            "queue_depths": list(self.queue_depths),
            "duration_s": self.duration,
            "repeat": self.repeat,
            "direct": self.direct,
            "drop_caches": self.drop_caches,
            "model": self.model.to_dict(),
            "ranks": self.ranks,
            "full_checkpoint": self.full_checkpoint,
            "seq_len": self.seq_len,
            "token_bytes": self.token_bytes,
            "files": self.files,
            "small_file_size": self.small_file_size,
            "seed": self.seed,
            "gpu_tokens_per_s": self.gpu_tokens_per_s,
            "gpus": self.gpus,
            "target_checkpoint_s": self.target_checkpoint_s,
        }

    def config_hash(self) -> str:
        """Same parameters, same hash: lets results from different runs and hosts be grouped."""
        canonical = json.dumps(self.parameters(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def read_option(option: str, read: Callable[[Any], T], value: Any) -> T:
    """An option's value through its reader (storekit.readers); a bad one names the option."""
    try:
        return read(value)
    except Invalid as exc:
        raise UsageError(f"{option}: {exc}") from None


def parse_size(text: str, option: str) -> int:
    """A size of an option: storekit's one size grammar, as fio reads it."""
    return read_option(option, read_size, text)


def parse_model(text: str, *, bytes_per_param: float, optimizer_bytes_per_param: float) -> ModelSpec:
    key = text.strip().lower()
    if key in MODEL_PRESETS:
        params = MODEL_PRESETS[key]
    else:
        match = _MODEL_RE.match(key)
        if not match:
            known = ", ".join(MODEL_PRESETS)
            raise UsageError(f"--model {text!r}: expected a preset ({known}) or a size such as 3.2b or 350m")
        params = float(match.group(1)) * (1e9 if match.group(2).lower() == "b" else 1e6)
    if params <= 0:
        raise UsageError(f"--model {text!r}: the parameter count must be positive")
    if bytes_per_param <= 0 or optimizer_bytes_per_param < 0:
        raise UsageError("--bytes-per-param must be > 0 and --optimizer-bytes-per-param >= 0")
    return ModelSpec(
        name=key,
        params=params,
        bytes_per_param=bytes_per_param,
        optimizer_bytes_per_param=optimizer_bytes_per_param,
    )


def validate(spec: BenchSpec) -> BenchSpec:
    """Reject nonsensical combinations before anything touches the target."""
    for pattern in spec.patterns:
        if pattern not in PATTERNS:
            raise UsageError(f"--pattern {pattern!r}: expected one of {', '.join(PATTERNS)} or all")
    if spec.size <= 0 or spec.file_size <= 0:
        raise UsageError("--size and --file-size must be greater than 0")
    for option in IO_OPTIONS:  # each option's range, as its declaration gives it
        if option.bounds and option.field:
            low, high = option.bounds
            value = getattr(spec, option.field)
            for item in value if isinstance(value, tuple) else (value,):
                read_option(option.flag, partial(read_number, low=low, high=high), item)
    if spec.gpu_tokens_per_s <= 0 or spec.target_checkpoint_s <= 0:
        raise UsageError("--gpu-tokens-per-s and --target-checkpoint-s must be greater than 0")
    if spec.nodes > 1 and "checkpoint" in spec.patterns and spec.ranks % spec.nodes:
        raise UsageError(
            f"--ranks {spec.ranks} cannot be spread evenly over --nodes {spec.nodes}",
            hint="give a multiple of --nodes (ranks are the world size, workers are per node)",
        )
    direct_posix = spec.direct and spec.target.kind == "posix"
    for bs in spec.block_sizes:
        if bs <= 0:
            raise UsageError("--block-size must be greater than 0")
        if direct_posix and bs % DIRECT_ALIGN:
            raise UsageError(
                f"--block-size {bs} is not a multiple of {DIRECT_ALIGN}, which O_DIRECT requires",
                hint="use e.g. 4k, 64k, 1M, or pass --no-direct for buffered I/O",
            )
        if spec.file_size < bs:
            raise UsageError(f"--file-size {spec.file_size} is smaller than --block-size {bs}")
        if spec.file_size % bs:
            raise UsageError(f"--file-size {spec.file_size} is not a multiple of --block-size {bs}")
    data_patterns = {"shards", "tokens"} & set(spec.patterns)
    if data_patterns:
        if spec.size < spec.file_size or spec.size % spec.file_size:
            raise UsageError(
                f"--size {spec.size} must be a whole number of files of --file-size {spec.file_size}"
            )
        if "shards" in spec.patterns and spec.shard_files < max(spec.workers) * spec.nodes:
            raise UsageError(
                f"--size holds {spec.shard_files} files of --file-size; cannot give each of "
                f"{max(spec.workers) * spec.nodes} workers a file",
                hint="raise --size or lower --file-size",
            )
    if "tokens" in spec.patterns and spec.window_bytes > spec.file_size:
        raise UsageError(
            f"a training window (--seq-len x --token-bytes = {spec.window_bytes} bytes) "
            f"does not fit in --file-size {spec.file_size}"
        )
    if "checkpoint" in spec.patterns:
        for bs in spec.block_sizes:
            if spec.checkpoint_rank_bytes(bs) < bs:
                raise UsageError(
                    f"--size {spec.size} split over {spec.ranks} ranks is less than one block of {bs}",
                    hint="raise --size or lower --ranks/--block-size",
                )
    return spec


def build_spec(target: TargetSpec, **options: Any) -> BenchSpec:
    """A validated spec from option values as typed on the command line (missing ones: DEFAULTS),
    each read with its option's reader (storekit/bench/options.py)."""
    unknown = set(options) - set(DEFAULTS)
    if unknown:
        raise TypeError(f"unknown bench options: {', '.join(sorted(unknown))}")
    given = {**DEFAULTS, **options}
    auto_size = given["size"] is None  # not given: the default, raised to one --file-size file per worker
    if auto_size:
        given["size"] = DEFAULTS["size"]
    values = {
        opt.name: read_option(opt.flag, opt.read, given[opt.name])
        if opt.read is not None and given[opt.name] is not None
        else given[opt.name]
        for opt in IO_OPTIONS
        if opt.field
    }
    model = parse_model(
        str(values["model"]),
        bytes_per_param=values["bytes_per_param"],
        optimizer_bytes_per_param=values["optimizer_bytes_per_param"],
    )
    # each option's value into the field it names; the model's three into the ModelSpec above
    fields = {opt.field: values[opt.name] for opt in IO_OPTIONS if opt.field and opt.field != "model"}
    fields["gpu_tokens_per_s"] = float(values["gpu_tokens_per_s"] or model.default_gpu_tokens_per_s())
    fields["gpus"] = int(values["gpus"] or values["ranks"])
    spec = BenchSpec(target=target, model=model, **fields)
    needed = max(spec.workers) * spec.nodes * spec.file_size
    if auto_size and "shards" in spec.patterns and spec.file_size > 0 and spec.size < needed:
        spec = replace(spec, size=needed)  # `--workers 1,4,16` runs as typed, as fio's numjobs would
    return validate(spec)
