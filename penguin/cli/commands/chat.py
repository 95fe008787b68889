"""``penguin chat [SESSION]``: the interactive chat on a new or resumed session.

Owns: the command — checking for a terminal, choosing the model (a resumed session keeps its
recorded one), creating or resuming the session, and handing it to ``Chat``.  Does not: run
the chat loop (``chat``).
"""

from __future__ import annotations

import functools
import sys
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from penguin.cli.errors import CliError, errors_to_exit_codes
from penguin.cli.globalopts import Globals, globals_of
from penguin.cli.options import (
    ApproveOpt,
    BaseUrlOpt,
    ChangeModelOpt,
    KeyEnvOpt,
    LlmOpt,
    MaxTurnsOpt,
    ModelOpt,
    NetworkOpt,
    SandboxOpt,
    ScriptOpt,
    ThinkingOpt,
    checked_thinking,
)
from penguin.cli.terminal.safe import safe

from .run import DEFAULT_SYSTEM_PROMPT

if TYPE_CHECKING:
    from engine import Session
    from eventstore import DataRoot
    from penguin.cli.tasks.model import LlmOptions
    from penguin.cli.tasks.setup import Setup
    from replay import TaskChanges

__all__ = ["chat", "open_chat"]


def chat(
    ctx: typer.Context,
    session_id: Annotated[
        str | None,
        typer.Argument(
            help="Resume this session (id, unique prefix or short id) [default: a new one].",
            show_default=False,
            metavar="SESSION",
        ),
    ] = None,
    script: ScriptOpt = None,
    llm: LlmOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    api_key_env: KeyEnvOpt = None,
    change_model: ChangeModelOpt = False,
    workspace: Annotated[
        Path | None,
        typer.Option(
            "--workspace",
            help="Directory the tools work in [default: the current directory, or the "
            "resumed session's].",
            show_default=False,
        ),
    ] = None,
    approve: ApproveOpt = None,
    max_turns: MaxTurnsOpt = None,
    thinking: ThinkingOpt = None,
    sandbox: SandboxOpt = None,
    network: NetworkOpt = None,
) -> None:
    """Chat with the agent: `penguin` with no command opens this on a new session.

    Streams the answer, shows a spinner while the model or a tool is awaited, asks before each
    tool call (y/n/a at the prompt), and lets you steer a running task by typing.  Ctrl-C
    aborts the task; twice at an idle prompt quits.  Slash commands: /compact, /goal[:budget]
    OBJECTIVE, /fork, /rewind [N], /title, /sessions, /help, /exit.
    """
    with errors_to_exit_codes():
        from penguin.cli.tasks.model import LlmOptions

        opts = LlmOptions(
            script, llm.value if llm else None, model, base_url, api_key_env, change_model
        )
        open_chat(
            globals_of(ctx),
            session_id,
            opts,
            workspace=workspace,
            approve=approve.value if approve else None,
            max_turns=max_turns,
            thinking=checked_thinking(thinking),
            sandbox=sandbox.value if sandbox else None,
            network=network,
        )


def open_chat(
    g: Globals,
    session_id: str | None,
    opts: LlmOptions,
    *,
    workspace: Path | None = None,
    approve: str | None = None,
    max_turns: int | None = None,
    thinking: str | None = None,
    sandbox: str | None = None,
    network: bool | None = None,
) -> None:
    import anyio

    from penguin._setup import Overrides
    from penguin.cli.targets import resolve_session_id
    from penguin.cli.tasks.setup import Recorded, prepare
    from penguin.cli.tasks.task import checked_turns

    from .resume import load

    if not sys.stdin.isatty():
        raise CliError(
            "penguin chat needs a terminal (stdin is not one): use `penguin run -m TEXT` "
            "for one task"
        )
    if max_turns is not None:
        checked_turns(max_turns)
    recorded = None
    if session_id is not None:
        loaded = load(g, resolve_session_id(g, session_id))
        recorded = Recorded(loaded.session_id, loaded.meta_payload, loaded.state.settings)
    setup = prepare(
        g,
        opts,
        Overrides(approval=approve, max_turns=max_turns),
        approve=approve,
        resumed=recorded,
        workspace=workspace,
        sandbox=sandbox,
        network=network,
        thinking=thinking,
    )
    anyio.run(_chat, g, setup)


