"""A readable live rendering of a run's stream for terminals (``penguin run`` / ``demo``).

Owns: turning OmniMessages into lines and streamed text on a rich ``Console``.  Does not:
decide anything about the run.  Every string from the stream goes through ``safe()``.
"""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from eventstore import (
    AbortPayload,
    ApprovalDecisionPayload,
    CompactionBeginPayload,
    CompactionEndPayload,
    OmniMessage,
    PartialTextPayload,
    PartialThinkingPayload,
    PartialToolCallOutputPayload,
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

_OUTPUT_PREVIEW = 2000


class StreamRenderer:
    """Feed messages in stream order; text and thinking stream as they arrive."""

    def __init__(self, console: Console) -> None:
        self._c = console
        self._inline = False  # a streamed segment is open on the current line
        self._streamed_complete = False
        self._in_compaction = False

    def _out(self, text: Text) -> None:
        self._c.print(text, end="", soft_wrap=True, highlight=False)

    def _line(self, text: str, style: str = "") -> None:
        self._break()
        self._c.print(Text(text, style=style), soft_wrap=True, highlight=False)

    def _break(self) -> None:
        if self._inline:
            self._c.print()
            self._inline = False

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
            return  # the complete output is shown once it settles
        elif msg.is_partial:
            return
        elif isinstance(p, TextPayload | ThinkingPayload):
            if not self._streamed_complete and p.role == "assistant":
                body = p.text if isinstance(p, TextPayload) else p.thinking
                style = "" if isinstance(p, TextPayload) else "dim italic"
                self._line(prefix + safe(body), style)
            self._streamed_complete = False
            if p.stop_reason not in (None, "completed"):
                self._line(f"{prefix}[{p.stop_reason}]", "yellow")
        elif isinstance(p, ToolCallPayload):
            self._line(
                f"{prefix}[tool] {safe(p.name, keep_newlines=False)} "
                f"{safe(p.arguments, keep_newlines=False)}  ({safe(p.tool_call_id)})",
                "cyan",
            )
        elif isinstance(p, ApprovalDecisionPayload):
            self._line(f"{prefix}[approval] {p.decision} {safe(p.tool_call_id)}", "magenta")
        elif isinstance(p, ToolCallOutputPayload):
            body = p.output
            if len(body) > _OUTPUT_PREVIEW:
                body = body[:_OUTPUT_PREVIEW] + f"… ({len(p.output)} chars)"
            status = p.stop_reason or "completed"
            self._line(f"{prefix}[output {safe(p.tool_call_id)} {status}]", "green")
            self._line(safe(body), "green")
        elif isinstance(p, RequestEndPayload):
            if p.retry_in_ms is not None:
                self._line(
                    f"{prefix}[retry] attempt {p.attempt}, next in {p.retry_in_ms} ms"
                    f" ({p.status}: {safe(p.error_message or '')})",
                    "yellow",
                )
            elif p.status != "completed":
                self._line(f"{prefix}[request {p.status}] {safe(p.error_message or '')}", "red")
        elif isinstance(p, CompactionBeginPayload):
            self._line(
                f"{prefix}[compaction] {p.mode} ({p.reason}; context {p.context}, "
                f"turns {p.turns})",
                "blue",
            )
        elif isinstance(p, CompactionEndPayload):
            self._line(f"{prefix}[compaction {p.status}] attempts: {p.attempt or 0}", "blue")
        elif isinstance(p, AbortPayload):
            self._line(f"{prefix}[abort] {safe(p.reason or '')}", "red")
        elif isinstance(p, ToolListReadyPayload):
            names = ", ".join(safe(t.name, keep_newlines=False) for t in p.tools)
            self._line(f"{prefix}[tools] {names}", "dim")
        elif isinstance(p, TokenUsagePayload):
            return

    def close(self) -> None:
        self._break()
