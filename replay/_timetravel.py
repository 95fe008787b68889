"""Time travel: the model context and the exact request at any point of a trace (SPEC R-TOOL-1).

Owns: resolving a ``(file_index, ordinal)`` position to one record of one file, folding that
file's records up to it (the file alone, as resume does, R-PROJ-1), and rebuilding the
``LLMRequest`` the engine sent at a ``request_begin`` from the fold, the file's
``session_meta`` and the toolset recorded before it.  Does not: print anything (the CLI does),
take a lock or modify a trace.

The engine builds each request from the same projections it folds over the records it writes
(R-PROJ-3), so the fold up to a ``request_begin`` *is* the request: synthesized messages (the
carry-over placeholders, ``[turn_aborted]`` / ``[turn_retried]`` blocks) come out of it byte for
byte.  ``thinking_level`` is a run option that no record holds; it is returned as given.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import msgspec

from engine import AbortSignal, LLMRequest
from eventstore import (
    OmniMessage,
    RequestBeginPayload,
    SessionMetaPayload,
    TextPayload,
    ToolDefinition,
    ToolListReadyPayload,
    encode,
    file_index,
    record_kind,
    scan_trace,
)
from projections import ModelContext

from ._replay_llm import _session_files

__all__ = ["Position", "TracePoint", "context_at", "parse_position", "request_at", "trace_point"]

Position: TypeAlias = tuple[int, int]
Files: TypeAlias = "str | os.PathLike[str] | Sequence[str | os.PathLike[str]]"


@dataclass(frozen=True, slots=True)
class TracePoint:
    """What the trace says at one record.

    ``request`` is set when the record is a ``request_begin``; ``synthesized`` holds the indices
    of ``request.messages`` (or, without a request, of ``context.request_messages()``'s view:
    history then carry-over) that no record holds — the fold made them (R-PROJ-3).
    """

    path: Path
    position: Position
    line: int
    record: OmniMessage
    context: ModelContext
    request: LLMRequest | None
    synthesized: frozenset[int]

    def messages(self) -> tuple[list[OmniMessage], int]:
        """The messages shown at this point and how many at the end are new: the request's
        messages and its new input, or the context's history then its carry-over."""
        if self.request is not None:
            return self.request.messages, self.request.new_messages
        return [*self.context.history, *self.context.pending], len(self.context.pending)

    def as_json(self) -> dict[str, Any]:
        """JSON-ready values (strings raw, as recorded): the record, then ``request`` (system
        prompt, tools, ``new_messages``, messages) or ``context`` (its summary and messages);
        every message row says whether it is ``synthesized`` and ``new``."""
        messages, new = self.messages()
        first_new = len(messages) - new
        rows = [
            {
                "index": i,
                "synthesized": i in self.synthesized,
                "new": i >= first_new,
                "message": msgspec.json.decode(encode(m)),
            }
            for i, m in enumerate(messages)
        ]
        out: dict[str, Any] = {
            "at": f"{self.position[0]}:{self.position[1]}",
            "path": str(self.path),
            "line": self.line,
            "record": msgspec.json.decode(encode(self.record)),
        }
        if self.request is not None:
            out["request"] = {
                "system_prompt": self.request.system_prompt,
                "tools": msgspec.to_builtins(self.request.tools),
                "new_messages": new,
                "messages": rows,
            }
            return out
        ctx = self.context
        summary = ctx.pending_summary
        out["context"] = {
            "history": len(ctx.history),
            "carry_over": len(ctx.pending),
            "pending_summary": summary.payload.text
            if summary is not None and isinstance(summary.payload, TextPayload)
            else None,
            "closed": ctx.closed,
            "open_request": ctx.open_request,
            "dangling_compaction": list(ctx.dangling_compaction)
            if ctx.dangling_compaction
            else None,
            "messages": rows,
        }
        return out


def parse_position(text: str) -> Position:
    """``"FILE:ORDINAL"`` (e.g. ``"2:41"``) as a position; ``ValueError`` otherwise."""
    head, sep, tail = text.partition(":")
    try:
        if not sep:
            raise ValueError
        index, ordinal = int(head), int(tail)
    except ValueError:
        raise ValueError(f"invalid position {text!r}: expected FILE:ORDINAL, e.g. 1:12") from None
    return _checked((index, ordinal))


