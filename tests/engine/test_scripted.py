"""ScriptedLLM and ScriptedEnvironment (SPEC §15.1: R-SCRIPT-1…10; R-TOOL-1…4; R-STREAM-1/2/4;
R-RUN-16).  The generators are driven directly, without an engine."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

from engine._protocols import LLMOutcome, LLMRequest
from engine._signal import AbortSignal
from engine.llm import DEFAULT_SCRIPT, Script, ScriptedEnvironment, ScriptedLLM, load_script
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
)
from eventstore.builders import is_partial, stop_reason_of, tool_call, user_text

ABORT_NOTE = "[interrupted: tool aborted by user]"

# --------------------------------------------------------------------------- helpers

_COMPLETE_OF: dict[type, type] = {
    PartialTextPayload: TextPayload,
    PartialThinkingPayload: ThinkingPayload,
    PartialToolCallPayload: ToolCallPayload,
    PartialToolCallOutputPayload: ToolCallOutputPayload,
}


def _content(payload: Any) -> str:
    for key in ("text", "thinking", "arguments", "output"):
        if hasattr(payload, key):
            value = getattr(payload, key)
            assert isinstance(value, str)
            return value
    raise AssertionError(f"no content in {payload!r}")


def assert_discipline(items: list[Any]) -> None:
    """R-STREAM-1/2/4: every segment is start, deltas, stop, then at once its complete message,
    whose content and stop_reason match the fragments (computed by hand)."""
    open_type: type | None = None
    parts: list[str] = []
    stop_seen: Any = None
    for item in items:
        if isinstance(item, LLMOutcome):
            assert open_type is None, "outcome inside an open segment"
            assert stop_seen is None, "outcome between stop and complete"
            continue
        if stop_seen is not None:
            assert type(item.payload) is _COMPLETE_OF[type(stop_seen)], "complete must follow stop"
            assert _content(item.payload) == "".join(parts)
            assert stop_reason_of(item) == stop_seen.stop_reason
            stop_seen, open_type, parts = None, None, []
            continue
        if not is_partial(item):
            assert open_type is None, f"{item.payload!r} inside an open segment"
            continue
        payload = item.payload
        if payload.event_type == "start":
            assert open_type is None
            open_type = type(payload)
        else:
            assert type(payload) is open_type
        parts.append(_content(payload))
        if payload.event_type == "stop":
            stop_seen = payload
    assert open_type is None, "segment left open"
    assert stop_seen is None, "stop without its complete message"


def request(n_messages: int = 2, signal: AbortSignal | None = None) -> LLMRequest:
    messages = [user_text(f"m{i}") for i in range(n_messages)]
    return LLMRequest(
        system_prompt="sys",
        tools=[],
        messages=messages,
        new_messages=n_messages,
        thinking_level=None,
        signal=signal or AbortSignal(),
    )


async def drain(
    stream: AsyncIterator[Any], on_item: Callable[[Any], None] | None = None
) -> list[Any]:
    items: list[Any] = []
    async for item in stream:
        items.append(item)
        if on_item is not None:
            on_item(item)
    return items


def shape(items: list[Any]) -> list[tuple[str, ...]]:
    """A compact view: (payload type, event_type?, content?, stop_reason?)."""
    out: list[tuple[str, ...]] = []
    for item in items:
        if isinstance(item, LLMOutcome):
            out.append(("outcome", item.status))
            continue
        p = item.payload
        if isinstance(p, TokenUsagePayload):
            out.append(("token_usage",))
        elif is_partial(item):
            out.append((tag(p), p.event_type, _content(p), stop_reason_of(item)))
        else:
            out.append((tag(p), _content(p), stop_reason_of(item)))
    return out


def tag(payload: Any) -> str:
    value = type(payload).__struct_config__.tag
    assert isinstance(value, str)
    return value


def outcome(items: list[Any]) -> LLMOutcome:
    assert isinstance(items[-1], LLMOutcome)
    assert not any(isinstance(i, LLMOutcome) for i in items[:-1]), "exactly one outcome, last"
    return items[-1]


def usages(items: list[Any]) -> list[TokenUsagePayload]:
    return [
        i.payload
        for i in items
        if not isinstance(i, LLMOutcome) and isinstance(i.payload, TokenUsagePayload)
    ]


# --------------------------------------------------------------------------- LLM: emission


@pytest.mark.anyio
async def test_r_script_4_text_item_streams_one_delta_then_complete_and_default_usage() -> None:
    """R-SCRIPT-4 + R-SCRIPT-6 + R-RUN-16: start "", one delta, stop "", complete, then the
    default token_usage as the last message and one completed outcome."""
    llm = ScriptedLLM([[{"text": "Hello"}]])
    items = await drain(llm.stream(request(3)))
    assert shape(items) == [
        ("partial_text", "start", "", "completed"),
        ("partial_text", "delta", "Hello", "completed"),
        ("partial_text", "stop", "", "completed"),
        ("text", "Hello", "completed"),
        ("token_usage",),
        ("outcome", "completed"),
    ]
    assert items[3].payload.role == "assistant"
    (usage,) = usages(items)
    assert usage.request == TokenCounts(cache_read=0, cache_write=3, output=1, total=4)
    assert usage.session == usage.request
    assert outcome(items) == LLMOutcome("completed")
    assert_discipline(items)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("body", "chunks", "deltas"),
    [
        ("abcdefghij", 3, ["abc", "def", "ghij"]),
        ("abcdef", 2, ["abc", "def"]),
        ("ab", 3, ["", "", "ab"]),
        ("", 2, ["", ""]),
    ],
)
async def test_r_script_4_chunks_equal_parts_last_takes_remainder(
    body: str, chunks: int, deltas: list[str]
) -> None:
    """R-SCRIPT-4: `chunks` equal parts, one delta each; the last part takes the remainder."""
    llm = ScriptedLLM([[{"thinking": body, "chunks": chunks}]])
    items = await drain(llm.stream(request()))
    got = [
        i.payload.thinking
        for i in items
        if not isinstance(i, LLMOutcome)
        and isinstance(i.payload, PartialThinkingPayload)
        and i.payload.event_type == "delta"
    ]
    assert got == deltas
    assert_discipline(items)


@pytest.mark.anyio
async def test_r_script_3_explicit_delta_list_and_fidelity() -> None:
    """R-SCRIPT-3: a list of strings gives the deltas explicitly; fidelity rides on the complete
    message."""
    llm = ScriptedLLM([[{"thinking": ["Thi", "nk", ""], "fidelity": {"signature": "s1"}}]])
    items = await drain(llm.stream(request()))
    assert shape(items)[:5] == [
        ("partial_thinking", "start", "", "completed"),
        ("partial_thinking", "delta", "Thi", "completed"),
        ("partial_thinking", "delta", "nk", "completed"),
        ("partial_thinking", "delta", "", "completed"),
        ("partial_thinking", "stop", "", "completed"),
    ]
    complete = items[5].payload
    assert isinstance(complete, ThinkingPayload)
    assert complete.thinking == "Think"
    assert complete.fidelity == {"signature": "s1"}
    assert_discipline(items)


@pytest.mark.anyio
async def test_r_script_4_tool_call_partials_default_ids_and_argument_serialization() -> None:
    """R-SCRIPT-3/4: tool_call start (name, args ""), one delta with the arguments, stop (name
    ""), complete; default id call_<r>_<n>; an object is serialized compactly keeping non-ASCII,
    a string is used verbatim."""
    llm = ScriptedLLM(
        [
            [
                {"tool_call": {"name": "write_file", "arguments": {"path": "é.txt", "n": 1}}},
                {"tool_call": {"name": "exec_command", "arguments": '{"cmd": "ls"'}},
                {"tool_call": {"name": "read_file", "arguments": {}, "id": "mine"}},
            ],
            [{"text": "x"}, {"tool_call": {"name": "read_file", "arguments": {"path": "a"}}}],
        ]
    )
    first = await drain(llm.stream(request()))
    second = await drain(llm.stream(request()))
    partials = [
        i.payload for i in first if isinstance(getattr(i, "payload", None), PartialToolCallPayload)
    ]
    assert [(p.event_type, p.name, p.arguments, p.tool_call_id) for p in partials[:3]] == [
        ("start", "write_file", "", "call_1_1"),
        ("delta", "", '{"path":"é.txt","n":1}', "call_1_1"),
        ("stop", "", "", "call_1_1"),
    ]
    calls = [
        i.payload
        for i in first + second
        if isinstance(getattr(i, "payload", None), ToolCallPayload)
    ]
    assert [(c.name, c.arguments, c.tool_call_id, c.stop_reason) for c in calls] == [
        ("write_file", '{"path":"é.txt","n":1}', "call_1_1", "completed"),
        ("exec_command", '{"cmd": "ls"', "call_1_2", "completed"),
        ("read_file", "{}", "mine", "completed"),
        ("read_file", '{"path":"a"}', "call_2_1", "completed"),
    ]
    # R-SCRIPT-6: output counts every complete assistant message of the response.
    assert usages(first)[0].request.output == 3
    assert usages(second)[0].request.output == 2
    assert_discipline(first)
    assert_discipline(second)


# --------------------------------------------------------------------------- LLM: usage


@pytest.mark.anyio
async def test_r_script_6_usage_item_emitted_in_place_and_replaces_default() -> None:
    """R-SCRIPT-6: a usage item emits token_usage at that point, total = sum; no default usage
    follows."""
    llm = ScriptedLLM(
        [[{"usage": {"cache_read": 5, "cache_write": 900, "output": 12}}, {"text": "t"}]]
    )
    items = await drain(llm.stream(request()))
    assert shape(items)[0] == ("token_usage",)
    (usage,) = usages(items)
    assert usage.request == TokenCounts(cache_read=5, cache_write=900, output=12, total=917)
    assert usage.session == usage.request
    assert outcome(items).status == "completed"


@pytest.mark.anyio
async def test_r_script_6_usage_false_suppresses_and_response_object_usage_goes_last() -> None:
    """R-SCRIPT-2/6: `"usage": false` suppresses the default; a response-level usage object is
    emitted as the last message instead of the default counts."""
    llm = ScriptedLLM(
        [
            {"items": [{"text": "a"}], "usage": False},
            {"items": [{"text": "b"}], "usage": {"cache_write": 7}},
        ]
    )
    first = await drain(llm.stream(request()))
    assert usages(first) == []
    assert outcome(first).status == "completed"
    second = await drain(llm.stream(request()))
    assert shape(second)[-2:] == [("token_usage",), ("outcome", "completed")]
    assert usages(second)[0].request == TokenCounts(0, 7, 0, 7)


@pytest.mark.anyio
async def test_r_script_6_empty_response_default_usage_counts_messages() -> None:
    """R-SCRIPT-6: cache_write = len(request.messages), output = 0 complete messages."""
    llm = ScriptedLLM([[]])
    items = await drain(llm.stream(request(5)))
    assert shape(items) == [("token_usage",), ("outcome", "completed")]
    assert usages(items)[0].request == TokenCounts(0, 5, 0, 5)


# --------------------------------------------------------------------------- LLM: failure


@pytest.mark.anyio
async def test_r_script_5_fail_stamps_the_last_segment_and_emits_no_usage() -> None:
    """R-SCRIPT-5: the text right before `fail` is the interrupted segment: its stop and complete
    carry the failure status; R-SCRIPT-6/R-RUN-16: no token_usage in a failing response."""
    llm = ScriptedLLM(
        [
            [
                {"thinking": "hm"},
                {"text": "half an ans"},
                {"fail": {"status": "timeout", "message": "idle timeout"}},
            ]
        ]
    )
    items = await drain(llm.stream(request()))
    assert shape(items) == [
        ("partial_thinking", "start", "", "completed"),
        ("partial_thinking", "delta", "hm", "completed"),
        ("partial_thinking", "stop", "", "completed"),
        ("thinking", "hm", "completed"),
        ("partial_text", "start", "", "completed"),
        ("partial_text", "delta", "half an ans", "completed"),
        ("partial_text", "stop", "", "timeout"),
        ("text", "half an ans", "timeout"),
        ("outcome", "timeout"),
    ]
    assert outcome(items) == LLMOutcome("timeout", "idle timeout", permanent=False)
    assert_discipline(items)


@pytest.mark.anyio
async def test_r_script_5_tool_call_before_fail_stays_completed_and_explicit_stop_wins() -> None:
    """R-SCRIPT-5: tool calls default to completed even right before `fail`; an explicit
    stop_reason is kept."""
    llm = ScriptedLLM(
        [
            [
                {"tool_call": {"name": "t", "arguments": {}}},
                {"fail": {"status": "malformed"}},
            ],
            [
                {"text": "x", "stop_reason": "completed"},
                {"fail": {"status": "auth", "message": "bad key", "permanent": True}},
            ],
            [
                {"tool_call": {"name": "t", "arguments": "{", "stop_reason": "malformed"}},
                {"fail": {"status": "failed", "retry_after_s": 1.5}},
            ],
        ]
    )
    first = await drain(llm.stream(request()))
    assert shape(first)[-2:] == [("tool_call", "{}", "completed"), ("outcome", "malformed")]
    second = await drain(llm.stream(request()))
    assert shape(second)[-2:] == [("text", "x", "completed"), ("outcome", "auth")]
    assert outcome(second) == LLMOutcome("auth", "bad key", permanent=True)
    third = await drain(llm.stream(request()))
    assert shape(third)[-3:] == [
        ("partial_tool_call", "stop", "", "malformed"),
        ("tool_call", "{", "malformed"),
        ("outcome", "failed"),
    ]
    assert outcome(third).retry_after_s == 1.5
    for items in (first, second, third):
        assert usages(items) == []
        assert_discipline(items)


@pytest.mark.anyio
async def test_r_script_1_and_9_responses_in_order_then_exhausted_and_requests_recorded() -> None:
    """R-SCRIPT-1: response k answers request k; exhausted → failed, permanent, exact message.
    R-SCRIPT-9: every request is recorded, in call order."""
    llm = ScriptedLLM([[{"text": "one"}], [{"text": "two"}]])
    reqs = [request(1), request(2), request(3)]
    results = [await drain(llm.stream(r)) for r in reqs]
    assert shape(results[0])[3] == ("text", "one", "completed")
    assert shape(results[1])[3] == ("text", "two", "completed")
    assert results[2] == [
        LLMOutcome("failed", "scripted: no response for request 3", permanent=True)
    ]
    assert llm.requests == reqs
    assert all(a is b for a, b in zip(llm.requests, reqs, strict=True))


@pytest.mark.anyio
async def test_r_script_1_response_is_chosen_when_stream_is_called() -> None:
    """R-SCRIPT-1: requests are numbered in the order `stream` is called, even when the second
    stream is iterated first."""
    llm = ScriptedLLM([[{"text": "first"}], [{"text": "second"}]])
    a = llm.stream(request())
    b = llm.stream(request())
    assert shape(await drain(b))[3] == ("text", "second", "completed")
    assert shape(await drain(a))[3] == ("text", "first", "completed")


# --------------------------------------------------------------------------- LLM: abort


class SteerRecorder:
    """A stand-in for Session: records steering and what had been consumed at that moment;
    optionally fires a signal."""

    def __init__(self, fire: AbortSignal | None = None, seen: list[Any] | None = None) -> None:
        self.calls: list[list[OmniMessage]] = []
        self.consumed_at_call: list[int] = []
        self.fire = fire
        self.seen = seen if seen is not None else []

    def steer(self, input: list[OmniMessage], /) -> bool:
        self.calls.append(input)
        self.consumed_at_call.append(len(self.seen))
        if self.fire is not None:
            self.fire.abort("from steer")
        return True


@pytest.mark.anyio
async def test_r_script_3_steer_item_calls_the_bound_session_at_its_place() -> None:
    """R-SCRIPT-3: `{"steer": text}` calls session.steer([user_text(text)]) between the items
    around it."""
    llm = ScriptedLLM([[{"text": "a"}, {"steer": "turn left"}, {"text": "b"}]])
    items: list[Any] = []
    session = SteerRecorder(seen=items)
    llm.bind(session)
    await drain(llm.stream(request()), items.append)
    (call,) = session.calls
    assert len(call) == 1
    assert isinstance(call[0].payload, TextPayload)
    assert (call[0].payload.role, call[0].payload.text) == ("user", "turn left")
    # After the complete "a" (4 messages), before anything of "b".
    assert session.consumed_at_call == [4]
    assert shape(items)[4] == ("partial_text", "start", "", "completed")
    assert outcome(items).status == "completed"


@pytest.mark.anyio
async def test_r_script_3_steer_without_bound_session_fails_the_request() -> None:
    """R-SCRIPT-3 + R-MSG-24: an unbound steer item is a failed outcome, not an exception."""
    llm = ScriptedLLM([[{"steer": "x"}, {"text": "never"}]])
    items = await drain(llm.stream(request()))
    assert len(items) == 1
    assert outcome(items).status == "failed"
    assert outcome(items).permanent


@pytest.mark.anyio
async def test_r_script_7_abort_between_items_fired_from_steer_hook() -> None:
    """R-SCRIPT-7: aborted between items → nothing open, no further item, no usage, outcome
    aborted."""
    signal = AbortSignal()
    llm = ScriptedLLM([[{"text": "a"}, {"steer": "stop"}, {"text": "b"}, {"usage": {"output": 1}}]])
    llm.bind(SteerRecorder(fire=signal))
    items = await drain(llm.stream(request(signal=signal)))
    assert shape(items) == [
        ("partial_text", "start", "", "completed"),
        ("partial_text", "delta", "a", "completed"),
        ("partial_text", "stop", "", "completed"),
        ("text", "a", "completed"),
        ("outcome", "aborted"),
    ]
    assert_discipline(items)


@pytest.mark.anyio
async def test_r_script_7_abort_before_the_first_item() -> None:
    """R-SCRIPT-7: the signal is checked before the first item."""
    signal = AbortSignal()
    signal.abort()
    llm = ScriptedLLM([[{"text": "a"}]])
    assert await drain(llm.stream(request(signal=signal))) == [LLMOutcome("aborted")]


@pytest.mark.anyio
async def test_r_script_7_abort_inside_a_text_closes_with_content_so_far() -> None:
    """R-SCRIPT-7 + R-STREAM-4: aborted inside an item → stop and complete carry `aborted` and
    the content emitted so far; then outcome aborted (a `fail` item is not reached)."""
    signal = AbortSignal()
    llm = ScriptedLLM(
        [[{"text": "abcdef", "chunks": 3}, {"text": "later"}, {"fail": {"status": "timeout"}}]]
    )

    def on_item(item: Any) -> None:
        if (
            isinstance(getattr(item, "payload", None), PartialTextPayload)
            and item.payload.text == "ab"
        ):
            signal.abort()

    items = await drain(llm.stream(request(signal=signal)), on_item)
    assert shape(items) == [
        ("partial_text", "start", "", "completed"),
        ("partial_text", "delta", "ab", "completed"),
        ("partial_text", "stop", "", "aborted"),
        ("text", "ab", "aborted"),
        ("outcome", "aborted"),
    ]
    assert_discipline(items)


@pytest.mark.anyio
async def test_r_script_7_abort_after_tool_call_start_closes_the_call_as_aborted() -> None:
    """R-SCRIPT-7: checked before the arguments delta; the closed call carries `aborted` and
    the arguments emitted so far (none)."""
    signal = AbortSignal()
    llm = ScriptedLLM([[{"tool_call": {"name": "t", "arguments": {"a": 1}}}]])

    def on_item(item: Any) -> None:
        if isinstance(getattr(item, "payload", None), PartialToolCallPayload):
            signal.abort()

    items = await drain(llm.stream(request(signal=signal)), on_item)
    assert shape(items) == [
        ("partial_tool_call", "start", "", "completed"),
        ("partial_tool_call", "stop", "", "aborted"),
        ("tool_call", "", "aborted"),
        ("outcome", "aborted"),
    ]
    assert items[2].payload.name == "t"
    assert items[2].payload.tool_call_id == "call_1_1"
    assert_discipline(items)


@pytest.mark.anyio
async def test_r_script_7_sleep_is_abort_aware() -> None:
    """R-SCRIPT-7: an abort during `sleep_ms` ends the wait at once → outcome aborted.  The
    signal fires from another task once the stream is blocked in its (one-hour) sleep."""
    signal = AbortSignal()
    llm = ScriptedLLM([[{"text": "a"}, {"sleep_ms": 3_600_000}, {"text": "b"}]])
    items: list[Any] = []

    async def consume() -> None:
        items.extend(await drain(llm.stream(request(signal=signal))))

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            await anyio.wait_all_tasks_blocked()
            assert shape(items) == []  # still inside the sleep, "a" not collected yet
            signal.abort()
    assert shape(items)[-2:] == [("text", "a", "completed"), ("outcome", "aborted")]
    assert_discipline(items)


@pytest.mark.anyio
async def test_r_script_7_sleep_then_completes_when_not_aborted() -> None:
    """R-SCRIPT-3: a short sleep just pauses the stream."""
    llm = ScriptedLLM([[{"sleep_ms": 1}, {"text": "b"}]])
    items = await drain(llm.stream(request()))
    assert outcome(items).status == "completed"


@pytest.mark.anyio
async def test_r_script_7_abort_after_the_last_item_keeps_the_scripted_outcome() -> None:
    """R-SCRIPT-7: once the last item has been yielded the outcome is the scripted one; the
    default usage still follows (a fully delivered response counts as completed)."""
    signal = AbortSignal()
    llm = ScriptedLLM([[{"text": "done"}], [{"text": "half"}, {"fail": {"status": "timeout"}}]])

    def on_item(item: Any) -> None:
        if isinstance(getattr(item, "payload", None), TextPayload):
            signal.abort()

    items = await drain(llm.stream(request(signal=signal)), on_item)
    assert shape(items)[-2:] == [("token_usage",), ("outcome", "completed")]
    signal2 = AbortSignal()

    def on_item2(item: Any) -> None:
        if isinstance(getattr(item, "payload", None), TextPayload):
            signal2.abort()

    failing = await drain(llm.stream(request(signal=signal2)), on_item2)
    assert shape(failing)[-1] == ("outcome", "timeout")


# --------------------------------------------------------------------------- LLM: attributes


def test_r_script_10_attributes_defaults() -> None:
    """R-SCRIPT-10: provider "scripted", model_id "script", vision True, no context_window."""
    llm = ScriptedLLM([])
    assert llm.provider == "scripted"
    assert llm.model_id == "script"
    assert llm.vision is True
    assert not hasattr(llm, "context_window")
    assert getattr(llm, "context_window", None) is None
    assert llm.tools == []
    assert llm.requests == []


def test_r_script_10_attributes_from_script_and_tools() -> None:
    """R-SCRIPT-10: model_id, vision and context_window come from the script; tools become
    ToolDefinitions."""
    llm = ScriptedLLM(
        {
            "responses": [],
            "model_id": "m1",
            "vision": False,
            "context_window": 8192,
            "tools": [{"name": "t", "description": "d", "parameters": {"type": "object"}}],
            "description": "free text is allowed at top level",
            "comment": ["so is this"],
        }
    )
    assert (llm.model_id, llm.vision, llm.context_window) == ("m1", False, 8192)
    assert llm.tools == [ToolDefinition(name="t", description="d", parameters={"type": "object"})]
    assert llm.script.extra == {
        "description": "free text is allowed at top level",
        "comment": ["so is this"],
    }


@pytest.mark.anyio
async def test_load_script_from_path_str_and_pathlike(tmp_path: Path) -> None:
    """§15.1: a path to a .json file (str or PathLike) is accepted."""
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"responses": [[{"text": "from file"}]], "model_id": "f"}))
    for source in (path, str(path)):
        llm = ScriptedLLM(source)
        assert llm.model_id == "f"
        assert shape(await drain(llm.stream(request())))[3] == ("text", "from file", "completed")
    script = load_script(path)
    assert isinstance(script, Script)
    assert load_script(script) is script


def test_default_script_is_a_valid_demo() -> None:
    """R-CLI-8: the embedded script has thinking, text, write_file then parallel exec_command
    calls then read_file, a timeout, a final answer whose usage crosses a low threshold, and a
    [summary] response; its tool calls carry no result (the real environment runs them)."""
    script = load_script(DEFAULT_SCRIPT)
    assert isinstance(script.extra.get("description"), str)
    assert 5 <= len(script.responses) <= 8
    raw = json.loads(DEFAULT_SCRIPT.read_text(encoding="utf-8"))
    flat = [item for resp in raw["responses"] for item in resp]
    kinds = {next(iter(item)) for item in flat}
    assert {"thinking", "text", "tool_call", "usage", "fail"} <= kinds
    names_per_response = [
        [item["tool_call"]["name"] for item in resp if "tool_call" in item]
        for resp in raw["responses"]
    ]
    assert ["write_file"] in names_per_response
    assert ["exec_command", "exec_command"] in names_per_response
    assert ["read_file"] in names_per_response
    assert all("result" not in item["tool_call"] for item in flat if "tool_call" in item)
    fails = [item["fail"] for item in flat if "fail" in item]
    assert fails == [{"status": "timeout", "message": "idle timeout"}]
    usage = next(item["usage"] for item in flat if "usage" in item)
    assert sum(usage.values()) > 500
    last_text = raw["responses"][-1][-1]["text"]
    assert last_text.startswith("[summary]")
    assert last_text.endswith("[/summary]")


@pytest.mark.anyio
async def test_default_script_streams_with_discipline() -> None:
    """R-STREAM-1/2 over every response of the demo script."""
    llm = ScriptedLLM(DEFAULT_SCRIPT)
    for _ in llm.script.responses:
        assert_discipline(await drain(llm.stream(request())))


# --------------------------------------------------------------------------- invalid scripts


@pytest.mark.parametrize(
    ("script", "needle"),
    [
        ([[{"txt": "a"}]], "responses[0][0]: no item kind"),
        ([[{"text": "a", "chunk": 2}]], "responses[0][0]: unknown key 'chunk'"),
        ([[], [{"text": "a", "thinking": "b"}]], "responses[1][0]: several item kinds"),
        (
            [[{"fail": {"status": "timeout"}}, {"text": "a"}]],
            "responses[0][0]: 'fail' must be the last",
        ),
        (
            [[{"text": "a"}, {"usage": {"output": 1}}, {"fail": {"status": "failed"}}]],
            "responses[0][1]: a failing response never emits usage",
        ),
        (
            [{"items": [{"fail": {"status": "failed"}}], "usage": {"output": 1}}],
            "responses[0].usage: a failing response never emits usage",
        ),
        (
            [{"items": [{"usage": {}}], "usage": {"output": 1}}],
            "responses[0].usage: give usage either",
        ),
        ([{"items": [], "usage": True}], "responses[0].usage: expected an object or false"),
        ([{"item": []}], "responses[0]: unknown key 'item'"),
        ([[{"fail": {"status": "completed"}}]], "responses[0][0].fail.status"),
        ([[{"fail": {"message": "x"}}]], "needs a 'status'"),
        ([[{"text": "a", "stop_reason": "done"}]], "responses[0][0].stop_reason"),
        ([[{"text": "a", "chunks": 0}]], "responses[0][0].chunks: expected an integer >= 1"),
        ([[{"text": ["a"], "chunks": 2}]], "'chunks' cannot be combined"),
        ([[{"text": ["a", 1]}]], "responses[0][0].text: expected a list of strings"),
        (
            [[{"tool_call": {"arguments": {}}}]],
            "responses[0][0].tool_call: a tool_call needs a 'name'",
        ),
        ([[{"tool_call": {"name": "t", "arguments": 3}}]], "responses[0][0].tool_call.arguments"),
        ([[{"tool_call": {"name": "t", "results": {}}}]], "unknown key 'results'"),
        (
            [[{"tool_call": {"name": "t", "result": {"output": "ab", "chunks": ["a"]}}}]],
            "responses[0][0].tool_call.result: 'output' and 'chunks' disagree",
        ),
        ([[{"tool_call": {"name": "t", "result": {"delay_ms": -1}}}]], "result.delay_ms"),
        ([[{"usage": {"total": 3}}]], "responses[0][0].usage: unknown key 'total'"),
        ([[{"sleep_ms": "1"}]], "responses[0][0].sleep_ms"),
        ([["text"]], "responses[0][0]: expected an item object"),
        ({"responses": [], "vision": "yes"}, "vision: expected a boolean"),
        ({"responses": [], "context_window": 0}, "context_window"),
        ({"responses": [], "tools": [{"name": "t"}]}, "tools[0]"),
        ({"tools": []}, "missing 'responses'"),
        ({"responses": {}}, "responses: expected a list"),
    ],
)
def test_invalid_scripts_raise_value_error_naming_the_place(script: Any, needle: str) -> None:
    """§15.1: a bad script fails up front with a ValueError naming where and what."""
    with pytest.raises(ValueError, match="invalid script") as info:
        ScriptedLLM(script)
    assert needle in str(info.value)


def test_invalid_json_file_names_the_path(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{nope")
    with pytest.raises(ValueError, match="not valid JSON") as info:
        load_script(path)
    assert str(path) in str(info.value)
    path.write_text('[[{"txt": 1}]]')
    with pytest.raises(ValueError, match=r"responses\[0\]\[0\]") as info:
        load_script(path)
    assert str(path) in str(info.value)


# --------------------------------------------------------------------------- environment


def call_of(llm_items: list[Any]) -> list[OmniMessage]:
    return [
        i
        for i in llm_items
        if not isinstance(i, LLMOutcome) and isinstance(i.payload, ToolCallPayload)
    ]


@pytest.mark.anyio
async def test_r_script_8_environment_tools_permissions_and_close() -> None:
    """R-SCRIPT-8: list_tools() returns the script's tools; known tools are "rw"."""
    env = ScriptedEnvironment({"responses": [], "tools": [{"name": "t", "description": "d"}]})
    assert await env.list_tools() == [ToolDefinition(name="t", description="d")]
    assert env.tool_permission("t") == "rw"
    assert env.tool_permission("other") is None
    await env.aclose()


