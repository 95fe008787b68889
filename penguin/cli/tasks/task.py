"""One task on a session from the command line, shared by ``run``, ``resume -m`` and ``chat``.

Owns: checking the task options (message, turn limit, workspace), the ``--json`` head line,
running the task with the live rendering, the end-of-run summary line (turns, tool calls,
tokens, elapsed time) and the exit code (1 when the task was aborted or hit ``--max-turns``).
Does not: choose the model (``tasks.model``) or build the session (the commands do).
"""

from __future__ import annotations

import sys
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from rich.console import Console
from rich.text import Text

from engine import DEFAULT_MAX_TURNS, LLM, CompactionSettings, GoalOptions, SandboxPolicy, Session
from engine.llm import ScriptedLLM
from eventstore import (
    AbortPayload,
    OmniMessage,
    RequestEndPayload,
    TextPayload,
    TokenUsagePayload,
    ToolCallPayload,
)
from eventstore.builders import user_text
from penguin.cli.config import Config
from penguin.cli.errors import CliError
from penguin.cli.globalopts import workspace_dir
from penguin.cli.options import checked_thinking
from penguin.cli.terminal.console import err_console, out_console, write_json
from penguin.cli.terminal.safe import safe
from penguin.cli.views.inspect import token_words
from penguin.cli.views.labels import sandbox_label
from projections import markers as mk

from .goal import GOAL_NOT_COMPLETE, GoalView
from .live import Subagents, build_compaction, drive
from .model import ApproveMode, LlmOptions, choose_sandbox, close_llm

if TYPE_CHECKING:
    from penguin._setup import Overrides

__all__ = [
    "DEFAULT_MAX_TURNS",
    "overrides_of",
    "TaskOptions",
    "TaskResult",
    "checked_message",
    "checked_turns",
    "checked_workspace",
    "finish_task",
    "run_task",
    "task_options",
]


def checked_message(message: str) -> str:
    if not message.strip():
        raise CliError("-m/--message is empty: give the task for the agent")
    return message


def checked_turns(max_turns: int | None) -> int:
    if max_turns is None:
        return DEFAULT_MAX_TURNS
    if max_turns <= 0:
        raise CliError(f"--max-turns must be at least 1, not {max_turns}")
    return max_turns


def overrides_of(opts: TaskOptions, *, approve: str | None = None) -> Overrides:
    """The settings the command line gave explicitly (SPEC §23: they override the recorded
    ones; what was not given comes from the record, the config or the defaults)."""
    from penguin._setup import Overrides

    given = opts.compaction.model_fields_set
    changes = {name: getattr(opts.compaction, name) for name in given}
    if opts.max_turns is not None:
        checked_turns(opts.max_turns)
    return Overrides(
        approval=approve,
        max_turns=opts.max_turns,
        compaction=changes or None,
        thinking_level=opts.thinking,
    )


def checked_workspace(path: Path, *, hint: str = "") -> Path:
    return workspace_dir(path.expanduser(), hint=hint)


@dataclass(slots=True, frozen=True)
class TaskOptions:
    """The options ``run`` and ``resume -m`` share, as given on the command line."""

    llm: LlmOptions
    approve: str | None
    workspace: Path | None
    max_turns: int | None
    compaction: CompactionSettings
    subagents: bool | None
    as_json: bool
    goal: GoalOptions | None = None
    thinking: str | None = None
    sandbox: str | None = None
    network: bool | None = None

    def sandbox_options(self, config: Config | None) -> dict[str, Any]:
        """``Session.create``/``resume_session``'s ``sandbox``/``network`` (SPEC §25)."""
        return choose_sandbox(self.sandbox, self.network, config=config)


def task_options(
    llm: LlmOptions,
    *,
    approve: Any,
    workspace: Path | None,
    max_turns: int | None,
    compaction: tuple[int | None, int | None, Any],
    subagents: bool | None,
    as_json: bool,
    goal: GoalOptions | None = None,
    thinking: str | None = None,
    sandbox: tuple[Any, bool | None] = (None, None),
) -> TaskOptions:
    """``TaskOptions`` from the command line's values (enums as given by typer)."""
    context, turns, mode = compaction
    return TaskOptions(
        llm=llm,
        approve=approve.value if approve else None,
        workspace=workspace,
        max_turns=max_turns,
        compaction=build_compaction(
            max_context_length=context,
            max_session_turns=turns,
            compaction_mode=mode.value if mode else None,
        ),
        subagents=subagents,
        as_json=as_json,
        goal=goal,
        thinking=checked_thinking(thinking),
        sandbox=sandbox[0].value if sandbox[0] else None,
        network=sandbox[1],
    )


def thinking_level(flag: str | None, config: Config) -> str | None:
    """The run's thinking level: ``--thinking``, else config.toml's ``thinking``, else None
    (the provider's default)."""
    return flag if flag is not None else config.get("thinking")


