"""``penguin resume``: show where a session stands, or continue it with one task (R-CLI-2).

Owns: the ``resume`` command, the rebuilt-state view (read only: no lock, no repair) and
continuing a session with its recorded model.  Does not: choose the model (``tasks.model``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from penguin.cli.errors import CliError, errors_to_exit_codes
from penguin.cli.globalopts import Globals, globals_of
from penguin.cli.options import (
    ApproveOpt,
    BaseUrlOpt,
    ChangeModelOpt,
    JsonOpt,
    KeyEnvOpt,
    LlmOpt,
    MaxContextOpt,
    MaxSessionTurnsOpt,
    MaxTurnsOpt,
    ModelOpt,
    ModeOpt,
    NetworkOpt,
    SandboxOpt,
    ScriptOpt,
    SubagentsOpt,
    ThinkingOpt,
)
from penguin.cli.tasks.goal import (
    BudgetOpt,
    GoalContinueOpt,
    check_goal_continue,
    goal_line,
    goal_options,
)
from penguin.cli.terminal.console import err_console, out_console, write_json
from penguin.cli.terminal.safe import preview, safe

if TYPE_CHECKING:
    from eventstore import Diagnostic, OmniMessage, SessionMetaPayload
    from penguin.cli.tasks.task import TaskOptions, TaskResult
    from projections import ModelContext, SessionState

__all__ = ["Loaded", "load", "resume"]


@dataclass(slots=True)
class Loaded:
    """A session folded without its lock."""

    session_id: str
    files: list[Path]
    latest: Path
    context: ModelContext
    state: SessionState
    meta: OmniMessage
    diagnostics: list[Diagnostic]

    @property
    def meta_payload(self) -> SessionMetaPayload:
        from eventstore import SessionMetaPayload

        p = self.meta.payload
        assert isinstance(p, SessionMetaPayload)
        return p


def load(g: Globals, session_id: str) -> Loaded:
    """Fold the session; an unknown id, and a session with no usable trace, are exit 2."""
    from penguin.cli.diagnose import quiet_reader, session_diagnostics
    from replay import load_session

    root = g.root()
    try:
        files = root.trace_files(session_id, project=g.project, agent=g.agent)
    except FileNotFoundError:
        raise CliError(
            f"unknown session: {safe(session_id)} (not under {safe(str(root.home))})"
        ) from None
    diagnostics = session_diagnostics(files)
    try:
        with quiet_reader():
            files, latest, context, state, meta = load_session(
                root, session_id, project=g.project, agent=g.agent
            )
    except FileNotFoundError:
        shown = ", ".join(safe(str(f), keep_newlines=False) for f in files)
        why = "; ".join(safe(d.detail, keep_newlines=False) for d in diagnostics[-3:])
        raise CliError(
            f"session {safe(session_id)} has no usable trace: {shown} "
            f"({why or 'empty'}); nothing to resume"
        ) from None
    return Loaded(session_id, files, latest, context, state, meta, diagnostics)


def resume(
    ctx: typer.Context,
    session_id: Annotated[
        str | None,
        typer.Argument(
            help="Session id or a unique prefix of one [default: the most recently active "
            "session of the project/agent].",
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
    change_model: ChangeModelOpt = False,
    workspace: Annotated[
        Path | None,
        typer.Option(
            "--workspace",
            help="Use this workspace instead of the recorded one "
            "(e.g. a trace from another machine).",
            show_default=False,
        ),
    ] = None,
    approve: ApproveOpt = None,
    max_turns: MaxTurnsOpt = None,
    max_context_length: MaxContextOpt = None,
    max_session_turns: MaxSessionTurnsOpt = None,
    compaction_mode: ModeOpt = None,
    subagents: SubagentsOpt = None,
    sandbox: SandboxOpt = None,
    network: NetworkOpt = None,
    goal_continue: GoalContinueOpt = False,
    budget: BudgetOpt = None,
    thinking: ThinkingOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Continue a session, or show where it stands.  Without -m: the state rebuilt from the trace (turns, tokens, context, carry-over); no lock,
    nothing written.  With -m: one task with the recorded model (--change-model for another),
    after closing what a crash left open (repairs are printed).  --goal-continue (no -m)
    continues an aborted or crashed goal.  Exit 2 while another process holds the session."""
    from penguin.cli.diagnose import report
    from penguin.cli.targets import resolve_session_id
    from penguin.cli.tasks.model import LlmOptions
    from penguin.cli.tasks.task import task_options

    with errors_to_exit_codes():
        g = globals_of(ctx)
        loaded = load(g, sid := resolve_session_id(g, session_id))
        report(err_console(), loaded.diagnostics)
        goal_opts = goal_options(goal=False, budget=budget, resume=goal_continue)
        check_goal_continue(sid, loaded.state.goal, message=message, goal_opts=goal_opts)
        if message is None and goal_opts is None:
            _print_state(loaded, as_json=as_json)
            return
        opts = task_options(
            LlmOptions(
                script, llm.value if llm else None, model, base_url, api_key_env, change_model
            ),
            approve=approve,
            workspace=workspace,
            max_turns=max_turns,
            compaction=(max_context_length, max_session_turns, compaction_mode),
            subagents=subagents,
            as_json=as_json,
            goal=goal_opts,
            thinking=thinking,
            sandbox=(sandbox, network),
        )
        _continue(g, loaded, message, opts)


