"""Property tests of the codec: SPEC §2 (R-MSG-1..23), R-MSG-7 (nothing lost), R-READ-3/4."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import (
    AbortPayload,
    ApprovalDecisionPayload,
    CompactionBeginPayload,
    CompactionEndPayload,
    GoalFinishedPayload,
    ImageUrlPayload,
    InlineDataPayload,
    InlineThinkingPayload,
    McpConnectBeginPayload,
    McpConnectEndPayload,
    OmniMessage,
    PartialTextPayload,
    PartialThinkingPayload,
    PartialToolCallOutputPayload,
    PartialToolCallPayload,
    RequestBeginPayload,
    RequestEndPayload,
    SessionMetaPayload,
    SubagentPayload,
    TextPayload,
    ThinkingPayload,
    TokenCounts,
    TokenUsagePayload,
    ToolCallOutputPayload,
    ToolCallPayload,
    ToolDefinition,
    ToolListReadyPayload,
    TraceDecodeError,
    UnknownPayload,
    decode,
    encode,
    encode_line,
    read_trace,
)
from eventstore._reader import scan_trace

SETTINGS = settings(
    max_examples=120,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

REFERENCE_TRACES = Path(__file__).parents[2].parent / "shared" / "reference-traces"

# SPEC §2.2-2.5: payload keys in wire order, per payload class.
KEY_ORDER: dict[type[Any], tuple[str, ...]] = {
    SessionMetaPayload: (
        "session_id",
        "provider",
        "model_id",
        "model_context_window",
        "system_prompt",
        "agent_state",
        "workspace",
        "source",
    ),
    TextPayload: ("type", "role", "text", "stop_reason", "fidelity", "sender"),
    ImageUrlPayload: ("type", "role", "image_url", "stop_reason"),
    InlineDataPayload: ("type", "role", "data", "mime_type", "stop_reason", "fidelity"),
    ThinkingPayload: ("type", "role", "thinking", "stop_reason", "fidelity"),
    InlineThinkingPayload: ("type", "role", "data", "mime_type", "stop_reason", "fidelity"),
    ToolCallPayload: (
        "type",
        "role",
        "name",
        "arguments",
        "tool_call_id",
        "stop_reason",
        "fidelity",
    ),
    ToolCallOutputPayload: ("type", "role", "output", "images", "tool_call_id", "stop_reason"),
    PartialTextPayload: ("type", "role", "event_type", "text", "stop_reason"),
    PartialThinkingPayload: ("type", "role", "event_type", "thinking", "stop_reason"),
    PartialToolCallPayload: (
        "type",
        "role",
        "event_type",
        "name",
        "arguments",
        "tool_call_id",
        "stop_reason",
    ),
    PartialToolCallOutputPayload: (
        "type",
        "role",
        "event_type",
        "output",
        "images",
        "tool_call_id",
        "stop_reason",
    ),
    RequestBeginPayload: ("type",),
    RequestEndPayload: ("type", "status", "error_message", "attempt", "retry_in_ms"),
    TokenUsagePayload: ("type", "session", "request"),
    ApprovalDecisionPayload: ("type", "decision", "tool_call_id"),
    AbortPayload: ("type", "reason"),
    CompactionBeginPayload: ("type", "reason", "mode", "context", "turns"),
    CompactionEndPayload: ("type", "reason", "mode", "status", "attempt", "error_message"),
    ToolListReadyPayload: ("type", "tools"),
    SubagentPayload: ("type", "session_id"),
    McpConnectBeginPayload: ("type", "servers"),
    McpConnectEndPayload: ("type", "status", "results"),
    GoalFinishedPayload: ("type", "outcome", "rounds", "tokens_used"),
}
KNOWN_TAGS = {"text", "image_url", "inline_data", "thinking", "inline_thinking", "tool_call"}
KNOWN_TAGS |= {"tool_call_output", "request_begin", "request_end", "token_usage", "abort"}
KNOWN_TAGS |= {"approval_decision", "compaction_begin", "compaction_end", "tool_list_ready"}
KNOWN_TAGS |= {"subagent", "mcp_connect_begin", "mcp_connect_end", "goal_finished"}
KNOWN_TAGS |= {"partial_text", "partial_thinking", "partial_tool_call"}
KNOWN_TAGS |= {"partial_tool_call_output"}


# --------------------------------------------------------------------------- strategies

# Text includes non-ASCII, control characters and quotes; never lone surrogates (not UTF-8).
texts = st.text(max_size=40)
ints = st.integers(min_value=-(2**70), max_value=2**70)
nonneg = st.integers(min_value=0, max_value=2**40)
json_scalars: st.SearchStrategy[Any] = st.one_of(
    st.none(), st.booleans(), ints, st.floats(allow_nan=False, allow_infinity=False), texts
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=12,
)
json_objects = st.dictionaries(texts, json_values, max_size=5)
fidelity = st.none() | st.dictionaries(texts, json_values, min_size=1, max_size=4)
stop = st.none() | st.sampled_from(
    ["completed", "failed", "aborted", "timeout", "malformed", "auth"]
)
status = st.sampled_from(["completed", "failed", "aborted", "timeout", "malformed", "auth"])
role = st.sampled_from(["user", "assistant"])
event_type = st.sampled_from(["start", "delta", "stop"])
images = st.none() | st.lists(texts, min_size=1, max_size=3)
opt_text = st.none() | texts
opt_int = st.none() | nonneg
counts = st.builds(TokenCounts, nonneg, nonneg, nonneg, nonneg)
tool_defs = st.builds(
    ToolDefinition, name=texts, description=texts, parameters=st.none() | json_objects
)
mcp_results = st.lists(json_objects, max_size=3)


def extras_for(cls: type[Any]) -> st.SearchStrategy[dict[str, Any] | None]:
    """Unknown keys a newer writer may have added (R-MSG-7): never a known key or ``$extra``."""
    taken = set(KEY_ORDER[cls]) | {"type", "$extra"}
    keys = texts.filter(lambda k: k not in taken)
    return st.none() | st.dictionaries(keys, json_values, min_size=1, max_size=3)


def payload(cls: type[Any], **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.builds(cls, **fields, extra=extras_for(cls))


MODEL_PAYLOADS = [
    payload(TextPayload, role=role, text=texts, stop_reason=stop, fidelity=fidelity, sender=st.none() | st.sampled_from(["parent_agent", "harness", "server", "user"])),
    payload(ImageUrlPayload, role=role, image_url=texts, stop_reason=stop),
    payload(InlineDataPayload, role=role, data=texts, mime_type=texts, stop_reason=stop, fidelity=fidelity),
    payload(ThinkingPayload, role=role, thinking=texts, stop_reason=stop, fidelity=fidelity),
    payload(InlineThinkingPayload, role=role, data=texts, mime_type=texts, stop_reason=stop, fidelity=fidelity),
    payload(ToolCallPayload, role=role, name=texts, arguments=texts, tool_call_id=texts, stop_reason=stop, fidelity=fidelity),
    payload(ToolCallOutputPayload, role=role, output=texts, images=images, tool_call_id=texts, stop_reason=stop),
    payload(PartialTextPayload, role=role, event_type=event_type, text=texts, stop_reason=stop),
    payload(PartialThinkingPayload, role=role, event_type=event_type, thinking=texts, stop_reason=stop),
    payload(PartialToolCallPayload, role=role, event_type=event_type, name=texts, arguments=texts, tool_call_id=texts, stop_reason=stop),
    payload(PartialToolCallOutputPayload, role=role, event_type=event_type, output=texts, images=images, tool_call_id=texts, stop_reason=stop),
]  # fmt: skip
EVENT_PAYLOADS = [
    payload(RequestBeginPayload),
    payload(RequestEndPayload, status=status, error_message=opt_text, attempt=opt_int, retry_in_ms=opt_int),
    payload(TokenUsagePayload, session=counts, request=counts),
    payload(ApprovalDecisionPayload, decision=st.sampled_from(["allow", "deny", "forbidden"]), tool_call_id=texts),
    payload(AbortPayload, reason=opt_text),
    payload(CompactionBeginPayload, reason=st.sampled_from(["context", "turns", "manual"]), mode=st.sampled_from(["summarize", "discard"]), context=nonneg, turns=nonneg),
    payload(CompactionEndPayload, reason=st.sampled_from(["context", "turns", "manual"]), mode=st.sampled_from(["summarize", "discard"]), status=status, attempt=opt_int, error_message=opt_text),
    payload(ToolListReadyPayload, tools=st.lists(tool_defs, max_size=3)),
    payload(SubagentPayload, session_id=texts),
    payload(McpConnectBeginPayload, servers=st.lists(texts, max_size=3)),
    payload(McpConnectEndPayload, status=st.sampled_from(["completed", "failed", "aborted"]), results=mcp_results),
    payload(GoalFinishedPayload, outcome=st.sampled_from(["complete", "blocked", "budget_limited", "aborted"]), rounds=ints, tokens_used=ints),
]  # fmt: skip
META_PAYLOAD = payload(
    SessionMetaPayload,
    session_id=texts,
    provider=texts,
    model_id=texts,
    model_context_window=nonneg | texts,
    system_prompt=texts,
    agent_state=texts,
    workspace=texts,
    source=st.none() | st.sampled_from(["subagent", "schedule"]),
)
unknown_tag = texts.filter(lambda t: t not in KNOWN_TAGS)
UNKNOWN_PAYLOADS = st.builds(
    lambda tag, rest: UnknownPayload(
        {"type": tag, **{k: v for k, v in rest.items() if k != "type"}}
    ),
    unknown_tag,
    json_objects,
)
origins = st.none() | st.lists(texts, min_size=1, max_size=3)
envelope_extra = st.none() | st.dictionaries(
    texts.filter(lambda k: k not in {"timestamp", "type", "payload", "origin", "$extra"}),
    json_values,
    min_size=1,
    max_size=2,
)


def envelopes(kind: str, payloads: st.SearchStrategy[Any]) -> st.SearchStrategy[OmniMessage]:
    return st.builds(
        OmniMessage,
        timestamp=texts,
        type=st.just(kind),
        payload=payloads,
        origin=origins,
        extra=envelope_extra,
    )


messages = st.one_of(
    envelopes("model_msg", st.one_of(*MODEL_PAYLOADS)),
    envelopes("event_msg", st.one_of(*EVENT_PAYLOADS)),
    envelopes("session_meta", META_PAYLOAD),
    envelopes("model_msg", UNKNOWN_PAYLOADS),
    envelopes("event_msg", UNKNOWN_PAYLOADS),
    # An envelope type this version does not know keeps an arbitrary object (R-READ-4).
    envelopes("future_msg", st.builds(UnknownPayload, json_objects)),
)


# --------------------------------------------------------------------------- round trip


@pytest.mark.parametrize(
    "strategy",
    [
        *(envelopes("model_msg", s) for s in MODEL_PAYLOADS),
        *(envelopes("event_msg", s) for s in EVENT_PAYLOADS),
        envelopes("session_meta", META_PAYLOAD),
    ],
    ids=[c.__name__ for c in KEY_ORDER if c is not SessionMetaPayload] + ["SessionMetaPayload"],
)
def test_r_msg_7_round_trip_and_r_msg_6_key_order_for_every_payload_type(
    strategy: st.SearchStrategy[OmniMessage],
) -> None:
    @settings(SETTINGS, max_examples=50)
    @given(strategy)
    def check(msg: OmniMessage) -> None:
        line = encode(msg)
        assert decode(line) == msg
        assert decode(line.decode()) == msg  # str input too
        assert b"\n" not in line  # one line (R-MSG-6)
        obj = json.loads(line)
        assert _compact(line)
        assert list(obj)[:3] == ["timestamp", "type", "payload"]  # R-MSG-1
        known = KEY_ORDER[type(msg.payload)]
        keys = list(obj["payload"])
        extra = list(msg.payload.extra or {})
        assert keys == [k for k in known if k in keys] + extra
        assert bytes(encode_line(msg)) == line + b"\n"

    check()


def _compact(line: bytes) -> bool:
    """No whitespace outside string literals and no \\u escape of a printable non-ASCII
    character (R-MSG-6: compact, UTF-8, non-ASCII not escaped)."""
    in_string = escaped = False
    for i, c in enumerate(line):
        if in_string:
            if escaped:
                if c == ord("u") and int(line[i + 1 : i + 5], 16) >= 0x80:
                    return False
                escaped = False
            elif c == ord("\\"):
                escaped = True
            elif c == ord('"'):
                in_string = False
        elif c == ord('"'):
            in_string = True
        elif c in b" \t\r\n":
            return False
    return True


def test_compact_check_sees_spaces_and_escapes() -> None:
    assert _compact(b'{"a b":"c\\u0001"}')
    assert not _compact(b'{"a": 1}')
    assert not _compact(b'{"a":"\\u00e9"}')


@SETTINGS
@given(messages)
def test_r_msg_7_any_message_round_trips(msg: OmniMessage) -> None:
    line = encode(msg)
    back = decode(line)
    assert back == msg
    assert encode(back) == line
    if isinstance(msg.payload, UnknownPayload):
        # The raw object is written back unchanged, key order included.
        assert list(json.loads(line)["payload"]) == list(msg.payload.raw)


def test_r_msg_4_empty_origin_reads_as_absent() -> None:
    line = b'{"timestamp":"t","type":"event_msg","payload":{"type":"request_begin"},"origin":[]}'
    msg = decode(line)
    assert msg.origin is None
    assert encode(msg) == line.replace(b',"origin":[]', b"")


def test_r_msg_13_empty_fidelity_is_not_written() -> None:
    msg = OmniMessage(
        "t", "model_msg", ThinkingPayload(role="assistant", thinking="x", fidelity={})
    )
    assert b"fidelity" not in encode(msg)


def test_r_msg_5_abort_reason_null_is_written() -> None:
    msg = OmniMessage("t", "event_msg", AbortPayload(reason=None))
    assert (
        encode(msg)
        == b'{"timestamp":"t","type":"event_msg","payload":{"type":"abort","reason":null}}'
    )
    assert decode(encode(msg)) == msg


def test_non_ascii_is_not_escaped() -> None:
    msg = OmniMessage("t", "model_msg", TextPayload(role="user", text="héllo ☃ 𝄞"))
    assert "héllo ☃ 𝄞".encode() in encode(msg)


# --------------------------------------------------------------------------- reference traces


def _reference_files() -> list[Path]:
    return sorted(REFERENCE_TRACES.glob("*/*/*.jsonl"))


@pytest.mark.needs_shared(REFERENCE_TRACES)
def test_reference_traces_decode_fully_and_reencode_byte_identical() -> None:
    files = _reference_files()
    assert len({f.parent.parent for f in files}) >= 4
    seen: set[type[Any]] = set()
    for path in files:
        lines = path.read_bytes().split(b"\n")
        assert lines.pop() == b"", path  # every record ends with "\n"
        for n, line in enumerate(lines, start=1):
            msg = decode(line)
            assert not isinstance(msg.payload, UnknownPayload), (path, n)
            assert msg.payload.extra is None and msg.extra is None, (path, n)
            assert encode(msg) == line, (path, n)
            seen.add(type(msg.payload))
        tr = read_trace(path, report=False)
        assert tr.diagnostics == []
        assert len(tr.records) == len(lines)
    assert {SessionMetaPayload, TextPayload, ToolCallPayload, RequestEndPayload} <= seen


# --------------------------------------------------------------------------- hostile input


def _real_lines() -> list[bytes]:
    lines = [line for f in _reference_files() for line in f.read_bytes().splitlines()]
    if not lines:  # CI without ../shared: a few lines of our own
        sample = [
            OmniMessage("t", "model_msg", TextPayload(role="user", text="hi ☃")),
            OmniMessage("t", "event_msg", TokenUsagePayload(session=TokenCounts(1, 2, 3, 6), request=TokenCounts(1, 2, 3, 6))),
        ]  # fmt: skip
        lines = [encode(m) for m in sample]
    return lines


REAL_LINES = _real_lines()


def _decode_or_reject(data: bytes) -> None:
    try:
        decode(data)
    except TraceDecodeError:
        pass


@SETTINGS
@given(st.binary(max_size=300))
def test_random_bytes_only_ever_raise_trace_decode_error(data: bytes) -> None:
    _decode_or_reject(data)


@SETTINGS
@given(
    st.sampled_from(REAL_LINES),
    st.integers(min_value=0),
    st.integers(min_value=0, max_value=255),
    st.booleans(),
)
def test_truncated_or_damaged_real_lines_only_ever_raise_trace_decode_error(
    line: bytes, cut: int, byte: int, flip: bool
) -> None:
    cut %= len(line) + 1
    _decode_or_reject(line[:cut])
    if flip and cut < len(line):
        _decode_or_reject(line[:cut] + bytes([byte]) + line[cut + 1 :])


@settings(SETTINGS, max_examples=60)
@given(
    st.lists(
        st.one_of(
            st.binary(max_size=60),
            st.sampled_from(REAL_LINES).map(lambda b: b + b"\n"),
            st.tuples(st.sampled_from(REAL_LINES), st.integers(min_value=0)).map(
                lambda t: t[0][: t[1] % (len(t[0]) + 1)]
            ),
        ),
        max_size=12,
    )
)
def test_scan_and_read_never_raise_on_garbage_files(chunks: list[bytes]) -> None:
    data = b"".join(chunks)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "s_001.jsonl"
        p.write_bytes(data)
        items = list(scan_trace(p))
        tr = read_trace(p, report=False)
        assert [i[1] for i in items if isinstance(i, tuple)] == tr.records
        assert len(items) == len(tr.records) + len(tr.diagnostics)
        read_trace([p], report=False)  # the session path (R-ROOT-10) as well


def test_known_payload_with_wrong_shape_is_kept_whole() -> None:
    """R-MSG-7: a known type whose fields do not fit stays an UnknownPayload, byte for byte."""
    line = b'{"timestamp":"t","type":"model_msg","payload":{"type":"text","role":"robot","text":5}}'
    msg = decode(line)
    assert isinstance(msg.payload, UnknownPayload)
    assert encode(msg) == line


def test_msgspec_structs_are_frozen() -> None:
    msg = decode(REAL_LINES[0])
    with pytest.raises((AttributeError, TypeError)):
        msg.timestamp = "x"  # type: ignore[misc]
    assert msgspec.structs.replace(msg, timestamp="x").timestamp == "x"
