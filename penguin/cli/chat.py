"""``penguin chat`` (and ``penguin`` with no command): an interactive chat on a session.

Owns: the chat loop — a prompt_toolkit prompt that stays active while a task streams above it
(a line typed during a task steers it), the status bar (a spinner with the elapsed time while
the model or a tool is awaited, the ``[retry]`` countdown, a pending approval), inline approvals
(``y``/``n``/``a`` typed at the prompt), Ctrl-C (aborts the task; twice in a row at an idle
prompt quits), the slash commands, and the input history (``<home>/.cache/chat_history``).
Does not: choose the model (``tasks.model``), render messages (``views.render``) or drive the engine
beyond ``Session.run/steer/compact/generate_title``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import anyio
import anyio.abc
from rich.console import Console
from rich.text import Text

from engine import LLM, AbortSignal, Approval, GoalOptions, Session, with_approval_mode
from engine.llm import ScriptedLLM
from eventstore import (
    OmniMessage,
    PartialTextPayload,
    PartialThinkingPayload,
    RequestBeginPayload,
    RequestEndPayload,
    SessionMetaPayload,
    TextPayload,
    ToolCallPayload,
)
from eventstore.builders import user_text
from projections import markers as mk

from .errors import CliError
from .tasks.goal import GoalView, goal_options
from .tasks.model import ApproveMode
from .terminal.safe import preview, safe
from .views.labels import sandbox_label
from .views.render import StreamRenderer, short_id

if TYPE_CHECKING:
    from prompt_toolkit import PromptSession
    from prompt_toolkit.formatted_text import AnyFormattedText

    from replay import TaskChanges

__all__ = ["HELP", "Chat", "parse_slash"]

_SPINNER: Final = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"
_ANSWERS: Final = ("y", "yes", "n", "no", "a", "all")
_QUIT_WINDOW_S: Final = 2.0
HELP: Final = """\
Type a task and press Enter; while it runs, a line you type steers it.
  Ctrl-C      abort the running task (twice at an idle prompt: quit)
  /compact    compact the context now
  /goal[:budget] OBJECTIVE   pursue an objective over rounds (budget e.g. 500k)
  /fork       fork the session at its last completed task and go on in the fork
  /rewind [N] list the tasks with the files each changed; with N: put the workspace back as
              it was at the end of task N and go on in a fork from there
  /title      ask the model for a title
  /sessions   the most recent sessions
  /help       this help
  /exit       quit (also Ctrl-D)"""


def _round_input(text: str) -> str:
    """A goal round's input shown as the round, not its protocol block."""
    found = mk.goal_round_of(text)
    return text if found is None else f"[goal round {found[0]}] {found[1]}"


def parse_slash(line: str) -> tuple[str, str, str]:
    """``/goal:500k fix it`` → ``("goal", "500k", "fix it")``; ``/exit`` → ``("exit", "", "")``."""
    head, _, rest = line[1:].partition(" ")
    name, _, option = head.partition(":")
    return name.lower(), option, rest.strip()


@dataclass
class _Status:
    """What the status bar shows."""

    waiting_since: float | None = None
    retry_at: float | None = None
    approval: str | None = None
    started: float = field(default_factory=time.monotonic)