@dataclass(slots=True)
class TaskResult:
    """What one task did, counted from the messages it streamed (top level only)."""

    session_id: str = ""
    trace: Path = field(default_factory=Path)
    aborted: bool = False
    max_turns_reached: bool = False
    goal_incomplete: bool = False
    turns: int = 0
    tool_calls: int = 0
    input_tokens: int = 0
    cached_tokens: int = 0
    output_tokens: int = 0
    elapsed_s: float = 0.0
    goal_tokens: int | None = None  # a goal run's count (R-GOAL-5), the one it reports

    def count(self, msg: OmniMessage, max_turns: int) -> None:
        if msg.origin is not None:
            return
        p = msg.payload
        if isinstance(p, RequestEndPayload) and p.status == "completed":
            self.turns += 1
        elif isinstance(p, ToolCallPayload):
            self.tool_calls += 1
        elif isinstance(p, TokenUsagePayload):
            self.input_tokens += p.request.cache_read + p.request.cache_write
            self.cached_tokens += p.request.cache_read
            self.output_tokens += p.request.output
        elif isinstance(p, AbortPayload):
            self.aborted = True
        elif (
            isinstance(p, TextPayload)
            and p.stop_reason == "failed"
            and p.text == mk.max_turns_notice(max_turns)
        ):
            self.max_turns_reached = True

    def summary(self) -> str:
        ended = "aborted" if self.aborted else "max turns" if self.max_turns_reached else "done"
        if self.goal_incomplete:
            ended = "goal not complete"
        tokens = {
            "cache_read": self.cached_tokens,
            "cache_write": self.input_tokens - self.cached_tokens,
            "output": self.output_tokens,
            "total": self.input_tokens + self.output_tokens,
        }
        if self.goal_tokens is not None:
            # One number per goal run: the one its round and outcome lines count (R-GOAL-5),
            # not a second total that also counts the cached input.
            used = f"{self.goal_tokens} tokens used (input {tokens['cache_write']} uncached, "
            used += f"{self.cached_tokens} cached and not counted, output {self.output_tokens})"
        else:
            used = f"tokens: {token_words(tokens)}"
        return (
            f"{ended}: {self.turns} turn(s), {self.tool_calls} tool call(s), "
            f"{used}; {self.elapsed_s:.1f} s"
        )


async def run_task(
    session: Session,
    llm: LLM,
    message: str | None,
    *,
    approve: ApproveMode,
    as_json: bool,
    max_turns: int,
    host: Subagents | None = None,
    out: Console | None = None,
    goal: GoalOptions | None = None,
    thinking: str | None = None,
) -> TaskResult:
    """Run one task on ``session`` (created or resumed, not yet entered) with the live
    rendering; close the model afterwards.  ``message`` None continues a goal."""
    if isinstance(llm, ScriptedLLM):
        llm.bind(session)
    out = out or out_console()
    err = err_console()
    result = TaskResult(session_id=session.id, trace=session.trace_path)
    policy = session.sandbox
    if as_json:
        head: dict[str, object] = {"session_id": session.id, "trace": str(session.trace_path)}
        head["sandbox"] = None if policy is None else policy.settings()
        write_json(head)
    else:
        if policy != SandboxPolicy():  # the default goes without saying; anything else is shown
            label, style = sandbox_label(policy)
            err.print(Text(label, style=style), soft_wrap=True)
        if message is not None:
            out.print(Text(f"> {safe(message)}", style="bold"), soft_wrap=True)
    view = None
    if goal is not None:
        start = session.state.goal.tokens_used if goal.resume else 0
        view = GoalView(err if as_json else out, start_tokens=start)
    started = time.monotonic()
    try:
        async with AsyncExitStack() as stack:
            if host is not None:
                # Entered before the session and left after it: children live in the
                # runner's task group, and leaving it aborts any still running.
                await stack.enter_async_context(host.runner)
            async with session:
                await drive(
                    session,
                    None if message is None else [user_text(message)],
                    approve=approve,
                    as_json=as_json,
                    out=out,
                    err=err,
                    on_message=lambda msg: result.count(msg, max_turns),
                    goal=goal,
                    intercept=view.take if view is not None else None,
                    thinking=thinking,
                )
                result.trace = session.trace_path
                result.goal_incomplete = view is not None and not view.complete
                if view is not None:
                    result.goal_tokens = view.tokens_used
    finally:
        result.elapsed_s = time.monotonic() - started
        await close_llm(llm)
        if host is not None:
            await host.aclose()
    return result


def finish_task(result: TaskResult, *, as_json: bool) -> None:
    """The summary line, where the session is, and the exit code."""
    console = err_console() if as_json else out_console()
    console.print(Text(result.summary(), style="dim"), soft_wrap=True)
    console.print(Text(f"session: {result.session_id}"), soft_wrap=True)
    console.print(Text(f"trace:   {safe(str(result.trace), keep_newlines=False)}"), soft_wrap=True)
    if result.goal_incomplete:
        console.print(Text(f"{GOAL_NOT_COMPLETE} (exit 1)", style="yellow"))
        if result.aborted:
            # An interrupted goal continues where it stopped (R-GOAL-7): say how (issue 30).
            console.print(
                Text(
                    "the goal was interrupted; continue it with: penguin resume "
                    f"{safe(result.session_id, keep_newlines=False)} --goal-continue",
                    style="yellow",
                ),
                soft_wrap=True,
            )
    elif result.aborted:
        console.print(Text("the run ended with an abort (exit 1)", style="yellow"))
    elif result.max_turns_reached:
        console.print(
            Text("the task reached --max-turns before it finished (exit 1)", style="yellow")
        )
    sys.stdout.flush()
    failed = result.aborted or result.max_turns_reached or result.goal_incomplete
    raise typer.Exit(1 if failed else 0)
