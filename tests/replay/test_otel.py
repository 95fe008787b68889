"""OpenTelemetry export (``replay.otel``; ``penguin export --format otlp``, ``penguin serve
--otlp``): sessions as GenAI spans over OTLP/HTTP, checked on a real OTLP/HTTP receiver on
loopback that decodes the protobuf it receives (``otlpkit``).  Every expected time, token count
and name is taken from the trace records (R-MSG-17 token counts, R-MSG-15 real tool calls,
R-USAGE-2 ``token_usage`` right after its ``request_end``), never from the clock.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from otlpkit import Receiver, Span
from typer.testing import CliRunner

from eventstore import (
    RequestBeginPayload,
    RequestEndPayload,
    SubagentPayload,
    TokenUsagePayload,
    ToolCallOutputPayload,
    ToolCallPayload,
    read_trace,
)
from penguin.cli import app
from projections import SessionState
from replay.otel import LiveExport, OtelExportError, export_otlp, timestamp_ns

NESTED = Path(__file__).parents[2] / "fixtures" / "traces" / "subagent_nested" / "2026-12-02"
PARENT = NESTED / "session-2026-12-02-05-13-40-95cf7c26_001.jsonl"


def _of(spans: list[Span], sid: str, prefix: str) -> list[Span]:
    return sorted(
        (s for s in spans if s.attributes.get("session.id") == sid and s.name.startswith(prefix)),
        key=lambda s: s.start_ns,
    )


def _expected(path: Path) -> dict[str, Any]:
    """Requests, tool calls, runs and subagents of one trace, from its records."""
    records = read_trace([path], report=False).records
    requests: list[tuple[int, int, int, int]] = []
    tools: list[tuple[str, int, int]] = []
    begun: int | None = None
    calls: dict[str, tuple[str, int]] = {}
    children: list[str] = []
    for r in records:
        ns = timestamp_ns(r.timestamp)
        assert ns is not None
        p = r.payload
        if isinstance(p, RequestBeginPayload):
            begun = ns
        elif isinstance(p, TokenUsagePayload):
            usage = (p.request.cache_read + p.request.cache_write, p.request.output)
        elif isinstance(p, RequestEndPayload):
            assert begun is not None
            requests.append((begun, ns, *usage))
        elif isinstance(p, ToolCallPayload):
            calls[p.tool_call_id] = (p.name, ns)
        elif isinstance(p, ToolCallOutputPayload):
            name, start = calls.pop(p.tool_call_id)
            tools.append((name, start, ns))
        elif isinstance(p, SubagentPayload):
            children.append(p.session_id)
    state = SessionState.from_records(records)
    meta = records[0].payload
    return {
        "sid": meta.session_id,  # type: ignore[union-attr]
        "model": meta.model_id,  # type: ignore[union-attr]
        "requests": requests,
        "tools": sorted(tools, key=lambda t: t[1]),
        "runs": state.runs,
        "first": timestamp_ns(records[1].timestamp),
        "children": children,
    }


def _check_session(spans: list[Span], path: Path) -> dict[str, Any]:
    want = _expected(path)
    sid = want["sid"]
    chats = _of(spans, sid, "chat ")
    assert [
        (
            s.start_ns,
            s.end_ns,
            s.attributes["gen_ai.usage.input_tokens"],
            s.attributes["gen_ai.usage.output_tokens"],
        )
        for s in chats
    ] == want["requests"]
    for s in chats:
        assert s.name == f"chat {want['model']}"
        assert s.attributes["gen_ai.operation.name"] == "chat"
        assert s.attributes["gen_ai.request.model"] == want["model"]
        assert s.attributes["gen_ai.provider.name"] == "scripted"
        assert s.attributes["gen_ai.conversation.id"] == sid
    tools = _of(spans, sid, "execute_tool ")
    assert [(s.attributes["gen_ai.tool.name"], s.start_ns, s.end_ns) for s in tools] == want[
        "tools"
    ]
    assert all(s.attributes["gen_ai.operation.name"] == "execute_tool" for s in tools)
    runs = _of(spans, sid, "invoke_agent ")
    assert len(runs) == want["runs"] == 1
    assert runs[0].start_ns == want["first"]  # the prompt's record
    assert runs[0].attributes["gen_ai.operation.name"] == "invoke_agent"
    by_id = {s.span_id: s for s in spans}
    for s in chats + tools:
        assert by_id[s.parent_span_id] is runs[0]  # every request and call in its run
        assert s.trace_id == runs[0].trace_id
    return {"run": runs[0], "tools": tools, "children": want["children"]}


def test_export_sends_runs_requests_tools_and_nested_subagents() -> None:
    with Receiver() as r:
        result = CliRunner().invoke(
            app, ["export", str(PARENT), "--format", "otlp", "--endpoint", r.url]
        )
        assert result.exit_code == 0, result.output
        spans = r.spans
    assert f"sent {len(spans)} span(s)" in result.stderr
    assert {s.resource["service.name"] for s in spans} == {"penguin"}
    parent = _check_session(spans, PARENT)
    assert parent["run"].parent_span_id == ""  # a run of a top-level session is a root
    (subagent_call,) = [t for t in parent["tools"] if t.name == "execute_tool run_subagent"]
    # The subagent's session, nested under the call that ran it, and its own subagent too.
    (child_id,) = parent["children"]
    child = _check_session(spans, NESTED / f"{child_id}_001.jsonl")
    assert child["run"].parent_span_id == subagent_call.span_id
    assert child["run"].trace_id == parent["run"].trace_id
    (grandchild_id,) = child["children"]
    (child_call,) = [t for t in child["tools"] if t.name == "execute_tool run_subagent"]
    grandchild = _check_session(spans, NESTED / f"{grandchild_id}_001.jsonl")
    assert grandchild["run"].parent_span_id == child_call.span_id


def _closed_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_export_to_an_unreachable_endpoint_fails_clearly() -> None:
    with pytest.raises(OtelExportError):
        export_otlp([PARENT], endpoint=_closed_port(), timeout=1)
    result = CliRunner().invoke(
        app, ["export", str(PARENT), "--format", "otlp", "--endpoint", _closed_port()]
    )
    assert result.exit_code == 1
    assert "did not accept" in result.stderr
    result = CliRunner().invoke(app, ["export", str(PARENT), "--format", "otlp"])
    assert result.exit_code == 2 and "--endpoint" in result.stderr


def _shape(spans: list[Span]) -> list[tuple[Any, ...]]:
    """Spans without their random ids: name, parent's name and start, times, attributes."""
    by_id = {s.span_id: s for s in spans}

    def parent(s: Span) -> tuple[str, int]:
        p = by_id.get(s.parent_span_id)
        return (p.name, p.start_ns) if p else ("", 0)

    return sorted(
        (s.name, parent(s), s.start_ns, s.end_ns, s.status_code, sorted(s.attributes.items()))
        for s in spans
    )


