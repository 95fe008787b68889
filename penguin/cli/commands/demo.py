"""``penguin demo``: the embedded demo script, end to end (R-CLI-8).

Owns: the command.  Does not: anything ``run`` does differently.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Final

import typer

from penguin.cli.errors import errors_to_exit_codes
from penguin.cli.globalopts import globals_of
from penguin.cli.terminal.console import out_console
from penguin.cli.terminal.safe import safe

if TYPE_CHECKING:
    from rich.console import Console

    from eventstore import DataRoot


__all__ = ["demo"]

_DEMO_PROMPT: Final = "Show me what you can do in this workspace."
_DEMO_THRESHOLD: Final = 500


def demo(
    ctx: typer.Context,
    keep: Annotated[
        bool, typer.Option("--keep", hidden=True, help="Accepted for compatibility.")
    ] = False,
) -> None:
    """Run the embedded demo script with the real built-in tools, then validate its trace.

    Shows text, thinking, tool calls, one timeout and its retry, and a compaction.  The session
    is recorded in the data root like any other (its workspace is the agent's
    workspaces/demo directory), so `penguin sessions` and `penguin show <id>` find it.  Exit
    code: the validation result.
    """
    import anyio
    from rich.text import Text

    from eventstore import DEFAULT_AGENT, DEFAULT_PROJECT
    from penguin.cli.views.render import short_id
    from replay import validate_session

    del keep  # the session is always kept now
    with errors_to_exit_codes():
        g = globals_of(ctx)
        root = g.writable_root()
        project, agent = g.project or DEFAULT_PROJECT, g.agent or DEFAULT_AGENT
        workspace = root.ensure_dir(root.workspaces_dir(project, agent) / "demo")
        console = out_console()
        session_id, trace_files = anyio.run(_demo, root, project, agent, workspace, console)
        findings = validate_session(trace_files)
        errors = [f for f in findings if f.severity == "error"]
        for finding in findings:
            console.print(Text(safe(str(finding), keep_newlines=False)), soft_wrap=True)
        verdict = "valid" if not errors else f"INVALID ({len(errors)} error(s))"
        console.print(Text(f"trace: {verdict}"))
        console.print(
            Text(
                f"next: penguin sessions; penguin show {short_id(session_id)}; "
                f"penguin inspect {short_id(session_id)}",
                style="dim",
            ),
            soft_wrap=True,
        )
        raise typer.Exit(1 if errors else 0)


async def _demo(
    root: DataRoot, project: str, agent: str, workspace: Path, console: Console
) -> tuple[str, list[Path]]:
    from rich.text import Text

    from engine import CompactionSettings, LocalEnvironment, RetryPolicy, Session, allow_all
    from engine.llm import DEFAULT_SCRIPT, ScriptedLLM
    from eventstore.builders import user_text
    from penguin.cli.views.render import StreamRenderer

    llm = ScriptedLLM(DEFAULT_SCRIPT)
    session = await Session.create(
        llm=llm,
        environment=LocalEnvironment(workspace),
        root=root,
        workspace=workspace,
        system_prompt="You are a careful assistant working in a scratch workspace.",
        project=project,
        agent=agent,
        compaction=CompactionSettings(max_context_length=_DEMO_THRESHOLD),
        retry=RetryPolicy(base_ms=100),
    )
    llm.bind(session)
    renderer = StreamRenderer(console)
    console.print(Text(f"> {_DEMO_PROMPT}", style="bold"))
    async with session:
        async for msg in session.run([user_text(_DEMO_PROMPT)], approve=allow_all):
            renderer.feed(msg)
        renderer.close()
        console.print(Text(f"session: {session.id}"), soft_wrap=True)
        console.print(Text(f"trace:   {session.trace_path}"), soft_wrap=True)
    return session.id, root.trace_files(session.id, project=project, agent=agent)
