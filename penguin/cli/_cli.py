"""The ``penguin`` command line (SPEC §16).

Owns: argument parsing, help texts, exit codes (0 ok, 1 the checked thing is bad, 2 usage or
input error) and output shapes (``--json`` prints plain JSON on stdout, never through rich;
progress and diagnostics go to stderr).  Does not: implement engine behaviour; it calls the
library.  Commands that only read (``sessions``, ``inspect``, ``validate``, ``stats``,
``resume`` without ``-m``) never take a lock or modify a trace.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import AsyncExitStack, contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Final

import anyio
import msgspec
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from engine import (
    DEFAULT_MAX_TURNS,
    CompactionSettings,
    GoalOptions,
    LocalEnvironment,
    RetryPolicy,
    Session,
    allow_all,
)
from engine.llm import DEFAULT_SCRIPT, ScriptedLLM
from eventstore import (
    DEFAULT_AGENT,
    DEFAULT_PROJECT,
    DataRoot,
    OmniMessage,
    SessionMetaPayload,
    encode,
    validate_id,
)
from eventstore.builders import user_text
from projections import ModelContext, SessionState
from replay import Finding, load_session, resume_session, validate_session

from ._at import show_at
from ._clikit import (
    CliError,
    Globals,
    err_console,
    errors_to_exit_codes,
    find_trace_files,
    group_sessions,
    latest_session_id,
    out_console,
    resolve_target,
    sniff_trace,
    total_bytes,
    workspace_dir,
    write_json,
)
from ._follow import follow
from ._goal import (
    GOAL_NOT_COMPLETE,
    BudgetOpt,
    GoalContinueOpt,
    GoalOpt,
    GoalView,
    check_goal_continue,
    goal_line,
    goal_options,
)
from ._inspect import (
    build_inspection,
    context_dict,
    describe,
    find_session_files,
    follow_children,
    iter_rows,
    read_numbered,
    record_row,
    render_children,
    render_inspection,
    render_records,
    state_dict,
)
from ._live import (
    ApproveMode,
    LlmOptions,
    Subagents,
    build_compaction,
    build_llm,
    build_subagents,
    close_llm,
    drive,
    environment_for,
)
from ._render import StreamRenderer
from ._safe import preview, safe, safe_json_bytes
from ._stats import (
    add_summaries,
    finish_totals,
    render_all,
    render_usage,
    usage_json,
    usage_of,
    usage_summary,
)

__all__ = ["app", "main"]

app = typer.Typer(
    name="penguin",
    help=(
        "Run, inspect and replay event-sourced agent sessions recorded as JSONL traces.\n\n"
        "Sessions live under a data root (--home, else $PENGUIN_HOME, else ~/.penguin/data) "
        "as <project>/agents/<agent>/traces/<date>/<session>_<NNN>.jsonl.  Try `penguin demo` "
        "first, then `penguin sessions` and `penguin inspect <session id>`.\n\n"
        "Exit codes: 0 ok; 1 the thing checked is bad (validation failed, replay diverged, run "
        "aborted); 2 usage or input error (missing file, not a trace, unknown session, session "
        "locked by another process)."
    ),
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

_DEMO_PROMPT: Final = "Show me what you can do in this workspace."
_DEMO_THRESHOLD: Final = 500
_DEFAULT_SYSTEM_PROMPT: Final = (
    "You are a careful assistant. You work in the user's workspace with the tools provided; "
    "explain briefly what you do."
)
# Inputs at least this large get a progress bar on stderr.
_PROGRESS_FILES: Final = 50
_PROGRESS_BYTES: Final = 32 * 2**20


class ApproveChoice(StrEnum):
    ask = "ask"
    allow_all = "allow-all"
    deny_all = "deny-all"


class ModeChoice(StrEnum):
    summarize = "summarize"
    discard = "discard"


class LlmChoice(StrEnum):
    openai = "openai"
    anthropic = "anthropic"


def _console(*, stderr: bool = False) -> Console:
    return err_console() if stderr else out_console()


def _globals(ctx: typer.Context) -> Globals:
    found = ctx.find_object(Globals)
    return found if found is not None else Globals()


@app.callback()
def _main(
    ctx: typer.Context,
    home: Annotated[
        Path | None,
        typer.Option(
            "--home",
            help="Data root holding the sessions (overrides $PENGUIN_HOME; "
            "default ~/.penguin/data).",
            show_default=False,
        ),
    ] = None,
    project: Annotated[
        str | None,
        typer.Option(
            "--project",
            help="Project name: where `run` creates sessions; narrows the search of the "
            "other commands. [default: default_project for run]",
            show_default=False,
        ),
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            help="Agent name, like --project. [default: default_agent for run]",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Global options go before the command: penguin --home DIR inspect SESSION."""
    with errors_to_exit_codes():
        if project is not None:
            validate_id(project, what="project")
        if agent is not None:
            validate_id(agent, what="agent")
    ctx.obj = Globals(home=home, project=project, agent=agent)


