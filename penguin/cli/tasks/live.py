"""Driving one task from the terminal: ``penguin run`` and ``penguin resume -m`` (R-CLI-1/2).

Owns: choosing the environment, the approval callback (``allow-all``, ``deny-all``, ``ask`` —
y/n read from stdin in a daemon thread — or ``refuse``, deny with a notice), Ctrl-C
handling (first → the run's ``AbortSignal``, second → exit 130 at once), the live ``[retry]``
countdown on a terminal's stderr, streaming the run as a rendering or as JSON lines, and the
``--subagents`` host (``penguin._subagents``: children get the same kind of model).
Does not: implement any engine behaviour, or choose the model (``tasks.model``).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import anyio
import anyio.abc
from rich.console import Console
from rich.text import Text

from engine import (
    LLM,
    AbortSignal,
    Approval,
    ApproveFn,
    CompactionSettings,
    Environment,
    GoalOptions,
    LocalEnvironment,
    Session,
    SubagentRunner,
    allow_all,
    deny_all,
    with_approval_mode,
)
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import (
    AbortPayload,
    DataRoot,
    OmniMessage,
    RequestEndPayload,
    ToolCallPayload,
    encode,
)
from eventstore.builders import user_text
from penguin._subagents import CHILD_SCRIPT, SUBAGENT_SYSTEM_PROMPT, Subagents, SubagentsUnavailable
from penguin._subagents import build_subagents as _build_subagents
from penguin.cli.errors import CliError
from penguin.cli.terminal.console import quiet_stdout
from penguin.cli.terminal.keyboard import Keyboard, restore_terminal
from penguin.cli.terminal.safe import preview, safe, safe_json_bytes
from penguin.cli.views.render import StreamRenderer, short_id

from .model import ApproveMode, ModelChoice, build_llm

__all__ = [
    "CHILD_SCRIPT",
    "SUBAGENT_SYSTEM_PROMPT",
    "RunOutcome",
    "Subagents",
    "build_compaction",
    "build_subagents",
    "drive",
    "environment_for",
]

# How long an approval prompt waits for the stream to show its call first.
_SHOW_WAIT_S: Final = 1.0


def environment_for(
    llm: LLM, workspace: Path, *, subagents: SubagentRunner | None = None
) -> Environment:
    """A script that declares its own ``tools`` gets them served from the script
    (``ScriptedEnvironment``); everything else runs the built-in tools in ``workspace``, plus
    ``run_subagent`` when given ``subagents``."""
    if isinstance(llm, ScriptedLLM) and llm.script.tools:
        if subagents is not None:
            raise CliError(
                "--subagents needs the built-in tools, but this script declares its own `tools`"
            )
        return ScriptedEnvironment.from_llm(llm)
    return LocalEnvironment(workspace, subagents=subagents)


# --------------------------------------------------------------------------- subagents


def build_subagents(
    llm: LLM,
    choice: ModelChoice,
    *,
    root: DataRoot,
    workspace: Path,
    project: str,
    agent: str,
    compaction: CompactionSettings | None,
    max_turns: int,
) -> Subagents:
    """The ``--subagents`` host (``penguin._subagents``, shared with ``penguin serve``): a
    provider's children each get a new client built from the same options."""
    try:
        return _build_subagents(
            llm,
            lambda: build_llm(choice),
            root=root,
            workspace=workspace,
            project=project,
            agent=agent,
            compaction=compaction,
            max_turns=max_turns,
        )
    except SubagentsUnavailable as exc:
        message = str(exc).replace("subagents need", "--subagents needs", 1)
        raise CliError(safe(message)) from None


def build_compaction(
    *,
    max_context_length: int | None,
    max_session_turns: int | None,
    compaction_mode: str | None,
) -> CompactionSettings:
    base = Session.DEFAULT_COMPACTION
    changes: dict[str, Any] = {}
    if max_context_length is not None:
        changes["max_context_length"] = max_context_length
    if max_session_turns is not None:
        changes["max_session_turns"] = max_session_turns
    if compaction_mode is not None:
        if compaction_mode not in ("summarize", "discard"):
            raise CliError(
                f"unknown --compaction-mode {safe(compaction_mode)!r}: choose summarize or discard"
            )
        changes["mode"] = compaction_mode
    return base.model_copy(update=changes) if changes else base