async def _chat(g: Globals, setup: Setup) -> None:
    """Open the session, chat; after ``/fork``, fork it and go on chatting in the fork."""
    from rich.text import Text

    from penguin.cli.chat import Chat
    from penguin.cli.tasks.model import close_llm
    from penguin.cli.terminal.console import err_console, out_console

    root, session_id = setup.root, setup.session_id
    history = root.home / ".cache" / "chat_history"
    history.parent.mkdir(mode=0o700, exist_ok=True)
    try:
        while True:
            session = await setup.open(system_prompt=DEFAULT_SYSTEM_PROMPT, session_id=session_id)
            async with AsyncExitStack() as stack:
                if setup.host is not None:  # a session recorded with subagents keeps them
                    await stack.enter_async_context(setup.host.runner)
                await stack.enter_async_context(session)
                chat = Chat(
                    session,
                    setup.llm,
                    approve=setup.mode,
                    max_turns=setup.resolved.max_turns,
                    history=history,
                    list_sessions=lambda: _recent(g, root),
                    thinking=setup.thinking,
                    task_changes=functools.partial(_task_changes, root, session.id),
                )
                await chat.run()
            if chat.rewind_requested is not None:
                session_id = _rewind_here(root, session, chat.rewind_requested)
                continue
            if not chat.fork_requested:
                return
            session_id = session.id
            try:
                session_id = _fork_here(root, session)
            except (CliError, ValueError, LookupError, OSError) as exc:
                err_console().print(Text(f"/fork: {safe(str(exc))}", style="red"), soft_wrap=True)
                continue
            out_console().print(
                Text(f"forked: {session_id}; the chat goes on in the fork", style="cyan"),
                soft_wrap=True,
            )
    finally:
        await close_llm(setup.llm)
        if setup.host is not None:
            await setup.host.aclose()


def _recent(g: Globals, root: DataRoot) -> list[str]:
    from penguin.cli.listing import list_sessions
    from penguin.cli.views.render import short_id

    rows = list_sessions(root, project=g.project, agent=g.agent, limit=10, top_level=True)
    return [
        f"  {short_id(r.session_id)}  {r.status:<12} {(r.first_prompt or '')[:50]}" for r in rows
    ]


def _task_changes(root: DataRoot, session_id: str) -> list[TaskChanges]:
    from replay import task_changes

    return task_changes(root, session_id)


def _rewind_here(root: DataRoot, session: Session, task: int) -> str:
    """``/rewind N``: show the plan, ask, restore and go on in the fork (or stay)."""
    from rich.text import Text

    from penguin.cli.commands.rewind import plan_lines
    from penguin.cli.terminal.console import err_console, out_console
    from replay import plan_rewind, rewind_session

    out = out_console()
    try:
        plan = plan_rewind(root, session.id, to=task)
        for line in plan_lines(plan):
            out.print(Text(line), soft_wrap=True)
        question = (
            "Overwrite the files changed outside the session? [y/N] "
            if plan.outside
            else "Rewind? [y/N] "
        )
        typer.echo(question, nl=False, err=True)
        if sys.stdin.readline().strip().lower() not in ("y", "yes"):
            out.print(Text("/rewind: nothing written", style="yellow"))
            return session.id
        result = rewind_session(root, session.id, to=task, force=bool(plan.outside))
    except (CliError, ValueError, LookupError, OSError, RuntimeError) as exc:
        err_console().print(Text(f"/rewind: {safe(str(exc))}", style="red"), soft_wrap=True)
        return session.id
    out.print(
        Text(f"rewound; the chat goes on in {result.new_session_id}", style="cyan"), soft_wrap=True
    )
    return result.new_session_id


def _fork_here(root: DataRoot, session: Session) -> str:
    """Fork at the last assistant text of the session's latest file (a completed task)."""
    from eventstore import TextPayload
    from penguin.cli.views.inspect import read_numbered
    from replay import fork_session

    numbered = read_numbered(session.trace_path)
    at = None
    for ordinal, (_line, record) in enumerate(numbered.records):
        p = record.payload
        if record.origin is None and isinstance(p, TextPayload) and p.role == "assistant":
            at = (numbered.index, ordinal)
    if at is None:
        raise CliError("nothing to fork yet: no task has completed in this file")
    return fork_session(root, session.id, at=at)
