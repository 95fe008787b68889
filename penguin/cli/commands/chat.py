"""``penguin chat [SESSION]``: the interactive chat on a new or resumed session.

Owns: the command — checking for a terminal, choosing the model (a resumed session keeps its
recorded one), creating or resuming the session, and handing it to ``Chat``.  Does not: run
the chat loop (``chat``).
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from penguin.cli.config import load_config, mcp_servers, snapshot_settings
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
    from engine import LLM, Session
    from eventstore import DataRoot
    from penguin._setup import Resolved
    from penguin.cli.tasks.model import LlmOptions
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
    from rich.text import Text

    from penguin._setup import Overrides, resolve, settings_line
    from penguin.cli.targets import resolve_session_id
    from penguin.cli.tasks.model import (
        build_llm,
        check_same_model,
        choose_approve,
        choose_model,
        choose_sandbox,
    )
    from penguin.cli.tasks.task import checked_turns, checked_workspace, thinking_level
    from penguin.cli.terminal.console import err_console

    from .resume import _recorded_model, load

    if not sys.stdin.isatty():
        raise CliError(
            "penguin chat needs a terminal (stdin is not one): use `penguin run -m TEXT` "
            "for one task"
        )
    if max_turns is not None:
        checked_turns(max_turns)
    config = load_config(g.root().home)
    restored = None
    if session_id is None:
        choice = choose_model(opts, config=config)
        ws = checked_workspace(workspace or Path.cwd())
        root = g.writable_root()
        recorded = None
    else:
        sid = resolve_session_id(g, session_id)
        loaded = load(g, sid)
        meta = loaded.meta_payload
        restored = loaded.state.settings
        recorded, endpoint = _recorded_model(meta, restored)
        choice = choose_model(
            opts, config=config, recorded=recorded, session_id=sid, endpoint=endpoint
        )
        ws = checked_workspace(
            workspace or Path(meta.workspace), hint=" (pass --workspace DIR to use another)"
        )
        root = g.writable_root()
    model_llm = build_llm(choice)
    if recorded is not None:
        check_same_model(
            choice, model_llm, recorded=recorded, session_id=sid, allow=opts.change_model
        )
    mode = choose_approve(
        approve,
        scripted=choice.script is not None,
        config=config,
        recorded=restored.approval if restored is not None else None,
    )
    resolved = resolve(
        restored,
        Overrides(approval=approve, max_turns=max_turns),
        default_approval=mode,
        configured_mcp=mcp_servers(config),
        default_approval_rules=config.approval_rules,
    )
    if session_id is not None:  # R-SET-3: what the session comes back with, on one line
        err_console().print(Text(safe(settings_line(restored)), style="dim"), soft_wrap=True)
    level = thinking_level(thinking, config)
    # A new session takes config.toml's sandbox; a resumed one keeps its own unless a flag says.
    box = choose_sandbox(sandbox, network, config=config if session_id is None else None)
    anyio.run(_chat, g, root, session_id and sid, model_llm, ws, mode, resolved, level, box)


async def _chat(
    g: Globals,
    root: DataRoot,
    session_id: str | None,
    model_llm: LLM,
    ws: Path,
    mode: str,
    resolved: Resolved,
    thinking: str | None,
    box: dict[str, Any],
) -> None:
    """Open the session, chat; after ``/fork``, fork it and go on chatting in the fork."""
    from rich.text import Text

    from penguin.cli.chat import Chat
    from penguin.cli.tasks.model import close_llm
    from penguin.cli.terminal.console import err_console, out_console

    history = root.home / ".cache" / "chat_history"
    history.parent.mkdir(mode=0o700, exist_ok=True)
    try:
        while True:
            session = await _open(g, root, session_id, model_llm, ws, resolved, box)
            async with session:
                chat = Chat(
                    session,
                    model_llm,
                    approve=mode,  # type: ignore[arg-type]
                    max_turns=resolved.max_turns,
                    history=history,
                    list_sessions=lambda: _recent(g, root),
                    thinking=thinking,
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
        await close_llm(model_llm)


async def _open(
    g: Globals,
    root: DataRoot,
    session_id: str | None,
    llm: LLM,
    ws: Path,
    resolved: Resolved,
    box: dict[str, Any],
) -> Session:
    from eventstore import DEFAULT_AGENT, DEFAULT_PROJECT
    from penguin._setup import open_session
    from penguin.cli.diagnose import quiet_reader
    from penguin.cli.tasks.live import environment_for

    config = load_config(root.home)
    if session_id is None:
        project, agent = g.project or DEFAULT_PROJECT, g.agent or DEFAULT_AGENT
    else:
        location = root.locate(session_id, project=g.project, agent=g.agent)
        project, agent = location.project, location.agent
    with quiet_reader():
        return await open_session(
            root,
            llm=llm,
            environment=lambda m, w: environment_for(m, w),
            resolved=resolved,
            session_id=session_id,
            workspace=ws,
            system_prompt=DEFAULT_SYSTEM_PROMPT,
            project=project,
            agent=agent,
            **box,
            **snapshot_settings(config),
        )


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
