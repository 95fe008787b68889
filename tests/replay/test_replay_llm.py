"""ReplayLLM and ReplayEnvironment (SPEC §15.2, R-REPLAY-1…5), driven directly and through the
engine, over the committed corpus in ``fixtures/traces`` and hand-built record lists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from enginekit import collect

from engine import AbortSignal, LLMOutcome, LLMRequest, Session
from eventstore import (
    OmniMessage,
    PartialTextPayload,
    PartialThinkingPayload,
    PartialToolCallOutputPayload,
    PartialToolCallPayload,
    TextPayload,
    ThinkingPayload,
    TokenCounts,
    TokenUsagePayload,
    ToolCallOutputPayload,
    ToolCallPayload,
    ToolDefinition,
    read_trace,
)
from eventstore import builders as b
from eventstore.builders import is_partial, payload_type, stop_reason_of
from eventstore.partials import PartialAggregator
from replay._replay_llm import ReplayEnvironment, ReplayLLM, load_located, recorded_approve

pytestmark = pytest.mark.anyio

FIXTURES = Path(__file__).parents[2] / "fixtures" / "traces"
REFERENCE = Path(__file__).parents[2].parent / "shared" / "reference-traces"
TOOLS = [ToolDefinition(name="t", description="test tool")]
USAGE = TokenCounts(0, 3, 1, 4)


def files(scenario: str) -> list[Path]:
    return sorted((FIXTURES / scenario).rglob("*.jsonl"))


def request(signal: AbortSignal | None = None) -> LLMRequest:
    return LLMRequest("", [], [], 0, None, signal or AbortSignal())


async def respond(llm: ReplayLLM, signal: AbortSignal | None = None) -> list[Any]:
    return [item async for item in llm.stream(request(signal))]


def completes(items: list[Any]) -> list[OmniMessage]:
    return [i for i in items if isinstance(i, OmniMessage) and not is_partial(i)]


def meta(**overrides: Any) -> OmniMessage:
    fields: dict[str, Any] = {
        "session_id": "session-2026-07-18-11-10-22-3f8a1c2d",
        "provider": "acme",
        "model_id": "m-1",
        "model_context_window": 64000,
        "system_prompt": "sys",
        "agent_state": "/h/p/agents/a/agent_state",
        "workspace": "/w",
    } | overrides
    return b.session_meta(**fields)


def span(*inner: OmniMessage, status: Any = "completed", **end: Any) -> list[OmniMessage]:
    return [b.request_begin(), *inner, b.request_end(status, **end)]


# --------------------------------------------------------------------------- R-REPLAY-1


def recorded_spans(paths: list[Path]) -> list[list[OmniMessage]]:
    """Assistant messages of every completed request span, in file-index then line order."""
    out: list[list[OmniMessage]] = []
    current: list[OmniMessage] | None = None
    for r in read_trace(paths).records:
        kind = payload_type(r)
        if kind == "request_begin":
            current = []
        elif kind == "request_end":
            assert current is not None
            if r.payload.status == "completed":  # type: ignore[union-attr]
                out.append(current)
            current = None
        elif current is not None and getattr(r.payload, "role", None) == "assistant":
            current.append(r)
    return out


async def test_response_k_answers_request_k_across_files_and_compactions() -> None:
    """R-REPLAY-1: every completed span — turn and compaction requests alike — in file-index
    then line order, whatever order the files are given in."""
    paths = files("multi_file")
    assert len(paths) == 3
    llm = ReplayLLM(list(reversed(paths)))
    expected = recorded_spans(paths)
    assert llm.responses == len(expected) == 5  # 3 turns + 2 compaction requests
    for want in expected:
        got = completes(await respond(llm))
        bodies = [(payload_type(m), m.payload.text) for m in got if payload_type(m) == "text"]  # type: ignore[union-attr]
        assert bodies == [(payload_type(m), m.payload.text) for m in want]  # type: ignore[union-attr]
    assert len(llm.requests) == 5


@pytest.mark.parametrize("form", ["path", "paths", "directory", "records"])
async def test_accepts_a_path_paths_a_directory_or_records(form: str) -> None:
    """R-REPLAY-1: a path, a session's files (or their directory), or records."""
    paths = files("plain")
    source: Any = {
        "path": paths[0],
        "paths": paths,
        "directory": FIXTURES / "plain",
        "records": read_trace(paths).records,
    }[form]
    llm = ReplayLLM(source)
    assert llm.responses == 2
    texts = [m.payload.text for m in completes(await respond(llm)) if payload_type(m) == "text"]  # type: ignore[union-attr]
    assert texts == ["2 + 2 = 4."]


