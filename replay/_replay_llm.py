"""Replaying a recorded trace: ``ReplayLLM`` and ``ReplayEnvironment`` (SPEC §15.2).

Owns: loading a trace as *located* records (file, line, position), the index of what the trace
recorded per request span (assistant messages, usage, outcome) and per tool call (output,
approval), re-emitting a span as an LLM response with the streaming discipline (R-REPLAY-1…4,
R-SCRIPT-4), answering tool calls and approvals from the record (R-REPLAY-5), and — when the two
are paired with ``ReplayEnvironment.from_llm`` — pacing them so that tool outputs land at the
recorded places relative to the model's messages.  Does not: run the engine, compare traces
(``replay.golden``) or write anything.

Pacing (an addition of ours, needed for golden replays): a recorded session interleaves two
producers, the model's stream and the tools.  Their relative order depends on timing that a
replay does not have, so each recorded tool output waits until (a) every environment output of
the same request span that the trace recorded before it has been delivered, and, when paired
with a ``ReplayLLM``, (b) the model has emitted everything of that span recorded before it; and
a paired model waits before each message until every environment output of its span recorded
before that message has been delivered.  All waits are on events, never on the clock; a wait
whose condition cannot come true (the replay already diverged: a call that was never dispatched)
gives up after ``stall_timeout`` seconds and lets the replay go on, so the divergence is reported
instead of hanging.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal, TypeAlias

import anyio
import msgspec

from engine import AbortSignal, Approval, ApproveFn, LLMOutcome, LLMRequest
from eventstore import (
    HEAD_EVENT_TYPES,
    AbortPayload,
    ApprovalDecisionPayload,
    CompactionBeginPayload,
    ImageUrlPayload,
    InlineDataPayload,
    InlineThinkingPayload,
    OmniMessage,
    RequestBeginPayload,
    RequestEndPayload,
    SessionMetaPayload,
    StopReason,
    TextPayload,
    ThinkingPayload,
    TokenUsagePayload,
    ToolCallOutputPayload,
    ToolCallPayload,
    ToolDefinition,
    ToolListReadyPayload,
    UnknownPayload,
    file_index,
    scan_trace,
)
from eventstore import builders as b
from eventstore.builders import is_partial, stop_reason_of
from eventstore.partials import SegmentWriter
from projections import markers as mk

__all__ = [
    "Located",
    "ReplayEnvironment",
    "ReplayLLM",
    "TraceSource",
    "load_located",
    "recorded_approve",
]

TraceSource: TypeAlias = (
    "str | os.PathLike[str] | Sequence[str | os.PathLike[str]] | Sequence[OmniMessage]"
)
ReplayMode: TypeAlias = Literal["completed", "all"]

_DEFAULT_STALL_TIMEOUT: Final = 2.0


# --------------------------------------------------------------------------- loading


@dataclass(frozen=True, slots=True)
class Located:
    """One record with where it was read: ``path``/``line`` (1-based, physical line) in its
    file, or ``None``/its 1-based list position for records given in memory; ``position`` is
    its 0-based index in the whole session."""

    path: Path | None
    line: int
    position: int
    record: OmniMessage

    @property
    def where(self) -> str:
        return f"{self.path if self.path is not None else '<records>'}:{self.line}"


def _session_files(source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]) -> list[Path]:
    if isinstance(source, str | os.PathLike):
        path = Path(source)
        if path.is_dir():
            paths = [p for p in path.rglob("*.jsonl") if p.is_file()]
            if not paths:
                raise FileNotFoundError(f"no trace file (*.jsonl) under {path}")
        else:
            paths = [path]
    else:
        paths = [Path(p) for p in source]
        if not paths:
            raise ValueError("no trace file given")
    sessions = {_session_of(p) for p in paths}
    if len(sessions) > 1:
        names = ", ".join(sorted(s for s in sessions if s))
        raise ValueError(f"the files belong to more than one session: {names}")
    return sorted(paths, key=lambda p: (file_index(p) or 0, str(p)))


def _session_of(path: Path) -> str:
    index = file_index(path)
    if index is None:
        return path.stem
    return path.name.rsplit("_", 1)[0]


def _is_residue(records: list[Located], index: int) -> bool:
    """R-ROOT-10: a latest file with no session_meta, or (index > 1) only its rotation head."""
    kinds = [r.record for r in records]
    if not any(r.type == "session_meta" for r in kinds):
        return True
    return index > 1 and all(
        r.type == "session_meta" or isinstance(r.payload, HEAD_EVENT_TYPES) for r in kinds
    )


def load_located(source: TraceSource) -> list[Located]:
    """The records of one session with their locations, in file-index then line order.

    ``source`` is a trace file, a directory holding one session's files (searched
    recursively), a list of a session's files, or a list of records.  Torn tails and
    malformed lines are skipped (§4.5); a crash-residue latest file is ignored (R-ROOT-10).
    """
    if not isinstance(source, str | os.PathLike) and _is_records(source):
        return [
            Located(None, n + 1, n, record)
            for n, record in enumerate(source)
            if isinstance(record, OmniMessage)
        ]
    files = _session_files(source)  # type: ignore[arg-type]
    per_file: list[list[Located]] = []
    for path in files:
        found: list[Located] = []
        for item in scan_trace(path):
            if isinstance(item, tuple):
                line, record = item
                found.append(Located(path, line, 0, record))
        per_file.append(found)
    if len(files) > 1 and _is_residue(per_file[-1], file_index(files[-1]) or len(files)):
        per_file.pop()
    out: list[Located] = []
    for found in per_file:
        for loc in found:
            out.append(Located(loc.path, loc.line, len(out), loc.record))
    return out


def _is_records(source: object) -> bool:
    if not isinstance(source, Sequence) or isinstance(source, str | bytes):
        return False
    return len(source) > 0 and all(isinstance(item, OmniMessage) for item in source)


# --------------------------------------------------------------------------- the index


@dataclass(slots=True)
class _Span:
    """One request span as recorded."""

    begin: int
    items: list[tuple[int, OmniMessage]] = field(default_factory=list)
    usage: tuple[int, OmniMessage] | None = None
    status: StopReason = "aborted"
    error_message: str | None = None
    permanent: bool = False
    end: int | None = None
    calls: list[str] = field(default_factory=list)

    @property
    def llm_positions(self) -> list[int]:
        """Positions of everything the model side produced, the outcome's ``request_end``
        included, in order."""
        out = [p for p, _ in self.items]
        if self.usage is not None:
            out.append(self.usage[0])
        if self.end is not None:
            out.append(self.end)
        return sorted(out)


@dataclass(frozen=True, slots=True)
class _Output:
    position: int
    message: OmniMessage


def _is_assistant_output(record: OmniMessage) -> bool:
    if record.type != "model_msg" or record.origin is not None or is_partial(record):
        return False
    p = record.payload
    if isinstance(p, UnknownPayload):
        return p.raw.get("role") == "assistant"
    if isinstance(p, TextPayload | InlineDataPayload):
        return p.role == "assistant"
    return isinstance(p, ThinkingPayload | InlineThinkingPayload | ToolCallPayload)


def _is_run_boundary(record: OmniMessage) -> bool:
    """What ends the search for the ``abort`` that explains a failure (R-RESUME-7b)."""
    p = record.payload
    if isinstance(
        p, RequestBeginPayload | CompactionBeginPayload | ToolListReadyPayload | ImageUrlPayload
    ):
        return True
    return isinstance(p, TextPayload) and p.role == "user"


class _TraceIndex:
    """What the trace recorded, indexed for replay.  Built once; read-only afterwards."""

    def __init__(self, located: list[Located]) -> None:
        self.located = located
        self.spans: list[_Span] = []
        self.outputs: dict[str, _Output] = {}
        self.approvals: dict[str, Approval] = {}
        self.tools: list[ToolDefinition] = []
        self.meta: SessionMetaPayload | None = None
        self.span_of_call: dict[str, int] = {}
        self._build()
        # Environment outputs: the first output of a call the trace *allowed*; denials and
        # compaction repairs are written by the engine itself and need no pacing.
        self.env_outputs: dict[str, _Output] = {
            cid: out
            for cid, out in self.outputs.items()
            if self.approvals.get(cid) == "allow" and cid in self.span_of_call
        }
        self.env_by_span: dict[int, list[int]] = {}
        for cid, out in self.env_outputs.items():
            self.env_by_span.setdefault(self.span_of_call[cid], []).append(out.position)
        for positions in self.env_by_span.values():
            positions.sort()

    def _build(self) -> None:
        open_span: _Span | None = None
        last_closed: _Span | None = None  # waiting for the record that tells its permanence
        after_end: _Span | None = None  # a token_usage right after request_end belongs to it
        for loc in self.located:
            record, pos = loc.record, loc.position
            p = record.payload
            if record.origin is not None:
                continue
            if record.type == "session_meta":
                if self.meta is None and isinstance(p, SessionMetaPayload):
                    self.meta = p
                after_end = None
                continue
            if isinstance(p, TokenUsagePayload):
                if open_span is not None:
                    open_span.usage = (pos, record)
                elif after_end is not None and after_end.usage is None:
                    after_end.usage = (pos, record)  # R-RUN-16: the reference's order
                after_end = None
                continue
            after_end = None
            if isinstance(p, RequestBeginPayload):
                if open_span is not None:
                    self._close_dangling(open_span)
                open_span = _Span(begin=pos)
                self.spans.append(open_span)
                last_closed = None
                continue
            if isinstance(p, RequestEndPayload):
                if open_span is None:
                    continue  # its request_begin was lost: nothing to replay
                open_span.status = p.status
                open_span.error_message = p.error_message
                open_span.end = pos
                after_end = last_closed = open_span
                open_span = None
                continue
            if isinstance(p, AbortPayload):
                reason = p.reason or ""
                if (
                    open_span is None
                    and last_closed is not None
                    and last_closed.status == "failed"
                    and reason.startswith(mk.ABORT_LLM_REQUEST_ERROR_PREFIX)
                ):
                    last_closed.permanent = True
                last_closed = None
                continue
            if _is_run_boundary(record):
                last_closed = None
            if isinstance(p, ToolListReadyPayload):
                if not self.tools:
                    self.tools = list(p.tools)
                continue
            if isinstance(p, ApprovalDecisionPayload):
                self.approvals.setdefault(p.tool_call_id, p.decision)
                continue
            if isinstance(p, ToolCallOutputPayload):
                if p.tool_call_id not in self.outputs:
                    self.outputs[p.tool_call_id] = _Output(pos, record)
                continue
            if open_span is not None and _is_assistant_output(record):
                open_span.items.append((pos, record))
                if isinstance(p, ToolCallPayload) and stop_reason_of(record) == "completed":
                    open_span.calls.append(p.tool_call_id)
                    self.span_of_call.setdefault(p.tool_call_id, len(self.spans) - 1)
        if open_span is not None:
            self._close_dangling(open_span)

    @staticmethod
    def _close_dangling(span: _Span) -> None:
        """A span the trace never closed: committed when its usage was recorded (R-RESUME-7a),
        otherwise as the R-RESUME-14a closure would close it."""
        if span.usage is not None:
            span.status = "completed"
        else:
            span.status = "aborted"
            span.error_message = mk.REQUEST_CLOSURE_ERROR

    def prev_llm(self, cid: str) -> int:
        """The last model-side position of the call's span recorded before its output."""
        out = self.env_outputs[cid]
        span = self.spans[self.span_of_call[cid]]
        before = [p for p in span.llm_positions if p < out.position]
        return before[-1] if before else -1