@contextmanager
def _progress(total: int, description: str, *, enabled: bool) -> Iterator[Callable[[int], None]]:
    """A progress bar on stderr (never on stdout, so ``--json`` stays clean)."""
    if not enabled or total <= 0:
        yield lambda _n: None
        return
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err_console(), transient=False) as bar:
        task = bar.add_task(description, total=total)
        yield lambda n: bar.advance(task, n)


# --------------------------------------------------------------------------- shared options

ScriptOpt = Annotated[
    Path | None,
    typer.Option(
        "--script",
        help="A ScriptedLLM script (JSON) to answer instead of a model.  Without --script and "
        "--llm the embedded demo script is used.  A script that declares its own `tools` gets "
        "them served from the script; otherwise the built-in tools run in the workspace.",
        show_default=False,
    ),
]
LlmOpt = Annotated[
    LlmChoice | None,
    typer.Option("--llm", help="A real model provider.", show_default=False),
]
ModelOpt = Annotated[
    str | None, typer.Option("--model", help="Model name for --llm.", show_default=False)
]
BaseUrlOpt = Annotated[
    str | None,
    typer.Option(
        "--base-url",
        help="API base URL for --llm (e.g. a local OpenAI-compatible server).",
        show_default=False,
    ),
]
KeyEnvOpt = Annotated[
    str | None,
    typer.Option(
        "--api-key-env",
        help="Environment variable holding the API key "
        "[default: OPENAI_API_KEY / ANTHROPIC_API_KEY].",
        show_default=False,
    ),
]
ApproveOpt = Annotated[
    ApproveChoice,
    typer.Option(
        "--approve",
        help="Tool approval: allow-all, deny-all, or ask (prompt y/n/a for each call).",
        case_sensitive=False,
    ),
]
MaxTurnsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-turns", help="Stop the task after N model turns [default: 100].", show_default=False
    ),
]
MaxContextOpt = Annotated[
    int | None,
    typer.Option(
        "--max-context-length",
        help="Compact when the context reaches N tokens (<= 0 disables) [default: 128000].",
        show_default=False,
    ),
]
MaxSessionTurnsOpt = Annotated[
    int | None,
    typer.Option(
        "--max-session-turns",
        help="Compact after N turns in context (<= 0 disables) [default: -1].",
        show_default=False,
    ),
]
ModeOpt = Annotated[
    ModeChoice | None,
    typer.Option(
        "--compaction-mode", help="How to compact [default: summarize].", show_default=False
    ),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout instead of text.")]


def _llm_options(
    script: Path | None,
    llm: LlmChoice | None,
    model: str | None,
    base_url: str | None,
    api_key_env: str | None,
) -> LlmOptions:
    return LlmOptions(
        script=script,
        llm=llm.value if llm is not None else None,
        model=model,
        base_url=base_url,
        api_key_env=api_key_env,
    )


def _finish_run(
    *,
    aborted: bool,
    session_id: str,
    trace: Path,
    as_json: bool,
    reason: str = "the run ended with an abort",
) -> None:
    console = _console(stderr=as_json)
    console.print(Text(f"session: {session_id}"), soft_wrap=True)
    console.print(Text(f"trace:   {safe(str(trace), keep_newlines=False)}"), soft_wrap=True)
    if aborted:
        console.print(Text(f"{reason} (exit 1)", style="yellow"))
    raise typer.Exit(1 if aborted else 0)


# --------------------------------------------------------------------------- run


@app.command()
def run(
    ctx: typer.Context,
    message: Annotated[
        str, typer.Option("-m", "--message", help="The task for the agent.", show_default=False)
    ],
    script: ScriptOpt = None,
    llm: LlmOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    api_key_env: KeyEnvOpt = None,
    workspace: Annotated[
        Path | None,
        typer.Option(
            "--workspace",
            help="Directory the tools work in [default: the current directory].",
            show_default=False,
        ),
    ] = None,
    approve: ApproveOpt = ApproveChoice.allow_all,
    max_turns: MaxTurnsOpt = None,
    max_context_length: MaxContextOpt = None,
    max_session_turns: MaxSessionTurnsOpt = None,
    compaction_mode: ModeOpt = None,
    system_prompt: Annotated[
        str | None,
        typer.Option(
            "--system-prompt", help="System prompt of the new session.", show_default=False
        ),
    ] = None,
    subagents: Annotated[
        bool,
        typer.Option(
            "--subagents/--no-subagents",
            help="Offer the run_subagent tool: the agent can delegate a task to a child session "
            "(same model, workspace and approval policy; its own trace, pointed to from this "
            "one).  A scripted run's children answer from the script's `subagent` key, else "
            "with one fixed line.",
        ),
    ] = False,
    goal: GoalOpt = False,
    budget: BudgetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Start a new session and run one task, streaming what happens.

    Without --llm the embedded demo script answers (it writes hello.txt in the workspace).
    Ctrl-C aborts the run cleanly (the trace stays valid and the next task sees what was
    interrupted); a second Ctrl-C quits at once.  Prints the session id and trace path at the
    end.  Exit 1 when the run ended with an abort.  With --subagents, a subagent's messages are
    shown indented under the run_subagent call that started it.

    \b
    Examples:
      penguin run -m "list the files" --workspace /tmp/ws
      penguin run -m "fix the tests" --llm openai --model gpt-4o --approve ask
      penguin run -m "survey the repo" --llm openai --model gpt-4o --subagents
      penguin run --goal --budget 500k -m "make all tests pass" --llm openai --model gpt-4o
    """
    with errors_to_exit_codes():
        g = _globals(ctx)
        goal_opts = goal_options(goal=goal, budget=budget, message=message)
        model_llm = build_llm(_llm_options(script, llm, model, base_url, api_key_env))
        ws = workspace_dir((workspace or Path.cwd()).expanduser())
        compaction = build_compaction(
            max_context_length=max_context_length,
            max_session_turns=max_session_turns,
            compaction_mode=compaction_mode.value if compaction_mode else None,
        )
        turns = DEFAULT_MAX_TURNS if max_turns is None else max_turns
        project, agent = g.project or DEFAULT_PROJECT, g.agent or DEFAULT_AGENT
        host: Subagents | None = None
        if subagents:
            host = build_subagents(
                model_llm,
                _llm_options(script, llm, model, base_url, api_key_env),
                root=g.root(),
                workspace=ws,
                project=project,
                agent=agent,
                compaction=compaction,
                max_turns=turns,
            )
        environment = environment_for(
            model_llm, ws, subagents=host.runner if host is not None else None
        )

        async def go() -> tuple[bool, str, Path]:
            session = await Session.create(
                llm=model_llm,
                environment=environment,
                root=g.root(),
                workspace=ws,
                system_prompt=_DEFAULT_SYSTEM_PROMPT if system_prompt is None else system_prompt,
                project=project,
                agent=agent,
                compaction=compaction,
                max_turns=turns,
            )
            aborted, trace = await _one_task(
                session,
                model_llm,
                message,
                approve=approve.value,
                as_json=as_json,
                host=host,
                goal=goal_opts,
            )
            return aborted, session.id, trace

        aborted, session_id, trace = anyio.run(go)
        _finish_run(
            aborted=aborted,
            session_id=session_id,
            trace=trace,
            as_json=as_json,
            reason=GOAL_NOT_COMPLETE if goal_opts else "the run ended with an abort",
        )


# --------------------------------------------------------------------------- resume


def _load(
    g: Globals, session_id: str
) -> tuple[list[Path], Path, ModelContext, SessionState, OmniMessage]:
    try:
        return load_session(g.root(), session_id, project=g.project, agent=g.agent)
    except FileNotFoundError:
        raise CliError(
            f"unknown session: {safe(session_id)} (not under {safe(str(g.root().home))})"
        ) from None


@app.command()
def resume(
    ctx: typer.Context,
    session_id: Annotated[
        str | None,
        typer.Argument(
            help="Session id [default: the latest session of the project/agent].",
            show_default=False,
            metavar="SESSION_ID",
        ),
    ] = None,
    message: Annotated[
        str | None,
        typer.Option(
            "-m",
            "--message",
            help="Run this task on the session.  Without it the "
            "reconstructed state is printed and nothing is written.",
            show_default=False,
        ),
    ] = None,
    script: ScriptOpt = None,
    llm: LlmOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    api_key_env: KeyEnvOpt = None,
    workspace: Annotated[
        Path | None,
        typer.Option(
            "--workspace",
            help="Use this workspace instead of the recorded one "
            "(e.g. a trace from another machine).",
            show_default=False,
        ),
    ] = None,
    approve: ApproveOpt = ApproveChoice.allow_all,
    max_turns: MaxTurnsOpt = None,
    max_context_length: MaxContextOpt = None,
    max_session_turns: MaxSessionTurnsOpt = None,
    compaction_mode: ModeOpt = None,
    goal_continue: GoalContinueOpt = False,
    budget: BudgetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Continue a session, or show where it stands.

    Without -m: prints the state rebuilt from the trace (turns, tokens, the model context and
    the carry-over the next task will see); takes no lock and writes nothing.  With -m: resumes
    the session (closing what a crash left open) and runs one task on it, like `run`.
    With --goal-continue (instead of -m): continues its aborted or crashed goal; exit 0 only
    when the goal completes.  Exit 2 while another process holds the session.
    """
    with errors_to_exit_codes():
        g = _globals(ctx)
        sid = session_id if session_id is not None else latest_session_id(g)
        validate_id(sid, what="session id")
        files, latest, context, state, meta = _load(g, sid)
        goal_opts = goal_options(goal=False, budget=budget, resume=goal_continue)
        check_goal_continue(sid, state.goal, message=message, goal_opts=goal_opts)
        if message is None and goal_opts is None:
            _print_resume_state(sid, files, latest, context, state, meta, as_json=as_json)
            return

        meta_payload = meta.payload
        assert isinstance(meta_payload, SessionMetaPayload)
        ws = workspace_dir(
            (workspace or Path(meta_payload.workspace)).expanduser(),
            hint=" (pass --workspace DIR to use another)",
        )
        options = _llm_options(script, llm, model, base_url, api_key_env)
        model_llm = build_llm(options)
        environment = environment_for(model_llm, ws)
        compaction = build_compaction(
            max_context_length=max_context_length,
            max_session_turns=max_session_turns,
            compaction_mode=compaction_mode.value if compaction_mode else None,
        )
        location = g.root().locate(sid, project=g.project, agent=g.agent)

        async def go() -> tuple[bool, Path]:
            session = await resume_session(
                g.root(),
                sid,
                llm=model_llm,
                environment=environment,
                workspace=ws,
                project=location.project,
                agent=location.agent,
                compaction=compaction,
                max_turns=DEFAULT_MAX_TURNS if max_turns is None else max_turns,
            )
            return await _one_task(
                session,
                model_llm,
                message,
                approve=approve.value,
                as_json=as_json,
                host=None,
                goal=goal_opts,
            )

        aborted, trace = anyio.run(go)
        _finish_run(
            aborted=aborted,
            session_id=sid,
            trace=trace,
            as_json=as_json,
            reason=GOAL_NOT_COMPLETE if goal_opts else "the run ended with an abort",
        )


async def _one_task(
    session: Session,
    model_llm: Any,
    message: str | None,
    *,
    approve: ApproveMode,
    as_json: bool,
    host: Subagents | None,
    goal: GoalOptions | None = None,
) -> tuple[bool, Path]:
    """Run one task on ``session`` (created or resumed) with the live rendering; close the
    model afterwards.  Returns whether the run ended with an abort (with ``goal``: whether the
    goal did not complete), and the trace path."""
    if isinstance(model_llm, ScriptedLLM):
        model_llm.bind(session)
    out, err = _console(), _console(stderr=True)
    if not as_json and message is not None:
        out.print(Text(f"> {safe(message)}", style="bold"), soft_wrap=True)
    view = None
    if goal is not None:
        start = session.state.goal.tokens_used if goal.resume else 0
        view = GoalView(err if as_json else out, start_tokens=start)
    try:
        async with AsyncExitStack() as stack:
            if host is not None:
                # Entered before the session and left after it: children live in the
                # runner's task group, and leaving it aborts any still running.
                await stack.enter_async_context(host.runner)
            async with session:
                outcome = await drive(
                    session,
                    None if message is None else [user_text(message)],
                    approve=approve,
                    as_json=as_json,
                    out=out,
                    err=err,
                    goal=goal,
                    intercept=view.take if view is not None else None,
                )
                trace = session.trace_path
    finally:
        await close_llm(model_llm)
        if host is not None:
            await host.aclose()
    return (not view.complete if view is not None else outcome.aborted), trace


def _record_json(msg: OmniMessage) -> Any:
    return msgspec.json.decode(encode(msg))


def _print_resume_state(
    sid: str,
    files: list[Path],
    latest: Path,
    context: ModelContext,
    state: SessionState,
    meta: OmniMessage,
    *,
    as_json: bool,
) -> None:
    payload = meta.payload
    assert isinstance(payload, SessionMetaPayload)
    carry = list(context.pending)
    history = list(context.history)
    last_reply = next(
        (
            m
            for m in reversed(history)
            if getattr(m.payload, "role", None) == "assistant" and hasattr(m.payload, "text")
        ),
        None,
    )
    if as_json:
        write_json(
            {
                "session_id": sid,
                "files": [str(f) for f in files],
                "latest_trace": str(latest),
                "meta": _record_json(meta)["payload"],
                "state": state_dict(state),
                "context": context_dict(context),
                "carry_over": [_record_json(m) for m in carry],
                "last_reply": getattr(last_reply.payload, "text", None) if last_reply else None,
            }
        )
        return
    out = _console()
    t = Text
    out.print(t(f"Session {safe(sid)}", style="bold"))
    out.print(
        t(
            f"  latest trace: {safe(str(latest), keep_newlines=False)} "
            f"(file {len(files)} of {len(files)})"
        ),
        soft_wrap=True,
    )
    out.print(
        t(
            f"  model: {preview(payload.provider, 40)}/{preview(payload.model_id, 60)}; "
            f"workspace: {preview(payload.workspace, 100)}"
        ),
        soft_wrap=True,
    )
    s = state_dict(state)
    out.print(
        t(
            f"  turns {s['turns_total']} ({s['turns_in_context']} in context); "
            f"session tokens {s['session_tokens']['total']}; last request "
            f"{s['last_request_status'] or '-'}; task running: {s['task_running']}"
        )
    )
    c = context_dict(context)
    out.print(
        t(
            f"  context: {c['history']} messages in history, {c['carry_over']} carried over, "
            f"pending summary: {'yes' if c['pending_summary'] else 'no'}, "
            f"closed: {c['closed']}"
        )
    )
    if s["goal"]:
        out.print(t(goal_line(s["goal"])), soft_wrap=True)
    if carry:
        out.print(t("Carry-over (sent before the next prompt):", style="bold"))
        for m in carry:
            out.print(t(f"  {describe(m)}"), soft_wrap=True)
    if last_reply is not None:
        out.print(t("Last reply:", style="bold"))
        out.print(t(f"  {preview(getattr(last_reply.payload, 'text', ''), 300)}"), soft_wrap=True)
    out.print(t(f'Continue with: penguin resume {safe(sid)} -m "…"', style="dim"))


# --------------------------------------------------------------------------- sessions


@app.command()
def sessions(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """List the sessions of the data root, newest first.

    Columns: id, project/agent, created (from the id), files, records, turns, the status of the
    last request, and the latest trace file.  Reads only; takes no lock.
    """
    with errors_to_exit_codes():
        g = _globals(ctx)
        root = g.root()
        infos = root.sessions(project=g.project, agent=g.agent)
        rows: list[dict[str, Any]] = []
        with _progress(len(infos), "sessions", enabled=len(infos) >= _PROGRESS_FILES) as advance:
            for info in infos:
                row: dict[str, Any] = {
                    "session_id": info.session_id,
                    "project": info.project,
                    "agent": info.agent,
                    "created": info.created.isoformat(timespec="seconds"),
                    "files": len(info.files),
                }
                try:
                    _files, latest, _ctx, state, _meta = load_session(
                        root, info.session_id, project=info.project, agent=info.agent
                    )
                except (OSError, ValueError, LookupError) as exc:
                    row.update(
                        records=None,
                        turns=None,
                        last_status="unreadable",
                        task_running=None,
                        latest_trace=str(info.files[-1]),
                        error=str(exc),
                    )
                else:
                    row.update(
                        records=state.records,
                        turns=state.turns_total,
                        last_status=state.last_request_status,
                        task_running=state.task_running,
                        latest_trace=str(latest),
                    )
                rows.append(row)
                advance(1)
        if as_json:
            write_json(rows)
            return
        out = _console()
        if not rows:
            out.print(Text(f"no sessions under {safe(str(root.home))}"))
            return
        table = Table(show_edge=False, pad_edge=False)
        for col in (
            "id",
            "project/agent",
            "created",
            "files",
            "records",
            "turns",
            "last status",
            "latest trace",
        ):
            table.add_column(
                col,
                overflow="fold",
                justify="right" if col in ("files", "records", "turns") else "left",
            )
        for row in rows:
            table.add_row(
                Text(safe(row["session_id"], keep_newlines=False)),
                Text(safe(f"{row['project']}/{row['agent']}", keep_newlines=False)),
                Text(row["created"].replace("T", " ")),
                Text(str(row["files"])),
                Text("" if row["records"] is None else str(row["records"])),
                Text("" if row["turns"] is None else str(row["turns"])),
                Text(str(row["last_status"] or "-")),
                Text(safe(row["latest_trace"], keep_newlines=False)),
            )
        out.print(table)


# --------------------------------------------------------------------------- inspect


@app.command()
def inspect(
    ctx: typer.Context,
    target: Annotated[
        str,
        typer.Argument(
            help="A session id, a trace file, or a directory holding one session's files.",
            show_default=False,
            metavar="SESSION_OR_PATH",
        ),
    ],
    file: Annotated[
        int | None,
        typer.Option(
            "--file", help="Only file N of the session (its _NNN index).", show_default=False
        ),
    ] = None,
    records: Annotated[
        bool,
        typer.Option(
            "--records",
            help="List every record with its file:ordinal "
            "coordinate (as `fork` takes it) and line number.",
        ),
    ] = False,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow",
            "-f",
            help="Keep printing records as a live session "
            "writes them (across file rotations) until Ctrl-C.",
        ),
    ] = False,
    children: Annotated[
        bool,
        typer.Option(
            "--children",
            help="Also show every subagent session this trace "
            "points to, indented under the pointer's file:ordinal (recursively; "
            "with --json, as nested `children`).",
        ),
    ] = False,
    at: Annotated[
        str | None,
        typer.Option(
            "--at",
            help="Show the exact request sent at the request_begin FILE:ORDINAL (or the model "
            "context after any other record), synthesized messages marked with *.",
            show_default=False,
            metavar="FILE:ORDINAL",
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Show what a session's trace holds.

    Files with counts per record type, the session state, a summary of the model context
    (history, carry-over, pending summary, closed), a timeline of request spans (status,
    attempts, durations, tokens) with tool calls, approvals and outputs, compactions and
    aborts, and what the reader skipped (diagnostics).  Reads only; takes no lock.  A
    subagent pointer that cannot be followed (--children) is reported, not an error.
    """
    with errors_to_exit_codes():
        g = _globals(ctx)
        if children and (records or follow):
            raise CliError(
                "--children shows the session view: it does not combine with --records or --follow"
            )
        t = resolve_target(target, g)
        if at is not None:
            point = show_at(_console(), t.files, at, as_json=as_json)
            if point is not None:
                write_json(point)
            return
        numbered = [read_numbered(path) for path in t.files]
        selected: list[int] | None = None
        if file is not None:
            positions = [i for i, nf in enumerate(numbered) if nf.index == file]
            if not positions:
                have = ", ".join(str(nf.index) for nf in numbered)
                raise CliError(f"no file {file} in {safe(t.label)} (files: {have})")
            selected = positions
        if follow:
            _follow(numbered[selected[0] if selected else -1].path, as_json=as_json)
            return
        chosen = numbered if selected is None else [numbered[i] for i in selected]
        if records:
            if as_json:
                write_json(
                    {
                        "session_id": t.session_id,
                        "records": [record_row(*row) for row in iter_rows(chosen)],
                    }
                )
            else:
                render_records(_console(), chosen)
            return
        insp = build_inspection(numbered, selected=selected)
        if not children:
            if as_json:
                write_json(insp.as_json())
            else:
                render_inspection(_console(), insp, label=t.label)
            return
        root = g.root()

        def find(session_id: str) -> list[Path]:
            return find_session_files(
                session_id, near=t.files, root=root, project=t.project, agent=t.agent
            )

        seen = {t.session_id} if t.session_id else set()
        views = follow_children(insp, find, seen=seen)
        if as_json:
            write_json(insp.as_json() | {"children": [v.as_json() for v in views]})
        else:
            out = _console()
            render_inspection(out, insp, label=t.label)
            render_children(out, views)


def _follow(path: Path, *, as_json: bool) -> None:
    out = _console()

    def emit(index: int, ordinal: int, line: int, record: OmniMessage) -> None:
        if as_json:
            sys.stdout.write(safe_json_bytes(encode(record)).decode("utf-8") + "\n")
        else:
            coord = f"{index}:{ordinal}"
            out.print(Text(f"{coord:>7} ", style="bold") + Text(describe(record)), soft_wrap=True)
        sys.stdout.flush()

    _console(stderr=True).print(
        Text(f"following {safe(str(path), keep_newlines=False)} (Ctrl-C to stop)", style="dim"),
        soft_wrap=True,
    )
    anyio.run(follow, path, emit)


# --------------------------------------------------------------------------- validate


def _expand(arg: str, g: Globals) -> list[Path]:
    path = Path(arg)
    if path.is_dir():
        files = find_trace_files(path)
        if not files:
            raise CliError(f"{safe(arg)}: no trace files (*.jsonl) in this directory")
        return files
    if path.exists():
        sniff_trace(path)
        return [path]
    return resolve_target(arg, g).files


@app.command()
def validate(
    ctx: typer.Context,
    paths: Annotated[
        list[str],
        typer.Argument(
            help="Session ids, trace files or directories (searched recursively).",
            show_default=False,
            metavar="SESSION_OR_PATH",
        ),
    ],
    strict: Annotated[
        bool,
        typer.Option(
            "--strict", help="Fail on warnings too, and report decreasing timestamps (V-20)."
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print findings as a JSON list.")] = False,
) -> None:
    """Check trace files against the rules V-1…V-20 (SPEC §16.1).

    Prints each finding as `<path>:<line>: <V-id> <error|warning>: <message>`; exit 1 on any
    error (with --strict, on any warning too).  Files are grouped into sessions by the id in
    their names, so cross-file rules (rotation heads, contiguous indices) are checked too.
    """
    with errors_to_exit_codes():
        g = _globals(ctx)
        files: list[Path] = []
        seen: set[Path] = set()
        for arg in paths:
            for f in _expand(arg, g):
                resolved = f.resolve()
                if resolved not in seen:
                    seen.add(resolved)
                    files.append(f)
        groups = group_sessions(files)
        large = len(files) >= _PROGRESS_FILES or total_bytes(files) >= _PROGRESS_BYTES
        findings: list[Finding] = []
        with _progress(len(files), "validate", enabled=large) as advance:
            for group in groups.values():
                findings.extend(validate_session(group, strict=strict))
                advance(len(group))
        errors = sum(1 for f in findings if f.severity == "error")
        warnings = len(findings) - errors
        if as_json:
            write_json(
                [
                    {
                        "path": str(f.path),
                        "line": f.line,
                        "rule": f.rule,
                        "severity": f.severity,
                        "message": f.message,
                    }
                    for f in findings
                ]
            )
        else:
            console = _console()
            for finding in findings:
                console.print(Text(safe(str(finding), keep_newlines=False)), soft_wrap=True)
            _console(stderr=True).print(
                Text(
                    f"{len(files)} file(s), {len(groups)} session(s): {errors} error(s), "
                    f"{warnings} warning(s)",
                    style="dim",
                )
            )
        bad = errors > 0 or (strict and warnings > 0)
        raise typer.Exit(1 if bad else 0)


# --------------------------------------------------------------------------- replay


@app.command()
def replay(
    ctx: typer.Context,
    target: Annotated[
        str,
        typer.Argument(
            help="A session id, a trace file, or a directory holding one session's files.",
            show_default=False,
            metavar="SESSION_OR_PATH",
        ),
    ],
    max_turns: Annotated[
        int | None,
        typer.Option(
            "--max-turns",
            help="Turn limit of the replayed runs [default: from "
            "the trace's max-turns notice, else 100].",
            show_default=False,
        ),
    ] = None,
    max_context_length: Annotated[
        int | None,
        typer.Option(
            "--max-context-length",
            help="Compaction threshold [default: inferred from the recorded compactions].",
            show_default=False,
        ),
    ] = None,
    max_session_turns: Annotated[
        int | None,
        typer.Option(
            "--max-session-turns",
            help="Turns-in-context compaction threshold [default: inferred].",
            show_default=False,
        ),
    ] = None,
    compaction_mode: Annotated[
        ModeChoice | None,
        typer.Option(
            "--compaction-mode", help="Compaction mode [default: as recorded].", show_default=False
        ),
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Re-run a recorded session and compare the result with its trace.

    The session is replayed in a temporary data root with the recorded model answers, tool
    outputs and approvals; both record sequences (timestamps and session_meta left out) must
    be equal.  Runs up to the first one with an abort or steering are compared.  Prints
    `match` with the number of runs compared, or the first divergence; exit 1 on divergence.
    Settings are read from the trace; the options override them.
    """
    with errors_to_exit_codes():
        g = _globals(ctx)
        t = resolve_target(target, g)
        try:
            from replay.golden import replay_trace
        except ImportError:
            raise CliError(
                "replay is not available in this installation (replay.golden is missing)"
            ) from None
        result = _call_replay(
            replay_trace,
            t.files,
            max_turns=max_turns,
            max_context_length=max_context_length,
            max_session_turns=max_session_turns,
            compaction_mode=compaction_mode.value if compaction_mode else None,
        )
        matched = bool(result.matched)
        runs = getattr(result, "runs_compared", None)
        runs_total = getattr(result, "runs_total", None)
        stopped = getattr(result, "stopped", None)
        divergence = getattr(result, "divergence", None)
        if as_json:
            write_json(
                {
                    "matched": matched,
                    "runs_compared": runs,
                    "runs_total": runs_total,
                    "stopped": stopped,
                    "divergence": _divergence_json(divergence),
                    "summary": str(result),
                }
            )
        else:
            out = _console()
            of = f" of {runs_total}" if runs_total is not None else ""
            if matched:
                out.print(Text(f"match ({runs}{of} run(s) compared)", style="green"))
            else:
                index = getattr(divergence, "index", None)
                where = f" at record {index}" if index is not None else ""
                out.print(Text(f"diverged{where} ({runs}{of} run(s) compared):", style="red"))
                out.print(Text(safe(str(result))), soft_wrap=True)
            if stopped:
                _console(stderr=True).print(
                    Text(f"compared up to: {safe(str(stopped))}", style="dim"), soft_wrap=True
                )
        raise typer.Exit(0 if matched else 1)


def _call_replay(replay_trace: Any, files: list[Path], **options: Any) -> Any:
    import inspect as pyinspect

    kwargs = {k: v for k, v in options.items() if v is not None}
    try:
        params = pyinspect.signature(replay_trace).parameters
    except (TypeError, ValueError):
        params = None
    if params is not None and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        unsupported = [k for k in kwargs if k not in params]
        if unsupported:
            raise CliError(f"replay does not support {', '.join(unsupported)} in this version")
    source: Any = files if len(files) > 1 else files[0]
    return replay_trace(source, **kwargs)


def _divergence_json(divergence: Any) -> Any:
    if divergence is None:
        return None
    if isinstance(divergence, dict | list | str | int | float | bool):
        return divergence
    try:
        return json.loads(msgspec.json.encode(divergence, enc_hook=_to_jsonable))
    except (TypeError, msgspec.EncodeError):
        return str(divergence)


def _to_jsonable(value: Any) -> Any:
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    raise TypeError(f"not JSON: {type(value).__name__}")


# --------------------------------------------------------------------------- stats


@app.command()
def stats(
    ctx: typer.Context,
    target: Annotated[
        str | None,
        typer.Argument(
            help="A session id or trace path [default: the latest session].",
            show_default=False,
            metavar="SESSION_OR_PATH",
        ),
    ] = None,
    all_sessions: Annotated[
        bool,
        typer.Option(
            "--all", help="Every session of the data root (or of --project / --agent), with totals."
        ),
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Token usage, requests, retries, compactions and errors of sessions.

    From the Usage projection: one row per request span (turn or compaction) with its status,
    attempt and token counts, plus error rows (failed requests, failed compactions, aborts).
    """
    with errors_to_exit_codes():
        g = _globals(ctx)
        if all_sessions and target is not None:
            raise CliError("give a session or --all, not both")
        if not all_sessions:
            t = resolve_target(target if target is not None else latest_session_id(g), g)
            usage = usage_of(t.files)
            sid = t.session_id or t.label
            if as_json:
                write_json({"session_id": sid, **usage_json(usage)})
            else:
                render_usage(_console(), sid, usage)
            return
        root = g.root()
        infos = root.sessions(project=g.project, agent=g.agent)
        rows: list[dict[str, Any]] = []
        total: dict[str, Any] = {}
        with _progress(len(infos), "stats", enabled=len(infos) >= _PROGRESS_FILES) as advance:
            for info in infos:
                row: dict[str, Any] = {
                    "session_id": info.session_id,
                    "project": info.project,
                    "agent": info.agent,
                }
                try:
                    summary = usage_summary(usage_of(info.files))
                except OSError as exc:
                    row["error"] = str(exc)
                else:
                    row.update(summary)
                    add_summaries(total, summary)
                rows.append(row)
                advance(1)
        total = finish_totals(total)
        if as_json:
            write_json({"sessions": rows, "totals": total})
        else:
            render_all(_console(), rows, total)


# --------------------------------------------------------------------------- demo


@app.command()
def demo(
    keep: Annotated[
        bool, typer.Option("--keep", help="Keep the temporary home and workspace.")
    ] = False,
) -> None:
    """Run the embedded demo agent in a scratch directory, then validate its trace.

    Uses the real built-in tools.  Shows text, thinking, tool calls, one timeout and its retry, and a compaction.  The exit
    code is the validation result.
    """
    base = Path(tempfile.mkdtemp(prefix="penguin-demo-"))
    home, workspace = base / "home", base / "workspace"
    workspace.mkdir()
    console = _console()
    try:
        trace_files = anyio.run(_demo, home, workspace, console)
        findings = validate_session(trace_files)
        errors = [f for f in findings if f.severity == "error"]
        for finding in findings:
            console.print(Text(safe(str(finding), keep_newlines=False)), soft_wrap=True)
        verdict = "valid" if not errors else f"INVALID ({len(errors)} error(s))"
        console.print(Text(f"trace: {verdict}"))
        if keep:
            console.print(Text(f"kept: {base}"), soft_wrap=True)
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
    console.print(Text(f"> {_DEMO_PROMPT}", style="bold"))
    async with session:
        async for msg in session.run([user_text(_DEMO_PROMPT)], approve=allow_all):
            renderer.feed(msg)
        renderer.close()
        console.print(Text(f"session: {session.id}"), soft_wrap=True)
        console.print(Text(f"trace:   {session.trace_path}"), soft_wrap=True)
    return root.trace_files(session.id)


def main() -> None:
    """Console-script entry point: a closed stdout (``| head``) ends quietly."""
    try:
        app()
    except BrokenPipeError:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise SystemExit(1) from None


from . import _query as _query  # noqa: E402  (registers `query` and `export-parquet` on app)
from . import _serve as _serve  # noqa: E402  (registers `penguin serve` on `app`)
from . import _tracetools as _tracetools  # noqa: E402  (registers diff, repair, export, import)
