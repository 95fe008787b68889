"""Shared helpers for engine tests (importable as `enginekit`; pytest puts tests/support on
sys.path): sessions on a temporary data root, stream collection, and the
event-sourcing checks every scenario runs (INV-11, INV-18, INV-24, INV-25)."""

from __future__ import annotations

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
    ToolCallOutputPayload,
    ToolCallPayload,
    ToolDefinition,
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
    agen: AsyncIterator[OmniMessage], *, on: Callable[[OmniMessage], Awaitable[None] | None] | None = None
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


def check_trace(session: Session, stream: list[OmniMessage] | None = None) -> list[OmniMessage]:
    """INV-18 (validator), INV-21, INV-24/25 (rebuilt == live) and INV-11 (stream == trace)."""
    files = session._root.trace_files(session.id)
    findings = [f for f in validate_session(files) if f.severity == "error"]
    assert findings == [], "\n".join(str(f) for f in findings)
    records = read_trace(files).records
    assert all(is_recordable(r) for r in records)
    assert ModelContext.from_records(records) == session.context
    assert SessionState.from_records(records) == session.state
    if stream is not None:
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
