"""Typed request bodies (R-SRV-2, R-SRV-3…5).

Owns: the msgspec structures every write decodes into (unknown keys and wrong types are 400
with the field named), the capped body reader (413 counted while reading, so chunked bodies are
capped too) and the JSON-only check (415).  Does not: act on a body.
"""

from __future__ import annotations

from typing import Final, Literal, TypeVar

import anyio
import msgspec
from starlette.requests import Request

from ._exceptions import ApiError

__all__ = [
    "ApprovalBody",
    "ArchiveBody",
    "CompactionBody",
    "CreateSessionBody",
    "ForkBody",
    "GoalBody",
    "ImagePart",
    "LoginBody",
    "McpServerBody",
    "Part",
    "Position",
    "RewindBody",
    "SearchAnswer",
    "SearchHit",
    "SearchSegment",
    "SteerBody",
    "TaskBody",
    "read_body",
]

ApprovalMode = Literal["allow-all", "ask", "deny-all"]
MAX_IMAGE_BYTES = 20 * 2**20
# The longest wait for the next piece of a request body (issue 29: a stalled upload must not
# hold a connection and a handler forever).  Per read, so a slow but moving upload still works.
BODY_TIMEOUT_S: Final = 30.0


class _Body(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    pass


class TextPart(_Body, tag="text", tag_field="type"):
    text: str


class ImagePart(_Body, tag="image", tag_field="type"):
    data_url: str


Part = TextPart | ImagePart


class CompactionBody(_Body):
    max_context_length: int | None = None
    max_session_turns: int | None = None
    mode: Literal["summarize", "discard"] | None = None


Rule = Literal["allow", "ask", "deny"]


class McpServerBody(_Body):
    """One MCP server of a new session (SPEC §26): ``{}`` picks the server of that name in the
    server's config.toml (the only way to a stdio server: a request never names a command to
    run); else a streamable HTTP server by ``url``.  ``approval``/``tools`` set its rules."""

    url: str | None = None
    headers: dict[str, str] | None = None
    timeout_ms: int | None = None
    connect_timeout_ms: int | None = None
    approval: Rule | None = None
    tools: dict[str, Rule] | None = None


class CreateSessionBody(_Body):
    workspace: str | None = None
    system_prompt: str | None = None
    model: str | None = None
    approval: ApprovalMode | None = None
    compaction: CompactionBody | bool | None = None
    max_turns: int | None = None
    # SPEC §25: the tools' sandbox; None = the environment's default (workspace-write, TCP off).
    sandbox: Literal["workspace-write", "read-only", "off"] | None = None
    network: bool | None = None
    # SPEC §26: MCP servers (None = those of the server's config.toml) and approval rules.
    mcp: dict[str, McpServerBody] | None = None
    approval_rules: dict[str, Rule] | None = None
    # SPEC §11: offer the run_subagent tool (None = the server's default, off unless
    # ``penguin serve --subagents``); recorded in the settings' ``tools`` (R-SET-1).
    subagents: bool | None = None


class GoalBody(_Body):
    budget: int | None = None


class TaskBody(_Body):
    input: list[Part]
    thinking_level: str | None = None
    goal: GoalBody | None = None


class SteerBody(_Body):
    input: list[Part]


class ApprovalBody(_Body):
    decision: Literal["allow", "deny"]


class Position(_Body):
    file: int
    ordinal: int


class ForkBody(_Body):
    at: Position


class RewindBody(_Body):
    """R-SNAP-2: a task number or the position of a task's final reply (one of the two)."""

    task: int | None = None
    at: Position | None = None
    force: bool = False
    dry_run: bool = False


class ArchiveBody(_Body):
    """The session's archive mark: true hides it from the default listing, false shows it."""

    archived: bool


class LoginBody(_Body):
    token: str


class ImportBody(_Body):
    jsonl: str


T = TypeVar("T")


def _is_json(request: Request) -> bool:
    ctype = request.headers.get("content-type", "")
    return ctype.split(";", 1)[0].strip().lower() == "application/json"


async def read_raw(request: Request, *, limit: int) -> bytes:
    """The body, at most ``limit`` bytes (413 beyond, whether declared or streamed)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            if int(declared) > limit:
                raise ApiError(413, "body_too_large", f"the body exceeds {limit} bytes")
        except ValueError:
            raise ApiError(400, "bad_request", "invalid Content-Length") from None
    timeout = getattr(request.app.state, "penguin", None)
    timeout = getattr(timeout, "body_timeout", BODY_TIMEOUT_S)
    chunks: list[bytes] = []
    size = 0
    stream = request.stream()
    while True:
        with anyio.move_on_after(timeout) as waited:
            try:
                chunk = await stream.__anext__()
            except StopAsyncIteration:
                return b"".join(chunks)
        if waited.cancelled_caught:
            raise ApiError(408, "request_timeout", f"the request body stalled for {timeout:g} s")
        size += len(chunk)
        if size > limit:
            raise ApiError(413, "body_too_large", f"the body exceeds {limit} bytes")
        chunks.append(chunk)


async def read_body(request: Request, kind: type[T], *, limit: int, optional: bool = False) -> T:
    """Decode the JSON body into ``kind``; ``optional`` accepts an empty body as ``kind()``."""
    raw_peek = request.headers.get("content-length")
    if optional and raw_peek in (None, "0") and "content-type" not in request.headers:
        raw = await read_raw(request, limit=limit)
        if not raw:
            return kind()
        raise ApiError(415, "unsupported_media_type", "write bodies must be application/json")
    if not _is_json(request):
        raise ApiError(415, "unsupported_media_type", "write bodies must be application/json")
    raw = await read_raw(request, limit=limit)
    if optional and not raw.strip():
        return kind()
    try:
        return msgspec.json.decode(raw, type=kind)
    except msgspec.ValidationError as exc:
        raise ApiError(400, "invalid_body", str(exc)) from None
    except msgspec.DecodeError as exc:
        raise ApiError(400, "invalid_json", f"the body is not valid JSON: {exc}") from None
    except RecursionError:
        raise ApiError(400, "invalid_json", "the body is nested too deeply") from None


# --------------------------------------------------------------------------- answers


class SearchSegment(msgspec.Struct, frozen=True):
    """A piece of a snippet: ``match`` marks the words the query matched (plain text: the
    trace is untrusted, render it as text, never as markup)."""

    text: str
    match: bool


class SearchHit(msgspec.Struct, frozen=True):
    """One matching session and its best hit: ``at`` is ``FILE:ORDINAL`` (the ``?at=`` of the
    context route, ``penguin inspect SESSION --at``)."""

    session_id: str
    project: str
    agent: str
    title: str | None
    workspace: str | None
    active: str
    status: str
    at: str
    kind: Literal["user", "assistant", "tool_call", "tool_output"]
    time: str
    matches: int
    snippet: list[SearchSegment]
    archived: bool  # hidden from the sessions list (a session_archived mark), still searched


class SearchAnswer(msgspec.Struct, frozen=True):
    """``GET /api/search``: matching sessions, most recently active first."""

    query: str
    hits: list[SearchHit]
