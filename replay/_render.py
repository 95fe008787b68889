"""A readable live rendering of a run's stream for terminals (``penguin run`` / ``resume`` /
``demo``).

Owns: turning OmniMessages into lines and streamed text on a rich ``Console`` — thinking dimmed,
text as it streams, tool calls with their arguments, tool output as it arrives (line by line,
attributed by call id while several calls run at once), approvals, ``[retry]`` and compaction
lines.  Does not: decide anything about the run, prompt, or count down (the CLI does).  Every
string from the stream goes through ``safe()``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from rich.console import Console
from rich.text import Text

from eventstore import (
    AbortPayload,
    ApprovalDecisionPayload,
    CompactionBeginPayload,
    CompactionEndPayload,
    ImageUrlPayload,
    OmniMessage,
    PartialTextPayload,
    PartialThinkingPayload,
    PartialToolCallOutputPayload,
    RequestBeginPayload,
    RequestEndPayload,
    TextPayload,
    ThinkingPayload,
    TokenUsagePayload,
    ToolCallOutputPayload,
    ToolCallPayload,
    ToolListReadyPayload,
)

from ._safe import safe

__all__ = ["StreamRenderer"]

_OUTPUT_PREVIEW: Final = 2000
# A tool that prints more than this many lines live is cut short on screen (the trace has all).
_LIVE_LINES: Final = 200


@dataclass
class _ToolStream:
    """Live output of one running call: the unterminated last line and how much was shown."""

    buffer: str = ""
    tagged: bool = False  # lines carry the call id (another call was running beside it)
    lines: int = 0
    streamed: bool = False
    cut: bool = False
    images: list[str] = field(default_factory=list)


class StreamRenderer:
    """Feed messages in stream order; text and thinking stream as they arrive."""

    def __init__(self, console: Console) -> None:
        self._c = console
        self._inline = False  # a streamed segment is open on the current line
        self._streamed_complete = False
        self._tools: dict[str, _ToolStream] = {}  # calls whose output has started
        self._pending: set[str] = set()  # dispatched calls without a complete output yet

    # ------------------------------------------------------------------ output primitives

    def _out(self, text: Text) -> None:
        self._c.print(text, end="", soft_wrap=True, highlight=False)

    def _line(self, text: str, style: str = "") -> None:
        self._break()
        self._c.print(Text(text, style=style), soft_wrap=True, highlight=False)

    def _break(self) -> None:
        if self._inline:
            self._c.print()
            self._inline = False

    def break_line(self) -> None:
        """End a streamed segment's line, e.g. before a prompt is printed elsewhere."""
        self._break()

    # ------------------------------------------------------------------ messages

    def feed(self, msg: OmniMessage) -> None:
        p = msg.payload
        prefix = f"[{safe(msg.origin[-1], keep_newlines=False)}] " if msg.origin else ""
        if isinstance(p, PartialTextPayload):
            if p.text:
                self._out(Text(safe(p.text)))
                self._inline = True
                self._streamed_complete = True
            if p.event_type == "stop":
                self._break()
        elif isinstance(p, PartialThinkingPayload):
            if p.event_type == "start":
                self._break()
            if p.thinking:
                self._out(Text(safe(p.thinking), style="dim italic"))
                self._inline = True
                self._streamed_complete = True
            if p.event_type == "stop":
                self._break()
        elif isinstance(p, PartialToolCallOutputPayload):
            self._tool_fragment(prefix, p)
        elif msg.is_partial:
            return
        elif isinstance(p, TextPayload | ThinkingPayload):
            if not self._streamed_complete and p.role == "assistant":
                body = p.text if isinstance(p, TextPayload) else p.thinking
                style = "" if isinstance(p, TextPayload) else "dim italic"
                self._line(prefix + safe(body), style)
            elif p.role == "user" and isinstance(p, TextPayload):
                # Input that arrives during a run: steering, or a subagent's task.
                self._line(f"{prefix}> {safe(p.text)}", "bold")
            self._streamed_complete = False
            if p.stop_reason not in (None, "completed"):
                self._line(f"{prefix}[{p.stop_reason}]", "yellow")
        elif isinstance(p, ImageUrlPayload):
            self._line(f"{prefix}[image] {safe(p.image_url[:120], keep_newlines=False)}", "dim")
        elif isinstance(p, ToolCallPayload):
            if p.stop_reason in (None, "completed"):
                self._pending.add(prefix + p.tool_call_id)
                if len(self._pending) > 1:
                    for other in self._pending:
                        self._tools.setdefault(other, _ToolStream()).tagged = True
            status = "" if p.stop_reason in (None, "completed") else f" [{p.stop_reason}]"
            self._line(
                f"{prefix}[tool] {safe(p.name, keep_newlines=False)} "
                f"{safe(p.arguments, keep_newlines=False)}  "
                f"({safe(p.tool_call_id, keep_newlines=False)}){status}",
                "cyan",
            )
        elif isinstance(p, ApprovalDecisionPayload):
            self._line(
                f"{prefix}[approval] {p.decision} {safe(p.tool_call_id, keep_newlines=False)}",
                "magenta",
            )
        elif isinstance(p, ToolCallOutputPayload):
            self._tool_output(prefix, p)
        elif isinstance(p, RequestBeginPayload):
            # Tools of a turn finish inside its request span: nothing is pending any more.
            self._pending.clear()
        elif isinstance(p, RequestEndPayload):
            if p.retry_in_ms is not None:
                self._line(
                    f"{prefix}[retry] attempt {p.attempt}, next in {p.retry_in_ms} ms"
                    f" ({p.status}: {safe(p.error_message or '', keep_newlines=False)})",
                    "yellow",
                )
            elif p.status != "completed":
                self._line(
                    f"{prefix}[request {p.status}] "
                    f"{safe(p.error_message or '', keep_newlines=False)}",
                    "red",
                )
        elif isinstance(p, CompactionBeginPayload):
            self._line(
                f"{prefix}[compaction] {p.mode} ({p.reason}; context {p.context}, "
                f"turns {p.turns})",
                "blue",
            )
        elif isinstance(p, CompactionEndPayload):
            detail = f": {safe(p.error_message, keep_newlines=False)}" if p.error_message else ""
            self._line(
                f"{prefix}[compaction {p.status}] attempts: {p.attempt or 1}{detail}", "blue"
            )
        elif isinstance(p, AbortPayload):
            self._line(f"{prefix}[abort] {safe(p.reason or '', keep_newlines=False)}", "red")
        elif isinstance(p, ToolListReadyPayload):
            names = ", ".join(safe(t.name, keep_newlines=False) for t in p.tools)
            self._line(f"{prefix}[tools] {names}", "dim")
        elif isinstance(p, TokenUsagePayload):
            return

    # ------------------------------------------------------------------ tool output

    def _tool_fragment(self, prefix: str, p: PartialToolCallOutputPayload) -> None:
        key = prefix + p.tool_call_id
        stream = self._tools.get(key)
        if stream is None:
            stream = self._tools[key] = _ToolStream()
        self._pending.add(key)
        if len(self._pending) > 1:
            # Sticky: every call of a concurrent batch stays attributed to the end.
            for other in self._pending:
                self._tools.setdefault(other, _ToolStream()).tagged = True
        if p.output:
            stream.buffer += p.output
            *complete, stream.buffer = stream.buffer.split("\n")
            for line in complete:
                self._tool_line(prefix, p.tool_call_id, key, stream, line)
        if p.event_type == "stop":
            self._flush_tool(prefix, p.tool_call_id, key)

    def _flush_tool(self, prefix: str, call_id: str, key: str) -> None:
        stream = self._tools.get(key)
        if stream is not None and stream.buffer:
            line, stream.buffer = stream.buffer, ""
            self._tool_line(prefix, call_id, key, stream, line)

    def _tool_line(
        self, prefix: str, call_id: str, key: str, stream: _ToolStream, line: str
    ) -> None:
        stream.streamed = True
        if stream.cut:
            return
        if stream.lines >= _LIVE_LINES:
            stream.cut = True
            self._line(f"{prefix}  … (more output from {safe(call_id)}; see the trace)", "dim")
            return
        stream.lines += 1
        tag = f"[{safe(call_id, keep_newlines=False)}] " if stream.tagged else ""
        self._line(f"{prefix}  {tag}{safe(line, keep_newlines=False)}", "green")

    def _tool_output(self, prefix: str, p: ToolCallOutputPayload) -> None:
        key = prefix + p.tool_call_id
        self._flush_tool(prefix, p.tool_call_id, key)
        self._pending.discard(key)
        stream = self._tools.pop(key, None)
        status = p.stop_reason or "completed"
        self._line(f"{prefix}[output {safe(p.tool_call_id, keep_newlines=False)} {status}]", "green")
        if stream is None or not stream.streamed:
            body = p.output
            if len(body) > _OUTPUT_PREVIEW:
                body = body[:_OUTPUT_PREVIEW] + f"… ({len(p.output)} chars)"
            self._line(safe(body), "green")
        if p.images:
            self._line(f"{prefix}  ({len(p.images)} image(s))", "dim")

    def close(self) -> None:
        for key in list(self._tools):
            stream = self._tools[key]
            if stream.buffer:
                line, stream.buffer = stream.buffer, ""
                self._line(f"  {safe(line, keep_newlines=False)}", "green")
        self._break()
