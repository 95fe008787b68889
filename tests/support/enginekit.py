"""Shared helpers for engine tests (importable as `enginekit`; pytest puts tests/support on
sys.path): sessions on a temporary data root, stream collection, and the
event-sourcing checks every scenario runs (INV-11, INV-18, INV-24, INV-25)."""

from __future__ import annotations

import errno
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio

from engine import AbortSignal, CompactionSettings, LLMRequest, RetryPolicy, Session
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import (
    DataRoot,
    OmniMessage,
    RecordTooLarge,
    ToolCallOutputPayload,
    ToolCallPayload,
    ToolDefinition,
    TraceWriteError,
    encode,
    read_trace,
)
from eventstore import builders as b
from eventstore.builders import is_recordable, stop_reason_of
from projections import ModelContext, SessionState
from replay._validate import validate_session


@dataclass
class Env:
    home: Path
    workspace: Path

    @property
    def root(self) -> DataRoot:
        return DataRoot(self.home)


def make_env(tmp_path: Path) -> Env:
    ws = tmp_path / "ws"
    ws.mkdir()
    return Env(home=tmp_path / "home", workspace=ws)


async def make_session(
    env: Env,
    script: Any,
    *,
    environment: Any = None,
    compaction: CompactionSettings | None = None,
    retry: RetryPolicy | None = None,
    max_turns: int = 100,
    system_prompt: str = "You are careful.",
) -> tuple[Session, ScriptedLLM]:
    llm = ScriptedLLM(script)
    session = await Session.create(
        llm=llm,
        environment=environment if environment is not None else ScriptedEnvironment.from_llm(llm),
        root=env.root,
        workspace=env.workspace,
        system_prompt=system_prompt,
        compaction=compaction,
        retry=retry or RetryPolicy(base_ms=1, cap_ms=4),
        max_turns=max_turns,
    )
    llm.bind(session)
    return session, llm


async def collect(
    agen: AsyncIterator[OmniMessage],
    *,
    on: Callable[[OmniMessage], Awaitable[None] | None] | None = None,
) -> list[OmniMessage]:
    out: list[OmniMessage] = []
    async for msg in agen:
        out.append(msg)
        if on is not None:
            result = on(msg)
            if result is not None:
                await result
    return out


def trace_records(session: Session) -> list[OmniMessage]:
    files = DataRoot(session._root.home).trace_files(session.id)
    return read_trace(files).records


def check_trace(
    session: Session, stream: list[OmniMessage] | None = None, *, whole_stream: bool = True
) -> list[OmniMessage]:
    """INV-18 (validator), INV-21, INV-24/25 (rebuilt == live) and INV-11 (stream == trace)."""
    files = session._root.trace_files(session.id)
    findings = [f for f in validate_session(files) if f.severity == "error"]
    assert findings == [], "\n".join(str(f) for f in findings)
    records = read_trace(files).records
    assert all(is_recordable(r) for r in records)
    assert ModelContext.from_records(records) == session.context
    assert SessionState.from_records(records) == session.state
    if stream is not None:
        if whole_stream:  # a consumer that left early saw only part of the stream
            check_stream(stream)
        # INV-11: the recordable messages of the stream are a subsequence of the trace, in order.
        encoded = [encode(r) for r in records]
        at = 0
        for msg in (m for m in stream if is_recordable(m)):
            line = encode(msg)
            while at < len(encoded) and encoded[at] != line:
                at += 1
            assert at < len(encoded), f"streamed record missing from the trace (INV-11): {line!r}"
            at += 1
    return records


_CONTENT = {
    "partial_text": ("text", "text"),
    "partial_thinking": ("thinking", "thinking"),
    "partial_tool_call": ("tool_call", "arguments"),
    "partial_tool_call_output": ("tool_call_output", "output"),
}


def check_stream(stream: list[OmniMessage]) -> None:
    """INV-1 (every streamed segment is start/deltas/stop and its complete message follows with
    the concatenated content), INV-2 (approval after its call, before any output) and INV-3 (one
    output per completed call; at most one when the run aborted).  Compaction spans are
    exempt from INV-1: they stream partial_text fragments only (R-COMPACT-8)."""
    open_: dict[tuple[Any, ...], list[str]] = {}
    awaiting: dict[tuple[Any, ...], str] = {}
    in_compaction = False
    calls: dict[str, int] = {}
    approved: set[str] = set()
    outputs: dict[str, int] = {}
    for m in stream:
        tag = m.payload.__struct_config__.tag  # type: ignore[union-attr]
        p: Any = m.payload
        if tag == "compaction_begin":
            in_compaction = True
        elif tag == "compaction_end":
            in_compaction = False
        origin = tuple(m.origin or ())
        if tag in _CONTENT:
            if in_compaction:
                continue
            complete_tag, field_name = _CONTENT[tag]
            key = (complete_tag, getattr(p, "tool_call_id", ""), origin)
            if p.event_type == "start":
                assert key not in open_, f"INV-1: segment {key} started twice"
                open_[key] = [getattr(p, field_name)]
            else:
                assert key in open_, f"INV-1: {p.event_type} without start for {key}"
                open_[key].append(getattr(p, field_name))
                if p.event_type == "stop":
                    awaiting[key] = "".join(open_.pop(key))
            continue
        key = (tag, getattr(p, "tool_call_id", ""), origin)
        if tag in ("text", "thinking", "tool_call", "tool_call_output") and key in awaiting:
            _, field_name = next(v for v in _CONTENT.values() if v[0] == tag)
            assert getattr(p, field_name) == awaiting.pop(key), f"INV-1: content differs for {key}"
        if origin:
            continue  # a child's calls and outputs are its own session's (R-SUB-2)
        if tag == "tool_call" and stop_reason_of(m) == "completed":
            calls[p.tool_call_id] = calls.get(p.tool_call_id, 0) + 1
        elif tag == "approval_decision":
            assert p.tool_call_id in calls, "INV-2: approval before its call"
            assert p.tool_call_id not in outputs, "INV-2: approval after an output"
            approved.add(p.tool_call_id)
        elif tag == "tool_call_output":
            outputs[p.tool_call_id] = outputs.get(p.tool_call_id, 0) + 1
    assert open_ == {}, f"INV-1: segments never closed: {list(open_)}"
    assert awaiting == {}, f"INV-1: no complete message after stop: {list(awaiting)}"
    aborted = bool(stream) and stream[-1].payload.__struct_config__.tag == "abort"  # type: ignore[union-attr]
    for cid in calls:
        n = outputs.get(cid, 0)
        assert n <= 1 if aborted else n == 1, f"INV-3: call {cid} has {n} outputs"