# --------------------------------------------------------------------------- pacing


class _Pacer:
    """The recorded interleaving of model messages and tool outputs, enforced with events."""

    def __init__(self, index: _TraceIndex, *, paced_llm: bool, stall_timeout: float) -> None:
        self._index = index
        self._paced_llm = paced_llm
        self._timeout = stall_timeout
        self._delivered: set[int] = set()
        self._llm_mark = -1
        self._changed: anyio.Event | None = None
        self.stalls = 0
        # Golden replays (R-GOLD-2): the recorded interleaving holds after an abort too, so
        # the waits do not end when the signal fires (only the stall timeout ends them).
        self.strict = False

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    def _env_before(self, span: int, position: int) -> bool:
        """Every environment output of ``span`` recorded before ``position`` was delivered."""
        for p in self._index.env_by_span.get(span, ()):
            if p >= position:
                return True
            if p not in self._delivered:
                return False
        return True

    async def _wait(self, ready: Callable[[], bool], signal: AbortSignal) -> None:
        deadline = anyio.current_time() + self._timeout
        while not ready() and (self.strict or not signal.aborted):
            remaining = deadline - anyio.current_time()
            if remaining <= 0:
                self.stalls += 1
                return
            if self._changed is None:
                self._changed = anyio.Event()
            event = self._changed
            forget = signal.wake_on_abort(event)
            try:
                with anyio.move_on_after(remaining):
                    await event.wait()
            finally:
                forget()

    async def before_llm(self, span: int, position: int, signal: AbortSignal) -> None:
        await self._wait(lambda: self._env_before(span, position), signal)

    def llm_done(self, position: int) -> None:
        if position > self._llm_mark:
            self._llm_mark = position
            self._notify()

    async def before_env(self, cid: str, signal: AbortSignal) -> None:
        out = self._index.env_outputs.get(cid)
        if out is None:
            return
        span = self._index.span_of_call[cid]
        after = self._index.prev_llm(cid) if self._paced_llm else -1

        def ready() -> bool:
            return self._llm_mark >= after and self._env_before(span, out.position)

        await self._wait(ready, signal)

    def env_done(self, cid: str) -> None:
        out = self._index.env_outputs.get(cid)
        if out is not None and out.position not in self._delivered:
            self._delivered.add(out.position)
            self._notify()


