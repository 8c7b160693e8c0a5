"""Every storekit command the README shows (its shell blocks and its inline `storekit ...` spans) and
every `Examples:` line of every command's --help runs, from a directory that is not the repository:
nothing ends in a usage error (exit 2) or a traceback. Commands that change things get --dry-run; the
site is three local tiers (lustre, nvme, archive) with the README's own policies, a prepared sample
dataset and a checkpoint run. Commands that need a service this host may lack (S3, Slurm, a model
directory) may fail only as the README says a missing service does (exit 3 or 5)."""

from __future__ import annotations

import gzip
import re
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from typer.core import TyperArgument, TyperGroup
from typer.main import get_command

from storekit.cli.app import build_app
from storekit.cli.common import Command
from tests.conftest import REPO, Ran
from tests.unit.tier.conftest import dcp_unit

pytestmark = pytest.mark.slow

README = (REPO / "README.md").read_text()
SITE = """\
default_tier = "lustre"
[tiers.nvme]
url = "./nvme"
role = "burst"
[tiers.lustre]
url = "./lustre"
role = "parallel"
[tiers.archive]
url = "./archive"
role = "archive"
"""
# documented paths -> this test's site (SITE_DIR is replaced by the site's directory)
PATHS = {
    "/etc/storekit.toml": "SITE_DIR/storekit.toml",
    "/lustre/storage": "SITE_DIR/lustre",
    "/var/lib/node_exporter/textfile/": "SITE_DIR/",
    "/var/lib/node_exporter/": "SITE_DIR/",
    "~/src/linux": "SITE_DIR/src/linux",
    "/etc/storekit/storekit.toml": "SITE_DIR/storekit.toml",
    "/lustre/scratch/": "SITE_DIR/lustre/scratch/",
    "/scratch/old/run_7": "SITE_DIR/lustre/checkpoints/run_001",  # a run by path, not by name
}
MUTATING = {
    ("init",),
    ("prepare", "dataset"),
    ("layout", "clean"),
    ("tier",),
    ("tier", "gc"),
    ("ckpt", "prune"),
    ("ckpt", "adopt"),
    ("bench", "io"),
    ("jobs", "rerun"),
}
NEEDS_A_SERVICE = re.compile(r"s3://|--executor slurm|/models/")
# what the test site does not hold: a job's work dir (a prepare run removes its own), a checkpoint in
# another writer's layout on the parallel tier's absolute path
NOT_IN_THE_SITE = re.compile(r"^jobs |checkpoint-500|--recall checkpoints/run_001/step_000100")
PLACEHOLDER = re.compile(r"^(?:[A-Z][A-Z_]*|\[.*|.*\.\.\.)$")  # WORKDIR, DATASET, F, [PATH], N...


def readme_policies() -> str:
    start = README.index("Policies are `[policies.NAME]`")
    block = README[start:].split("```toml\n", 1)[1].split("```", 1)[0]
    return re.sub(r'paths = \["checkpoints/run_0\*"\]', 'paths = ["checkpoints/run_*"]', block)


def shell_lines(text: str) -> Iterator[str]:
    """Lines of the README's shell code blocks, continuation lines joined, comments cut."""
    fence = None
    pending = ""
    for line in text.splitlines():
        if line.startswith("```"):
            fence = None if fence is not None else line[3:].strip()
            continue
        if fence not in ("bash", "sh", "console", ""):
            continue
        pending += line.rstrip("\\").rstrip() + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            yield re.sub(r"\s+#.*$", "", pending).strip()
            pending = ""


def inline_spans(text: str) -> Iterator[str]:
    for span in re.findall(r"`([^`\n]+)`", text):
        if span.startswith(("storekit ", "srun ")) and (args := storekit_args(span)) and runnable(args):
            yield span


OPERATORS = {"|", "||", "&&", ";", ">", ">>", ")", "2>", "&"}


def storekit_args(line: str) -> list[str] | None:
    """The storekit command of a shell line (after srun/sbatch/$(...), before a pipe, `||` or `>`)."""
    at = re.search(r"(?:^|[\s('\"$])storekit\s", line)
    if at is None:
        return None
    lexer = shlex.shlex(line[at.end() :], posix=True, punctuation_chars="|&;>)")
    lexer.whitespace_split = True
    args: list[str] = []
    try:
        for token in lexer:
            if token in OPERATORS or set(token) <= set("|&;>)"):
                break
            args.append(token)
    except ValueError:
        return None
    if not args or any(PLACEHOLDER.match(a) for a in args):
        return None
    return args


def command_words(args: list[str]) -> list[str]:
    """The words naming the command and its arguments: options are left out, and so is the value of
    a common option given before the subcommand (`storekit --config FILE tier --drain`)."""
    words, skip = [], False
    for i, arg in enumerate(args):
        if skip:
            skip = False
        elif arg in ("--config", "-c") and not words:
            skip = i + 1 < len(args)
        elif not arg.startswith("-"):
            words.append(arg)
    return words


def runnable(args: list[str]) -> bool:
    """A whole command, not a command's name in prose (`storekit dataset verify`, `storekit tier`)."""
    cmd: Command = get_command(build_app())
    words = command_words(args)
    while isinstance(cmd, TyperGroup) and words and words[0] in cmd.commands:
        cmd = cmd.commands[words.pop(0)]
    if isinstance(cmd, TyperGroup) and not cmd.invoke_without_command:
        return False
    if isinstance(cmd, TyperGroup) and not any(a.startswith("-") for a in args):
        return False  # `storekit tier` alone: the name of the command
    required = [p for p in cmd.params if isinstance(p, TyperArgument) and p.required]
    return len(words) >= len(required)