def _continue(g: Globals, loaded: Loaded, message: str | None, opts: TaskOptions) -> None:
    import anyio

    from penguin.cli.tasks.setup import Recorded, prepare
    from penguin.cli.tasks.task import checked_message, finish_task, overrides_of, run_task

    text = checked_message(message) if message is not None else None
    recorded = Recorded(loaded.session_id, loaded.meta_payload, loaded.state.settings)
    setup = prepare(
        g,
        opts.llm,
        overrides_of(opts, approve=opts.approve),
        approve=opts.approve,
        resumed=recorded,
        workspace=opts.workspace,
        sandbox=opts.sandbox,
        network=opts.network,
        subagents=opts.subagents,
        thinking=opts.thinking,
    )
    torn = [d for d in loaded.diagnostics if d.kind == "torn_tail" and d.path == loaded.latest]

    async def go() -> TaskResult:
        session = await setup.open(system_prompt="")  # the recorded one is kept
        _report_cut(torn)
        return await run_task(
            session,
            setup.llm,
            text,
            approve=setup.mode,
            as_json=opts.as_json,
            max_turns=setup.resolved.max_turns,
            host=setup.host,
            goal=opts.goal,
            thinking=setup.thinking,
        )

    finish_task(anyio.run(go), as_json=opts.as_json)


def _report_cut(torn: list[Any]) -> None:
    """What resuming repaired: each torn last line it cut (R-CLI-2), in yellow on stderr."""
    from rich.text import Text

    for d in torn:
        err_console().print(
            Text(
                f"[resume] repaired: cut the torn last line {d.line} of "
                f"{safe(str(d.path), keep_newlines=False)} ({safe(d.detail)})",
                style="yellow",
            ),
            soft_wrap=True,
        )


def _record_json(msg: OmniMessage) -> Any:
    import msgspec

    from eventstore import encode

    return msgspec.json.decode(encode(msg))


def _last_reply(context: ModelContext) -> str | None:
    from eventstore import TextPayload

    for m in reversed(list(context.history)):
        p = m.payload
        if isinstance(p, TextPayload) and p.role == "assistant":
            return p.text
    return None


def _print_state(loaded: Loaded, *, as_json: bool) -> None:
    from rich.text import Text

    from penguin._setup import settings_line
    from penguin.cli.views.inspect import context_dict, describe, state_dict

    sid, context, payload = loaded.session_id, loaded.context, loaded.meta_payload
    carry = list(context.pending)
    last_reply = _last_reply(context)
    s, c = state_dict(loaded.state), context_dict(context)
    if as_json:
        write_json(
            {
                "session_id": sid,
                "files": [str(f) for f in loaded.files],
                "latest_trace": str(loaded.latest),
                "meta": _record_json(loaded.meta)["payload"],
                "state": s,
                "context": c,
                "carry_over": [_record_json(m) for m in carry],
                "last_reply": last_reply,
            }
        )
        return
    out, t = out_console(), Text
    n = len(loaded.files)
    out.print(t(f"Session {safe(sid)}", style="bold"))
    latest = safe(str(loaded.latest), keep_newlines=False)
    out.print(t(f"  latest trace: {latest} (file {n} of {n})"), soft_wrap=True)
    out.print(
        t(
            f"  model: {preview(payload.provider, 40)}/{preview(payload.model_id, 60)}; "
            f"workspace: {preview(payload.workspace, 100)}"
        ),
        soft_wrap=True,
    )
    running = "true" if s["task_running"] else "false"
    out.print(
        t(
            f"  turns {s['turns_total']} ({s['turns_in_context']} in context); "
            f"session tokens {s['session_tokens']['total']}; last request "
            f"{s['last_request_status'] or '-'}; task running: {running}"
        )
    )
    out.print(
        t(
            f"  context: {c['history']} messages in history, {c['carry_over']} carried over, "
            f"pending summary: {'yes' if c['pending_summary'] else 'no'}, "
            f"closed: {'true' if c['closed'] else 'false'}"
        )
    )
    out.print(t(f"  {safe(settings_line(loaded.state.settings))}"), soft_wrap=True)
    if s["goal"]:
        out.print(t(goal_line(s["goal"])), soft_wrap=True)
    if carry:
        out.print(t("Carry-over (sent before the next prompt):", style="bold"))
        for m in carry:
            out.print(t(f"  {describe(m)}"), soft_wrap=True)
    if last_reply is not None:
        out.print(t("Last reply:", style="bold"))
        out.print(t(f"  {preview(last_reply, 300)}"), soft_wrap=True)
    out.print(t(f'Continue with: penguin resume {safe(sid)} -m "…"', style="dim"))