@pytest.mark.anyio
async def test_r_tool_1_streamed_chunks_and_images_by_default_id() -> None:
    """R-SCRIPT-8 + R-TOOL-1: start, one delta per chunk, stop, complete with status and images;
    the result is found by the default id call_<r>_<n>."""
    llm = ScriptedLLM(
        [
            [{"text": "x"}],
            [
                {"tool_call": {"name": "a", "arguments": {}}},
                {
                    "tool_call": {
                        "name": "b",
                        "arguments": {},
                        "result": {
                            "chunks": ["line 1\n", "line 2"],
                            "images": ["data:image/png;base64,AA=="],
                            "status": "failed",
                        },
                    }
                },
            ],
        ]
    )
    env = ScriptedEnvironment.from_llm(llm)
    assert env.script is llm.script
    items = await drain(
        env.execute(tool_call("b", "{}", "call_2_2"), signal=AbortSignal(), approve=None)
    )
    payloads = [i.payload for i in items]
    assert [(tag(p), getattr(p, "event_type", None), p.output) for p in payloads] == [
        ("partial_tool_call_output", "start", ""),
        ("partial_tool_call_output", "delta", "line 1\n"),
        ("partial_tool_call_output", "delta", "line 2"),
        ("partial_tool_call_output", "stop", ""),
        ("tool_call_output", None, "line 1\nline 2"),
    ]
    assert all(p.tool_call_id == "call_2_2" for p in payloads)
    assert payloads[1].images is None
    assert payloads[2].images == ["data:image/png;base64,AA=="]
    assert payloads[4].images == ["data:image/png;base64,AA=="]
    assert [p.stop_reason for p in payloads] == ["completed"] * 3 + ["failed"] * 2
    assert_discipline(items)


