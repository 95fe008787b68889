"""One session's index rows as a fold over its records, resumable where it stopped.

Owns: ``SessionFold`` — the session state (``projections.SessionState``, R-SET-5's one status)
and the listing summary (first prompt, workspace, model, subagent links, last error, reader
diagnostics) folded record by record, encodable so that another process continues it; and what
each record adds to the other tables: a usage row per ``token_usage``, an error row per failed
``request_end``, a full-text document per user or assistant text, tool call and tool output.
Does not: read files or touch the database (``_catchup``).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any, Final

import msgspec

from eventstore import (
    HEAD_EVENT_TYPES,
    CompactionBeginPayload,
    CompactionEndPayload,
    OmniMessage,
    RequestBeginPayload,
    RequestEndPayload,
    SessionArchivedPayload,
    SessionMetaPayload,
    SubagentPayload,
    TextPayload,
    TokenUsagePayload,
    ToolCallOutputPayload,
    ToolCallPayload,
)
from projections import SessionState, archived_after

from ._records import OUTPUT_CHARS, PROMPT_CHARS, TEXT_CHARS, wrong_type

__all__ = ["MAX_DIAGNOSTICS", "Doc", "SessionFold", "Summary", "fold_shape", "is_head"]

#: (kind, text, file, ordinal, time): one full-text document.
Doc = tuple[str, str, int, int, str]

#: Reader diagnostics kept per session (a garbled file would otherwise fill the row).
MAX_DIAGNOSTICS: Final = 50


def fold_shape() -> str:
    """What an encoded fold depends on: the shape of the session state.  Folds another shape
    wrote are not continued (``_catchup.check_shape`` empties the index)."""
    from projections import GoalState

    shape = [
        (c.__name__, f.name, str(f.type))
        for c in (SessionState, GoalState)
        for f in dataclasses.fields(c)
    ]
    shape += [("Summary", name, "") for name in Summary.__struct_fields__]
    return hashlib.sha256(repr(shape).encode()).hexdigest()[:16]


class Summary(msgspec.Struct, kw_only=True):
    """What the listing shows beyond the session state (encoded in the index between
    catch-ups)."""

    first_prompt: str | None = None
    workspace: str = ""
    model: str = ""
    is_child: bool = False
    children: list[str] = msgspec.field(default_factory=list)
    max_turns: bool = False  # the last task ended at its turn limit
    last_error: str | None = None  # the last request's error message
    last_time: str = ""  # the last record's timestamp, as written
    compacting: bool = False  # inside a compaction span (usage rows of kind "compaction")
    #: (path, line, kind, detail) of what the reader skipped, at most MAX_DIAGNOSTICS.
    diagnostics: list[tuple[str, int, str, str]] = msgspec.field(default_factory=list)
    dropped: int = 0  # diagnostics beyond the cap
    #: Records skipped as damage (``eventstore.unrecognised``); a newer writer's type is kept.
    unreadable: int = 0
    #: The last own ``session_archived`` mark (``projections.archived_after``).
    archived: bool = False


class _Saved(msgspec.Struct):
    state: SessionState
    summary: Summary


_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder(_Saved)


class SessionFold:
    """The rows of one session so far.  ``apply`` each record of its (non-residue) files in
    order; ``encode``/``decode`` carry the fold between processes."""

    __slots__ = ("agent", "project", "session_id", "state", "summary")

    def __init__(
        self,
        session_id: str,
        project: str,
        agent: str,
        state: SessionState | None = None,
        summary: Summary | None = None,
    ) -> None:
        self.session_id, self.project, self.agent = session_id, project, agent
        self.state = state if state is not None else SessionState()
        self.summary = summary if summary is not None else Summary()

    def encode(self) -> bytes:
        return _encoder.encode(_Saved(self.state, self.summary))

    @classmethod
    def decode(cls, data: bytes, session_id: str, project: str, agent: str) -> SessionFold:
        """``msgspec.DecodeError`` when ``data`` is not a fold of this version."""
        saved = _decoder.decode(data)
        return cls(session_id, project, agent, saved.state, saved.summary)

    def diagnose(self, path: str, line: int, kind: str, detail: str) -> None:
        s = self.summary
        if len(s.diagnostics) < MAX_DIAGNOSTICS:
            s.diagnostics.append((path, line, kind, detail))
        else:
            s.dropped += 1

    def apply(
        self,
        rec: OmniMessage,
        *,
        path: str,
        line: int,
        file: int,
        ordinal: int,
        usage: list[tuple[Any, ...]],
        errors: list[tuple[Any, ...]],
        docs: list[Doc],
    ) -> None:
        """Fold one record; append what it adds to the other tables."""
        why = wrong_type(rec)
        if why is not None:
            self.summary.unreadable += 1
            self.diagnose(path, line, "malformed", why)
        s = self.summary
        p = rec.payload
        if type(p) is SessionArchivedPayload:
            # A mark, not activity: the session keeps its place in "recent first".
            s.archived = archived_after(s.archived, rec)
            return
        self.state.apply(rec)
        s.last_time = rec.timestamp
        own = rec.origin is None
        if isinstance(p, SessionMetaPayload):
            s.model = p.model_id
            s.workspace = s.workspace or p.workspace
            s.is_child = s.is_child or p.source == "subagent"
        elif isinstance(p, TextPayload):
            if own and p.role in ("user", "assistant"):
                docs.append((p.role, p.text[:TEXT_CHARS], file, ordinal, rec.timestamp))
            if own and p.role == "user" and s.first_prompt is None:
                s.first_prompt = p.text[:PROMPT_CHARS]
            if own and p.role == "assistant":
                # The last task ended at --max-turns when its last word is the notice.
                s.max_turns = p.stop_reason == "failed" and _is_max_turns(p.text)
        elif isinstance(p, ToolCallPayload):
            if own:
                body = f"{p.name} {p.arguments}"[:TEXT_CHARS]
                docs.append(("tool_call", body, file, ordinal, rec.timestamp))
        elif isinstance(p, ToolCallOutputPayload):
            if own:
                docs.append(("tool_output", p.output[:OUTPUT_CHARS], file, ordinal, rec.timestamp))
        elif isinstance(p, SubagentPayload):
            if own:
                s.children.append(p.session_id)
        elif isinstance(p, RequestBeginPayload):
            if own:
                s.max_turns = False
        elif isinstance(p, CompactionBeginPayload):
            s.compacting = True
        elif isinstance(p, CompactionEndPayload):
            s.compacting = False
        elif isinstance(p, TokenUsagePayload):
            r = p.request
            kind = "compaction" if s.compacting else "turn"
            usage.append(
                (
                    self.session_id,
                    self.project,
                    self.agent,
                    s.model,
                    kind,
                    r.cache_read,
                    r.cache_write,
                    r.output,
                    r.total,
                    rec.timestamp,
                    file,
                    ordinal,
                )
            )
        if isinstance(p, RequestEndPayload):
            if own:
                s.last_error = p.error_message
            if p.status not in ("completed", "aborted"):
                errors.append(
                    (
                        self.session_id,
                        self.project,
                        self.agent,
                        p.status,
                        p.error_message or "",
                        rec.timestamp,
                        file,
                        ordinal,
                    )
                )

    @property
    def title(self) -> str | None:
        """The first prompt, or a goal session's objective (its first input is a round block)."""
        first = self.summary.first_prompt
        objective = self.state.goal.objective
        if objective is not None and (first or "").startswith("[goal]\nround: "):
            return objective[:PROMPT_CHARS]
        return first


def is_head(rec: OmniMessage) -> bool:
    """A record a rotation copies to the head of the next file (R-ROOT-10)."""
    return rec.type == "session_meta" or isinstance(rec.payload, HEAD_EVENT_TYPES)


def _is_max_turns(text: str) -> bool:
    from projections import markers as mk

    return mk.parse_max_turns_notice(text) is not None
