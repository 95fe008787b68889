"""The conversation of a session as a readable transcript (``penguin show``).

Owns: turning a session's records into transcript entries (the user's prompts, the
assistant's answers rendered as Markdown, thinking dimmed, tool calls with their outputs,
denials, aborts, compactions and subagents as one line each) and printing them.  Leaves out
the internals (request spans, token counts, partials, the compaction request's own text).
Every string is made terminal-safe before Markdown sees it, and Markdown links are not turned
into terminal hyperlinks.  Does not: inspect the trace (``inspect`` is the forensic view).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rich.console import Console
from rich.markdown import Markdown
from rich.padding import Padding
from rich.text import Text

from eventstore import (
    AbortPayload,
    ApprovalDecisionPayload,
    CompactionBeginPayload,
    CompactionEndPayload,
    ImageUrlPayload,
    InlineDataPayload,
    OmniMessage,
    SubagentPayload,
    TextPayload,
    ThinkingPayload,
    ToolCallOutputPayload,
    ToolCallPayload,
)
from penguin.cli.terminal.safe import safe
from projections import markers as mk

from .render import short_id

__all__ = ["Entry", "render_transcript", "transcript"]


@dataclass(slots=True, frozen=True)
class Entry:
    """One transcript entry: ``kind`` is user, assistant, cut (an answer cut short: retried,
    aborted, out of turns), thinking, tool_call, tool_output, denied, aborted, compaction,
    subagent or image."""

    kind: str
    text: str
    detail: str = ""


def _one(p: Any, in_compaction: bool) -> Entry | None:
    if isinstance(p, TextPayload):
        if in_compaction:
            return None  # the compaction request and its summary are internals
        if p.role == "user":
            return None if mk.is_context_summary(p.text) else Entry("user", p.text)
        if p.stop_reason not in (None, "completed"):
            return Entry("cut", p.text, p.stop_reason)  # a retried or aborted segment
        return Entry("assistant", p.text)
    if isinstance(p, ThinkingPayload):
        return None if in_compaction or not p.thinking else Entry("thinking", p.thinking)
    if isinstance(p, ToolCallPayload):
        return None if in_compaction else Entry("tool_call", p.name, p.arguments)
    if isinstance(p, ToolCallOutputPayload):
        return Entry("tool_output", p.output, p.stop_reason or "")
    if isinstance(p, ApprovalDecisionPayload) and p.decision == "deny":
        return Entry("denied", p.tool_call_id)
    if isinstance(p, AbortPayload):
        return Entry("aborted", p.reason or "")
    if isinstance(p, CompactionEndPayload):
        return Entry("compaction", p.status, p.mode)
    if isinstance(p, SubagentPayload):
        return Entry("subagent", p.session_id)
    if isinstance(p, ImageUrlPayload | InlineDataPayload):
        return Entry("image", "")
    return None


def transcript(records: Iterable[OmniMessage]) -> list[Entry]:
    """The session's own conversation (a subagent's messages are in its own trace)."""
    out: list[Entry] = []
    in_compaction = False
    for record in records:
        if record.origin is not None or record.type == "session_meta":
            continue
        p = record.payload
        if isinstance(p, CompactionBeginPayload):
            in_compaction = True
        entry = _one(p, in_compaction)
        if isinstance(p, CompactionEndPayload):
            in_compaction = False
        if entry is not None:
            out.append(entry)
    return out


def render_transcript(console: Console, entries: list[Entry]) -> None:
    def md(text: str) -> Markdown:
        return Markdown(safe(text), hyperlinks=False)

    for e in entries:
        if e.kind == "user":
            console.print(Text("› You", style="bold cyan"))
            console.print(Padding(Text(safe(e.text)), (0, 0, 1, 2), expand=False))
        elif e.kind == "assistant":
            console.print(Text("● Assistant", style="bold green"))
            console.print(Padding(md(e.text), (0, 0, 1, 2), expand=False))
        elif e.kind == "cut":
            body = Text(safe(e.text), style="dim") + Text(f"  [{e.detail}]", style="yellow")
            console.print(Padding(body, (0, 0, 1, 2), expand=False))
        elif e.kind == "thinking":
            console.print(
                Padding(Text(safe(e.text), style="dim italic"), (0, 0, 1, 2), expand=False)
            )
        elif e.kind == "tool_call":
            line = Text(f"  ▶ {safe(e.text, keep_newlines=False)} ", style="magenta")
            console.print(line + Text(safe(e.detail, keep_newlines=False), style="dim"))
        elif e.kind == "tool_output":
            status = "" if e.detail in ("", "completed") else f" [{e.detail}]"
            output = safe(e.text.rstrip("\n")) + status
            console.print(Padding(Text(output, style="dim"), (0, 0, 1, 4), expand=False))
        elif e.kind == "denied":
            console.print(Text(f"    denied ({safe(e.text)})", style="yellow"))
        elif e.kind == "aborted":
            console.print(Text(f"  ■ aborted: {safe(e.text)}", style="yellow"))
        elif e.kind == "compaction":
            console.print(Text(f"  — context compacted ({e.detail}, {e.text}) —", style="dim"))
        elif e.kind == "subagent":
            console.print(Text(f"  ↳ subagent {short_id(e.text)}", style="dim"))
        elif e.kind == "image":
            console.print(Text("  [image]", style="dim"))