# --------------------------------------------------------------------------- approvals


_YES: Final = ("y", "yes")
_NO: Final = ("n", "no")
_ALL: Final = ("a", "all")
_QUIT: Final = ("/exit", "/quit")


class _Asker:
    """``--approve ask``: y = allow, n = deny, a = allow this and the rest; on a terminal one
    key answers (no Enter).  Any other answer asks again (it was a silent deny, issue 30 item
    3); ``/exit`` ends the run (aborted: the call is not run)."""

    def __init__(
        self, renderer: StreamRenderer, err: Console, cancel: AbortSignal, keyboard: Keyboard
    ) -> None:
        self._renderer = renderer
        self._err = err
        self._cancel = cancel
        self._keys = keyboard
        self._allow_rest = False
        self._one_at_a_time = anyio.Lock()  # a subagent may ask while its parent does
        self.steer: Callable[[str], None] = lambda _line: None
        # Keyed by (origin, call id): a subagent's call ids may repeat its parent's.
        self._shown: dict[tuple[tuple[str, ...], str], anyio.Event] = {}

    def _event(self, origin: list[str] | None, call_id: str) -> anyio.Event:
        return self._shown.setdefault((tuple(origin or ()), call_id), anyio.Event())

    def note(self, msg: OmniMessage) -> None:
        """Called once the stream consumer has shown ``msg``: a prompt for a call waits for
        its ``[tool]`` line, so that the text the model wrote before it is on screen first."""
        p = msg.payload
        if isinstance(p, ToolCallPayload):
            self._event(msg.origin, p.tool_call_id).set()

    async def _until_shown(self, origin: list[str] | None, call_id: str) -> bool:
        """False when the run was aborted first.  Ordering is a nicety: a call the stream
        never shows is asked about after a short wait anyway."""
        shown = self._event(origin, call_id)
        with anyio.move_on_after(_SHOW_WAIT_S):
            async with anyio.create_task_group() as tg:

                async def on_cancel() -> None:
                    await self._cancel.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(on_cancel)
                await shown.wait()
                tg.cancel_scope.cancel()
        return not self._cancel.aborted

    async def __call__(self, call: OmniMessage) -> Approval:
        async with self._one_at_a_time:
            return await self._ask(call)

    async def _ask(self, call: OmniMessage) -> Approval:
        if self._allow_rest:
            return "allow"
        if self._cancel.aborted:
            return "deny"
        p = call.payload
        name, args, cid = (
            (p.name, p.arguments, p.tool_call_id)
            if isinstance(p, ToolCallPayload)
            else ("?", "", "?")
        )
        if not await self._until_shown(call.origin, cid):
            return "deny"  # aborted before the call was even shown
        self._renderer.break_line()
        # A subagent's call (R-SUB-5) names the child it comes from, as the rendering does.
        who = f"[subagent {short_id(call.origin[-1])}] " if call.origin else ""
        self._err.print(
            Text(
                f"[approve] {who}{preview(name, 60)} {preview(args, 200)} ({preview(cid, 60)})",
                style="magenta bold",
            ),
            soft_wrap=True,
        )
        keys = self._keys
        if keys.tty:  # lines typed before the question are steering, not answers
            for line in keys.pending_lines():
                self.steer(line)
        keys.asking = True
        try:
            with keys.single_keys():
                answer = await self._answer()
        finally:
            keys.asking = False
        if answer is None:
            return "deny"
        if answer in _QUIT:
            self._cancel.abort("quit at the approval prompt")
            return "deny"
        if answer in _ALL:
            self._allow_rest = True
        return "allow" if answer in (*_YES, *_ALL) else "deny"

    async def _answer(self) -> str | None:
        """y/n/a (or yes/no/all, or /exit), asked again until it is one; None: end of input
        (denied, and said so) or the run was aborted."""
        prompt = "allow? [y]es / [n]o / [a]ll from now on: "
        while True:
            self._err.print(Text(prompt), end="")
            self._err.file.flush()
            answer = await (self._typed_key() if self._keys.tty else self._typed_line())
            if answer is None:
                self._err.print()
                if not self._cancel.aborted:
                    self._err.print(Text("(end of input: denied)", style="dim"))
                return None
            answer = answer.strip().lower()
            if answer in (*_YES, *_NO, *_ALL, *_QUIT):
                return answer
            self._err.print(
                Text(
                    "answer y (yes), n (no) or a (all from now on); /exit ends the run, "
                    "Ctrl-C aborts it",
                    style="magenta",
                ),
                soft_wrap=True,
            )

    async def _typed_line(self) -> str | None:
        return await self._keys.line(self._cancel)

    async def _typed_key(self) -> str | None:
        """One key; ``/`` starts a typed command (echoed, ended by Enter)."""
        key = await self._keys.key(self._cancel)
        if key is None:
            return None
        if key != "/":
            shown = {"y": "yes", "n": "no", "a": "all"}.get(key.lower(), "")
            self._err.print(Text(shown))  # ends the prompt's line
            return key if shown else key + "?"  # "?": a stray key is no answer
        typed = key
        self._err.file.write(key)
        self._err.file.flush()
        while True:
            key = await self._keys.key(self._cancel)
            if key is None:
                return None
            if key in "\r\n":
                self._err.print()
                return typed
            if key in "\x7f\b":
                if typed:
                    typed = typed[:-1]
                    self._err.file.write("\b \b")
            elif key.isprintable():
                typed += key
                self._err.file.write(key)
            self._err.file.flush()


