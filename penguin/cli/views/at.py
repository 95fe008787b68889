"""``penguin inspect --at FILE:ORDINAL``: the request sent (or the context) at one record.

Owns: printing a ``replay.TracePoint`` — the exact request at a ``request_begin``, or the
model context after any other record — with synthesized messages marked, as text or JSON.
Does not: fold anything itself (``replay.trace_point`` does, R-TOOL-1).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.text import Text

from eventstore import (
    ImageUrlPayload,
    InlineDataPayload,
    OmniMessage,
    TextPayload,
    ThinkingPayload,
    ToolCallOutputPayload,
    ToolCallPayload,
)
from penguin.cli.terminal.safe import safe
from replay import TracePoint, parse_position, trace_point

from .inspect import describe

__all__ = ["render_point", "show_at"]


def _body(m: OmniMessage) -> str:
    p = m.payload
    if isinstance(p, TextPayload):
        return p.text
    if isinstance(p, ThinkingPayload):
        return p.thinking
    if isinstance(p, ToolCallPayload):
        return f"{p.name}({p.arguments})  id={p.tool_call_id}"
    if isinstance(p, ToolCallOutputPayload):
        return f"id={p.tool_call_id}: {p.output}"
    if isinstance(p, ImageUrlPayload):
        return p.image_url
    if isinstance(p, InlineDataPayload):
        return f"{p.mime_type} ({len(p.data)} chars)"
    return describe(m)


def render_point(console: Console, point: TracePoint) -> None:
    messages, new = point.messages()
    first_new = len(messages) - new
    where = f"{point.position[0]}:{point.position[1]}"
    console.print(
        Text(f"at {where} ({safe(str(point.path), keep_newlines=False)}:{point.line})", "bold"),
        soft_wrap=True,
    )
    console.print(Text("record: " + describe(point.record)), soft_wrap=True)
    if point.request is not None:
        req = point.request
        console.print(Text("the request sent here:", style="bold"))
        console.print(Text("system prompt: ") + Text(safe(req.system_prompt)), soft_wrap=True)
        names = ", ".join(safe(t.name, keep_newlines=False) for t in req.tools) or "(none)"
        console.print(Text(f"tools: {names}"), soft_wrap=True)
        label = "messages"
    else:
        console.print(
            Text("the model context after this record (history, then carry-over):", "bold")
        )
        label = "carry-over"
    console.print(
        Text(f"{len(messages)} message(s); {new} {label} at the end; * = synthesized by the fold")
    )
    for i, m in enumerate(messages):
        flag = "*" if i in point.synthesized else " "
        mark = "+" if i >= first_new else " "
        head = f"{flag}{mark}[{i}] {describe(m)}"
        style = "yellow" if i in point.synthesized else ""
        console.print(Text(head, style=style), soft_wrap=True)
        body = safe(_body(m))
        console.print(Text("      " + body.replace("\n", "\n      "), style="dim"), soft_wrap=True)


def show_at(
    console: Console, files: list[Path], at: str, *, as_json: bool
) -> dict[str, Any] | None:
    """Resolve ``at`` against ``files``; return the JSON form when ``as_json``, else print."""
    point = trace_point(files, parse_position(at))
    if as_json:
        return point.as_json()
    render_point(console, point)
    return None