@pytest.mark.anyio
async def test_r_tool_4_whole_output_one_delta_and_no_output_cases() -> None:
    """R-SCRIPT-8: `output` goes out as one delta; R-TOOL-4: no content → `[no output]` (also for
    a call without a scripted result, and for a failed result without output)."""
    env = ScriptedEnvironment(
        [
            [
                {"tool_call": {"name": "a", "id": "whole", "result": {"output": "all of it"}}},
                {"tool_call": {"name": "a", "id": "failed", "result": {"status": "failed"}}},
                {"tool_call": {"name": "a", "id": "unscripted"}},
            ]
        ]
    )
    sig = AbortSignal()
    whole = await drain(env.execute(tool_call("a", "{}", "whole"), signal=sig, approve=None))
    assert [i.payload.output for i in whole] == ["", "all of it", "", "all of it"]
    failed = await drain(env.execute(tool_call("a", "{}", "failed"), signal=sig, approve=None))
    assert [(i.payload.output, i.payload.stop_reason) for i in failed] == [
        ("", "completed"),
        ("[no output]", "completed"),
        ("", "failed"),
        ("[no output]", "failed"),
    ]
    for call_id in ("unscripted", "never-seen"):
        items = await drain(env.execute(tool_call("a", "{}", call_id), signal=sig, approve=None))
        assert items[-1].payload == ToolCallOutputPayload(
            role="user", output="[no output]", tool_call_id=call_id, stop_reason="completed"
        )
        assert_discipline(items)
    assert_discipline(whole)
    assert_discipline(failed)


