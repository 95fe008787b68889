"""Export (SPEC R-TOOL-4): a session as a readable transcript or as one JSONL stream.

Owns: turning a session's records into transcript items (user and assistant text, thinking,
tool calls with their approval and output, failed requests, compactions, aborts), rendering
them as Markdown or as one self-contained HTML file, the concatenated JSONL of all files, and
``redact`` (a regular expression whose matches are masked in every string of every record).
Does not: read anything but the records (no scratchpad), write files, or print.

The HTML is safe to open whatever the trace holds: every string is escaped, the page carries
no script and a Content-Security-Policy that forbids scripts and every network request (only
inline styles and ``data:`` images of a few raster types are allowed), and remote image URLs
are shown as text, never fetched.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final, Literal

import msgspec

from eventstore import (
    AbortPayload,
    ApprovalDecisionPayload,
    CompactionEndPayload,
    ImageUrlPayload,
    InlineDataPayload,
    OmniMessage,
    RequestEndPayload,
    SessionMetaPayload,
    TextPayload,
    ThinkingPayload,
    ToolCallOutputPayload,
    ToolCallPayload,
    decode,
    encode,
)

from ._labels import request_label
from ._replay_llm import load_located
from ._timetravel import Files

__all__ = ["ExportFormat", "export_trace", "redact_record"]

ExportFormat = Literal["md", "html", "jsonl"]
MASK: Final = "[redacted]"
# Enum-valued keys: masking them would make the record undecodable, and they hold no data.
_KEPT_KEYS: Final = frozenset(
    {"type", "role", "stop_reason", "status", "event_type", "mode", "decision", "timestamp"}
)
_CONTROL: Final = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
_DATA_IMAGE: Final = re.compile(r"\Adata:image/(png|jpeg|gif|webp);base64,[A-Za-z0-9+/=\s]*\Z")
_BASE64: Final = re.compile(r"\A[A-Za-z0-9+/=\s]*\Z")
_RASTER: Final = frozenset({"image/png", "image/jpeg", "image/gif", "image/webp"})


# --------------------------------------------------------------------------- redaction


def _mask(value: Any, pattern: re.Pattern[str], key: str | None = None) -> Any:
    if isinstance(value, str):
        return value if key in _KEPT_KEYS else pattern.sub(MASK, value)
    if isinstance(value, list):
        return [_mask(v, pattern) for v in value]
    if isinstance(value, dict):
        kind = value.get("type")
        out = {}
        for k, v in value.items():
            enum_reason = k == "reason" and kind in ("compaction_begin", "compaction_end")
            out[k] = v if enum_reason else _mask(v, pattern, k)
        return out
    return value


def redact_record(record: OmniMessage, pattern: str | re.Pattern[str]) -> OmniMessage:
    """``record`` with every match of ``pattern`` in its strings replaced by ``[redacted]``
    (enum-valued fields and the timestamp excepted)."""
    compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
    obj = msgspec.json.decode(encode(record))
    return decode(msgspec.json.encode(_mask(obj, compiled)))


# --------------------------------------------------------------------------- transcript items


@dataclass(frozen=True, slots=True)
class _Item:
    kind: str  # user | assistant | thinking | call | output | event | image
    title: str
    body: str = ""
    code: bool = False
    image: str | None = None  # a data: URL that is safe to embed


def _image(p: ImageUrlPayload | InlineDataPayload) -> _Item:
    if isinstance(p, ImageUrlPayload):
        url = p.image_url
        if _DATA_IMAGE.match(url):
            return _Item("image", f"{p.role} image", image=url)
        return _Item("image", f"{p.role} image (not fetched)", url, code=True)
    if p.mime_type in _RASTER and _BASE64.match(p.data):
        return _Item("image", f"{p.role} image", image=f"data:{p.mime_type};base64,{p.data}")
    return _Item("image", f"{p.role} {p.mime_type} ({len(p.data)} chars, not shown)")


def _items(records: list[OmniMessage]) -> Iterator[_Item]:
    names: dict[str, str] = {}
    for r in records:
        if r.origin is not None:
            continue
        p = r.payload
        if isinstance(p, TextPayload):
            yield _Item(p.role, p.role.capitalize(), p.text)
        elif isinstance(p, ThinkingPayload):
            yield _Item("thinking", "Thinking", p.thinking)
        elif isinstance(p, ImageUrlPayload | InlineDataPayload):
            yield _image(p)
        elif isinstance(p, ToolCallPayload):
            names[p.tool_call_id] = p.name
            yield _Item("call", f"Tool call {p.name} ({p.tool_call_id})", p.arguments, True)
        elif isinstance(p, ApprovalDecisionPayload):
            yield _Item("event", f"approval: {p.decision} ({p.tool_call_id})")
        elif isinstance(p, ToolCallOutputPayload):
            name = names.get(p.tool_call_id, "?")
            status = p.stop_reason or "completed"
            title = f"Output of {name} ({p.tool_call_id}, {status})"
            yield _Item("output", title, p.output, True)
        elif isinstance(p, RequestEndPayload) and p.status != "completed":
            detail = f": {p.error_message}" if p.error_message else ""
            yield _Item("event", f"request {request_label(p.status, p.error_message)}{detail}")
        elif isinstance(p, CompactionEndPayload):
            yield _Item("event", f"compaction ({p.reason}, {p.mode}): {p.status}")
        elif isinstance(p, AbortPayload):
            yield _Item("event", f"aborted: {p.reason or ''}")


def _head(records: list[OmniMessage]) -> tuple[str, str, str]:
    meta = next((r for r in records if isinstance(r.payload, SessionMetaPayload)), None)
    if meta is None or not isinstance(meta.payload, SessionMetaPayload):
        return "(unknown session)", "", ""
    p = meta.payload
    return p.session_id, f"{p.provider}/{p.model_id}, started {meta.timestamp}", p.system_prompt


# --------------------------------------------------------------------------- markdown


def _fence(text: str) -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    ticks = "`" * max(3, longest + 1)
    return f"{ticks}\n{text}\n{ticks}"


def _markdown(records: list[OmniMessage]) -> str:
    sid, about, system = _head(records)
    out = [f"# Session {sid}", "", about, "", "## System prompt", "", _fence(system), ""]
    for item in _items(records):
        if item.kind == "event":
            out += [f"> *{item.title}*", ""]
        elif item.kind in ("user", "assistant"):
            out += [f"### {item.title}", "", item.body, ""]
        elif item.kind == "thinking":
            quoted = "\n".join(f"> {line}" for line in item.body.splitlines())
            out += ["*Thinking:*", "", quoted, ""]
        elif item.image is not None:
            out += [f"**{item.title}**: ![image]({item.image})", ""]
        else:
            out += [f"**{item.title}**", ""] + ([_fence(item.body), ""] if item.body else [])
    return "\n".join(out).rstrip() + "\n"


# --------------------------------------------------------------------------- html

_CSS: Final = """
body{font:15px/1.5 system-ui,sans-serif;max-width:50rem;margin:2rem auto;padding:0 1rem;color:#222}
h1{font-size:1.4rem}.about{color:#666}.msg{margin:1rem 0;padding:.6rem .8rem;border-radius:6px}
.user{background:#eef4ff}.assistant{background:#f5f5f5}.thinking{color:#666;font-style:italic}
.call,.output{background:#fafafa;border:1px solid #ddd}.event{color:#885;font-size:.9rem}
.title{font-weight:600;font-size:.85rem;color:#555}.text{white-space:pre-wrap}
pre{white-space:pre-wrap;word-break:break-word;margin:.3rem 0}img{max-width:100%}
"""
_CSP: Final = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


def _esc(text: str) -> str:
    shown = _CONTROL.sub(lambda m: f"\\x{ord(m.group(0)):02x}", text)
    return html.escape(shown, quote=True)


def _html(records: list[OmniMessage]) -> str:
    sid, about, system = _head(records)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{_CSP}">',
        '<meta name="referrer" content="no-referrer">',
        f"<title>Session {_esc(sid)}</title><style>{_CSS}</style></head><body>",
        f"<h1>Session {_esc(sid)}</h1><p class=about>{_esc(about)}</p>",
        f'<div class="msg event"><div class=title>System prompt</div><pre>{_esc(system)}</pre></div>',
    ]
    for item in _items(records):
        body = ""
        if item.image is not None:
            body = f'<img alt="image" src="{_esc(item.image)}">'
        elif item.body:
            body = (
                f"<pre>{_esc(item.body)}</pre>"
                if item.code
                else f"<div class=text>{_esc(item.body)}</div>"
            )
        parts.append(
            f'<div class="msg {item.kind}"><div class=title>{_esc(item.title)}</div>{body}</div>'
        )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def export_trace(
    source: Files, *, format: ExportFormat, redact: str | re.Pattern[str] | None = None
) -> str:
    """A session (a trace file, its files or their directory) as ``md``, ``html`` or
    ``jsonl`` text (SPEC R-TOOL-4).  Torn tails and malformed lines are left out, as readers
    leave them.  ``redact`` masks its matches in every string of every record."""
    records = [loc.record for loc in load_located(source)]
    if redact is not None:
        records = [redact_record(r, redact) for r in records]
    if format == "jsonl":
        return "".join(encode(r).decode("utf-8") + "\n" for r in records)
    if format == "md":
        return _markdown(records)
    if format == "html":
        return _html(records)
    raise ValueError(f"unknown export format {format!r}: expected md, html or jsonl")
