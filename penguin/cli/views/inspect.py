"""``penguin inspect`` and ``penguin resume`` without ``-m``: what a session's trace holds.

Owns: reading trace files with line numbers and ``file:ordinal`` coordinates (R-FORK-1), the
inspection model (files and counts per record type, ``SessionState``, the ``ModelContext``
summary, a timeline of request spans, tool calls, compactions and aborts, the reader's
diagnostics), one-line record descriptions, following ``subagent`` pointers to the child
sessions' views (``--children``, SPEC §11), and rendering all of it as rich text or JSON-ready
dicts.  Does not: take locks, repair or write anything (R-CLI-2, §16: read-only commands).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Final

import msgspec
from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from eventstore import (
    AbortPayload,
    ApprovalDecisionPayload,
    CompactionBeginPayload,
    CompactionEndPayload,
    DataRoot,
    Diagnostic,
    ImageUrlPayload,
    InlineDataPayload,
    InlineThinkingPayload,
    OmniMessage,
    RequestBeginPayload,
    RequestEndPayload,
    SessionMetaPayload,
    SubagentPayload,
    TextPayload,
    ThinkingPayload,
    TokenUsagePayload,
    ToolCallOutputPayload,
    ToolCallPayload,
    ToolListReadyPayload,
    encode,
    read_trace,
    record_kind,
    tail,
    validate_id,
)
from eventstore.builders import stop_reason_of
from penguin._goal import goal_dict
from penguin.cli.diagnose import wrong_type
from penguin.cli.tasks.goal import goal_line
from penguin.cli.terminal.safe import preview, safe
from penguin.cli.tracefiles import trace_name
from projections import ModelContext, SessionState

__all__ = [
    "MAX_CHILD_DEPTH",
    "ChildView",
    "Inspection",
    "NumberedFile",
    "build_inspection",
    "describe",
    "find_session_files",
    "follow_children",
    "kind_of",
    "read_numbered",
    "record_row",
    "render_children",
    "render_inspection",
    "render_records",
    "state_dict",
]

_PREVIEW: Final = 100


# --------------------------------------------------------------------------- reading


@dataclass(slots=True)
class NumberedFile:
    """One trace file read with the reader's rules, keeping each record's physical line."""

    path: Path
    index: int
    size: int
    records: list[tuple[int, OmniMessage]]

    def counts(self) -> dict[str, int]:
        return dict(Counter(kind_of(r) for _, r in self.records))

    @property
    def residue(self) -> bool:
        """R-ROOT-10: no session_meta, or (index > 1) nothing beyond the rotation head."""
        kinds = [kind_of(r) for _, r in self.records]
        if "session_meta" not in kinds:
            return True
        return self.index > 1 and all(k in ("session_meta", "tool_list_ready") for k in kinds)


def read_numbered(path: Path) -> NumberedFile:
    """Records with their 1-based physical line numbers, read by ``eventstore.tail`` with the
    reader's rules, so positions in the returned list are the record ordinals of the file
    (R-FORK-1)."""
    read = tail(path)
    size = path.stat().st_size
    records = [(t.line, t.record) for t in read.records]
    name = trace_name(path)
    return NumberedFile(path=path, index=name[1] if name else 1, size=size, records=records)


# --------------------------------------------------------------------------- record texts


def kind_of(record: OmniMessage) -> str:
    """What ``record`` is in one word, as every reader says it (``eventstore.record_kind``)."""
    return record_kind(record)


def describe(record: OmniMessage) -> str:
    """One safe line saying what ``record`` is."""
    p = record.payload
    kind = kind_of(record)
    origin = (
        f"[{'/'.join(safe(o, keep_newlines=False) for o in record.origin)}] "
        if record.origin
        else ""
    )
    if isinstance(p, SessionMetaPayload):
        detail = (
            f"{safe(p.session_id)} {safe(p.provider)}/{safe(p.model_id)} "
            f"workspace={preview(p.workspace, 60)}"
        )
    elif isinstance(p, TextPayload):
        detail = f"{p.role}: {preview(p.text, _PREVIEW)}"
    elif isinstance(p, ThinkingPayload):
        detail = preview(p.thinking, _PREVIEW)
    elif isinstance(p, InlineThinkingPayload | InlineDataPayload):
        detail = f"{safe(p.mime_type)} ({len(p.data)} chars)"
    elif isinstance(p, ImageUrlPayload):
        detail = preview(p.image_url, 80)
    elif isinstance(p, ToolCallPayload):
        detail = f"{preview(p.name, 40)} {preview(p.arguments, 80)} ({preview(p.tool_call_id, 40)})"
    elif isinstance(p, ToolCallOutputPayload):
        detail = f"{preview(p.tool_call_id, 40)}: {preview(p.output, 80)}"
    elif isinstance(p, RequestEndPayload):
        detail = p.status
        if p.attempt is not None:
            detail += f" attempt={p.attempt}"
        if p.retry_in_ms is not None:
            detail += f" retry_in_ms={p.retry_in_ms}"
        if p.error_message:
            detail += f" {preview(p.error_message, 80)}"
    elif isinstance(p, TokenUsagePayload):
        detail = f"request total={p.request.total} output={p.request.output}; session total={p.session.total}"
    elif isinstance(p, ApprovalDecisionPayload):
        detail = f"{p.decision} {preview(p.tool_call_id, 40)}"
    elif isinstance(p, AbortPayload):
        detail = preview(p.reason or "", _PREVIEW)
    elif isinstance(p, CompactionBeginPayload):
        detail = f"{p.mode} reason={p.reason} context={p.context} turns={p.turns}"
    elif isinstance(p, CompactionEndPayload):
        detail = f"{p.mode} {p.status} attempt={p.attempt}"
        if p.error_message:
            detail += f" {preview(p.error_message, 80)}"
    elif isinstance(p, ToolListReadyPayload):
        detail = ", ".join(preview(t.name, 40) for t in p.tools)
    elif isinstance(p, SubagentPayload):
        detail = preview(p.session_id, 80)
    elif isinstance(p, RequestBeginPayload):
        detail = ""
    else:
        detail = preview(encode(record).decode("utf-8", "replace"), _PREVIEW)
    stop = stop_reason_of(record)  # only messages have one: events never show a tail
    if stop != "completed":
        detail += f" [{stop}]"
    return f"{origin}{safe(kind, keep_newlines=False)} {detail}".rstrip()


def record_row(file_index: int, ordinal: int, line: int, record: OmniMessage) -> dict[str, Any]:
    """A ``--records --json`` row: coordinates plus the record as written."""
    return {
        "coord": f"{file_index}:{ordinal}",
        "file": file_index,
        "ordinal": ordinal,
        "line": line,
        "timestamp": record.timestamp,
        "type": kind_of(record),
        "record": msgspec.json.decode(encode(record)),
    }


# --------------------------------------------------------------------------- the model


def _ts(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _ms_between(begin: str | None, end: str | None) -> int | None:
    a, b = _ts(begin), _ts(end)
    if a is None or b is None:
        return None
    try:
        return round((b - a).total_seconds() * 1000)
    except TypeError:  # one aware, one naive
        return None


def state_dict(state: SessionState) -> dict[str, Any]:
    """The public fields of ``SessionState`` as JSON-ready values."""
    return {
        "turns_total": state.turns_total,
        "turns_in_context": state.turns_in_context,
        "session_tokens": msgspec.to_builtins(state.session_tokens),
        "last_request_total": state.last_request_total,
        "last_request_status": state.last_request_status,
        "open_request": state.open_request,
        "open_compaction": list(state.open_compaction) if state.open_compaction else None,
        "from_compaction": state.from_compaction,
        "rotation_pending": state.rotation_pending,
        "task_running": state.task_running,
        "files": state.files,
        "records": state.records,
        "goal": goal_dict(state.goal),
        # SPEC §23: the records alone (a reader holds no lock: an open run reads interrupted).
        "status": state.status,
        "runs": state.runs,
        "settings": msgspec.to_builtins(state.settings) if state.settings is not None else None,
    }


def context_dict(ctx: ModelContext) -> dict[str, Any]:
    summary = ctx.pending_summary
    summary_text = (
        summary.payload.text
        if summary is not None and isinstance(summary.payload, TextPayload)
        else None
    )
    return {
        "history": len(ctx.history),
        "carry_over": len(ctx.pending),
        "pending_summary": summary_text,
        "closed": ctx.closed,
        "open_request": ctx.open_request,
        "dangling_compaction": list(ctx.dangling_compaction) if ctx.dangling_compaction else None,
    }


@dataclass(slots=True)
class Inspection:
    """Everything ``inspect`` shows, as JSON-ready values (strings are raw, not escaped: the
    renderer and ``safe_json`` escape them)."""

    session_id: str | None
    meta: dict[str, Any] | None
    files: list[dict[str, Any]]
    state: dict[str, Any]
    context: dict[str, Any]
    timeline: list[dict[str, Any]]
    diagnostics: list[dict[str, Any]]
    counts: dict[str, int] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "meta": self.meta,
            "files": self.files,
            "counts": self.counts,
            "state": self.state,
            "context": self.context,
            "timeline": self.timeline,
            "requests": [e for e in self.timeline if e["kind"] == "request"],
            "tool_calls": [e for e in self.timeline if e["kind"] == "tool_call"],
            "compactions": [e for e in self.timeline if e["kind"] == "compaction"],
            "aborts": [e for e in self.timeline if e["kind"] == "abort"],
            "diagnostics": self.diagnostics,
        }


def _meta_dict(p: SessionMetaPayload) -> dict[str, Any]:
    return {
        "session_id": p.session_id,
        "provider": p.provider,
        "model_id": p.model_id,
        "model_context_window": p.model_context_window,
        "system_prompt": p.system_prompt,
        "agent_state": p.agent_state,
        "workspace": p.workspace,
        "source": p.source,
    }


class _Timeline:
    """Folds records into timeline entries; request spans and tool calls are filled in as
    their closing records arrive."""

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self._request: dict[str, Any] | None = None
        self._compaction: dict[str, Any] | None = None
        self._calls: dict[str, dict[str, Any]] = {}
        self._last_ended: dict[str, Any] | None = None
        # The request span closed by the record just before this one (its token_usage follows).
        self._just_ended: dict[str, Any] | None = None
        self._numbers = {"turn": 0, "compaction": 0}

    def _depth(self) -> int:
        return (1 if self._compaction is not None else 0) + (1 if self._request is not None else 0)

    def _add(self, entry: dict[str, Any]) -> dict[str, Any]:
        entry.setdefault("depth", self._depth())
        self.entries.append(entry)
        return entry

    def new_file(self) -> None:
        # A span left open by its file never closes (crash residue, R-RESUME-7a).
        self._request = None
        self._compaction = None
        self._last_ended = None

    def apply(self, at: str, record: OmniMessage) -> None:
        if record.origin is not None:
            return
        self._just_ended, self._last_ended = self._last_ended, None
        fold = _TIMELINE_FOLDS.get(type(record.payload))
        if fold is not None:
            fold(self, at, record.timestamp, record.payload)

    # -- request spans

    def _request_begin(self, at: str, ts: str, p: RequestBeginPayload) -> None:
        span = "compaction" if self._compaction is not None else "turn"
        self._numbers[span] += 1
        self._request = self._add(
            {
                "kind": "request",
                "at": at,
                "span": span,
                "number": self._numbers[span],
                "status": None,
                "attempt": None,
                "retry_in_ms": None,
                "error": None,
                "begin": ts,
                "end": None,
                "duration_ms": None,
                "tokens": None,
            }
        )

    def _request_end(self, at: str, ts: str, p: RequestEndPayload) -> None:
        entry = self._request
        if entry is None:
            # A request_end whose request_begin is in no file shown: a span without a start.
            entry = self._add(
                {
                    "kind": "request",
                    "at": at,
                    "span": "turn",
                    "number": None,
                    "begin": None,
                    "tokens": None,
                }
            )
        entry.update(
            status=p.status,
            attempt=p.attempt,
            retry_in_ms=p.retry_in_ms,
            error=p.error_message,
            end=ts,
            duration_ms=_ms_between(entry.get("begin"), ts),
        )
        self._request = None
        self._last_ended = entry

    def _token_usage(self, at: str, ts: str, p: TokenUsagePayload) -> None:
        target = self._request if self._request is not None else self._just_ended
        if target is not None:
            target["tokens"] = msgspec.to_builtins(p.request)

    # -- messages

    def _text(self, at: str, ts: str, p: TextPayload) -> None:
        role = "input" if p.role == "user" else "text"
        self._add({"kind": role, "at": at, "text": p.text, "stop_reason": p.stop_reason})

    def _image_url(self, at: str, ts: str, p: ImageUrlPayload) -> None:
        text = f"[image] {p.image_url[:200]}"
        self._add({"kind": "input", "at": at, "text": text, "stop_reason": p.stop_reason})

    def _thinking(self, at: str, ts: str, p: ThinkingPayload) -> None:
        self._add({"kind": "thinking", "at": at, "text": p.thinking, "stop_reason": p.stop_reason})

    # -- tool calls: approval and output fill in their call's entry when it has none yet

    def _tool_call(self, at: str, ts: str, p: ToolCallPayload) -> None:
        self._calls[p.tool_call_id] = self._add(
            {
                "kind": "tool_call",
                "at": at,
                "id": p.tool_call_id,
                "name": p.name,
                "arguments": p.arguments,
                "stop_reason": p.stop_reason,
                "approval": None,
                "output_status": None,
                "output": None,
                "duration_ms": None,
                "called": ts,
            }
        )

    def _approval(self, at: str, ts: str, p: ApprovalDecisionPayload) -> None:
        call = self._calls.get(p.tool_call_id)
        if call is not None and call["approval"] is None:
            call["approval"] = p.decision
            return
        self._add({"kind": "approval", "at": at, "id": p.tool_call_id, "decision": p.decision})

    def _tool_output(self, at: str, ts: str, p: ToolCallOutputPayload) -> None:
        status = p.stop_reason or "completed"
        call = self._calls.get(p.tool_call_id)
        if call is not None and call["output"] is None:
            call["output_status"] = status
            call["output"] = p.output
            call["duration_ms"] = _ms_between(call.get("called"), ts)
            return
        self._add(
            {
                "kind": "tool_output",
                "at": at,
                "id": p.tool_call_id,
                "status": status,
                "output": p.output,
            }
        )

    # -- compactions, aborts, subagents

    def _compaction_begin(self, at: str, ts: str, p: CompactionBeginPayload) -> None:
        self._compaction = self._add(
            {
                "kind": "compaction",
                "at": at,
                "reason": p.reason,
                "mode": p.mode,
                "context": p.context,
                "turns": p.turns,
                "status": None,
                "attempt": None,
                "error": None,
                "begin": ts,
                "duration_ms": None,
            }
        )

    def _compaction_end(self, at: str, ts: str, p: CompactionEndPayload) -> None:
        entry = self._compaction
        if entry is None:
            entry = self._add(
                {"kind": "compaction", "at": at, "reason": p.reason, "mode": p.mode, "begin": None}
            )
        self._request = None
        self._compaction = None
        entry.update(
            status=p.status,
            attempt=p.attempt,
            error=p.error_message,
            duration_ms=_ms_between(entry.get("begin"), ts),
        )

    def _abort(self, at: str, ts: str, p: AbortPayload) -> None:
        self._add({"kind": "abort", "at": at, "reason": p.reason})

    def _subagent(self, at: str, ts: str, p: SubagentPayload) -> None:
        self._add({"kind": "subagent", "at": at, "session_id": p.session_id})


# Payload class -> the fold of its records into the timeline; records of other types add nothing.
_TIMELINE_FOLDS: Final[dict[type[Any], Callable[[_Timeline, str, str, Any], None]]] = {
    RequestBeginPayload: _Timeline._request_begin,
    RequestEndPayload: _Timeline._request_end,
    TokenUsagePayload: _Timeline._token_usage,
    TextPayload: _Timeline._text,
    ImageUrlPayload: _Timeline._image_url,
    ThinkingPayload: _Timeline._thinking,
    ToolCallPayload: _Timeline._tool_call,
    ApprovalDecisionPayload: _Timeline._approval,
    ToolCallOutputPayload: _Timeline._tool_output,
    CompactionBeginPayload: _Timeline._compaction_begin,
    CompactionEndPayload: _Timeline._compaction_end,
    AbortPayload: _Timeline._abort,
    SubagentPayload: _Timeline._subagent,
}


def build_inspection(files: list[NumberedFile], *, selected: list[int] | None = None) -> Inspection:
    """Inspect ``files`` (one session's files in index order, or one file).

    ``selected`` (positions in ``files``) narrows the file table, counts and timeline; the
    state folds every file up to the last selected one and the context folds that file alone
    (R-PROJ-1, R-RESUME-11) — a trailing crash-residue file is skipped (R-ROOT-10).
    """
    positions = list(range(len(files))) if selected is None else selected
    last = positions[-1] if positions else len(files) - 1
    context_at = last
    if selected is None and len(files) > 1 and files[last].residue:
        context_at = last - 1
    state = SessionState()
    for nf in files[: context_at + 1]:
        for _, record in nf.records:
            state.apply(record)
    ctx = ModelContext()
    for _, record in files[context_at].records if files else []:
        ctx.apply(record)

    timeline = _Timeline()
    counts: Counter[str] = Counter()
    file_rows: list[dict[str, Any]] = []
    meta: dict[str, Any] | None = None
    for pos in positions:
        nf = files[pos]
        timeline.new_file()
        file_counts = nf.counts()
        counts.update(file_counts)
        file_rows.append(
            {
                "index": nf.index,
                "path": str(nf.path),
                "bytes": nf.size,
                "records": len(nf.records),
                "counts": file_counts,
                "residue": nf.residue,
            }
        )
        for ordinal, (_, record) in enumerate(nf.records):
            if meta is None and isinstance(record.payload, SessionMetaPayload):
                meta = _meta_dict(record.payload)
            timeline.apply(f"{nf.index}:{ordinal}", record)
    for entry in timeline.entries:
        entry.pop("called", None)

    paths = [files[p].path for p in positions]
    diagnostics: list[Diagnostic] = []
    if paths:
        as_session: Path | list[Path] = paths if len(paths) > 1 else paths[0]
        diagnostics = read_trace(as_session, report=False).diagnostics
        for pos in positions:
            for line, record in files[pos].records:
                why = wrong_type(record)
                if why is not None:
                    diagnostics.append(Diagnostic(files[pos].path, line, "malformed", why))
    return Inspection(
        session_id=meta["session_id"] if meta else None,
        meta=meta,
        files=file_rows,
        state=state_dict(state),
        context=context_dict(ctx),
        timeline=timeline.entries,
        diagnostics=[
            {"path": str(d.path), "line": d.line, "kind": d.kind, "detail": d.detail}
            for d in diagnostics
        ],
        counts=dict(counts),
    )


# --------------------------------------------------------------------------- rendering


def _tf(value: object) -> str:
    """JSON's spelling of a flag, as every other output of the CLI prints it."""
    return "true" if value is True else "false" if value is False else str(value)


def token_words(tokens: dict[str, int]) -> str:
    """The one wording of token counts (stats, inspect, the summary line): ``input`` is every
    prompt token, ``cached`` the part read from the provider's cache, ``output`` the reply."""
    read, write, out = tokens["cache_read"], tokens["cache_write"], tokens["output"]
    return f"input {read + write} (cached {read}), output {out}, total {tokens['total']}"


def _t(text: str, style: str = "") -> Text:
    return Text(text, style=style)


def _fmt_ms(ms: int) -> str:
    if ms < 1000:
        return f"{ms} ms"
    return f"{ms / 1000:.1f} s"


def _tokens(tokens: dict[str, int]) -> str:
    return f"tokens: {token_words(tokens)}"


def _entry_line(e: dict[str, Any]) -> tuple[str, str]:
    kind = e["kind"]
    if kind == "request":
        label = f"{e.get('span', 'turn')} request"
        if e.get("number") is not None:
            label += f" #{e['number']}"
        status = e.get("status") or "open (no request_end)"
        parts = [label, status]
        if e.get("attempt") is not None:
            parts.append(f"attempt {e['attempt']}")
        if e.get("duration_ms") is not None:
            parts.append(_fmt_ms(e["duration_ms"]))
        if e.get("tokens"):
            parts.append(_tokens(e["tokens"]))
        if e.get("retry_in_ms") is not None:
            parts.append(f"retry in {e['retry_in_ms']} ms")
        if e.get("error"):
            parts.append(preview(e["error"], 80))
        style = "bold" if status == "completed" else "bold yellow"
        return "  ".join(parts), style
    if kind == "input":
        return f"> {preview(e['text'], _PREVIEW)}", "bold"
    if kind == "text":
        stop = e.get("stop_reason")
        tail = f" [{stop}]" if stop not in (None, "completed") else ""
        return f"text: {preview(e['text'], _PREVIEW)}{tail}", ""
    if kind == "thinking":
        return f"thinking: {preview(e['text'], _PREVIEW)}", "dim italic"
    if kind == "tool_call":
        line = (
            f"tool {preview(e['name'], 40)} {preview(e['arguments'], 60)} ({preview(e['id'], 40)})"
        )
        if e.get("stop_reason") not in (None, "completed"):
            line += f" [{e['stop_reason']}]"
        line += f"  approval: {e['approval'] or '-'}"
        if e.get("output_status") is not None:
            line += f"  → {e['output_status']}"
            if e.get("duration_ms") is not None:
                line += f" in {_fmt_ms(e['duration_ms'])}"
            line += f": {preview(e['output'] or '', 80)}"
        else:
            line += "  → no output"
        return line, "cyan"
    if kind == "approval":
        return f"approval {e['decision']} {preview(e['id'], 40)} (no matching call)", "magenta"
    if kind == "tool_output":
        return f"output {preview(e['id'], 40)} {e['status']}: {preview(e['output'], 80)}", "green"
    if kind == "compaction":
        status = e.get("status") or "open (no compaction_end)"
        line = f"compaction {e['mode']} ({e['reason']}"
        if e.get("context") is not None:
            line += f"; context {e['context']}, turns {e['turns']}"
        line += f")  {status}"
        if e.get("attempt") is not None:
            line += f"  attempts {e['attempt']}"
        if e.get("duration_ms") is not None:
            line += f"  {_fmt_ms(e['duration_ms'])}"
        if e.get("error"):
            line += f"  {preview(e['error'], 80)}"
        return line, "blue"
    if kind == "abort":
        return f"abort: {preview(e.get('reason') or '', _PREVIEW)}", "red"
    # The last kind ``_Timeline`` makes.
    return f"subagent {preview(e['session_id'], 60)}", "dim"


class _View:
    """Prints the lines of one session view, each behind ``indent`` (a child's view is nested)."""

    def __init__(self, console: Console, indent: str) -> None:
        self.console = console
        self.indent = indent

    def line(self, text: Text | str, style: str = "") -> None:
        body = text if isinstance(text, Text) else _t(text, style)
        self.console.print(Text(self.indent) + body if self.indent else body, soft_wrap=True)

    def heading(self, title: str) -> None:
        self.console.print()
        self.line(_t(title, "bold underline"))

    def table(self, table: Table) -> None:
        indent = len(self.indent)
        self.console.print(Padding(table, (0, 0, 0, indent), expand=False) if indent else table)


def render_inspection(console: Console, insp: Inspection, *, label: str, indent: str = "") -> None:
    """The session view; every line starts with ``indent`` (a child's view is nested)."""
    view = _View(console, indent)
    _render_header(view, insp, label)
    _render_files(view, insp.files)
    _render_state(view, insp.state)
    _render_context(view, insp.context)
    _render_timeline(view, insp.timeline)
    _render_diagnostics(view, insp.diagnostics)


def _render_header(view: _View, insp: Inspection, label: str) -> None:
    view.line(_t(f"Session {safe(insp.session_id or '?', keep_newlines=False)}", "bold"))
    view.line(f"  source:    {safe(label, keep_newlines=False)}")
    m = insp.meta
    if m is None:
        return
    view.line(
        f"  model:     {preview(m['provider'], 40)}/{preview(m['model_id'], 60)}"
        f" (context window {preview(str(m['model_context_window']), 20)})"
    )
    view.line(f"  workspace: {preview(m['workspace'], 100)}")
    view.line(f"  system:    {preview(m['system_prompt'], 100)}")
    if m.get("source"):
        view.line(f"  started as: {preview(m['source'], 40)}")


def _render_files(view: _View, files: list[dict[str, Any]]) -> None:
    view.heading("Files")
    table = Table(show_edge=False, pad_edge=False)
    for col in ("#", "path", "bytes", "records", "record types"):
        table.add_column(col, overflow="fold")
    for f in files:
        kinds = ", ".join(
            f"{safe(k, keep_newlines=False)} {n}" for k, n in sorted(f["counts"].items())
        )
        residue = " (crash residue)" if f["residue"] else ""
        table.add_row(
            _t(str(f["index"])),
            _t(safe(f["path"], keep_newlines=False) + residue),
            _t(str(f["bytes"])),
            _t(str(f["records"])),
            _t(kinds),
        )
    view.table(table)


def _render_state(view: _View, s: dict[str, Any]) -> None:
    view.heading("State (SessionState)")
    view.line(
        f"  turns: {s['turns_total']} total, {s['turns_in_context']} in context; "
        f"records {s['records']}; files {s['files']}"
    )
    view.line(
        f"  session tokens: {token_words(s['session_tokens'])}; "
        f"last request {s['last_request_total']}"
    )
    view.line(
        f"  last request status: {s['last_request_status'] or '-'}; "
        f"task running: {_tf(s['task_running'])}; open request: {_tf(s['open_request'])}; "
        f"open compaction: {s['open_compaction'] or '-'}"
    )
    view.line(
        f"  opened by compaction: {_tf(s['from_compaction'])}; "
        f"rotation pending: {_tf(s['rotation_pending'])}"
    )
    if s.get("goal"):
        view.line(goal_line(s["goal"]))


def _render_context(view: _View, c: dict[str, Any]) -> None:
    view.heading("Model context (ModelContext)")
    summary = c["pending_summary"]
    view.line(
        f"  history: {c['history']} messages; carry-over: {c['carry_over']} messages; "
        f"closed: {_tf(c['closed'])}"
    )
    view.line("  pending summary: " + (preview(summary, 120) if summary else "none"))


def _render_timeline(view: _View, timeline: list[dict[str, Any]]) -> None:
    view.heading("Timeline")
    if not timeline:
        view.line("  (no records)", "dim")
    for e in timeline:
        text, style = _entry_line(e)
        depth = "  " * (1 + int(e.get("depth", 0)))
        view.line(Text(f"{e['at']:>7} ", style="dim") + Text(depth + text, style=style))


def _render_diagnostics(view: _View, diagnostics: list[dict[str, Any]]) -> None:
    view.heading("Diagnostics")
    if not diagnostics:
        view.line("  none", "dim")
    for d in diagnostics:
        where = f"{safe(d['path'], keep_newlines=False)}:{d['line']}"
        view.line(_t(f"  {where}: {d['kind']}: {preview(d['detail'], 120)}", "yellow"))


# --------------------------------------------------------------------------- subagents


@dataclass(slots=True)
class ChildView:
    """One ``subagent`` pointer of a trace, followed: the child's inspection (None when it
    could not be shown, ``error`` then says why) and the pointers of the child's own trace."""

    at: str  # the pointer's ``file:ordinal`` in the trace that holds it
    session_id: str  # as the pointer names it
    inspection: Inspection | None = None
    label: str = ""
    error: str | None = None
    children: list[ChildView] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        inner: dict[str, Any] | None = None
        if self.inspection is not None:
            inner = self.inspection.as_json()
            inner["children"] = [c.as_json() for c in self.children]
        return {
            "at": self.at,
            "session_id": self.session_id,
            "source": self.label or None,
            "error": self.error,
            "inspection": inner,
        }


def find_session_files(
    session_id: str,
    *,
    near: Sequence[Path],
    root: DataRoot | None,
    project: str | None = None,
    agent: str | None = None,
) -> list[Path]:
    """The trace files of ``session_id``, sorted by index: first in the ``traces`` directory
    (any date) of the files in ``near`` — a child lives beside its parent — then in ``root``
    under ``project``/``agent``, then anywhere in ``root``.

    Raises ``ValueError`` for an id that cannot be a file name (untrusted trace content never
    becomes a path), ``FileNotFoundError`` when there are no files, ``LookupError`` when the
    root holds the id under two agents."""
    validate_id(session_id, what="session id")
    for traces in dict.fromkeys(f.resolve().parent.parent for f in near if trace_name(f)):
        found: list[tuple[int, Path]] = []
        try:
            dates = [d for d in traces.iterdir() if d.is_dir()]
        except OSError:
            continue
        for date in dates:
            try:
                for f in date.iterdir():
                    name = trace_name(f)
                    if name is not None and name[0] == session_id and f.is_file():
                        found.append((name[1], f))
            except OSError:
                continue
        if found:
            return [f for _, f in sorted(found)]
    if root is None:
        raise FileNotFoundError(f"Session does not exist: {session_id}")
    if project is not None or agent is not None:
        try:
            return root.trace_files(session_id, project=project, agent=agent)
        except FileNotFoundError:
            pass
    return root.trace_files(session_id)


MAX_CHILD_DEPTH: Final = 8


def follow_children(
    insp: Inspection,
    find: Callable[[str], list[Path]],
    *,
    depth: int = 1,
    max_depth: int = MAX_CHILD_DEPTH,
    seen: set[str] | None = None,
) -> list[ChildView]:
    """Follow every ``subagent`` pointer of ``insp``'s timeline, recursively.

    ``find(session_id)`` gives a session's trace files (``find_session_files``).  A pointer
    that cannot be followed — an invalid or unknown id, unreadable files, a session already
    shown (a cycle, or the same child named twice), nesting deeper than ``max_depth`` — gives a
    view with ``error`` set instead of failing the whole inspection."""
    seen = set() if seen is None else seen
    if insp.session_id is not None:
        seen.add(insp.session_id)
    views: list[ChildView] = []
    for entry in insp.timeline:
        if entry["kind"] != "subagent":
            continue
        view = ChildView(at=entry["at"], session_id=entry["session_id"])
        views.append(view)
        sid = view.session_id
        if depth > max_depth:
            view.error = f"not followed: subagents nested deeper than {max_depth} levels"
            continue
        if sid in seen:
            view.error = "already shown above (a repeated pointer or a cycle); not followed again"
            continue
        try:
            files = find(sid)
        except FileNotFoundError:
            view.error = "not found: no trace files for this session"
            continue
        except (ValueError, LookupError, OSError) as exc:
            view.error = str(exc) or type(exc).__name__
            continue
        seen.add(sid)
        try:
            child = build_inspection([read_numbered(f) for f in files])
        except OSError as exc:
            view.error = f"unreadable: {exc}"
            continue
        view.inspection = child
        view.label = str(files[-1])
        view.children = follow_children(
            child, find, depth=depth + 1, max_depth=max_depth, seen=seen
        )
    return views


def render_children(console: Console, views: list[ChildView], *, indent: str = "") -> None:
    """Each followed pointer under a heading naming its ``file:ordinal``; the child's view
    (and its own children) indented below it."""
    if not indent:
        console.print()
        console.print(_t("Subagents", "bold underline"))
        if not views:
            console.print(_t("  none (no subagent pointers in this trace)", "dim"))
    for view in views:
        head = (
            f"{indent}── subagent at {safe(view.at, keep_newlines=False)}: "
            f"{safe(view.session_id, keep_newlines=False)}"
        )
        console.print()
        if view.inspection is None:
            console.print(
                _t(f"{head}: {safe(view.error or 'not shown')}", "yellow"), soft_wrap=True
            )
            continue
        console.print(_t(head, "bold"), soft_wrap=True)
        inner = indent + "    "
        render_inspection(console, view.inspection, label=view.label, indent=inner)
        render_children(console, view.children, indent=inner)


def iter_rows(files: Iterable[NumberedFile]) -> Iterator[tuple[int, int, int, OmniMessage]]:
    """``(file_index, ordinal, line, record)`` for every record, in order."""
    for nf in files:
        for ordinal, (line, record) in enumerate(nf.records):
            yield nf.index, ordinal, line, record


def render_records(console: Console, files: Iterable[NumberedFile]) -> None:
    for index, ordinal, line, record in iter_rows(files):
        coord = f"{index}:{ordinal}"
        console.print(
            Text(f"{coord:>7} ", style="bold")
            + Text(f"L{line:<5} {safe(record.timestamp, keep_newlines=False)} ", style="dim")
            + Text(describe(record)),
            soft_wrap=True,
        )