@pytest.mark.anyio
async def test_r_script_8_delays_order_completions() -> None:
    """R-SCRIPT-8: delays let tests order tool completions: the call dispatched first but
    delayed completes after the call dispatched second."""
    env = ScriptedEnvironment(
        [
            [
                {"tool_call": {"name": "slow", "result": {"output": "slow", "delay_ms": 50}}},
                {"tool_call": {"name": "fast", "result": {"output": "fast"}}},
            ]
        ]
    )
    done: list[str] = []

    async def run(call_id: str) -> None:
        items = await drain(
            env.execute(tool_call("x", "{}", call_id), signal=AbortSignal(), approve=None)
        )
        done.append(items[-1].payload.output)

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(run, "call_1_1")
            await anyio.wait_all_tasks_blocked()  # the slow call is inside its delay
            tg.start_soon(run, "call_1_2")
    assert done == ["fast", "slow"]


@pytest.mark.anyio
async def test_r_tool_2_abort_during_delay_gives_the_interrupted_note_only() -> None:
    """R-SCRIPT-8 + R-TOOL-2/3/4: aborted during the delay → output is exactly the note, stop
    reason aborted; the note travels as a delta (R-STREAM-2)."""
    env = ScriptedEnvironment(
        [
            [
                {
                    "tool_call": {
                        "name": "t",
                        "result": {
                            "output": "never",
                            "delay_ms": 3_600_000,
                            "images": ["data:x;base64,AA=="],
                        },
                    }
                }
            ]
        ]
    )
    signal = AbortSignal()
    items: list[Any] = []

    async def consume() -> None:
        items.extend(
            await drain(env.execute(tool_call("t", "{}", "call_1_1"), signal=signal, approve=None))
        )

    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            tg.start_soon(consume)
            await anyio.wait_all_tasks_blocked()
            signal.abort()
    assert [(i.payload.output, i.payload.stop_reason) for i in items] == [
        ("", "completed"),
        (ABORT_NOTE, "completed"),
        ("", "aborted"),
        (ABORT_NOTE, "aborted"),
    ]
    assert items[-1].payload.images is None
    assert_discipline(items)


