"""The ``penguin`` command line (SPEC §16).

Owns: argument parsing, exit codes (0 ok, 1 the checked thing is bad, 2 usage or input error)
and output shapes (``--json`` prints plain JSON on stdout, never through rich).  Does not:
implement engine behaviour; it calls the library.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import anyio
import typer
from rich.console import Console

from engine import CompactionSettings, LocalEnvironment, RetryPolicy, Session, allow_all
from engine.llm import DEFAULT_SCRIPT, ScriptedLLM
from eventstore import DataRoot
from eventstore.builders import user_text

from ._render import StreamRenderer
from ._validate import validate_paths

__all__ = ["app", "main"]

app = typer.Typer(
    name="penguin",
    help="Run, inspect and replay event-sourced agent sessions recorded as JSONL traces.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)

_DEMO_PROMPT = "Show me what you can do in this workspace."
_DEMO_THRESHOLD = 500


def _console(*, stderr: bool = False) -> Console:
    return Console(stderr=stderr, no_color="NO_COLOR" in os.environ, highlight=False)


@app.command()
def demo(
    keep: Annotated[
        bool, typer.Option("--keep", help="Keep the temporary home and workspace.")
    ] = False,
) -> None:
    """Run the embedded scripted agent with the real built-in tools, then validate its trace.

    Shows text, thinking, tool calls, one timeout and its retry, and a compaction.  The exit
    code is the validation result.
    """
    base = Path(tempfile.mkdtemp(prefix="penguin-demo-"))
    home, workspace = base / "home", base / "workspace"
    workspace.mkdir()
    console = _console()
    try:
        trace_files = anyio.run(_demo, home, workspace, console)
        findings = validate_paths(trace_files)
        errors = [f for f in findings if f.severity == "error"]
        for finding in findings:
            console.print(str(finding), markup=False, highlight=False)
        verdict = "valid" if not errors else f"INVALID ({len(errors)} error(s))"
        console.print(f"trace: {verdict}", markup=False)
        if keep:
            console.print(f"kept: {base}", markup=False)
        raise typer.Exit(1 if errors else 0)
    finally:
        if not keep:
            shutil.rmtree(base, ignore_errors=True)


async def _demo(home: Path, workspace: Path, console: Console) -> list[Path]:
    llm = ScriptedLLM(DEFAULT_SCRIPT)
    root = DataRoot(home)
    session = await Session.create(
        llm=llm,
        environment=LocalEnvironment(workspace),
        root=root,
        workspace=workspace,
        system_prompt="You are a careful assistant working in a scratch workspace.",
        compaction=CompactionSettings(max_context_length=_DEMO_THRESHOLD),
        retry=RetryPolicy(base_ms=100),
    )
    llm.bind(session)
    renderer = StreamRenderer(console)
    console.print(f"> {_DEMO_PROMPT}", markup=False, style="bold")
    async with session:
        async for msg in session.run([user_text(_DEMO_PROMPT)], approve=allow_all):
            renderer.feed(msg)
        renderer.close()
        console.print(f"session: {session.id}", markup=False, soft_wrap=True)
        console.print(f"trace:   {session.trace_path}", markup=False, soft_wrap=True)
    return root.trace_files(session.id)


@app.command()
def validate(
    paths: Annotated[list[Path], typer.Argument(help="Trace files or directories.")],
    strict: Annotated[bool, typer.Option("--strict", help="Fail on warnings too.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print findings as JSON.")] = False,
) -> None:
    """Check trace files against the validator rules V-1…V-20 (SPEC §16.1)."""
    missing = [p for p in paths if not p.exists()]
    if missing:
        _console(stderr=True).print(f"no such file or directory: {missing[0]}", markup=False)
        raise typer.Exit(2)
    findings = validate_paths(paths, strict=strict)
    if as_json:
        rows = [
            {"path": str(f.path), "line": f.line, "rule": f.rule, "severity": f.severity,
             "message": f.message}
            for f in findings
        ]
        sys.stdout.write(json.dumps(rows, ensure_ascii=False) + "\n")
    else:
        console = _console()
        for finding in findings:
            console.print(str(finding), markup=False, highlight=False)
    bad = any(f.severity == "error" or strict for f in findings)
    raise typer.Exit(1 if bad else 0)


def main() -> None:
    app()