def _checked(position: Position) -> Position:
    try:
        index, ordinal = (int(v) for v in position)
    except (TypeError, ValueError):
        raise ValueError(
            f"invalid position {position!r}: expected (file_index, ordinal), two ints"
        ) from None
    if index < 1 or ordinal < 0:
        raise ValueError(f"invalid position {position!r}: file indices start at 1, ordinals at 0")
    return index, ordinal


def _file_for(files: Files, index: int) -> Path:
    paths = _session_files(files)
    for n, path in enumerate(paths, start=1):
        if (file_index(path) or n) == index:
            return path
    have = ", ".join(str(file_index(p) or n) for n, p in enumerate(paths, start=1))
    raise ValueError(f"no file {index} among the session's files (files: {have})")


def _tools_before(files: Files, index: int) -> list[ToolDefinition] | None:
    """The last toolset recorded in a file before ``index`` (a session object that only
    compacted before its first run resolved its tools without recording them again)."""
    paths = [
        p for n, p in enumerate(_session_files(files), start=1) if (file_index(p) or n) < index
    ]
    for path in reversed(paths):
        found: list[ToolDefinition] | None = None
        for item in scan_trace(path):
            if isinstance(item, tuple) and isinstance(item[1].payload, ToolListReadyPayload):
                found = list(item[1].payload.tools)
        if found is not None:
            return found
    return None


def trace_point(
    files: Files, position: Position, *, thinking_level: str | None = None
) -> TracePoint:
    """Fold the file of ``position`` up to and including its record (see the module doc)."""
    index, ordinal = _checked(position)
    path = _file_for(files, index)
    ctx = ModelContext()
    # Identity tells a record from a message the fold made; every record is kept alive so
    # that no synthesized message can reuse a freed record's id.
    kept: list[OmniMessage] = []
    meta: SessionMetaPayload | None = None
    tools: list[ToolDefinition] | None = None
    n = -1
    line = 0
    record: OmniMessage | None = None
    for item in scan_trace(path):
        if not isinstance(item, tuple):
            continue
        n += 1
        line, record = item
        p = record.payload
        if isinstance(p, SessionMetaPayload) and meta is None:
            meta = p
        elif isinstance(p, ToolListReadyPayload):
            tools = list(p.tools)
        kept.append(record)
        ctx.apply(record)
        if n == ordinal:
            break
    if record is None or n != ordinal:
        raise ValueError(f"{path}: no record {ordinal} (the file holds {n + 1} record(s))")
    request: LLMRequest | None = None
    if isinstance(record.payload, RequestBeginPayload):
        if meta is None:
            raise ValueError(f"{path}: no session_meta before record {ordinal}")
        if tools is None:
            tools = _tools_before(files, index)
        request = LLMRequest(
            system_prompt=meta.system_prompt,
            tools=list(tools or []),
            messages=ctx.request_messages(),
            new_messages=len(ctx.snapshot),
            thinking_level=thinking_level,
            signal=AbortSignal(),
        )
        shown = request.messages
    else:
        shown = [*ctx.history, *ctx.pending]
    recorded = {id(r) for r in kept}
    synthesized = frozenset(i for i, m in enumerate(shown) if id(m) not in recorded)
    return TracePoint(path, (index, ordinal), line, record, ctx, request, synthesized)


def request_at(
    files: Files, position: Position, *, thinking_level: str | None = None
) -> LLMRequest:
    """The ``LLMRequest`` the engine sent at the ``request_begin`` at ``position`` (R-TOOL-1).

    ``files`` are the session's trace files (or one file, or their directory); ``position`` is
    ``(file_index, ordinal)``, the ordinal 0-based among the file's records (R-FORK-1).  Raises
    ``ValueError`` when the position names no record or a record that is not a
    ``request_begin``.
    """
    point = trace_point(files, position, thinking_level=thinking_level)
    if point.request is None:
        kind = record_kind(point.record)
        raise ValueError(
            f"{point.path}:{point.line}: record {position[1]} is a {kind}, not a request_begin"
        )
    return point.request


def context_at(files: Files, position: Position) -> ModelContext:
    """The ``ModelContext`` folded over the file of ``position`` up to and including that
    record (R-TOOL-1)."""
    return trace_point(files, position).context