def test_live_export_equals_the_export_of_the_finished_trace() -> None:
    """What ``penguin serve --otlp`` sends as records arrive is what ``export`` sends later."""
    with Receiver() as live_receiver:
        live = LiveExport(live_receiver.url, schedule_delay_ms=50)
        listener = live.listener("parent")
        for record in read_trace([PARENT], report=False).records:
            listener(record, PARENT)
        # Spans go out while the session runs (the batch processor's schedule), not at the end.
        sent_before_shutdown = live_receiver.wait(1)
        live.shutdown()
        live_spans = live_receiver.spans
    assert sent_before_shutdown
    with Receiver() as r:
        export_otlp([PARENT], endpoint=r.url)
        exported = r.spans
    assert _shape(live_spans) == _shape(exported)


def test_live_export_to_an_unreachable_endpoint_never_fails_the_session(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    live = LiveExport(_closed_port(), timeout=1, schedule_delay_ms=10)
    listener = live.listener("s")
    for _ in range(3):
        for record in read_trace([PARENT], report=False).records:
            listener(record, PARENT)  # never raises, never waits for the endpoint
        live.end("s")
    live.shutdown()
    failures = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(failures) == 1, [r.getMessage() for r in failures]
    assert "said once" in failures[0].getMessage()


@pytest.mark.anyio
async def test_serve_otlp_sends_each_session_as_it_runs_and_flushes_at_shutdown(
    tmp_path: Path,
) -> None:
    from serverkit import Reader, is_server, scripted, served

    tools = [{"name": "echo", "description": "echo", "parameters": {"type": "object"}}]
    turn = [
        {"text": "calling"},
        {"tool_call": {"name": "echo", "arguments": {"x": 1}, "result": {"output": "ok"}}},
    ]
    llm = scripted(turn, [{"text": "done"}], tools=tools)
    with Receiver() as r:
        async with served(tmp_path, llm_factory=llm, approval="allow-all", otlp=r.url) as s:
            sid = await s.new_session()
            async with s.client.stream("GET", f"/api/sessions/{sid}/stream") as resp:
                rd = Reader(resp)
                await rd.next()
                assert (await s.post(f"/api/sessions/{sid}/tasks", TEXT)).status_code == 202
                await rd.until(is_server("task_state", state="idle"))
        spans = r.spans  # the server has stopped: its shutdown sent what was queued
    (path,) = sorted(tmp_path.rglob(f"{sid}_*.jsonl"))
    checked = _check_session(spans, path)
    assert [t.attributes["gen_ai.tool.name"] for t in checked["tools"]] == ["echo"]
    assert [t.attributes["penguin.approval.decision"] for t in checked["tools"]] == ["allow"]


TEXT = {"input": [{"type": "text", "text": "hi"}]}
