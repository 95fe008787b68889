"""The trace validator (SPEC §16.1, V-1…V-20).

Owns: ``Finding``, ``validate_file``, ``validate_session`` and ``validate_paths``: structural checks
of trace files as written, one streaming pass per file (constant memory apart from per-id tables),
plus the cross-file checks of one session (V-2 crash residue, V-6 rotated heads, V-17, V-18).
Does not: repair, print, take locks or modify files; decide exit codes (the CLI does, R-CLI-5).

Reading is done here, not through ``eventstore``'s reader: the validator must see what a reader
hides (blank lines, the position of a malformed line, a torn tail), so it numbers raw lines itself
and calls ``eventstore.decode`` on each.

Choices where the SPEC leaves room (all documented in the rule's handler below):

- V-10: a call left without an output is *explained* when the first ``abort`` after it comes
  before any run boundary — ``request_begin``, ``compaction_begin``, ``tool_list_ready`` or a user
  text/image — the same test R-RESUME-10 uses to choose the case-A placeholder over the crash
  placeholder; the end of the file explains it too.  Since "never gets an output in the file" is
  only known at the end, the warning is issued at the end of the pass, at the call's line.
- V-12: the validator cannot know the ``RetryPolicy``.  It checks ``attempt`` exactly (the k-th
  request of a turn, or of a compaction span, carries ``attempt: k``, except a first-try
  completion, which carries none); ``retry_in_ms`` only on a retryable status and never on a
  completion; a retryable failure that *was* retried carries ``retry_in_ms``; and the values of one
  turn follow the shape of ``min(base·2^(k−1), cap)`` for unknown base and cap: never negative,
  never decreasing, at most doubling per attempt, and constant once they stop doubling (the cap).
  It also checks ``compaction_end.attempt`` against the number of request spans in its compaction
  span (INV-23, R-COMPACT-24).
- V-14: the next record is checked; a resume closure is accepted only after an ``abort`` written
  inside an open span (R-TRACE-15a).
- V-19: a record whose payload decoded to ``UnknownPayload`` although its ``type`` is a known one
  (or whose ``session_meta`` payload does not fit) is an error naming the offending field; roles
  outside their type's range (§2.3) and ``mcp_connect_end`` results are checked too.  Unknown
  payload and envelope types are accepted (R-MSG-7, R-READ-4).
"""

from __future__ import annotations

import glob
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Final, Literal, TypeAlias

import msgspec

from engine import RETRYABLE_STATUSES
from eventstore import (
    EVENT_PAYLOAD_TAGS,
    EXTRA_WIRE_NAME,
    MODEL_PAYLOAD_TAGS,
    PARTIAL_PAYLOAD_TYPES,
    PAYLOAD_TAG_OF,
    AbortPayload,
    ApprovalDecisionPayload,
    CompactionBeginPayload,
    CompactionEndPayload,
    ImageUrlPayload,
    InlineDataPayload,
    InlineThinkingPayload,
    McpConnectEndPayload,
    OmniMessage,
    RequestBeginPayload,
    RequestEndPayload,
    SessionMetaPayload,
    SettingsPayload,
    TextPayload,
    ThinkingPayload,
    TokenCounts,
    TokenUsagePayload,
    ToolCallOutputPayload,
    ToolCallPayload,
    ToolListReadyPayload,
    TraceDecodeError,
    UnknownPayload,
    decode,
    parse_trace_name,
)
from projections import markers as mk

__all__ = ["Finding", "Severity", "validate_file", "validate_paths", "validate_session"]