class _RefuseWithNotice:
    """The default of a real model without a terminal: every call is denied, and the first
    denial says why and which flag changes it (once per run)."""

    def __init__(self, renderer: StreamRenderer, err: Console) -> None:
        self._renderer = renderer
        self._err = err
        self._told = False

    async def __call__(self, call: OmniMessage) -> Approval:
        if not self._told:
            self._told = True
            self._renderer.break_line()
            self._err.print(
                Text(
                    "[approve] tool calls are refused: stdin is not a terminal and no --approve "
                    "was given (pass --approve allow-all to let the model run tools)",
                    style="yellow",
                ),
                soft_wrap=True,
            )
        return "deny"


def _approver(
    mode: ApproveMode,
    renderer: StreamRenderer,
    err: Console,
    cancel: AbortSignal,
    keyboard: Keyboard,
) -> ApproveFn:
    if mode == "allow-all":
        return allow_all
    if mode == "deny-all":
        return deny_all
    # Both ask a person: the session's setting is ``ask`` (R-SET-1); without a terminal to ask
    # on, the call is refused with a notice, and a later run on a terminal asks again.
    if mode == "refuse":
        return with_approval_mode(_RefuseWithNotice(renderer, err), "ask")
    return with_approval_mode(_Asker(renderer, err, cancel, keyboard), "ask")


# --------------------------------------------------------------------------- the run


class _Countdown:
    """A transient ``next attempt in 1.2 s`` status under a ``[retry]`` line (terminals only)."""

    def __init__(self, err: Console, tg: anyio.abc.TaskGroup) -> None:
        self._err = err
        self._tg = tg
        self._scope: anyio.CancelScope | None = None
        self._drawn = False

    def start(self, delay_ms: int) -> None:
        self.stop()
        if not self._err.is_terminal or delay_ms <= 0:
            return
        scope = anyio.CancelScope()
        self._scope = scope
        deadline = anyio.current_time() + delay_ms / 1000
        self._tg.start_soon(self._tick, scope, deadline)

    async def _tick(self, scope: anyio.CancelScope, deadline: float) -> None:
        with scope:
            while True:
                left = deadline - anyio.current_time()
                if left <= 0:
                    break
                self._err.file.write(f"\r  next attempt in {left:4.1f} s ")
                self._err.file.flush()
                self._drawn = True
                await anyio.sleep(min(0.1, left))
        self._clear()

    def _clear(self) -> None:
        if self._drawn:
            self._err.file.write("\r\x1b[2K")
            self._err.file.flush()
            self._drawn = False

    def stop(self) -> None:
        if self._scope is not None:
            self._scope.cancel()
            self._scope = None
        self._clear()


class _Reader:
    """Whoever reads stdout.  When they stop (``run --json | head -1``) the run is not theirs
    to end: it goes on to its end unshown and the session stays intact (issue 30 item 2);
    stdout then points at /dev/null so later writes cannot fail."""

    def __init__(self) -> None:
        self.gone = False

    @contextmanager
    def gone_is_fine(self) -> Iterator[None]:
        try:
            yield
        except BrokenPipeError:
            self.gone = True
            quiet_stdout()