# --------------------------------------------------------------------------- the LLM


def _restamp(record: OmniMessage) -> OmniMessage:
    return msgspec.structs.replace(record, timestamp=b.now_iso())


def _response_messages(record: OmniMessage) -> list[OmniMessage]:
    """The complete message preceded by start / one delta / stop (R-SCRIPT-4, R-REPLAY-2)."""
    p = record.payload
    stop = stop_reason_of(record)
    complete = _restamp(record)
    seg: SegmentWriter
    if isinstance(p, TextPayload):
        seg, body = SegmentWriter("text"), p.text
    elif isinstance(p, ThinkingPayload):
        seg, body = SegmentWriter("thinking"), p.thinking
    elif isinstance(p, ToolCallPayload):
        seg = SegmentWriter("tool_call", tool_call_id=p.tool_call_id, name=p.name)
        body = p.arguments
    else:
        # inline data / thinking and payloads of a newer version have no partial form.
        return [complete]
    # The recorded message itself is the complete one (it keeps its fidelity).
    return [seg.start(), seg.delta(body), seg.stop(stop)[0], complete]


class ReplayLLM:
    """An LLM that answers request *k* with the *k*-th recorded request span (R-REPLAY-1).

    ``mode="completed"`` replays the spans whose ``request_end`` is ``completed`` (a span the
    trace never closed counts as completed when its ``token_usage`` was recorded, R-RESUME-7a);
    ``mode="all"`` replays every span, ending the others with their recorded status and
    ``error_message`` (R-REPLAY-4; ``permanent`` when the run then ended with
    ``llm request error: …``; a ``token_usage`` recorded in such a span is not replayed,
    R-RUN-16).  Past the end the outcome is ``failed``, permanent (R-REPLAY-3).  Every
    ``stream`` call takes the next response, title requests (R-TITLE-1) included.  ``requests`` records every ``LLMRequest`` received.  ``provider``,
    ``model_id`` and ``context_window`` come from the trace's ``session_meta``; ``vision`` is
    always true (recorded inputs were already folded when the model had none).
    """

    vision: bool = True

    def __init__(self, trace: TraceSource, *, mode: ReplayMode = "completed") -> None:
        if mode not in ("completed", "all"):
            raise ValueError(f"mode must be 'completed' or 'all', got {mode!r}")
        self.mode: ReplayMode = mode
        self._index = _TraceIndex(load_located(trace))
        self._spans = [
            (n, span)
            for n, span in enumerate(self._index.spans)
            if mode == "all" or span.status == "completed"
        ]
        meta = self._index.meta
        self.provider: str = meta.provider if meta is not None else "replay"
        self.model_id: str = meta.model_id if meta is not None else "replay"
        window = meta.model_context_window if meta is not None else None
        self.context_window: int | None = (
            window if isinstance(window, int) and not isinstance(window, bool) else None
        )
        self.requests: list[LLMRequest] = []
        self._pacer: _Pacer | None = None
        self._cursor = 0  # the next response to give
        # Called with a span's ``request_begin`` position once the partial output of its
        # interrupted segment has streamed (a golden replay fires the user abort there).
        self.on_cut: Callable[[int], None] | None = None
        # Golden replays (R-GOLD-2): every recorded item and the recorded outcome are given
        # whatever the signal says (the abort is fired at the recorded point instead).
        self.strict = False

    def __repr__(self) -> str:
        return (
            f"ReplayLLM(mode={self.mode!r}, responses={len(self._spans)}, "
            f"requests={len(self.requests)})"
        )

    @property
    def responses(self) -> int:
        """How many recorded responses this replay can give."""
        return len(self._spans)

    def stream(self, request: LLMRequest) -> AsyncIterator[OmniMessage | LLMOutcome]:
        # Chosen at call time, as ScriptedLLM does, so concurrent callers keep call order.
        index = self._cursor
        self._cursor += 1
        self.requests.append(request)
        return self._respond(index, request.signal)

    def rewind(self, position: int) -> None:
        """Answer the next request with the first response whose span begins at or after
        record ``position`` (a replay that stopped a session at a recorded crash and resumed
        it there, R-GOLD-3)."""
        self._cursor = sum(1 for _, span in self._spans if span.begin < position)

    async def _respond(
        self, index: int, signal: AbortSignal
    ) -> AsyncIterator[OmniMessage | LLMOutcome]:
        if index >= len(self._spans):
            yield LLMOutcome(
                "failed", f"replay: no recorded response for request {index + 1}", permanent=True
            )
            return
        span_no, span = self._spans[index]
        pacer = self._pacer
        for position, record in span.items:
            if pacer is not None:
                await pacer.before_llm(span_no, position, signal)
            if signal.aborted and not self.strict:
                yield LLMOutcome("aborted")
                return
            messages = _response_messages(record)
            cut = self.on_cut is not None and stop_reason_of(record) == "aborted"
            for k, message in enumerate(messages):
                if cut and k == len(messages) - 2 and self.on_cut is not None:
                    self.on_cut(span.begin)  # after start and delta, before stop
                yield message
            if pacer is not None:
                pacer.llm_done(position)
        if span.usage is not None and span.status == "completed":
            position, usage = span.usage
            if pacer is not None:
                await pacer.before_llm(span_no, position, signal)
            p = usage.payload
            assert isinstance(p, TokenUsagePayload)
            yield b.token_usage(p.request)
            if pacer is not None:
                pacer.llm_done(position)
        if pacer is not None and span.end is not None:
            await pacer.before_llm(span_no, span.end, signal)
            # Nothing runs between this outcome and the engine's request_end record.
            pacer.llm_done(span.end)
        if span.status == "completed":
            yield LLMOutcome("completed")
        else:
            yield LLMOutcome(span.status, span.error_message, permanent=span.permanent)