def test_a_directory_with_two_sessions_is_refused(tmp_path: Path) -> None:
    for scenario in ("plain", "retry"):
        src = files(scenario)[0]
        (tmp_path / src.name).write_bytes(src.read_bytes())
    with pytest.raises(ValueError, match="more than one session"):
        ReplayLLM(tmp_path)


def test_identity_comes_from_session_meta() -> None:
    """R-REPLAY-1 / API: provider, model_id, context_window from session_meta; vision True."""
    llm = ReplayLLM([meta(), *span(b.assistant_text("hi"), b.token_usage(USAGE))])
    assert (llm.provider, llm.model_id, llm.context_window, llm.vision) == (
        "acme",
        "m-1",
        64000,
        True,
    )
    unknown = ReplayLLM(files("plain"))
    assert (unknown.provider, unknown.model_id, unknown.context_window) == (
        "scripted",
        "script",
        None,
    )


# --------------------------------------------------------------------------- R-REPLAY-2


async def test_response_streams_partials_then_complete_then_usage_then_completed() -> None:
    """R-REPLAY-2: each complete message is preceded by start / one delta / stop (R-SCRIPT-4);
    fidelity and tool-call ids verbatim; the span's request counts; then ``completed``."""
    fid = {"signature": "abc", "nested": {"k": [1, 2]}}
    records = [
        meta(),
        *span(
            b.thinking("ponder", fidelity=fid),
            b.assistant_text("Let me look."),
            b.tool_call("t", '{"x":1}', "provider-id-77", fidelity={"phase": "final"}),
            b.approval_decision("allow", "provider-id-77"),
            b.token_usage(USAGE, TokenCounts(9, 9, 9, 27)),
        ),
        b.tool_call_output("provider-id-77", "done"),
    ]
    items = await respond(ReplayLLM(records))
    kinds = [payload_type(i) if isinstance(i, OmniMessage) else "outcome" for i in items]
    assert kinds == [
        "partial_thinking",
        "partial_thinking",
        "partial_thinking",
        "thinking",
        "partial_text",
        "partial_text",
        "partial_text",
        "text",
        "partial_tool_call",
        "partial_tool_call",
        "partial_tool_call",
        "tool_call",
        "token_usage",
        "outcome",
    ]
    assert [i.payload.event_type for i in items[:3]] == ["start", "delta", "stop"]
    thinking, _text, call = completes(items)[:3]
    assert isinstance(thinking.payload, ThinkingPayload) and thinking.payload.fidelity == fid
    assert isinstance(call.payload, ToolCallPayload)
    assert call.payload.tool_call_id == "provider-id-77"
    assert call.payload.fidelity == {"phase": "final"}
    assert call.payload.arguments == '{"x":1}'
    usage = items[-2].payload
    assert isinstance(usage, TokenUsagePayload) and usage.request == USAGE
    outcome = items[-1]
    assert isinstance(outcome, LLMOutcome) and outcome.status == "completed"
    # R-STREAM-1/2: the fragments add up to the complete messages, each closed at once.
    agg = PartialAggregator()
    rebuilt = [
        m for i in items if isinstance(i, OmniMessage) and is_partial(i) for m in agg.feed(i)
    ]
    assert agg.open_count == 0
    assert rebuilt[0].payload.thinking == "ponder"  # type: ignore[union-attr]
    assert rebuilt[1].payload.text == "Let me look."  # type: ignore[union-attr]
    assert rebuilt[2].payload.arguments == '{"x":1}'  # type: ignore[union-attr]


async def test_interrupted_segment_keeps_its_stop_reason_on_stop_and_complete() -> None:
    """R-REPLAY-2/4 with R-STREAM-4: a recorded timeout segment replays as such."""
    llm = ReplayLLM(files("retry"), mode="all")
    items = await respond(llm)
    stop = [
        i
        for i in items
        if isinstance(i, OmniMessage) and getattr(i.payload, "event_type", None) == "stop"
    ]
    assert [stop_reason_of(s) for s in stop] == ["timeout"]
    (text,) = completes(items)
    assert (text.payload.text, stop_reason_of(text)) == ("half an ans", "timeout")  # type: ignore[union-attr]


async def test_usage_recorded_after_request_end_belongs_to_its_span() -> None:
    """R-RUN-16: a reader attributes a token_usage found right after request_end to it."""
    records = [
        meta(),
        b.request_begin(),
        b.assistant_text("hi"),
        b.request_end("completed"),
        b.token_usage(USAGE),
    ]
    items = await respond(ReplayLLM(records))
    assert isinstance(items[-2], OmniMessage)
    assert items[-2].payload == TokenUsagePayload(session=USAGE, request=USAGE)