@pytest.mark.anyio
async def test_r_tool_2_abort_while_streaming_appends_note_on_its_own_line() -> None:
    """R-TOOL-2: content so far, then "\\n" and the note; stop_reason aborted; images not
    delivered."""
    env = ScriptedEnvironment(
        [
            [
                {
                    "tool_call": {
                        "name": "t",
                        "id": "c",
                        "result": {
                            "chunks": ["part one", " part two"],
                            "images": ["data:x;base64,AA=="],
                        },
                    }
                }
            ]
        ]
    )
    signal = AbortSignal()

    def on_item(item: Any) -> None:
        if item.payload.output == "part one":
            signal.abort()

    items = await drain(
        env.execute(tool_call("t", "{}", "c"), signal=signal, approve=None), on_item
    )
    assert items[-1].payload == ToolCallOutputPayload(
        role="user",
        output="part one\n[interrupted: tool aborted by user]",
        tool_call_id="c",
        stop_reason="aborted",
    )
    assert [i.payload.event_type for i in items[:-1]] == ["start", "delta", "delta", "stop"]
    assert items[2].payload.output == "\n" + ABORT_NOTE
    assert_discipline(items)


@pytest.mark.anyio
async def test_r_script_8_environment_serves_llm_emitted_calls() -> None:
    """R-SCRIPT-8: the calls the LLM streams are answered by the environment built on the same
    script (ids match, explicit and default)."""
    llm = ScriptedLLM(
        [
            [
                {"tool_call": {"name": "a", "result": {"output": "A"}}},
                {"tool_call": {"name": "b", "id": "own", "result": {"output": "B"}}},
            ]
        ]
    )
    env = ScriptedEnvironment.from_llm(llm)
    calls = call_of(await drain(llm.stream(request())))
    outputs = []
    for call in calls:
        items = await drain(env.execute(call, signal=AbortSignal(), approve=None))
        outputs.append((items[-1].payload.tool_call_id, items[-1].payload.output))
    assert outputs == [("call_1_1", "A"), ("own", "B")]


