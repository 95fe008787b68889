"""A readable live rendering of a run's stream for terminals (``penguin run`` / ``resume`` /
``demo``).

Owns: turning OmniMessages into lines and streamed text on a rich ``Console`` — thinking dimmed,
text as it streams, tool calls with their arguments, tool output as it arrives (line by line,
attributed by call id while several calls run at once), approvals, ``[retry]`` and compaction
lines — and nesting subagents' messages (``origin``, SPEC §11) under the ``run_subagent`` call
that spawned them.  Does not: decide anything about the run, prompt, or count down (the CLI
does).  Every string from the stream goes through ``safe()``.

Subagents.  A message with ``origin`` is a child session's (outer→inner ids): its lines are
indented two spaces per level and start with the last 8 characters of the innermost id, e.g.
``  fdded797 │ [tool] read_file …``.  A child's text and thinking are shown a whole line at a
time (buffered per child until a newline or the end of the segment) so that concurrent
sessions never share a line; only the top-level session streams text mid-line.

The stream does not say which call spawned a child: a child's ``session_meta`` arrives inside
its spawning call's output stream, which is not tagged with the call id.  So the renderer
attributes each new child to the oldest ``run_subagent`` call of the enclosing session that
has started (its output stream opened), has no output yet and has no child yet, and prints
``↳ subagent <id> for call <call id>``.  When several such calls were running at that moment
the attribution is a guess (children may start in any order) and the header says so.  A call
whose output arrives without a child proves a guess wrong: the child guessed for another call
was its own, so that other call is free again for the next child.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, TypeAlias

from rich.console import Console
from rich.text import Text

from engine import RUN_SUBAGENT
from eventstore import (
    AbortPayload,
    ApprovalDecisionPayload,
    CompactionBeginPayload,
    CompactionEndPayload,
    ImageUrlPayload,
    OmniMessage,
    RequestBeginPayload,
    RequestEndPayload,
    SessionMetaPayload,
    TextPayload,
    ThinkingPayload,
    TokenUsagePayload,
    ToolCallOutputPayload,
    ToolCallPayload,
    ToolListReadyPayload,
    UnknownPayload,
    unrecognised,
)
from eventstore.partials import Fragment, fragment
from penguin.cli.terminal.safe import safe

from .labels import request_label, tool_end_label

__all__ = ["StreamRenderer", "coloured", "short_id"]

_OUTPUT_PREVIEW: Final = 2000
# A tool that prints more than this many lines live is cut short on screen (the trace has all).
_LIVE_LINES: Final = 200
_THINKING: Final = "dim italic"

Origin: TypeAlias = tuple[str, ...]
"""Whose message: ``()`` for the session being run, else its ``origin`` (outer→inner)."""


_SGR: Final = re.compile(r"\x1b\[[0-9;]*m")


def coloured(text: str, *, colour: bool, style: str = "") -> Text:
    """``text`` made terminal-safe except for its SGR colour sequences (``ESC [ … m``), which
    become styles when ``colour`` and are dropped otherwise.  Only SGR survives ``safe()``, so
    nothing else a tool printed can act on the terminal."""
    parts: list[str] = []
    pos = 0
    for m in _SGR.finditer(text):
        parts.append(safe(text[pos : m.start()], keep_newlines=False))
        if colour:
            parts.append(m.group(0))
        pos = m.end()
    parts.append(safe(text[pos:], keep_newlines=False))
    joined = "".join(parts)
    return Text.from_ansi(joined, style=style) if colour else Text(joined, style=style)


def short_id(session_id: str) -> str:
    """The last 8 characters of a session id (its random hex part), made terminal-safe."""
    return safe(session_id[-8:], keep_newlines=False)


@dataclass
class _ToolStream:
    """Live output of one running call: the unterminated last line and how much was shown."""

    buffer: str = ""
    tagged: bool = False  # lines carry the call id (another call was running beside it)
    lines: int = 0
    streamed: bool = False
    cut: bool = False


@dataclass
class _Spawn:
    """A ``run_subagent`` call that may still start a child."""

    started: bool = False  # its output stream has opened: the tool is running
    child: str | None = None
    guessed: bool = False  # the child was attributed while other calls were running too


class StreamRenderer:
    """Feed messages in stream order; text and thinking stream as they arrive."""

    def __init__(self, console: Console) -> None:
        self._c = console
        self._inline = False  # a top-level streamed segment is open on the current line
        self._streamed: set[Origin] = set()  # sessions whose current text/thinking streamed
        self._held: dict[Origin, tuple[str, str]] = {}  # a child's unfinished line and style
        self._tools: dict[tuple[Origin, str], _ToolStream] = {}  # calls whose output started
        self._pending: dict[Origin, set[str]] = {}  # dispatched calls without an output yet
        self._spawns: dict[Origin, dict[str, _Spawn]] = {}  # run_subagent calls, call order
        self._children: dict[Origin, str | None] = {}  # child session → spawning call id
        self._denied: set[tuple[Origin, str]] = set()  # calls the approval refused

    # ------------------------------------------------------------------ output primitives

    def _out(self, text: Text) -> None:
        self._c.print(text, end="", soft_wrap=True, highlight=False)

    @staticmethod
    def _lead(origin: Origin) -> str:
        if not origin:
            return ""
        return "  " * len(origin) + f"{short_id(origin[-1])} │ "

    def _line(self, origin: Origin, text: str | Text, style: str = "") -> None:
        """Print ``text`` (already safe) as whole lines, each led by ``origin``'s prefix."""
        self._break()
        lead = self._lead(origin)
        if isinstance(text, Text):  # one line, already styled
            line = Text(lead, style=style) + text if lead else text
            self._c.print(line, soft_wrap=True, highlight=False)
            return
        body = text if not lead else "\n".join(lead + part for part in text.split("\n"))
        self._c.print(Text(body, style=style), soft_wrap=True, highlight=False)

    def _break(self) -> None:
        if self._inline:
            self._c.print()
            self._inline = False

    def break_line(self) -> None:
        """End a streamed segment's line, e.g. before a prompt is printed elsewhere."""
        self._break()

    # ------------------------------------------------------------------ streamed text

    def _stream(self, origin: Origin, text: str, style: str) -> None:
        if not origin:
            self._out(Text(safe(text), style=style))
            self._inline = True
            return
        # A child's text waits for its newline: concurrent sessions never share a line.
        held, held_style = self._held.pop(origin, ("", style))
        if held and held_style != style:
            self._line(origin, safe(held), held_style)
            held = ""
        *complete, rest = (held + text).split("\n")
        for line in complete:
            self._line(origin, safe(line), style)
        if rest:
            self._held[origin] = (rest, style)

    def _end_segment(self, origin: Origin) -> None:
        if not origin:
            self._break()
            return
        held = self._held.pop(origin, None)
        if held is not None:
            self._line(origin, safe(held[0]), held[1])

    # ------------------------------------------------------------------ messages

    def feed(self, msg: OmniMessage) -> None:
        p = msg.payload
        origin: Origin = tuple(msg.origin) if msg.origin else ()
        frag = fragment(msg)
        if frag is not None:
            self._fragment(origin, frag)
        elif isinstance(p, SessionMetaPayload):
            if origin:
                self._child_started(origin)
        elif isinstance(p, TextPayload | ThinkingPayload):
            self._end_segment(origin)
            if origin not in self._streamed and p.role == "assistant":
                body = p.text if isinstance(p, TextPayload) else p.thinking
                self._line(origin, safe(body), "" if isinstance(p, TextPayload) else _THINKING)
            elif p.role == "user" and isinstance(p, TextPayload):
                # Input that arrives during a run: steering, or a subagent's task.
                self._line(origin, f"> {safe(p.text)}", "bold")
            self._streamed.discard(origin)
            if p.stop_reason not in (None, "completed"):
                self._line(origin, f"[{p.stop_reason}]", "yellow")
        elif isinstance(p, ImageUrlPayload):
            self._line(origin, f"[image] {safe(p.image_url[:120], keep_newlines=False)}", "dim")
        elif isinstance(p, ToolCallPayload):
            self._tool_call(origin, p)
        elif isinstance(p, ApprovalDecisionPayload):
            if p.decision != "allow":
                self._spawns.get(origin, {}).pop(p.tool_call_id, None)
                self._denied.add((origin, p.tool_call_id))
            self._line(
                origin,
                f"[approval] {p.decision} {safe(p.tool_call_id, keep_newlines=False)}",
                "magenta",
            )
        elif isinstance(p, ToolCallOutputPayload):
            self._tool_output(origin, p)
        elif isinstance(p, RequestBeginPayload):
            # Tools of a turn finish inside its request span: nothing is pending any more.
            self._pending.pop(origin, None)
        elif isinstance(p, RequestEndPayload):
            if p.retry_in_ms is not None:
                self._line(
                    origin,
                    f"[retry] attempt {p.attempt}, next in {p.retry_in_ms} ms"
                    f" ({request_label(p.status, p.error_message)}: "
                    f"{safe(p.error_message or '', keep_newlines=False)})",
                    "yellow",
                )
            elif p.status != "completed":
                self._line(
                    origin,
                    f"[request {request_label(p.status, p.error_message)}] "
                    f"{safe(p.error_message or '', keep_newlines=False)}",
                    "red",
                )
        elif isinstance(p, CompactionBeginPayload):
            self._line(
                origin,
                f"[compaction] {p.mode} ({p.reason}; context {p.context}, turns {p.turns})",
                "blue",
            )
        elif isinstance(p, CompactionEndPayload):
            detail = f": {safe(p.error_message, keep_newlines=False)}" if p.error_message else ""
            self._line(
                origin, f"[compaction {p.status}] attempts: {p.attempt or 1}{detail}", "blue"
            )
        elif isinstance(p, AbortPayload):
            self._line(origin, f"[abort] {safe(p.reason or '', keep_newlines=False)}", "red")
        elif isinstance(p, ToolListReadyPayload):
            names = ", ".join(safe(t.name, keep_newlines=False) for t in p.tools)
            self._line(origin, f"[tools] {names}", "dim")
        elif isinstance(p, UnknownPayload):
            # Never dropped without a word: what the record is, as every reader says it.
            found = unrecognised(msg)
            if found is not None:
                self._line(origin, safe(f"[unread] {found}", keep_newlines=False), "dim")
        elif isinstance(p, TokenUsagePayload):
            return

    def _fragment(self, origin: Origin, frag: Fragment) -> None:
        if frag.kind == "tool_call_output":
            self._tool_fragment(origin, frag)
            return
        if frag.kind == "tool_call":
            return  # a call is shown whole, with its arguments, once complete
        if frag.kind == "thinking" and frag.event == "start":
            self._end_segment(origin)
        if frag.content:
            self._stream(origin, frag.content, "" if frag.kind == "text" else _THINKING)
            self._streamed.add(origin)
        if frag.event == "stop":
            self._end_segment(origin)

    # ------------------------------------------------------------------ subagents

    def _child_started(self, child: Origin) -> None:
        """A child's ``session_meta``: attribute it to a call and print its header."""
        if child in self._children:
            return
        spawns = self._spawns.get(child[:-1], {})
        # Prefer calls whose tool is running; a host without output-start fragments still works.
        running = [cid for cid, s in spawns.items() if s.started] or list(spawns)
        free = [cid for cid in running if spawns[cid].child is None]
        call_id = free[0] if free else None
        self._children[child] = call_id
        header = f"↳ subagent {safe(child[-1], keep_newlines=False)}"
        if call_id is not None:
            spawns[call_id].child = child[-1]
            spawns[call_id].guessed = len(running) > 1
            header += f" for call {safe(call_id, keep_newlines=False)}"
            if len(running) > 1:
                header += " (guessed by start order)"
        self._break()
        self._c.print(
            Text("  " * len(child) + header, style="bold"), soft_wrap=True, highlight=False
        )

    def _release(self, origin: Origin, call_id: str) -> None:
        """``call_id`` has ended: it starts no child any more.  Ending without a child while
        another call holds a guessed one means that child was this call's: free the other."""
        spawns = self._spawns.get(origin, {})
        spawn = spawns.pop(call_id, None)
        if spawn is None or spawn.child is not None:
            return
        for other in spawns.values():
            if other.guessed and other.child is not None:
                other.child, other.guessed = None, False
                return

    # ------------------------------------------------------------------ tool calls and output

    def _mark_pending(self, origin: Origin, call_id: str) -> None:
        pending = self._pending.setdefault(origin, set())
        pending.add(call_id)
        if len(pending) > 1:
            # Sticky: every call of a concurrent batch stays attributed to the end.
            for other in pending:
                self._tools.setdefault((origin, other), _ToolStream()).tagged = True

    def _tool_call(self, origin: Origin, p: ToolCallPayload) -> None:
        if p.stop_reason in (None, "completed"):
            self._mark_pending(origin, p.tool_call_id)
            if p.name == RUN_SUBAGENT:
                self._spawns.setdefault(origin, {})[p.tool_call_id] = _Spawn()
        status = "" if p.stop_reason in (None, "completed") else f" [{p.stop_reason}]"
        self._line(
            origin,
            f"[tool] {safe(p.name, keep_newlines=False)} "
            f"{safe(p.arguments, keep_newlines=False)}  "
            f"({safe(p.tool_call_id, keep_newlines=False)}){status}",
            "cyan",
        )

    def _tool_fragment(self, origin: Origin, p: Fragment) -> None:
        key = (origin, p.tool_call_id)
        stream = self._tools.get(key)
        if stream is None:
            stream = self._tools[key] = _ToolStream()
        spawn = self._spawns.get(origin, {}).get(p.tool_call_id)
        if spawn is not None:
            spawn.started = True
        self._mark_pending(origin, p.tool_call_id)
        if p.content:
            stream.buffer += p.content
            *complete, stream.buffer = stream.buffer.split("\n")
            for line in complete:
                self._tool_line(origin, p.tool_call_id, stream, line)
        if p.event == "stop":
            self._flush_tool(origin, p.tool_call_id)

    def _flush_tool(self, origin: Origin, call_id: str) -> None:
        stream = self._tools.get((origin, call_id))
        if stream is not None and stream.buffer:
            line, stream.buffer = stream.buffer, ""
            self._tool_line(origin, call_id, stream, line)

    def _tool_line(self, origin: Origin, call_id: str, stream: _ToolStream, line: str) -> None:
        stream.streamed = True
        if stream.cut:
            return
        if stream.lines >= _LIVE_LINES:
            stream.cut = True
            self._line(origin, f"  … (more output from {safe(call_id)}; see the trace)", "dim")
            return
        stream.lines += 1
        tag = f"[{safe(call_id, keep_newlines=False)}] " if stream.tagged else ""
        self._line(origin, Text(f"  {tag}", style="green") + self._tool_text(line), "green")

    def _tool_text(self, line: str) -> Text:
        """A line of tool output: its SGR colours kept on a colour terminal (stripped
        elsewhere); every other control sequence escaped as always."""
        c = self._c
        return coloured(line, colour=c.is_terminal and not c.no_color, style="green")

    def _tool_output(self, origin: Origin, p: ToolCallOutputPayload) -> None:
        self._flush_tool(origin, p.tool_call_id)
        self._pending.get(origin, set()).discard(p.tool_call_id)
        self._release(origin, p.tool_call_id)
        stream = self._tools.pop((origin, p.tool_call_id), None)
        denied = (origin, p.tool_call_id) in self._denied
        status = tool_end_label(p.stop_reason, denied=denied)
        self._line(
            origin, f"[output {safe(p.tool_call_id, keep_newlines=False)} {status}]", "green"
        )
        if stream is None or not stream.streamed:
            body = p.output
            if len(body) > _OUTPUT_PREVIEW:
                body = body[:_OUTPUT_PREVIEW] + f"… ({len(p.output)} chars)"
            if _SGR.search(body) is None:
                self._line(origin, safe(body), "green")
            else:
                for part in body.split("\n"):
                    self._line(origin, self._tool_text(part), "green")
        if p.images:
            self._line(origin, f"  ({len(p.images)} image(s))", "dim")

    def close(self) -> None:
        for (origin, _call_id), stream in list(self._tools.items()):
            if stream.buffer:
                line, stream.buffer = stream.buffer, ""
                self._line(origin, f"  {safe(line, keep_newlines=False)}", "green")
        for origin in list(self._held):
            self._end_segment(origin)
        self._break()
