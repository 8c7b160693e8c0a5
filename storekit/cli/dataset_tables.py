"""The human summary of a dataset manifest (`dataset info`, the end of `prepare dataset`): the domain in
storekit.pipeline.summary returns the data; drawing it is the CLI's."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from storekit.units import format_bytes as format_size

if TYPE_CHECKING:
    from rich.console import Console

SAMPLE_CORPUS = "bundled:cpython-stdlib-sample"


def render_manifest_summary(console: Console, summary: dict[str, Any]) -> None:
    ds = summary.get("dataset") or {}
    tok = summary.get("tokenizer") or {}
    stats = summary.get("stats") or {}
    from rich.table import Table

    table = Table("", "", show_header=False, box=None)
    table.add_row("dataset", f"{ds.get('kind')}/{ds.get('name')}/{ds.get('version')}")
    table.add_row("created", f"{summary.get('created_at')} by storekit {summary.get('storekit_version')}")
    table.add_row(
        "tokenizer",
        f"{tok.get('name')} (vocab {tok.get('vocab_size')}, {tok.get('dtype')}, "
        f"xxh3-128 {str(tok.get('xxh3_128'))[:16]}...)",
    )
    engine = tok.get("engine") or {}
    if engine:
        table.add_row("engine", f"{engine.get('name')}: {engine.get('reason')}")
    for split, s in (summary.get("splits") or {}).items():
        table.add_row(
            split, f"{s['documents']:,} documents, {s['tokens']:,} tokens in {s['shards']} shard(s)"
        )
    table.add_row(
        "size",
        f"{format_size(summary.get('bytes', 0))} in {summary.get('files')} files "
        f"from {summary.get('sources')} source file(s)",
    )
    if stats:
        table.add_row(
            "documents",
            f"read {stats.get('docs_read', 0):,}  kept {stats.get('docs_kept', 0):,}  "
            f"duplicate {stats.get('docs_duplicate', 0):,}  filtered {stats.get('docs_filtered', 0):,}  "
            f"bad {stats.get('docs_malformed', 0):,}",
        )
        if stats.get("special_token_strings"):
            opts = summary.get("options") or {}
            became = "plain text" if opts.get("special_tokens") == "text" else "special tokens"
            table.add_row(
                "special text",
                f"{stats['special_token_strings']:,} literal special-token strings, encoded as {became}",
            )
        if stats.get("errors"):
            table.add_row("bad records", ", ".join(f"{k} {v:,}" for k, v in stats["errors"].items()))
            table.add_row("", _bad_records_note(stats))
        for example in stats.get("error_examples", [])[:3]:
            table.add_row("", f"{example['where']}: {example['reason']}: {example['detail']}")
    console.print(table)


def _bad_records_note(stats: dict[str, Any]) -> str:
    examples = stats.get("error_examples", [])
    if set(stats["errors"]) == {"empty"} and all(e["where"].startswith(SAMPLE_CORPUS) for e in examples):
        return (
            "the sample's empty files (__init__.py), kept in it on purpose: bad input is skipped "
            "and counted, not fatal"
        )
    return "skipped and counted, not fatal (--on-error fail stops at the first instead)"