Severity: TypeAlias = Literal["error", "warning"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One validator finding; ``line`` is 1-based, 0 for a file-level finding."""

    path: Path
    line: int
    rule: str
    severity: Severity
    message: str

    def __str__(self) -> str:
        # R-CLI-5
        return f"{self.path}:{self.line}: {self.rule} {self.severity}: {self.message}"


# --------------------------------------------------------------------------- constants

# R-TRACE-17: a longer line is malformed and is never held in memory.  Module-level so that tests
# can lower it.
_MAX_LINE_BYTES: int = 256 * 1024 * 1024
_SKIP_CHUNK: Final = 1 << 20

# The exact strings and block grammars are the projections' (one spelling, SPEC Appendix A).
_DENIAL_TEXT: Final = {"deny": mk.DENIED_BY_USER, "forbidden": mk.DENIED_BY_POLICY}
_RETRYABLE: Final = RETRYABLE_STATUSES
# A text that opens like a steering block but does not parse as one is reported (V-16).
_STEERING_PREFIXES: Final = (f"[{mk.TAG_USER_STEERING}]", f"<{mk.TAG_USER_STEERING}>")


_MODEL_TAGS: Final = MODEL_PAYLOAD_TAGS
_EVENT_TAGS: Final = EVENT_PAYLOAD_TAGS
_KIND: Final[dict[type[Any], str]] = {**PAYLOAD_TAG_OF, SessionMetaPayload: "session_meta"}
# §2.3: the roles each complete model payload may carry.
_ROLES: Final[dict[type[Any], frozenset[str]]] = {
    ImageUrlPayload: frozenset({"user"}),
    ThinkingPayload: frozenset({"assistant"}),
    InlineThinkingPayload: frozenset({"assistant"}),
    ToolCallPayload: frozenset({"assistant"}),
    ToolCallOutputPayload: frozenset({"user"}),
}
_MCP_TRANSPORTS: Final = frozenset({"stdio", "http", "sse"})
_MCP_STATUSES: Final = frozenset({"completed", "failed", "aborted"})


def _kind(msg: OmniMessage) -> str:
    payload = msg.payload
    if isinstance(payload, UnknownPayload):
        return payload.type or msg.type
    return _KIND.get(type(payload), msg.type)


def _ts_key(ts: str) -> datetime | None:
    try:
        value = datetime.fromisoformat(ts)
    except ValueError:
        return None
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


# --------------------------------------------------------------------------- line reading


def _raw_lines(f: IO[bytes]) -> Iterator[tuple[int, bytes | None, bool]]:
    """``(line_no, content, terminated)`` per physical line; ``content`` is ``None`` for a line
    longer than ``_MAX_LINE_BYTES``, which is skipped without being held in memory."""
    limit = _MAX_LINE_BYTES
    line_no = 0
    while True:
        raw = f.readline(limit + 1)
        if not raw:
            return
        line_no += 1
        if raw.endswith(b"\n"):
            yield line_no, raw, True
            continue
        if len(raw) <= limit:
            yield line_no, raw, False
            return
        del raw
        terminated = False
        while more := f.readline(_SKIP_CHUNK):
            if more.endswith(b"\n"):
                terminated = True
                break
        yield line_no, None, terminated
        if not terminated:
            return


# --------------------------------------------------------------------------- per-file pass


@dataclass(slots=True)
class _FileSummary:
    """What the cross-file checks need to know about one file."""

    path: Path
    name_id: str | None
    index: int | None
    meta_line: int = 0
    meta: SessionMetaPayload | None = None
    has_tool_list: bool = False
    second_kind: str | None = None
    second_line: int = 0
    residue: bool = False
    # The line of each tool_call id's first call (R-RUN-20 across files).
    call_lines: dict[str, int] = field(default_factory=dict)


@dataclass(slots=True)
class _Call:
    line: int
    completed: bool
    in_span: bool


@dataclass(slots=True)
class _State:
    """One file's validation state and its reporting; the helpers every check group uses."""

    path: Path
    index: int | None
    name_id: str | None
    is_highest: bool
    strict: bool
    findings: list[Finding] = field(default_factory=list)

    n_records: int = 0
    meta_line: int = 0
    meta: SessionMetaPayload | None = None
    first_kind: str | None = None
    first_line: int = 0
    second_kind: str | None = None
    second_line: int = 0
    only_head: bool = True
    has_tool_list: bool = False
    first_model_seen: bool = False

    residue: bool = False

    prev_kind: str | None = None
    prev_line: int = 0

    # V-4 / V-5 spans
    req_line: int | None = None
    comp_line: int | None = None
    comp_reason: str = ""
    comp_mode: str = ""
    comp_requests: int = 0

    # V-11 token usage
    span_usage: int = 0
    last_end_line: int = 0
    last_end_usage: int = 0

    # V-7 / V-8 / V-9 pairing
    calls: dict[str, _Call] = field(default_factory=dict)
    call_lines: dict[str, int] = field(default_factory=dict)
    outputs: dict[str, int] = field(default_factory=dict)
    decisions: dict[str, tuple[str, int]] = field(default_factory=dict)

    # V-10
    window: dict[str, int] = field(default_factory=dict)
    span_calls: set[str] = field(default_factory=set)
    suspects: dict[str, int] = field(default_factory=dict)

    # V-12
    attempt_k: int = 0
    retry_pending: bool = False
    missing_retry_line: int | None = None
    ladder_prev: tuple[int, int] | None = None
    ladder_capped: bool = False

    # V-13 / V-14 / V-6
    await_retry_line: int | None = None
    abort_line: int | None = None
    abort_in_req: bool = False
    abort_in_comp: bool = False
    closed_end_line: int | None = None
    closed_end_void: bool = False
    span_texts: list[str] = field(default_factory=list)
    last_completed_texts: list[str] = field(default_factory=list)

    # V-20
    prev_ts: datetime | None = None
    prev_ts_text: str = ""
    prev_ts_line: int = 0

    def error(self, line: int, rule: str, message: str) -> None:
        self.findings.append(Finding(self.path, line, rule, "error", message))

    def warn(self, line: int, rule: str, message: str) -> None:
        self.findings.append(Finding(self.path, line, rule, "warning", message))

    def _check_role(self, line: int, payload: Any) -> None:
        allowed = _ROLES.get(type(payload))
        if allowed is not None and payload.role not in allowed:
            self.error(line, "V-19", f"{_KIND[type(payload)]} with role {payload.role!r}")

    def _boundary(self) -> None:
        """A record that starts a new run (R-RESUME-7b, R-RESUME-10): a failed attempt before it
        was not retried, and calls of completed turns still waiting for an output were not
        answered by an ``abort``'s case-A placeholder."""
        if self.comp_line is None:
            self.retry_pending = False
            self.missing_retry_line = None
        if not self.window:
            return
        keep: dict[str, int] = {}
        for cid, line in self.window.items():
            if cid in self.span_calls:
                keep[cid] = line
            else:
                self.suspects[cid] = line
        self.window = keep

    def _drop_span_calls(self) -> None:
        for cid in self.span_calls:
            self.window.pop(cid, None)
        self.span_calls = set()

    def _reset_ladder(self) -> None:
        self.ladder_prev = None
        self.ladder_capped = False


class _RecordChecks(_State):
    """Per-record checks: session_meta (V-2), unknown records, roles (V-19), images, tool lists,
    MCP events, texts and timestamps (V-20)."""

    __slots__ = ()

    def _on_meta(self, line: int, meta: SessionMetaPayload) -> None:
        if self.meta is not None:
            self.error(line, "V-2", f"second session_meta (the first is at line {self.meta_line})")
            return
        self.meta, self.meta_line = meta, line
        if self.name_id is not None and meta.session_id != self.name_id:
            self.error(
                line,
                "V-17",
                f"session_id {meta.session_id!r} differs from the file name's {self.name_id!r}",
            )

    def _check_unknown(self, line: int, msg: OmniMessage, payload: UnknownPayload) -> None:
        raw = payload.raw
        if msg.type == "session_meta":
            self.error(line, "V-19", f"session_meta: {_shape_error(SessionMetaPayload, raw)}")
            return
        if msg.type not in ("model_msg", "event_msg"):
            return  # an envelope type of a newer writer (R-READ-4)
        tag = raw.get("type")
        if not isinstance(tag, str):
            self.error(line, "V-19", f"{msg.type} payload without a string type")
            return
        own, other = (
            (_MODEL_TAGS, _EVENT_TAGS) if msg.type == "model_msg" else (_EVENT_TAGS, _MODEL_TAGS)
        )
        cls = own.get(tag)
        if cls is not None:
            self.error(line, "V-19", f"{tag}: {_shape_error(cls, raw)}")
        elif tag in other:
            self.error(line, "V-19", f"payload type {tag} in a {msg.type} envelope")

    def _on_image(self, line: int, payload: ImageUrlPayload) -> None:
        self._check_role(line, payload)
        self._boundary()

    def _on_tool_list(self, line: int, payload: ToolListReadyPayload) -> None:
        self.has_tool_list = True
        self._boundary()

    def _check_mcp(self, line: int, payload: McpConnectEndPayload) -> None:
        for i, result in enumerate(payload.results):
            problem = _mcp_result_problem(result)
            if problem:
                self.error(line, "V-19", f"mcp_connect_end result {i}: {problem}")
                return

    def _on_text(self, line: int, payload: TextPayload) -> None:
        body = payload.text
        if payload.role == "assistant":
            if payload.sender is not None:
                self.error(line, "V-19", "assistant text with a sender")
            if self.req_line is not None:
                self.span_texts.append(body)
            return
        if body.startswith(("[", "<")):
            if mk.is_context_summary(body):
                # V-6 [ours]: only the new context's first input may be a summary.
                if self.first_model_seen:
                    self.warn(
                        line, "V-6", "[context_summary] is not the file's first model message"
                    )
                elif self.index is not None and self.index < 2:
                    self.warn(line, "V-6", "[context_summary] in a file with index 1")
            elif body.startswith(_STEERING_PREFIXES):
                if not mk.is_steering(body):
                    self.warn(line, "V-16", "steering text does not match R-STEER-9 exactly")
            elif mk.unwrap_synthetic_block(body) is not None:
                self.warn(line, "V-15", "synthesized [turn_aborted]/[turn_retried] block written")
        self._boundary()

    def _check_timestamp(self, line: int, msg: OmniMessage, kind: str) -> None:
        if kind == "session_meta" or (kind == "tool_list_ready" and self.n_records == 2):
            return  # rotated heads re-write old timestamps (R-TRACE-9)
        if kind == "settings" and self.only_head:
            return  # a rotated head's settings record, stamped as its head (R-SET-2c)
        payload = msg.payload
        if (
            isinstance(payload, TextPayload)
            and payload.role == "user"
            and mk.is_context_summary(payload.text)
        ):
            return  # stamped with its compaction_end's time (R-PROJ-3a)
        key = _ts_key(msg.timestamp)
        if key is None:
            return
        if self.prev_ts is not None and key < self.prev_ts:
            self.warn(
                line,
                "V-20",
                f"timestamp {msg.timestamp} is earlier than {self.prev_ts_text} "
                f"(line {self.prev_ts_line})",
            )
        self.prev_ts, self.prev_ts_text, self.prev_ts_line = key, msg.timestamp, line


class _PairingChecks(_RecordChecks):
    """Calls, approvals and outputs pair up (V-7, V-8, V-9, V-10)."""

    __slots__ = ()

    def _on_call(self, line: int, payload: ToolCallPayload) -> None:
        self._check_role(line, payload)
        completed = payload.stop_reason in (None, "completed")
        in_span = self.req_line is not None
        in_comp = self.comp_line is not None
        first = self.call_lines.setdefault(payload.tool_call_id, line)
        if first != line:
            # R-RUN-20 (V-8 sees it only when both calls got a decision).
            self.error(
                line,
                "V-7",
                f"second tool_call with id {payload.tool_call_id} (first at line {first}): "
                "tool_call ids are unique within a session",
            )
        self.calls[payload.tool_call_id] = _Call(line, completed, in_span)
        if completed and in_span and not in_comp:
            self.window[payload.tool_call_id] = line
            self.span_calls.add(payload.tool_call_id)

    def _on_output(self, line: int, payload: ToolCallOutputPayload) -> None:
        self._check_role(line, payload)
        cid = payload.tool_call_id
        if payload.output == mk.PLACEHOLDER_CRASH:
            self.warn(line, "V-15", f"resume placeholder written as the output of {cid}")
        self.window.pop(cid, None)
        self.suspects.pop(cid, None)

        # V-7
        first = self.outputs.get(cid)
        if first is not None:
            self.error(line, "V-7", f"second output for {cid} (first at line {first})")
            return
        self.outputs[cid] = line
        call = self.calls.get(cid)
        if call is None:
            self.error(line, "V-7", f"output for {cid}, which no earlier tool_call has")
            return
        if not call.completed:
            self.error(
                line,
                "V-7",
                f"output for {cid}, whose tool_call (line {call.line}) is not completed",
            )
            return
        if not call.in_span:
            self.error(
                line,
                "V-7",
                f"output for {cid}, whose tool_call (line {call.line}) is outside a request span",
            )
            return

        if self.comp_line is not None:
            # V-9: inside a compaction span every output is a repair (R-COMPACT-14).
            if payload.output != mk.COMPACTION_REPAIR or payload.stop_reason != "failed":
                self.error(
                    line,
                    "V-9",
                    f"output for {cid} inside a compaction span is not the failed repair "
                    f"'{mk.COMPACTION_REPAIR}'",
                )
            return
        # V-8
        decision = self.decisions.get(cid)
        if decision is None:
            self.error(line, "V-8", f"output for {cid} without an approval_decision")
            return
        expected = _DENIAL_TEXT.get(decision[0])
        if expected is not None and (
            payload.output != expected or payload.stop_reason != "aborted"
        ):
            self.error(
                line,
                "V-8",
                f"output for {cid} after '{decision[0]}' (line {decision[1]}) is not "
                f"{expected!r} with stop_reason aborted",
            )

    def _on_decision(self, line: int, payload: ApprovalDecisionPayload) -> None:
        cid = payload.tool_call_id
        if self.comp_line is not None:
            self.error(line, "V-9", f"approval_decision for {cid} inside a compaction span")
            return
        first = self.decisions.get(cid)
        if first is not None:
            self.error(
                line, "V-8", f"second approval_decision for {cid} (first at line {first[1]})"
            )
            return
        self.decisions[cid] = (payload.decision, line)
        call = self.calls.get(cid)
        if call is None:
            self.error(line, "V-8", f"approval_decision for {cid}, which no earlier tool_call has")
        elif not call.completed:
            self.error(
                line, "V-8", f"approval_decision for {cid}, whose tool_call is not completed"
            )
        elif cid in self.outputs:
            self.error(
                line,
                "V-8",
                f"approval_decision for {cid} after its output (line {self.outputs[cid]})",
            )


class _SpanChecks(_PairingChecks):
    """Request spans, retries and aborts (V-4, V-11, V-12, V-13, V-14)."""

    __slots__ = ()

    def _check_sequencing(self, line: int, kind: str, payload: Any) -> None:
        if self.await_retry_line is not None:
            # V-13: after a retry-stamped failure only its tool outputs (and a late token_usage,
            # judged by V-11) may come before the retry, an abort or the span's compaction_end.
            if isinstance(payload, ToolCallOutputPayload | TokenUsagePayload):
                pass
            else:
                ok = isinstance(payload, RequestBeginPayload | AbortPayload) or (
                    isinstance(payload, CompactionEndPayload) and self.comp_line is not None
                )
                if not ok:
                    self.warn(
                        self.await_retry_line,
                        "V-13",
                        f"request_end with retry_in_ms is followed by {kind} (line {line}), "
                        "not by a retry, an abort or the end of the file",
                    )
                self.await_retry_line = None
        if self.abort_line is not None:
            # V-14: an abort ends its run; what follows starts a new run or a manual compaction,
            # or closes the span an R-TRACE-15a abort was written in.
            ok = (
                isinstance(payload, TextPayload | ImageUrlPayload | InlineDataPayload)
                and payload.role == "user"
            ) or isinstance(payload, ToolListReadyPayload | RequestBeginPayload | SettingsPayload)
            if isinstance(payload, CompactionBeginPayload):
                ok = not self.abort_in_comp and not self.abort_in_req
            if isinstance(payload, RequestEndPayload):
                ok = self.abort_in_req
            elif isinstance(payload, CompactionEndPayload):
                ok = self.abort_in_comp and not self.abort_in_req
            if not ok:
                self.warn(
                    self.abort_line,
                    "V-14",
                    f"abort is followed by {kind} (line {line}), not by the start of a new run",
                )
            self.abort_line = None

    def _on_request_begin(self, line: int, payload: RequestBeginPayload) -> None:
        if self.req_line is not None:
            self.error(
                line, "V-4", f"request_begin while the request of line {self.req_line} is open"
            )
            self._drop_span_calls()  # that request never committed (R-RESUME-5)
        # V-12: which attempt of which turn (or compaction) this request is.
        if self.comp_line is not None:
            self.attempt_k = self.comp_requests + 1
            self.comp_requests += 1
            if self.attempt_k == 1:
                self._reset_ladder()
        elif self.retry_pending:
            self.attempt_k += 1
        else:
            self.attempt_k = 1
            self._reset_ladder()
        if self.missing_retry_line is not None and self.attempt_k > 1:
            self.warn(
                self.missing_retry_line,
                "V-12",
                "failed request_end without retry_in_ms was retried",
            )
        self.missing_retry_line = None
        self.retry_pending = False
        self._boundary()
        self.req_line = line
        self.span_usage = 0
        self.span_texts = []
        self.span_calls = set()

    def _on_request_end(self, line: int, payload: RequestEndPayload) -> None:
        if self.req_line is None:
            self.error(line, "V-4", "request_end without an open request")
            return
        self.req_line = None
        status = payload.status
        self.last_end_line, self.last_end_usage = line, self.span_usage
        if status == "completed":
            self.last_completed_texts = self.span_texts
        else:
            self._drop_span_calls()
        self.span_calls = set()
        self.span_texts = []
        self._check_retry_stamps(line, payload)
        if status != "completed" and self.comp_line is None:
            self.retry_pending = True

    def _check_retry_stamps(self, line: int, payload: RequestEndPayload) -> None:
        status, attempt, retry = payload.status, payload.attempt, payload.retry_in_ms
        k = self.attempt_k
        unit = "compaction span" if self.comp_line is not None else "turn"
        expected = None if k == 1 and status == "completed" else k
        if attempt != expected:
            if expected is None:
                self.warn(line, "V-12", f"attempt {attempt} on a first-try completion")
            elif attempt is None:
                self.warn(line, "V-12", f"attempt missing (attempt {k} of this {unit})")
            else:
                self.warn(line, "V-12", f"attempt {attempt}, expected {k} ({unit} attempt {k})")
        if retry is None:
            if status in _RETRYABLE:
                self.missing_retry_line = line
            return
        if status not in _RETRYABLE:
            self.warn(line, "V-12", f"retry_in_ms on a request_end with status {status}")
            return
        self.await_retry_line = line
        if retry < 0:
            self.warn(line, "V-12", f"negative retry_in_ms {retry}")
            return
        prev = self.ladder_prev
        self.ladder_prev = (k, retry)
        if prev is None:
            return
        pk, pv = prev
        steps = max(k - pk, 0)
        doubled = pv << min(steps, 64)
        if retry < pv:
            self.warn(line, "V-12", f"retry_in_ms {retry} is less than the previous {pv}")
        elif self.ladder_capped and retry != pv:
            self.warn(line, "V-12", f"retry_in_ms {retry} changed after reaching its cap {pv}")
        elif retry > doubled:
            self.warn(
                line,
                "V-12",
                f"retry_in_ms {retry} grows faster than the backoff ladder (previous {pv})",
            )
        elif retry < doubled:
            self.ladder_capped = True

    def _on_token_usage(self, line: int, payload: TokenUsagePayload) -> None:
        if self.req_line is not None:
            self.span_usage += 1
            if self.span_usage > 1:
                self.error(
                    line, "V-11", f"second token_usage in the request of line {self.req_line}"
                )
        elif self.prev_kind == "request_end" and self.prev_line == self.last_end_line:
            self.last_end_usage += 1
            if self.last_end_usage > 1:
                self.error(line, "V-11", "second token_usage for the request just ended")
        else:
            self.warn(line, "V-11", "token_usage outside a request span")
        for name, counts in (("session", payload.session), ("request", payload.request)):
            problem = _counts_problem(counts)
            if problem:
                self.warn(line, "V-11", f"token_usage.{name}: {problem}")

    def _on_abort(self, line: int, payload: AbortPayload) -> None:
        self.abort_line = line
        self.abort_in_req = self.req_line is not None
        self.abort_in_comp = self.comp_line is not None
        self.retry_pending = False
        self.missing_retry_line = None
        # V-10: the calls still waiting were answered by case-A placeholders.
        self.window.clear()


class _CompactionChecks(_SpanChecks):
    """Compaction spans (V-5, V-6)."""

    __slots__ = ()

    def _on_compaction_begin(self, line: int, payload: CompactionBeginPayload) -> None:
        if self.comp_line is not None:
            self.error(
                line, "V-5", f"compaction_begin inside the compaction of line {self.comp_line}"
            )
        if self.req_line is not None:
            self.error(line, "V-5", f"compaction_begin inside the request of line {self.req_line}")
        self._boundary()
        self.retry_pending = False
        self.missing_retry_line = None
        self.comp_line = line
        self.comp_reason, self.comp_mode = payload.reason, payload.mode
        self.comp_requests = 0

    def _on_compaction_end(self, line: int, payload: CompactionEndPayload) -> None:
        if self.comp_line is None:
            self.error(line, "V-5", "compaction_end without an open compaction")
            return
        if self.req_line is not None:
            self.error(
                line, "V-5", f"compaction_end while the request of line {self.req_line} is open"
            )
        if (payload.reason, payload.mode) != (self.comp_reason, self.comp_mode):
            self.error(
                line,
                "V-5",
                f"compaction_end {payload.reason}/{payload.mode} does not match its begin "
                f"{self.comp_reason}/{self.comp_mode} (line {self.comp_line})",
            )
        expected = self.comp_requests or None
        if payload.attempt != expected:
            self.warn(
                line,
                "V-12",
                f"compaction_end attempt {payload.attempt}, but its span holds "
                f"{self.comp_requests} request(s)",
            )
        self.comp_line = None
        self.missing_retry_line = None
        if payload.status == "completed":
            void = payload.mode == "summarize" and not mk.extract_summary(
                "".join(self.last_completed_texts)
            )
            if void:
                self.warn(
                    line,
                    "V-6",
                    "completed compaction_end whose last completed request holds no usable "
                    "summary (void closure, R-RESUME-15)",
                )
            self.closed_end_line, self.closed_end_void = line, void


class _Checker(_CompactionChecks):
    """One file's pass: decode each line, dispatch it to its check group, then the end-of-file
    checks and the summary."""

    __slots__ = ()

    def run(self) -> None:
        deferred: tuple[int, str] | None = None  # a malformed line not yet known to be the last
        with self.path.open("rb") as f:
            for line_no, raw, terminated in _raw_lines(f):
                if raw is not None and not raw.strip():
                    self.warn(line_no, "V-1", "blank line")
                    continue
                if deferred is not None:
                    self.error(deferred[0], "V-1", f"malformed line: {deferred[1]}")
                    deferred = None
                if not terminated:
                    # R-READ-2: readers drop a last line without its newline, decodable or not.
                    self.warn(line_no, "V-1", "torn last line (no terminating newline)")
                    break
                if raw is None:
                    deferred = (line_no, f"line longer than {_MAX_LINE_BYTES} bytes")
                    continue
                try:
                    msg = decode(raw.strip())
                except TraceDecodeError as exc:
                    deferred = (line_no, str(exc))
                    continue
                self.feed(line_no, msg)
        if deferred is not None:
            self.warn(deferred[0], "V-1", f"torn last line: {deferred[1]}")
        self.finish()

    def feed(self, line: int, msg: OmniMessage) -> None:
        payload = msg.payload
        kind = _KIND.get(type(payload)) or _kind(msg)
        self.n_records += 1
        n = self.n_records
        if n <= 2:
            if n == 1:
                self.first_kind, self.first_line = kind, line
                self.only_head = kind == "session_meta"
            else:
                self.second_kind, self.second_line = kind, line
                self.only_head = self.only_head and kind in ("tool_list_ready", "settings")
        elif n == 3:
            # R-SET-2c: a rotated head is session_meta, tool_list_ready, settings.
            self.only_head = (
                self.only_head and kind == "settings" and self.second_kind == "tool_list_ready"
            )
        else:
            self.only_head = False

        if _ts_key(msg.timestamp) is None:
            # R-MSG-2: every reader (resume's times, analytics) needs the time; a garbled one
            # would otherwise surface as a missing time far from here.
            shown = msg.timestamp if len(msg.timestamp) <= 40 else msg.timestamp[:40] + "…"
            self.error(line, "V-19", f"timestamp {shown!r} is not an ISO 8601 time")
        elif self.strict:
            self._check_timestamp(line, msg, kind)

        # V-6: nothing may follow a completed compaction_end in its file.
        if self.closed_end_line is not None:
            if not self.closed_end_void:
                self.error(
                    self.closed_end_line,
                    "V-6",
                    f"completed compaction_end is not the last record of its file "
                    f"({kind} follows at line {line})",
                )
            self.closed_end_line = None

        # V-3: partials and origin-tagged records are never recorded; nothing else is checked on
        # them (an origin-tagged output does not pair with this session's calls, R-SUB-2).
        if isinstance(payload, PARTIAL_PAYLOAD_TYPES):
            self.error(line, "V-3", f"partial record {kind}")
            return
        if msg.origin is not None:
            self.error(line, "V-3", f"record with origin {msg.origin}")
            return

        if isinstance(payload, UnknownPayload):
            self._check_unknown(line, msg, payload)
        elif isinstance(payload, SessionMetaPayload):
            self._on_meta(line, payload)
        else:
            if self.await_retry_line is not None or self.abort_line is not None:
                self._check_sequencing(line, kind, payload)
            handler = _HANDLERS.get(type(payload))
            if handler is not None:
                handler(self, line, payload)
            if msg.type == "model_msg":
                self.first_model_seen = True
        self.prev_kind, self.prev_line = kind, line

    def finish(self) -> None:
        if self.req_line is not None:
            self.warn(self.req_line, "V-4", "request still open at end of file (crash)")
        if self.comp_line is not None:
            self.warn(self.comp_line, "V-5", "compaction still open at end of file (crash)")
        for cid, line in self.suspects.items():
            self.warn(
                line,
                "V-10",
                f"tool_call {cid} of a completed turn never gets an output and no abort ends "
                "its run",
            )
        if self.meta is None:
            if self.is_highest and self.index is not None:
                self.residue = True
                self.warn(
                    0,
                    "V-2",
                    "crash residue: highest-index file without a session_meta, ignored by "
                    "readers (R-ROOT-10)",
                )
            elif self.first_kind is None:
                self.error(0, "V-2", "no record, so no session_meta")
            else:
                self.error(
                    self.first_line, "V-2", f"first record is {self.first_kind}, not session_meta"
                )
        elif self.first_kind != "session_meta":
            self.error(
                self.first_line, "V-2", f"first record is {self.first_kind}, not session_meta"
            )
        elif self.is_highest and self.only_head and self.index is not None and self.index > 1:
            self.residue = True
            self.warn(
                0,
                "V-2",
                "crash residue: highest-index file holding only its rotation head, ignored by "
                "readers (R-ROOT-10)",
            )

    def summary(self) -> _FileSummary:
        return _FileSummary(
            path=self.path,
            name_id=self.name_id,
            index=self.index,
            meta_line=self.meta_line,
            meta=self.meta,
            has_tool_list=self.has_tool_list,
            second_kind=self.second_kind,
            second_line=self.second_line,
            residue=self.residue,
            call_lines=self.call_lines,
        )


_HANDLERS: Final[dict[type[Any], Callable[[_Checker, int, Any], None]]] = {
    ToolCallOutputPayload: _Checker._on_output,
    ToolCallPayload: _Checker._on_call,
    TextPayload: _Checker._on_text,
    ThinkingPayload: _Checker._check_role,
    InlineThinkingPayload: _Checker._check_role,
    ImageUrlPayload: _Checker._on_image,
    RequestBeginPayload: _Checker._on_request_begin,
    RequestEndPayload: _Checker._on_request_end,
    TokenUsagePayload: _Checker._on_token_usage,
    ApprovalDecisionPayload: _Checker._on_decision,
    AbortPayload: _Checker._on_abort,
    CompactionBeginPayload: _Checker._on_compaction_begin,
    CompactionEndPayload: _Checker._on_compaction_end,
    ToolListReadyPayload: _Checker._on_tool_list,
    McpConnectEndPayload: _Checker._check_mcp,
}


def _shape_error(cls: type[Any], raw: dict[str, Any]) -> str:
    fields = set(cls.__struct_encode_fields__) - {EXTRA_WIRE_NAME}
    known = {k: v for k, v in raw.items() if k in fields}
    try:
        msgspec.convert(known, cls)
    except msgspec.ValidationError as exc:
        return str(exc)
    except RecursionError:
        return "nesting too deep"
    return "does not fit its schema"  # pragma: no cover - the codec refused it for a reason


def _counts_problem(counts: TokenCounts) -> str:
    values = (counts.cache_read, counts.cache_write, counts.output, counts.total)
    if any(v < 0 for v in values):
        return f"negative count in {values}"
    parts = counts.cache_read + counts.cache_write + counts.output
    if counts.total != parts:
        return f"total {counts.total} is not cache_read + cache_write + output = {parts}"
    return ""


def _mcp_result_problem(result: dict[str, Any]) -> str:
    if not isinstance(result.get("server"), str):
        return "server missing or not a string"
    if result.get("transport") not in _MCP_TRANSPORTS:
        return f"transport {result.get('transport')!r} not stdio|http|sse"
    if result.get("status") not in _MCP_STATUSES:
        return f"status {result.get('status')!r} not completed|failed|aborted"
    duration = result.get("duration_ms")
    if not isinstance(duration, int | float) or isinstance(duration, bool):
        return "duration_ms missing or not a number"
    return ""


# --------------------------------------------------------------------------- public API


def _scan(
    path: Path, *, index: int | None, name_id: str | None, is_highest: bool, strict: bool
) -> tuple[list[Finding], _FileSummary]:
    checker = _Checker(path, index, name_id, is_highest, strict)
    checker.run()
    return checker.findings, checker.summary()


def validate_file(
    path: Path, *, session_files: list[Path] | None = None, strict: bool = False
) -> list[Finding]:
    """Validate one trace file (V-1…V-20 as far as one file can tell).

    ``session_files`` (default: the file's siblings of the same session in its directory) decide
    whether this is the session's highest-index file, whose crash residue is only a warning
    (R-ROOT-10).  A rotated file must start with ``tool_list_ready`` when this file has one at
    all; the session-wide toolset and the other cross-file checks need ``validate_session``.
    """
    path = Path(path)
    parsed = parse_trace_name(path)
    name_id, index = parsed if parsed else (None, None)
    is_highest = True
    if parsed is not None:
        candidates: Iterable[Path]
        if session_files is None:
            candidates = path.parent.glob(f"{glob.escape(parsed[0])}_*.jsonl")
        else:
            candidates = session_files
        for other in candidates:
            other_parsed = parse_trace_name(Path(other))
            if other_parsed and other_parsed[0] == name_id and other_parsed[1] > (index or 0):
                is_highest = False
                break
    findings, summary = _scan(
        path, index=index, name_id=name_id, is_highest=is_highest, strict=strict
    )
    findings.extend(_head_findings(summary, has_toolset=summary.has_tool_list))
    return _sorted(findings, [path])


def validate_session(paths: Sequence[Path], *, strict: bool = False) -> list[Finding]:
    """Validate every file of one session, plus the cross-file checks (V-2 residue, V-6 heads,
    V-17, V-18).  Raises ``ValueError`` when the file names name more than one session."""
    files = sorted({Path(p) for p in paths}, key=_order_key)
    if not files:
        return []
    parsed = [parse_trace_name(p) for p in files]
    ids = {p[0] for p in parsed if p is not None}
    if len(ids) > 1 or (ids and len(files) > 1 and any(p is None for p in parsed)):
        raise ValueError(f"files of more than one session: {sorted(ids)}")
    highest = max((p[1] for p in parsed if p is not None), default=None)

    findings: list[Finding] = []
    summaries: list[_FileSummary] = []
    for path, info in zip(files, parsed, strict=True):
        name_id, index = info if info else (None, None)
        file_findings, summary = _scan(
            path,
            index=index,
            name_id=name_id,
            is_highest=index is None or index == highest,
            strict=strict,
        )
        findings.extend(file_findings)
        summaries.append(summary)

    has_toolset = any(s.has_tool_list for s in summaries)
    for s in summaries:
        findings.extend(_head_findings(s, has_toolset=has_toolset))
    findings.extend(_meta_findings(summaries))
    findings.extend(_index_findings(summaries))
    findings.extend(_call_id_findings(summaries))
    return _sorted(findings, files)


def validate_paths(paths: Iterable[Path], *, strict: bool = False) -> list[Finding]:
    """Validate files and directories (searched recursively for ``*.jsonl``; ``*.lock`` files are
    ignored), grouping the files into sessions by the id in their names within one ``traces``
    directory (the parent of the date directories).  Raises ``FileNotFoundError`` for a path that
    does not exist."""
    seen: set[Path] = set()
    files: list[Path] = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            found = sorted(q for q in p.rglob("*.jsonl") if q.is_file())
        elif p.exists():
            found = [p]
        else:
            raise FileNotFoundError(f"No such file or directory: {p}")
        for q in found:
            resolved = q.resolve()
            if resolved not in seen:
                seen.add(resolved)
                files.append(q)

    groups: dict[tuple[Path, str] | Path, list[Path]] = {}
    for q in files:
        info = parse_trace_name(q)
        key: tuple[Path, str] | Path = (q.resolve().parent.parent, info[0]) if info else q
        groups.setdefault(key, []).append(q)
    findings: list[Finding] = []
    for group in groups.values():
        findings.extend(validate_session(group, strict=strict))
    return findings


# --------------------------------------------------------------------------- cross-file checks


def _head_findings(s: _FileSummary, *, has_toolset: bool) -> list[Finding]:
    # V-6: a rotated file starts session_meta, tool_list_ready (R-TRACE-8).
    if s.index is None or s.index < 2 or s.residue or s.meta is None or not has_toolset:
        return []
    if s.second_kind == "tool_list_ready":
        return []
    what = s.second_kind or "nothing"
    return [
        Finding(
            s.path,
            s.second_line,
            "V-6",
            "error",
            f"rotated file (index {s.index}) has {what} after its session_meta, not tool_list_ready",
        )
    ]


def _meta_findings(summaries: list[_FileSummary]) -> list[Finding]:
    # V-17: one system prompt and one workspace per session.
    out: list[Finding] = []
    ref: _FileSummary | None = None
    for s in summaries:
        if s.meta is None:
            continue
        if ref is None or ref.meta is None:
            ref = s
            continue
        for name in ("system_prompt", "workspace"):
            if getattr(s.meta, name) != getattr(ref.meta, name):
                out.append(
                    Finding(
                        s.path,
                        s.meta_line,
                        "V-17",
                        "error",
                        f"{name} differs from that of {ref.path.name}",
                    )
                )
    return out


def _call_id_findings(summaries: list[_FileSummary]) -> list[Finding]:
    # V-7 [ours]: a tool_call id is used by one call in the whole session (R-RUN-20).
    out: list[Finding] = []
    seen: dict[str, tuple[Path, int]] = {}
    for s in summaries:
        if s.residue:
            continue
        for cid, line in s.call_lines.items():
            first = seen.setdefault(cid, (s.path, line))
            if first[0] != s.path:
                out.append(
                    Finding(
                        s.path,
                        line,
                        "V-7",
                        "error",
                        f"tool_call id {cid} already used in {first[0].name} (line {first[1]}): "
                        "tool_call ids are unique within a session",
                    )
                )
    return out


def _index_findings(summaries: list[_FileSummary]) -> list[Finding]:
    # V-18: indices 1..n without gaps or repeats, all in one date directory.
    out: list[Finding] = []
    indexed = [s for s in summaries if s.index is not None]
    if not indexed:
        return out
    expected = 1
    seen: dict[int, Path] = {}
    for s in indexed:
        assert s.index is not None
        if s.index in seen:
            out.append(
                Finding(
                    s.path,
                    0,
                    "V-18",
                    "warning",
                    f"index {s.index} also used by {seen[s.index].name}",
                )
            )
            continue
        seen[s.index] = s.path
        if s.index != expected:
            missing = f"{expected}" if s.index == expected + 1 else f"{expected}..{s.index - 1}"
            out.append(Finding(s.path, 0, "V-18", "warning", f"file index {missing} missing"))
        expected = s.index + 1
    first_dir = indexed[0].path.parent
    for s in indexed[1:]:
        if s.path.parent != first_dir:
            out.append(
                Finding(
                    s.path, 0, "V-18", "warning", f"not in the session's date directory {first_dir}"
                )
            )
    return out


def _order_key(p: Path) -> tuple[str, int, str]:
    info = parse_trace_name(p)
    return (info[0], info[1], str(p)) if info else ("", 0, str(p))


def _sorted(findings: list[Finding], files: list[Path]) -> list[Finding]:
    rank = {p: i for i, p in enumerate(files)}
    return sorted(findings, key=lambda f: (rank.get(f.path, len(rank)), f.line))