@pytest.mark.anyio
async def test_environment_rejects_a_non_tool_call() -> None:
    env = ScriptedEnvironment([])
    with pytest.raises(TypeError, match="tool_call"):
        await drain(env.execute(user_text("x"), signal=AbortSignal(), approve=None))


@pytest.mark.anyio
async def test_r_script_8_first_scripted_result_wins_for_a_repeated_id() -> None:
    """R-SCRIPT-8: results are indexed over all responses; when a script reuses an id (e.g. a
    retried response repeating its call), the first call that carries a result answers."""
    env = ScriptedEnvironment(
        [
            [{"tool_call": {"name": "t", "id": "dup"}}],
            [{"tool_call": {"name": "t", "id": "dup", "result": {"output": "first"}}}],
            [{"tool_call": {"name": "t", "id": "dup", "result": {"output": "second"}}}],
        ]
    )
    items = await drain(
        env.execute(tool_call("t", "{}", "dup"), signal=AbortSignal(), approve=None)
    )
    assert items[-1].payload.output == "first"


@pytest.mark.anyio
async def test_reused_default_ids_get_a_suffix_r_run_20() -> None:
    """R-RUN-20: an id already in the history becomes ``<id>#<n>``; the environment still
    serves the scripted result for it."""
    from engine import AbortSignal, LLMRequest
    from engine.llm import ScriptedEnvironment, ScriptedLLM
    from eventstore import builders as bb

    script = {
        "responses": [
            [{"tool_call": {"name": "t", "arguments": {}, "result": {"output": "served"}}}]
        ],
        "tools": [{"name": "t", "description": "d"}],
    }
    llm = ScriptedLLM(script)
    history = [bb.tool_call("t", "{}", "call_1_1"), bb.tool_call("t", "{}", "call_1_1#2")]
    request = LLMRequest(
        system_prompt="",
        tools=[],
        messages=history,
        new_messages=0,
        thinking_level=None,
        signal=AbortSignal(),
    )
    items = [m async for m in llm.stream(request)]
    calls = [
        m for m in items if isinstance(m, OmniMessage) and isinstance(m.payload, ToolCallPayload)
    ]
    assert [c.payload.tool_call_id for c in calls] == ["call_1_1#3"]  # type: ignore[union-attr]
    env = ScriptedEnvironment.from_llm(llm)
    out = [m async for m in env.execute(calls[0], signal=AbortSignal(), approve=None)]
    assert out[-1].payload.output == "served"  # type: ignore[union-attr]


def test_used_ids_scan_only_the_new_tail() -> None:
    """The id registry reads each history message once per context (per-request cost must not
    grow with the history: bench_engine's per-turn ratio)."""
    from engine.llm._scripted import _UsedIds
    from eventstore import builders as bb

    class Once:
        """A stand-in message whose payload may be read only once."""

        def __init__(self, msg: OmniMessage) -> None:
            self._msg = msg
            self.reads = 0

        @property
        def payload(self) -> object:
            self.reads += 1
            return self._msg.payload

    history = [Once(bb.tool_call("t", "{}", f"c{i}")) for i in range(50)]
    used = _UsedIds()
    assert len(used.of(history)) == 50  # type: ignore[arg-type]
    assert "c51" in used.of([*history, Once(bb.tool_call("t", "{}", "c51"))])  # type: ignore[list-item]
    assert all(m.reads <= 2 for m in history)  # isinstance + attribute, once