# --------------------------------------------------------------------------- R-REPLAY-3


async def test_past_the_end_is_a_permanent_failure() -> None:
    """R-REPLAY-3: failed, permanent, ``replay: no recorded response for request <k+1>``."""
    llm = ReplayLLM(files("plain"))
    await respond(llm)
    await respond(llm)
    (outcome,) = await respond(llm)
    assert outcome == LLMOutcome(
        "failed", "replay: no recorded response for request 3", permanent=True
    )


# --------------------------------------------------------------------------- R-REPLAY-4


async def test_mode_all_replays_failed_attempts_with_status_and_message() -> None:
    """R-REPLAY-4: the retry fixture's timeout and malformed attempts, then the success;
    ``completed`` mode skips the failures."""
    llm = ReplayLLM(files("retry"), mode="all")
    outcomes = [(await respond(llm))[-1] for _ in range(3)]
    assert outcomes == [
        LLMOutcome("timeout", "idle timeout"),
        LLMOutcome("malformed", "truncated JSON in the stream"),
        LLMOutcome("completed"),
    ]
    only_completed = ReplayLLM(files("retry"))
    assert only_completed.responses == 1
    assert completes(await respond(only_completed))[0].payload.text == "The full answer: 42."  # type: ignore[union-attr]


async def test_failure_is_permanent_only_when_the_run_ended_with_llm_request_error() -> None:
    """R-REPLAY-4 + R-RETRY-14: ``permanent`` is read from the ``abort`` that followed."""
    records = [
        meta(),
        *span(status="failed", error_message="bad request", attempt=1, retry_in_ms=5),
        *span(status="failed", error_message="bad request", attempt=2),
        b.abort("llm request error: bad request"),
        b.user_text("again"),
        *span(status="failed", error_message="flaky", attempt=1),
        b.abort("llm request failed after 0 retries: flaky"),
    ]
    llm = ReplayLLM(records, mode="all")
    outcomes = [(await respond(llm))[-1] for _ in range(3)]
    assert [(o.status, o.message, o.permanent) for o in outcomes] == [
        ("failed", "bad request", False),
        ("failed", "bad request", True),
        ("failed", "flaky", False),
    ]


async def test_a_span_the_trace_never_closed() -> None:
    """R-RESUME-7a / R-RESUME-14a: with usage it is a completed response; without, ``all``
    mode ends it as the resume closure would."""
    with_usage = [meta(), b.request_begin(), b.assistant_text("done"), b.token_usage(USAGE)]
    assert (await respond(ReplayLLM(with_usage)))[-1] == LLMOutcome("completed")
    without = [meta(), b.request_begin(), b.assistant_text("do", stop_reason="aborted")]
    assert ReplayLLM(without).responses == 0
    outcome = (await respond(ReplayLLM(without, mode="all")))[-1]
    assert outcome == LLMOutcome("aborted", "process exited before the request ended")


def test_mode_is_checked() -> None:
    with pytest.raises(ValueError, match="mode"):
        ReplayLLM(files("plain"), mode="everything")  # type: ignore[arg-type]


async def test_an_aborted_signal_ends_the_response() -> None:
    signal = AbortSignal()
    signal.abort()
    assert await respond(ReplayLLM(files("plain")), signal) == [LLMOutcome("aborted")]


# --------------------------------------------------------------------------- R-REPLAY-5


def env_records() -> list[OmniMessage]:
    return [
        meta(),
        b.user_text("go"),
        b.tool_list_ready(TOOLS),
        *span(
            b.tool_call("t", "{}", "a"),
            b.approval_decision("allow", "a"),
            b.tool_call("t", "{}", "d"),
            b.approval_decision("deny", "d"),
            b.tool_call_output("d", "Tool call denied by user.", stop_reason="aborted"),
            b.tool_call("t", "{}", "f"),
            b.approval_decision("forbidden", "f"),
            b.tool_call_output("f", "Tool call denied by policy.", stop_reason="aborted"),
            b.token_usage(USAGE),
        ),
        b.tool_call_output("a", "pic", images=["data:image/png;base64,AAAA"], stop_reason="failed"),
        b.tool_call_output("a", "a later duplicate"),
    ]


async def execute(env: ReplayEnvironment, cid: str) -> list[OmniMessage]:
    return [
        m
        async for m in env.execute(b.tool_call("t", "{}", cid), signal=AbortSignal(), approve=None)
    ]