def help_examples() -> Iterator[str]:
    def walk(cmd: Command) -> Iterator[Command]:
        yield cmd
        if isinstance(cmd, TyperGroup):
            for sub in cmd.commands.values():
                if not sub.hidden:
                    yield from walk(sub)

    for cmd in walk(get_command(build_app())):
        text = (cmd.help or "") + "\n" + (cmd.epilog or "")
        if "Examples:" not in text:
            continue
        body = text.split("Examples:", 1)[1]
        joined = re.sub(r"\\\s*\n\s*", " ", body)
        for line in joined.splitlines():
            line = re.sub(r"\s+#.*$", "", line.strip())
            if line.startswith(("storekit ", "srun ", "sbatch ")) or "$(storekit" in line:
                yield line


def documented_commands() -> list[str]:
    lines = [*shell_lines(README), *inline_spans(README), *help_examples()]
    return list(dict.fromkeys(line for line in lines if storekit_args(line)))


def with_dry_run(args: list[str]) -> list[str]:
    words = tuple(command_words(args)[:2])
    mutating = any(words[: len(m)] == m for m in MUTATING) and words[:2] != ("tier", "verify")
    if mutating and "--dry-run" not in args and "--plan-out" not in args:
        return [*args, "--dry-run"]
    return args


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("readme-site")
    (root / "storekit.toml").write_text(SITE + readme_policies())
    src = root / "src/linux"
    src.mkdir(parents=True)
    (src / "hello.c").write_text("int main(void) { return 0; }\n")
    with gzip.open(REPO / "storekit/samples/anthropic-bpe-65k.tokenizer.json.gz") as fh:
        (root / "tok.json").write_bytes(fh.read())
    return root


@pytest.fixture
def ready_site(site: Path, sk: Callable[..., Ran]) -> Path:
    if not (site / "lustre/datasets/code/sample/v1/manifest.json").exists():
        for tier in ("lustre", "nvme", "archive"):
            assert sk(site, "init", "--tier", tier, "-q").code == 0
        assert sk(site, "prepare", "dataset", "-q").code == 0
        corpus = site / "web.jsonl"
        corpus.write_text("".join(f'{{"text": "web page number {i}"}}\n' for i in range(50)))
        web = ["-i", str(corpus), "--tokenizer", str(site / "tok.json"), "--name", "web", "--version", "v2"]
        assert sk(site, "prepare", "dataset", *web, "-q").code == 0
        run = site / "lustre/checkpoints/run_001"
        for step in (100, 200, 1200, 1300):
            dcp_unit(run, f"step_{step:06d}")
        for name in ("run_001", "run_002"):  # a Megatron checkpoint to adopt
            rank = site / f"lustre/checkpoints/{name}/iter_0002000/mp_rank_00"
            rank.mkdir(parents=True)
            (rank / "model_optim_rng.pt").write_bytes(b"weights")
        assert sk(site, "ckpt", "adopt", "run_001/step_000100", "-q").code == 0  # a manifest to verify
        # archived units to recall and verify: moved by a real `storekit tier` run
        for unit in ("step_000200", "step_001200"):
            ran = sk(site, "tier", "--archive", f"checkpoints/run_001/{unit}", "-q")
            assert ran.code == 0, ran.stderr
    return site


def test_the_readme_shows_commands_to_run() -> None:
    commands = documented_commands()
    assert len(commands) > 40
    joined = "\n".join(commands)
    for expected in (
        "storekit layout check --all --json",
        "bench io --target /lustre/storage",
        "--workers 8 --ranks 32",
        # the Slurm epilog's line and the cron line, run as written
        "storekit --config /etc/storekit.toml tier --drain --quiet || true",
        "storekit status --prometheus /var/lib/node_exporter/textfile/storekit.prom --quiet",
    ):
        assert expected in joined


def test_every_documented_command_runs(ready_site: Path, sk: Callable[..., Ran]) -> None:
    failures = []
    for line in documented_commands():
        for documented, here in PATHS.items():
            line = line.replace(documented, here.replace("SITE_DIR", str(ready_site)))
        args = storekit_args(line)
        assert args is not None
        args = with_dry_run(args)
        ran = sk(ready_site, *args)
        allowed = (
            {0, 1, 3, 5}
            if NEEDS_A_SERVICE.search(line)
            else {0, 3}
            if NOT_IN_THE_SITE.search(shlex.join(args))
            else {0}
        )
        if "layout check" in line:
            allowed.add(4)  # findings are its answer
        if args[:2] == ["bench", "io"] and ran.code == 6 and "this run needs" in ran.stderr:
            continue  # a documented 64G/70B example on a test machine's disk: "no space" is its answer
        if line.startswith(("sbatch ", "srun ")) and "outside an sbatch/salloc allocation" in ran.stderr:
            continue  # it runs inside the allocation that line asks for
        if ran.code not in allowed or "Traceback" in ran.stderr:
            failures.append(f"{shlex.join(args)} -> exit {ran.code}: {ran.stderr.strip()[-300:]}")
    assert failures == [], "\n".join(failures)