def kinds(msgs: list[OmniMessage]) -> list[str]:
    out = []
    for m in msgs:
        if m.type == "session_meta":
            out.append("session_meta")
            continue
        tag = m.payload.__struct_config__.tag  # type: ignore[union-attr]
        out.append(str(tag))
    return out


def complete(msgs: list[OmniMessage]) -> list[OmniMessage]:
    return [m for m in msgs if not m.is_partial]


def assert_requests_paired(requests: list[LLMRequest]) -> None:
    """INV-12: every completed call is answered exactly once later, every output answers."""
    for req in requests:
        calls: dict[str, int] = {}
        answered: dict[str, int] = {}
        for i, m in enumerate(req.messages):
            p = m.payload
            if isinstance(p, ToolCallPayload) and stop_reason_of(m) == "completed":
                calls[p.tool_call_id] = i
            elif isinstance(p, ToolCallOutputPayload):
                assert p.tool_call_id in calls, f"output {p.tool_call_id} answers nothing"
                assert calls[p.tool_call_id] < i
                answered[p.tool_call_id] = answered.get(p.tool_call_id, 0) + 1
        for cid in calls:
            assert answered.get(cid) == 1, f"call {cid} answered {answered.get(cid, 0)} times"


def texts(msgs: list[OmniMessage]) -> list[str]:
    return [getattr(m.payload, "text", None) or getattr(m.payload, "output", "") for m in msgs]


@dataclass
class GatedEnvironment:
    """Tools that finish when the test says so: ``release(id)`` completes a call."""

    tools: list[ToolDefinition] = field(
        default_factory=lambda: [ToolDefinition(name="t", description="test tool")]
    )
    gates: dict[str, anyio.Event] = field(default_factory=dict)
    started: dict[str, anyio.Event] = field(default_factory=dict)
    outputs: dict[str, str] = field(default_factory=dict)
    closed: bool = False

    def gate(self, cid: str) -> anyio.Event:
        return self.gates.setdefault(cid, anyio.Event())

    def start_event(self, cid: str) -> anyio.Event:
        return self.started.setdefault(cid, anyio.Event())

    def release(self, cid: str) -> None:
        self.gate(cid).set()

    async def list_tools(self) -> list[ToolDefinition]:
        return self.tools

    def tool_permission(self, name: str) -> Any:
        return "rw"

    async def aclose(self) -> None:
        self.closed = True

    async def execute(
        self, call: OmniMessage, *, signal: AbortSignal, approve: Any
    ) -> AsyncIterator[OmniMessage]:
        p = call.payload
        assert isinstance(p, ToolCallPayload)
        cid = p.tool_call_id
        self.start_event(cid).set()
        aborted = False
        with anyio.CancelScope() as scope:
            forget = signal.add_callback(scope.cancel)
            try:
                await self.gate(cid).wait()
            finally:
                forget()
        if scope.cancelled_caught:
            aborted = True
        text = self.outputs.get(cid, f"out {cid}")
        if aborted:
            text = "[interrupted: tool aborted by user]"
        yield b.partial_tool_call_output("start", cid)
        yield b.partial_tool_call_output("delta", cid, text)
        yield b.partial_tool_call_output("stop", cid)
        yield b.tool_call_output(cid, text, stop_reason="aborted" if aborted else "completed")


@dataclass
class WriteFault:
    """Fails the ``at``-th append (0-based, counting every record the session writes, its
    ``session_meta`` and rotation heads included) with ``kind``: ``enospc`` or ``eio`` (a
    ``TraceWriteError``, R-TRACE-15) or ``too_large`` (``RecordTooLarge``, R-TRACE-17).  The
    record is not written, as the writer guarantees for a failed append; later appends work (the
    disk was freed), so the final ``abort`` lands when the engine writes one."""

    at: int
    kind: str = "enospc"
    count: int = 0
    fired: bool = False

    def install(self, session: Session) -> WriteFault:
        if session._rec.writer is not None:
            self._wrap(session._rec.writer)
        opener = session._rec._open_writer

        def open_writer() -> Any:
            return self._wrap(opener())

        session._rec._open_writer = open_writer  # type: ignore[method-assign]
        return self

    def _wrap(self, writer: Any) -> Any:
        real = writer.append

        def append(msg: OmniMessage) -> Any:
            n = self.count
            self.count += 1
            if n == self.at:
                self.fired = True
                if self.kind == "too_large":
                    raise RecordTooLarge(size=10**9, limit=10**8, path=writer.path)
                code = errno.ENOSPC if self.kind == "enospc" else errno.EIO
                raise TraceWriteError("injected", path=writer.path, errno=code)
            return real(msg)

        writer.append = append
        return writer