class _ScreenLines:
    """The chat's output while its prompt listens: whole lines only are written above the
    prompt, and the unfinished last line of a streaming answer is drawn as the prompt's first
    rows until its newline comes (issue 30 item 1).

    prompt_toolkit draws its prompt from the start of the row the cursor is on and clears that
    row when it redraws, so a line written without its newline (an answer whose stream has not
    ended yet) was wiped by the next redraw.  Lines go out through ``run_in_terminal`` (erase
    the prompt, write, draw it again) on the event loop; until then they are shown in the
    prompt too, so nothing blinks.  ``write``/``flush`` make it a file for rich's ``Console``.
    """

    encoding = "utf-8"

    def __init__(self, output: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._output = output
        self._loop = loop
        self._lines: list[str] = []  # complete lines not yet written above the prompt
        self.tail = ""  # the unfinished last line
        self._scheduled = False

    def write(self, data: str) -> int:
        done, newline, self.tail = (self.tail + data).rpartition("\n")
        if newline:
            self._lines.append(done + newline)
            if not self._scheduled:
                self._scheduled = True
                self._loop.call_soon_threadsafe(self._schedule)
        self._redraw()
        return len(data)

    def flush(self) -> None:
        """Nothing: a line leaves when it is whole (``close`` ends the last one)."""

    def isatty(self) -> bool:
        return True

    def shown(self) -> str:
        """What the prompt draws above its input line: lines on their way, then the tail."""
        return "".join(self._lines) + self.tail

    def close(self) -> None:
        """Write whatever is held (the chat is ending): the tail gets its newline."""
        if self.tail:
            self._lines.append(self.tail + "\n")
            self.tail = ""
        self._emit()

    def _schedule(self) -> None:
        from prompt_toolkit.application import run_in_terminal

        run_in_terminal(self._emit, in_executor=False)

    def _emit(self) -> None:
        self._scheduled = False
        text, self._lines = "".join(self._lines), []
        if text:
            self._output.write_raw(text.replace("\n", "\r\n"))
            self._output.flush()

    @staticmethod
    def _redraw() -> None:
        from prompt_toolkit.application.current import get_app_or_none

        app = get_app_or_none()
        if app is not None and app.is_running:
            app.invalidate()


def _wrapped(text: str, columns: int) -> list[tuple[str, str]]:
    """``text`` (with SGR colours) as prompt_toolkit fragments cut into rows of ``columns``
    cells: the rows above the prompt's input line are not wrapped by prompt_toolkit itself."""
    from prompt_toolkit.formatted_text import ANSI, to_formatted_text
    from prompt_toolkit.utils import get_cwidth

    out: list[tuple[str, str]] = []
    used = 0
    for style, chunk, *_ in to_formatted_text(ANSI(text)):
        for ch in chunk:
            if ch == "\n":
                out.append(("", "\n"))
                used = 0
                continue
            width = get_cwidth(ch)
            if used + width > columns:
                out.append(("", "\n"))
                used = 0
            out.append((style, ch))
            used += width
    return out


class Chat:
    """One chat on an entered ``session``; ``run`` returns when the user quits."""

    def __init__(
        self,
        session: Session,
        llm: LLM,
        *,
        approve: ApproveMode,
        max_turns: int,
        history: Path | None,
        list_sessions: Callable[[], list[str]],
        thinking: str | None = None,
        task_changes: Callable[[], list[TaskChanges]] | None = None,
    ) -> None:
        self.session = session
        self.llm = llm
        self.approve_mode: ApproveMode = approve
        self.max_turns = max_turns
        self.history = history
        self._list_sessions = list_sessions
        self.thinking = thinking
        self._task_changes = task_changes
        self.fork_requested = False
        self.rewind_requested: int | None = None
        self._shown: dict[str, anyio.Event] = {}
        self.status = _Status()
        self.cancel: AbortSignal | None = None
        self._answer: anyio.Event | None = None
        self._answer_text = ""
        self._allow_rest = False
        self._last_interrupt = 0.0
        self._out: Console | None = None
        self._screen: _ScreenLines | None = None

    # ------------------------------------------------------------------ status bar

    def toolbar(self) -> str:
        s = self.status
        now = time.monotonic()
        if s.approval is not None:
            return f" approve {s.approval}?  y = yes, n = no, a = all from now on"
        if s.retry_at is not None and s.retry_at > now:
            return f" [retry] next attempt in {s.retry_at - now:4.1f} s  (Ctrl-C aborts)"
        if s.waiting_since is not None:
            frame = _SPINNER[int(now * 10) % len(_SPINNER)]
            return f" {frame} working… {now - s.waiting_since:4.1f} s  (Ctrl-C aborts)"
        if self.cancel is not None:
            return " running  (type to steer, Ctrl-C aborts)"
        return f" session {short_id(self.session.id)}  /help for commands"

    def _watch(self, msg: OmniMessage) -> None:
        """Keep the status bar in step with the stream (top-level messages only)."""
        if msg.origin is not None:
            return
        p = msg.payload
        if isinstance(p, PartialTextPayload | PartialThinkingPayload):
            self.status.waiting_since = None
        elif isinstance(p, RequestBeginPayload):
            self.status.waiting_since = time.monotonic()
            self.status.retry_at = None
        elif isinstance(p, ToolCallPayload):
            self.status.waiting_since = time.monotonic()
        elif isinstance(p, RequestEndPayload) and p.retry_in_ms is not None:
            self.status.retry_at = time.monotonic() + p.retry_in_ms / 1000
        elif isinstance(p, TextPayload) and p.role == "assistant":
            self.status.waiting_since = None

    # ------------------------------------------------------------------ approvals

    async def approve(self, call: OmniMessage) -> Approval:
        if self.approve_mode == "allow-all" or self._allow_rest:
            return "allow"
        if self.approve_mode in ("deny-all", "refuse"):
            return "deny"
        p = call.payload
        name, args = (p.name, p.arguments) if isinstance(p, ToolCallPayload) else ("?", "")
        if isinstance(p, ToolCallPayload):
            # Ask once the stream has shown the call (the text before it is on screen first);
            # a call the stream never shows is asked about after a short wait anyway.
            with anyio.move_on_after(1.0):
                await self._shown.setdefault(p.tool_call_id, anyio.Event()).wait()
        self.status.approval = f"{preview(name, 40)} {preview(args, 80)}"
        self._print(
            Text(f"[approve] {self.status.approval} — y / n / a (one key)", style="magenta bold")
        )
        self._answer = anyio.Event()
        cancel = self.cancel
        try:
            async with anyio.create_task_group() as tg:

                async def on_cancel() -> None:
                    if cancel is not None:
                        await cancel.wait()
                    tg.cancel_scope.cancel()

                tg.start_soon(on_cancel)
                await self._answer.wait()
                tg.cancel_scope.cancel()
        finally:
            self.status.approval = None
            self._answer = None
        answer = self._answer_text.strip().lower()
        if answer in ("a", "all"):
            self._allow_rest = True
        return "allow" if answer in ("y", "yes", "a", "all") else "deny"

    # ------------------------------------------------------------------ output

    def _print(self, text: Text) -> None:
        if self._out is not None:
            self._out.print(text, soft_wrap=True)

    # ------------------------------------------------------------------ tasks

    async def _task(self, message: str | None, goal: GoalOptions | None) -> None:
        assert self._out is not None
        out = self._out
        renderer = StreamRenderer(out)
        view = GoalView(out, start_tokens=0) if goal is not None else None
        cancel = self.cancel = AbortSignal()
        self.status.waiting_since = time.monotonic()
        prompt = None if message is None else [user_text(message)]
        try:
            # The session's setting (R-SET-1) is the chosen mode; asking with no terminal to
            # ask on ("refuse") is still ``ask``.
            mode = "ask" if self.approve_mode == "refuse" else self.approve_mode
            stream = self.session.run(
                prompt,
                approve=with_approval_mode(self.approve, mode),
                signal=cancel,
                goal=goal,
                thinking_level=self.thinking,
            )
            async for msg in stream:
                self._watch(msg)
                if view is not None and view.take(msg):
                    continue
                renderer.feed(msg)
                p = msg.payload
                if msg.origin is None and isinstance(p, ToolCallPayload):
                    self._shown.setdefault(p.tool_call_id, anyio.Event()).set()
        finally:
            renderer.close()
            self.cancel = None
            self.status = _Status()
        state = self.session.state
        self._print(
            Text(
                f"({state.turns_total} turn(s); session tokens {state.session_tokens.total})",
                style="dim",
            )
        )

    async def _slash(self, line: str, tg: anyio.abc.TaskGroup) -> bool:
        """Run a slash command; False to quit."""
        name, option, rest = parse_slash(line)
        busy = self.cancel is not None
        if name in ("exit", "quit"):
            return False
        if name == "help":
            self._print(Text(HELP))
        elif busy:
            self._print(Text(f"/{name}: wait for the task to end (or Ctrl-C)", style="yellow"))
        elif name == "compact":
            status = await self.session.compact()
            self._print(Text(f"[compact] {status or 'nothing to compact'}", style="cyan"))
        elif name == "goal":
            try:
                goal = goal_options(goal=True, budget=option or None, message=rest)
            except (CliError, ValueError) as exc:
                self._print(Text(f"/goal: {safe(str(exc))}", style="red"))
                return True
            if not rest:
                self._print(Text("/goal needs an objective: /goal[:budget] OBJECTIVE", style="red"))
                return True
            tg.start_soon(self._task, rest, goal)
        elif name == "title":
            title = await self.session.generate_title()
            self._print(Text(f"title: {safe(title or '(none)', keep_newlines=False)}"))
        elif name == "sessions":
            for row in self._list_sessions():
                self._print(Text(row))
        elif name == "fork":
            self.fork_requested = True  # the session is closed first: a fork needs it unlocked
            return False
        elif name == "rewind":
            return self._rewind(rest)
        else:
            self._print(Text(f"unknown command /{safe(name)} (/help lists them)", style="red"))
        return True

    def _rewind(self, arg: str) -> bool:
        """``/rewind``: the picker (the last tasks, what each changed); ``/rewind N``: ask for
        the rewind, which runs once the session is closed (a fork needs it unlocked)."""
        if arg:
            if not arg.isdigit():
                self._print(Text("/rewind N: N is a task number (/rewind lists them)", style="red"))
                return True
            self.rewind_requested = int(arg)
            return False
        tasks = self._task_changes() if self._task_changes is not None else []
        if not tasks:
            self._print(Text("/rewind: no task yet", style="yellow"))
        for t in tasks[-10:]:
            what = [f"+{n}" for n in t.created] + [f"~{n}" for n in t.changed]
            what += [f"-{n}" for n in t.deleted]
            shown = " ".join(what[:6]) + (" …" if len(what) > 6 else "") or "no file changes"
            prompt = safe(preview(t.prompt, 40), keep_newlines=False)
            self._print(Text(f"  {t.task:>3}  {prompt}  {safe(shown, keep_newlines=False)}"))
        if tasks:
            self._print(Text("/rewind N rewinds to the end of task N", style="dim"))
        return True

    async def _line(self, line: str, tg: anyio.abc.TaskGroup) -> bool:
        """Handle one submitted line; False to quit."""
        if self._answer is not None:
            answer = line.strip().lower()
            if answer in _ANSWERS:
                self._give(answer)
            elif answer in ("/exit", "/quit"):
                return False  # the task is aborted as the chat ends; the call is not run
            else:
                self._print(
                    Text(
                        f"[approve] {self.status.approval}? answer y (yes), n (no) or a (all "
                        "from now on); /exit quits, Ctrl-C aborts the task",
                        style="magenta",
                    )
                )
            return True
        if line.startswith("/"):
            return await self._slash(line, tg)
        if not line.strip():
            return True
        if self.cancel is not None:
            steered = self.session.steer([user_text(line)])
            note = (
                "[steer] sent to the running task"
                if steered
                else "[steer] the task is ending: send it again when it has"
            )
            self._print(Text(note, style="cyan"))
            return True
        tg.start_soon(self._task, line, None)
        return True

    def _interrupt(self) -> bool:
        """Ctrl-C at the prompt: abort the task, or (twice at an idle prompt) quit."""
        now = time.monotonic()
        if self.cancel is not None:
            self.cancel.abort("interrupted from the chat")
            if self._answer is not None:
                self._answer_text = "n"
                self._answer.set()
            self._print(Text("[interrupt] aborting the task…", style="yellow"))
            return True
        if now - self._last_interrupt < _QUIT_WINDOW_S:
            return False
        self._last_interrupt = now
        self._print(Text("(Ctrl-C again, Ctrl-D or /exit to quit)", style="dim"))
        return True

    def _recap(self) -> None:
        """A resumed chat starts where the conversation stands: the last exchange and what
        carries over to the next message (issue 30 item 6), not a blank screen."""
        from penguin.cli.views.inspect import describe

        asked = answered = None
        for m in reversed(self.session.context.history):
            p = m.payload
            if m.origin is not None or not isinstance(p, TextPayload):
                continue
            if p.role == "assistant" and answered is None and asked is None:
                answered = p.text
            elif p.role == "user" and not mk.is_steering(p.text):
                asked = p.text
                break
        carried = self.session.context.pending
        if asked is None and answered is None and not carried:
            return
        turns = self.session.state.turns_total
        self._print(Text(f"resumed after {turns} turn(s); the last exchange:", style="dim"))
        if asked is not None:
            self._print(Text(f"› {preview(_round_input(asked), 300)}", style="bold"))
        if answered is not None:
            self._print(Text(preview(answered, 600)))
        if carried:
            self._print(
                Text(f"carried over to your next message ({len(carried)}):", style="yellow")
            )
            for m in carried:
                self._print(Text(f"  {describe(m)}", style="yellow"))

    def _message(self) -> AnyFormattedText:
        """The prompt: the streaming answer's unfinished line above the input line (not in the
        prompt left on screen once a line is entered: the answer goes on below it)."""
        from prompt_toolkit.application.current import get_app

        app = get_app()
        shown = self._screen.shown() if self._screen is not None else ""
        if not shown or app.is_done:
            return [("", "› ")]
        columns = max(1, app.output.get_size().columns)
        return [*_wrapped(shown, columns), ("", "\n"), ("", "› ")]

    def _keys(self) -> Any:
        """y, n or a answer a pending approval at once (no Enter), when nothing is typed."""
        from prompt_toolkit.application.current import get_app
        from prompt_toolkit.filters import Condition
        from prompt_toolkit.key_binding import KeyBindings

        keys = KeyBindings()
        asking = Condition(lambda: self._answer is not None and not get_app().current_buffer.text)

        def bind(key: str) -> None:
            @keys.add(key, filter=asking)
            def _answer(event: Any) -> None:
                self._give(key.lower())

        for key in "ynaYNA":
            bind(key)
        return keys

    def _give(self, answer: str) -> None:
        if self._answer is not None:
            self._answer_text = answer
            self._answer.set()

    async def run(self) -> None:
        from prompt_toolkit import PromptSession
        from prompt_toolkit.history import FileHistory, InMemoryHistory
        from prompt_toolkit.patch_stdout import patch_stdout

        history = FileHistory(str(self.history)) if self.history is not None else InMemoryHistory()
        prompt: PromptSession[str] = PromptSession(
            history=history,
            bottom_toolbar=self.toolbar,
            refresh_interval=0.1,
            key_bindings=self._keys(),
        )
        if isinstance(self.llm, ScriptedLLM):
            self.llm.bind(self.session)
        screen = self._screen = _ScreenLines(prompt.app.output, asyncio.get_running_loop())
        with patch_stdout(raw=True):
            self._out = Console(
                file=screen,  # type: ignore[arg-type]
                width=prompt.app.output.get_size().columns,
                highlight=False,
                markup=False,
                emoji=False,
                force_terminal=True,
                no_color=bool(os.environ.get("NO_COLOR")),
            )
            meta = self.session.meta.payload
            model = (
                f"{meta.provider}/{meta.model_id}" if isinstance(meta, SessionMetaPayload) else "?"
            )
            header = Text(f"penguin chat — {safe(model)}, session {self.session.id}", style="bold")
            label, style = sandbox_label(self.session.sandbox)
            header.append(" · ", style="bold")
            header.append(label, style=style)
            header.append("  (/help)", style="bold")
            self._print(header)
            self._recap()
            try:
                async with anyio.create_task_group() as tg:
                    await self._loop(prompt, tg)
                    if self.cancel is not None:
                        self.cancel.abort("the chat ended")
            finally:
                self._out = None
                screen.close()

    async def _loop(self, prompt: PromptSession[str], tg: anyio.abc.TaskGroup) -> None:
        while True:
            try:
                line = await prompt.prompt_async(self._message)
            except KeyboardInterrupt:
                if not self._interrupt():
                    return
                continue
            except EOFError:
                return
            if not await self._line(line, tg):
                return