class _Steering:
    """Lines typed during a run (on a terminal): each is steering (R-STEER), or is said not to
    be sent (issue 30 item 7: they were echoed into the output and dropped)."""

    def __init__(
        self, session: Session, keyboard: Keyboard, renderer: StreamRenderer, err: Console
    ) -> None:
        self._session, self._keyboard, self._renderer, self._err = (
            session,
            keyboard,
            renderer,
            err,
        )

    def send(self, line: str) -> None:
        if not line.strip():
            return
        sent = self._session.steer([user_text(line.strip())])
        self._renderer.break_line()
        note = (
            "[steer] sent to the running task"
            if sent
            else "[steer] not sent: the task is ending (continue with `penguin resume "
            f"{safe(self._session.id, keep_newlines=False)} -m …`)"
        )
        self._err.print(Text(note, style="cyan"), soft_wrap=True)

    async def listen(self) -> None:
        while (line := await self._keyboard.line(AbortSignal(), steering=True)) is not None:
            self.send(line)


@dataclass(slots=True)
class RunOutcome:
    aborted: bool
    messages: int


def _quit_now() -> None:
    restore_terminal()
    try:
        sys.stdout.flush()
        sys.stderr.write("\n[interrupt] quit\n")
        sys.stderr.flush()
    finally:
        os._exit(130)


async def _interrupts(
    cancel: AbortSignal, err: Console, *, task_status: anyio.abc.TaskStatus[None]
) -> None:
    """First Ctrl-C aborts the run through its signal; the second quits at once (exit 130)."""
    with anyio.open_signal_receiver(signal.SIGINT) as signals:
        task_status.started()
        async for _ in signals:
            if cancel.aborted:
                _quit_now()
            err.print(
                Text(
                    "\n[interrupt] aborting the run… (Ctrl-C again to quit at once)", style="yellow"
                ),
                soft_wrap=True,
            )
            cancel.abort("interrupted from the terminal")


async def drive(
    session: Session,
    prompt: list[OmniMessage] | None,
    *,
    approve: ApproveMode,
    as_json: bool,
    out: Console,
    err: Console,
    on_message: Callable[[OmniMessage], None] | None = None,
    goal: GoalOptions | None = None,
    intercept: Callable[[OmniMessage], bool] | None = None,
    thinking: str | None = None,
) -> RunOutcome:
    """Run one task on an entered ``session``, rendering or printing JSON lines as it streams."""
    cancel = AbortSignal()
    renderer = StreamRenderer(out)
    keyboard = Keyboard()
    approve_fn = _approver(approve, renderer, err, cancel, keyboard)
    note = approve_fn.note if isinstance(approve_fn, _Asker) else None
    aborted = False
    count = 0

    steering = _Steering(session, keyboard, renderer, err)
    if isinstance(approve_fn, _Asker):
        approve_fn.steer = steering.send

    async with anyio.create_task_group() as tg:
        await tg.start(_interrupts, cancel, err)
        if keyboard.tty:  # a pipe on stdin holds answers, not steering
            tg.start_soon(steering.listen)
        countdown = _Countdown(err, tg)
        stream = session.run(
            prompt, approve=approve_fn, signal=cancel, goal=goal, thinking_level=thinking
        )
        reader = _Reader()
        async for msg in stream:
            countdown.stop()
            count += 1
            p = msg.payload
            with reader.gone_is_fine():
                if intercept is not None and intercept(msg) and not as_json:
                    pass  # shown by the interceptor (a goal round's input)
                elif reader.gone:
                    pass  # nobody reads stdout any more: the run goes on to its end
                elif as_json:
                    sys.stdout.write(safe_json_bytes(encode(msg)).decode("utf-8") + "\n")
                    sys.stdout.flush()
                else:
                    renderer.feed(msg)
            if note is not None:
                note(msg)
            if on_message is not None:
                on_message(msg)
            if msg.origin is None and isinstance(p, AbortPayload):
                aborted = True
            if (
                not as_json
                and msg.origin is None
                and isinstance(p, RequestEndPayload)
                and p.retry_in_ms is not None
            ):
                countdown.start(p.retry_in_ms)
        countdown.stop()
        tg.cancel_scope.cancel()
    with reader.gone_is_fine():
        renderer.close()
    return RunOutcome(aborted=aborted, messages=count)