# --------------------------------------------------------------------------- the environment


def recorded_approve(trace: TraceSource) -> ApproveFn:
    """An approve callback answering each call with its recorded ``approval_decision``
    (``allow`` when the trace recorded none) (R-REPLAY-5)."""
    return _approver(_TraceIndex(load_located(trace)))


def _approver(index: _TraceIndex) -> ApproveFn:
    def approve(call: OmniMessage) -> Approval:
        p = call.payload
        if isinstance(p, ToolCallPayload):
            return index.approvals.get(p.tool_call_id, "allow")
        return "allow"

    return approve


class ReplayEnvironment:
    """Answers each tool call with the first ``tool_call_output`` recorded for its id (same
    output, images and stop_reason), else ``[no output]`` (R-REPLAY-5), streamed as
    start / one delta / stop and the complete output.  ``list_tools()`` returns ``tools``: those
    of the first recorded ``tool_list_ready`` (a golden replay sets those of the session object
    it replays); ``approve`` is the matching approval callback.

    Outputs of one request span are delivered in the recorded order.  Use
    ``ReplayEnvironment.from_llm(llm)`` to pace them against a ``ReplayLLM`` of the same trace
    too (see the module docstring).
    """

    def __init__(
        self, trace: TraceSource, *, stall_timeout: float = _DEFAULT_STALL_TIMEOUT
    ) -> None:
        self._setup(_TraceIndex(load_located(trace)), None, stall_timeout)

    def _setup(self, index: _TraceIndex, llm: ReplayLLM | None, stall_timeout: float) -> None:
        self._index = index
        self._pacer = _Pacer(index, paced_llm=llm is not None, stall_timeout=stall_timeout)
        if llm is not None:
            llm._pacer = self._pacer
        self.tools = list(index.tools)
        self.approve: ApproveFn = _approver(index)
        self._stall_timeout = stall_timeout
        # Golden replays (R-GOLD-2): the calls whose recorded output a user abort produced;
        # each streams its output up to the abort note, waits for the signal, then closes.
        self.held: frozenset[str] = frozenset()
        self.strict = False

    @classmethod
    def from_llm(
        cls, llm: ReplayLLM, *, stall_timeout: float = _DEFAULT_STALL_TIMEOUT
    ) -> ReplayEnvironment:
        """The environment of ``llm``'s trace, paced with it (one pair per replay)."""
        env = cls.__new__(cls)
        env._setup(llm._index, llm, stall_timeout)
        return env

    @property
    def stalls(self) -> int:
        """How many pacing waits gave up (non-zero only once a replay has diverged)."""
        return self._pacer.stalls

    async def list_tools(self) -> list[ToolDefinition]:
        return list(self.tools)

    def tool_permission(self, name: str) -> Literal["r", "rw"] | None:
        return "rw" if any(t.name == name for t in self.tools) else None

    async def aclose(self) -> None:
        return None

    async def execute(
        self, call: OmniMessage, *, signal: AbortSignal, approve: ApproveFn | None
    ) -> AsyncIterator[OmniMessage]:
        p = call.payload
        if not isinstance(p, ToolCallPayload):
            raise TypeError(f"execute expects a tool_call message, got {type(p).__name__}")
        cid = p.tool_call_id
        try:
            seg = SegmentWriter("tool_call_output", tool_call_id=cid)
            started = False
            if self.strict:
                async for msg in self._until_aborted(cid, seg, signal):
                    started = True
                    yield msg
            await self._pacer.before_env(cid, signal)
            recorded = self._index.outputs.get(cid)
            output: str = mk.NO_OUTPUT
            images: list[str] | None = None
            status: StopReason = "completed"
            if recorded is not None:
                rp = recorded.message.payload
                assert isinstance(rp, ToolCallOutputPayload)
                output, images, status = rp.output, rp.images, stop_reason_of(recorded.message)
            if signal.aborted and recorded is None:
                output, status = mk.PLACEHOLDER_ABORTED, "aborted"
            if started:
                yield seg.stop(status)[0]
                yield b.tool_call_output(cid, output, stop_reason=status, images=images)
                return
            yield seg.start()
            yield seg.delta(output, images=images)
            for msg in seg.stop(status):
                yield msg
        finally:
            self._pacer.env_done(cid)

    async def _until_aborted(
        self, cid: str, seg: SegmentWriter, signal: AbortSignal
    ) -> AsyncIterator[OmniMessage]:
        """A held call streams its recorded output up to the abort note and waits for the
        signal; a call the trace never answered (a crash) waits for it too."""
        recorded = self._index.outputs.get(cid)
        if cid in self.held and recorded is not None:
            rp = recorded.message.payload
            assert isinstance(rp, ToolCallOutputPayload)
            yield seg.start()
            yield seg.delta(rp.output.removesuffix(mk.PLACEHOLDER_ABORTED).rstrip("\n"))
        elif recorded is not None:
            return
        with anyio.move_on_after(self._stall_timeout):
            await signal.wait()