async def test_environment_answers_with_the_first_recorded_output() -> None:
    """R-REPLAY-5: same output, images and stop_reason, streamed start/delta/stop/complete."""
    env = ReplayEnvironment(env_records())
    msgs = await execute(env, "a")
    assert [payload_type(m) for m in msgs] == ["partial_tool_call_output"] * 3 + [
        "tool_call_output"
    ]
    assert [m.payload.event_type for m in msgs[:3]] == ["start", "delta", "stop"]  # type: ignore[union-attr]
    assert all(isinstance(m.payload, PartialToolCallOutputPayload) for m in msgs[:3])
    out = msgs[-1].payload
    assert isinstance(out, ToolCallOutputPayload)
    assert (out.output, out.images, out.stop_reason, out.tool_call_id) == (
        "pic",
        ["data:image/png;base64,AAAA"],
        "failed",
        "a",
    )
    assert stop_reason_of(msgs[2]) == "failed"


async def test_unrecorded_call_answers_no_output() -> None:
    """R-REPLAY-5: ``[no output]`` when the trace holds no output for the id."""
    msgs = await execute(ReplayEnvironment(env_records()), "zzz")
    out = msgs[-1].payload
    assert isinstance(out, ToolCallOutputPayload)
    assert (out.output, stop_reason_of(msgs[-1])) == ("[no output]", "completed")


async def test_recorded_approvals_and_toolset() -> None:
    """R-REPLAY-5: the recorded decision per call id, ``allow`` by default; list_tools is
    the recorded ``tool_list_ready``."""
    records = env_records()
    env = ReplayEnvironment(records)
    standalone = recorded_approve(records)
    for approve in (env.approve, standalone):
        assert [approve(b.tool_call("t", "{}", cid)) for cid in ("a", "d", "f", "new")] == [
            "allow",
            "deny",
            "forbidden",
            "allow",
        ]
    assert await env.list_tools() == TOOLS
    assert env.tool_permission("t") == "rw"
    assert env.tool_permission("other") is None


async def test_replay_pair_reproduces_a_recorded_session_through_the_engine(tmp_path: Path) -> None:
    """R-REPLAY-1…5 end to end: the engine driven by the pair re-records what the fixture
    holds (completion order included), and ``requests`` logs every request."""
    paths = files("tools_out_of_order")
    llm = ReplayLLM(paths, mode="all")
    env = ReplayEnvironment.from_llm(llm)
    ws = tmp_path / "ws"
    ws.mkdir()
    session = await Session.create(
        llm=llm, environment=env, root=tmp_path / "home", workspace=ws, compaction=None
    )
    async with session:
        stream = await collect(
            session.run([b.user_text("List files and read b.txt")], approve=env.approve)
        )
    outputs = [
        m.payload.tool_call_id for m in stream if isinstance(m.payload, ToolCallOutputPayload)
    ]
    assert outputs == ["call_1_2", "call_1_1"]  # the recorded completion order
    assert len(llm.requests) == 2
    assert env.stalls == 0
    texts = [
        m.payload.text for m in stream if isinstance(m.payload, TextPayload) and not is_partial(m)
    ]
    assert texts[-1] == "There are two files; b.txt says: contents of b.txt."
    assert not any(
        isinstance(m.payload, PartialTextPayload | PartialThinkingPayload | PartialToolCallPayload)
        and m.origin
        for m in stream
    )


async def test_pacing_gives_up_when_the_replay_has_diverged() -> None:
    """A paced model waiting for a tool output that never comes (the call was not
    dispatched) gives up after ``stall_timeout`` instead of hanging."""
    records = [
        meta(),
        *span(
            b.tool_call("t", "{}", "a"),
            b.approval_decision("allow", "a"),
            b.tool_call_output("a", "early"),
            b.token_usage(USAGE),
        ),
    ]
    llm = ReplayLLM(records)
    env = ReplayEnvironment.from_llm(llm, stall_timeout=0.01)
    items = await respond(llm)  # nobody executes call "a"
    assert items[-1] == LLMOutcome("completed")
    assert env.stalls >= 1


def test_load_located_skips_bad_lines_and_keeps_line_numbers() -> None:
    """Torn tails and malformed lines are skipped; records keep their physical line."""
    located = load_located(files("damaged_malformed_middle"))
    lines = [loc.line for loc in located]
    assert 5 not in lines and lines[:5] == [1, 2, 3, 4, 6]
    assert [loc.position for loc in located] == list(range(len(located)))


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="reference traces not present")
def test_identity_of_a_reference_trace() -> None:
    llm = ReplayLLM(REFERENCE / "01_plain_text")
    assert (llm.provider, llm.model_id, llm.context_window) == ("fake", "scripted-model", 200000)
