"""The partial aggregator: SPEC §3, R-AGG-1..6 (and R-STREAM-2/3 for what it rebuilds)."""

from __future__ import annotations

import random
from typing import Any

import msgspec
import pytest

from eventstore import (
    OmniMessage,
    PartialTextPayload,
    PartialThinkingPayload,
    PartialToolCallOutputPayload,
    PartialToolCallPayload,
    TextPayload,
    ThinkingPayload,
    ToolCallOutputPayload,
    ToolCallPayload,
    encode,
)
from eventstore import builders as b
from eventstore._schema import EventType
from eventstore.partials import OpenSegments, PartialAggregator


def ts(n: int) -> str:
    return f"2026-07-18T03:10:{n:02d}.000Z"


def feed_all(agg: PartialAggregator, msgs: list[OmniMessage]) -> list[OmniMessage]:
    out: list[OmniMessage] = []
    for m in msgs:
        out += agg.feed(m)
    return out


def test_r_agg_1_non_partials_pass_through_unchanged_in_order() -> None:
    agg = PartialAggregator()
    msgs = [
        b.request_begin(timestamp=ts(1)),
        b.assistant_text("hi", timestamp=ts(2)),
        b.tool_call_output("c1", "out", timestamp=ts(3), origin=["child"]),
        b.request_end("completed", timestamp=ts(4)),
    ]
    for m in msgs:
        (got,) = agg.feed(m)
        assert got is m
    assert agg.flush() == []


def test_r_agg_5_text_segment_becomes_assistant_text() -> None:
    agg = PartialAggregator()
    assert agg.feed(b.partial_text("start", "", timestamp=ts(1))) == []
    assert agg.feed(b.partial_text("delta", "Hel", timestamp=ts(2))) == []
    assert agg.feed(b.partial_text("delta", "lo", timestamp=ts(3))) == []
    assert agg.open_count == 1
    (done,) = agg.feed(b.partial_text("stop", "!", timestamp=ts(4)))
    assert done == b.assistant_text("Hello!", timestamp=ts(4))
    assert agg.open_count == 0


def test_r_agg_5_thinking_segment() -> None:
    agg = PartialAggregator()
    out = feed_all(
        agg,
        [
            b.partial_thinking("start", "a", timestamp=ts(1)),
            b.partial_thinking("delta", "b", timestamp=ts(2)),
            b.partial_thinking("stop", "", timestamp=ts(3)),
        ],
    )
    assert out == [b.thinking("ab", timestamp=ts(3))]


def test_r_agg_5_tool_call_takes_the_last_non_empty_name() -> None:
    """R-STREAM-3: start carries the name, later fragments may carry ``""``."""
    agg = PartialAggregator()
    out = feed_all(
        agg,
        [
            b.partial_tool_call("start", "c1", name="read_file", timestamp=ts(1)),
            b.partial_tool_call("delta", "c1", arguments='{"pa', timestamp=ts(2)),
            b.partial_tool_call("delta", "c1", name="", arguments='th":1}', timestamp=ts(3)),
            b.partial_tool_call("stop", "c1", timestamp=ts(4)),
        ],
    )
    assert out == [b.tool_call("read_file", '{"path":1}', "c1", timestamp=ts(4))]
    out = feed_all(
        PartialAggregator(),
        [
            b.partial_tool_call("start", "c2", name="old", timestamp=ts(1)),
            b.partial_tool_call("stop", "c2", name="new", timestamp=ts(2)),
        ],
    )
    assert out[0].payload.name == "new"  # type: ignore[union-attr]


def test_r_agg_5_tool_output_images_last_non_empty_list_wins() -> None:
    agg = PartialAggregator()
    out = feed_all(
        agg,
        [
            b.partial_tool_call_output("start", "c1", "", timestamp=ts(1)),
            b.partial_tool_call_output("delta", "c1", "ab", images=["data:a"], timestamp=ts(2)),
            b.partial_tool_call_output("delta", "c1", "cd", images=["data:b", "data:c"]),
            b.partial_tool_call_output("delta", "c1", "", images=[], timestamp=ts(3)),
            b.partial_tool_call_output("stop", "c1", "", timestamp=ts(4)),
        ],
    )
    assert out == [b.tool_call_output("c1", "abcd", images=["data:b", "data:c"], timestamp=ts(4))]


def test_r_agg_5_tool_output_without_images_omits_the_key() -> None:
    out = feed_all(
        PartialAggregator(),
        [
            b.partial_tool_call_output("start", "c1", "x", timestamp=ts(1)),
            b.partial_tool_call_output("stop", "c1", "y", timestamp=ts(2)),
        ],
    )
    assert b'"images"' not in encode(out[0])
    assert out == [b.tool_call_output("c1", "xy", timestamp=ts(2))]


def test_r_agg_4_stop_reason_is_the_last_seen() -> None:
    out = feed_all(
        PartialAggregator(),
        [
            b.partial_text("start", "a", timestamp=ts(1)),
            b.partial_text("delta", "b", stop_reason="failed", timestamp=ts(2)),
            b.partial_text("stop", "", stop_reason="aborted", timestamp=ts(3)),
        ],
    )
    assert out == [b.assistant_text("ab", stop_reason="aborted", timestamp=ts(3))]


def test_r_agg_4_missing_stop_reason_reads_as_completed() -> None:
    raw = b.partial_text("stop", "x", stop_reason="failed", timestamp=ts(1))
    bare = msgspec.structs.replace(
        raw, payload=msgspec.structs.replace(raw.payload, stop_reason=None)
    )
    out = feed_all(PartialAggregator(), [b.partial_text("start", "", stop_reason="failed"), bare])
    assert out[0].payload.stop_reason == "completed"  # type: ignore[union-attr]


def test_r_agg_4_delta_or_stop_without_start_opens_leniently() -> None:
    agg = PartialAggregator()
    assert agg.feed(b.partial_text("delta", "a", timestamp=ts(1))) == []
    assert agg.open_count == 1
    assert agg.feed(b.partial_text("stop", "b", timestamp=ts(2))) == [
        b.assistant_text("ab", timestamp=ts(2))
    ]
    assert agg.feed(
        b.partial_tool_call("stop", "c9", name="n", arguments="{}", timestamp=ts(3))
    ) == [b.tool_call("n", "{}", "c9", timestamp=ts(3))]


def test_r_agg_3_start_while_open_finalizes_the_open_segment_first() -> None:
    agg = PartialAggregator()
    agg.feed(b.partial_text("start", "one", timestamp=ts(1)))
    agg.feed(b.partial_text("delta", "!", timestamp=ts(2)))
    out = agg.feed(b.partial_text("start", "two", timestamp=ts(3)))
    assert out == [b.assistant_text("one!", timestamp=ts(2))]
    assert agg.feed(b.partial_text("stop", "", timestamp=ts(4))) == [
        b.assistant_text("two", timestamp=ts(4))
    ]


def test_r_agg_2_fragments_are_keyed_by_type_and_tool_call_id() -> None:
    agg = PartialAggregator()
    out = feed_all(
        agg,
        [
            b.partial_tool_call_output("start", "c1", "1", timestamp=ts(1)),
            b.partial_tool_call_output("start", "c2", "A", timestamp=ts(2)),
            b.partial_text("start", "t", timestamp=ts(3)),
            b.partial_tool_call_output("delta", "c2", "B", timestamp=ts(4)),
            b.partial_tool_call_output("delta", "c1", "2", timestamp=ts(5)),
            b.partial_thinking("start", "th", timestamp=ts(6)),
            b.partial_tool_call_output("stop", "c1", "3", timestamp=ts(7)),
            b.partial_text("stop", "x", timestamp=ts(8)),
            b.partial_tool_call_output("stop", "c2", "C", timestamp=ts(9)),
        ],
    )
    assert out == [
        b.tool_call_output("c1", "123", timestamp=ts(7)),
        b.assistant_text("tx", timestamp=ts(8)),
        b.tool_call_output("c2", "ABC", timestamp=ts(9)),
    ]
    assert agg.open_count == 1  # the thinking segment


def test_r_agg_6_flush_emits_open_segments_in_opening_order() -> None:
    agg = PartialAggregator()
    feed_all(
        agg,
        [
            b.partial_tool_call("start", "c2", name="b", timestamp=ts(1)),
            b.partial_text("start", "hello", timestamp=ts(2)),
            b.partial_tool_call("start", "c1", name="a", timestamp=ts(3)),
            b.partial_tool_call("delta", "c2", arguments="{}", timestamp=ts(4)),
        ],
    )
    assert agg.flush() == [
        b.tool_call("b", "{}", "c2", timestamp=ts(4)),
        b.assistant_text("hello", timestamp=ts(2)),
        b.tool_call("a", "", "c1", timestamp=ts(3)),
    ]
    assert agg.flush() == []
    assert agg.open_count == 0


def test_r_agg_6_a_reopened_key_flushes_in_its_new_place() -> None:
    agg = PartialAggregator()
    agg.feed(b.partial_text("start", "a", timestamp=ts(1)))
    agg.feed(b.partial_thinking("start", "b", timestamp=ts(2)))
    agg.feed(b.partial_text("start", "c", timestamp=ts(3)))  # emits "a", re-opens text
    assert [type(m.payload) for m in agg.flush()] == [ThinkingPayload, TextPayload]


def test_forwarded_fragments_keep_their_origin() -> None:
    start = msgspec.structs.replace(b.partial_text("start", "a", timestamp=ts(1)), origin=["kid"])
    stop = msgspec.structs.replace(b.partial_text("stop", "b", timestamp=ts(2)), origin=["kid"])
    (done,) = feed_all(PartialAggregator(), [start, stop])
    assert done.origin == ["kid"]
    assert done.payload == b.assistant_text("ab").payload


def _segment(complete: OmniMessage, rng: random.Random) -> list[OmniMessage]:
    """Split a complete message into start, two deltas and stop (R-STREAM-2)."""
    p = complete.payload
    t = complete.timestamp

    def pieces(s: str) -> list[str]:
        cuts = sorted(rng.choices(range(len(s) + 1), k=3))
        return [s[: cuts[0]], s[cuts[0] : cuts[1]], s[cuts[1] : cuts[2]], s[cuts[2] :]]

    events: tuple[EventType, ...] = ("start", "delta", "delta", "stop")
    if isinstance(p, TextPayload):
        return [
            b.partial_text(e, s, timestamp=t) for e, s in zip(events, pieces(p.text), strict=True)
        ]
    if isinstance(p, ThinkingPayload):
        return [
            b.partial_thinking(e, s, timestamp=t)
            for e, s in zip(events, pieces(p.thinking), strict=True)
        ]
    if isinstance(p, ToolCallPayload):
        return [
            b.partial_tool_call(
                e, p.tool_call_id, name=p.name if e == "start" else "", arguments=s, timestamp=t
            )
            for e, s in zip(events, pieces(p.arguments), strict=True)
        ]
    assert isinstance(p, ToolCallOutputPayload)
    return [
        b.partial_tool_call_output(e, p.tool_call_id, s, timestamp=t)
        for e, s in zip(events, pieces(p.output), strict=True)
    ]


@pytest.mark.parametrize("seed", range(8))
def test_r_stream_2_aggregating_interleaved_segments_rebuilds_the_complete_messages(
    seed: int,
) -> None:
    """Complete messages split into fragments, the segments of different keys interleaved at
    random: the aggregator gives back exactly the complete messages, in the order of their
    stops (R-AGG-2, R-AGG-5, R-STREAM-2)."""
    rng = random.Random(seed)
    completes = [
        b.assistant_text("".join(rng.choice("abc é") for _ in range(40)), timestamp=ts(1)),
        b.thinking("ponder " * 5, timestamp=ts(2)),
        b.tool_call("exec", '{"cmd":"ls -la"}', "c1", timestamp=ts(3)),
        b.tool_call("read", '{"path":"x"}', "c2", timestamp=ts(4)),
        b.tool_call_output("c1", "file\n" * 7, timestamp=ts(5)),
        b.tool_call_output("c2", "", timestamp=ts(6)),
    ]
    segments = [_segment(c, rng) for c in completes]
    stream: list[OmniMessage] = []
    while any(segments):
        seg = rng.choice([s for s in segments if s])
        stream.append(seg.pop(0))
    by_stop: dict[tuple[str, type[Any]], OmniMessage] = {
        (m.timestamp, type(m.payload)): m for m in completes
    }
    partial_to_complete = {
        PartialTextPayload: TextPayload,
        PartialThinkingPayload: ThinkingPayload,
        PartialToolCallPayload: ToolCallPayload,
        PartialToolCallOutputPayload: ToolCallOutputPayload,
    }
    want = [
        by_stop[(m.timestamp, partial_to_complete[type(m.payload)])]
        for m in stream
        if m.payload.event_type == "stop"  # type: ignore[union-attr]
    ]
    agg = PartialAggregator()
    assert feed_all(agg, stream) == want
    assert agg.flush() == []


# --------------------------------------------------------------------------- the writer


@pytest.mark.parametrize("kind", ["text", "thinking", "tool_call", "tool_call_output"])
def test_r_stream_2_a_writers_fragments_aggregate_to_its_complete_message(kind: Any) -> None:
    from eventstore.partials import SegmentWriter

    seg = SegmentWriter(kind, tool_call_id="c1" if "tool" in kind else "", name="ls")
    msgs = [seg.start(), seg.delta("ab"), seg.delta("cd"), *seg.stop("failed")]
    complete = msgs[-1]
    assert msgs[-2].payload.event_type == "stop"  # type: ignore[union-attr]
    assert getattr(complete.payload, "stop_reason", None) == "failed"
    agg = PartialAggregator()
    rebuilt = feed_all(agg, msgs[:-1])
    assert [encode(m) for m in rebuilt] == [encode(complete)]
    assert seg.body == "abcd"


def test_writer_images_ride_on_a_delta_and_reach_the_complete_output() -> None:
    from eventstore.partials import SegmentWriter

    seg = SegmentWriter("tool_call_output", tool_call_id="c1")
    seg.start()
    seg.delta("x", images=["data:a"])
    _, complete = seg.stop("completed")
    assert isinstance(complete.payload, ToolCallOutputPayload)
    assert complete.payload.images == ["data:a"]


def test_r_stream_4_close_open_ends_every_open_segment_with_the_reason() -> None:
    agg = PartialAggregator()
    feed_all(
        agg,
        [
            b.partial_text("start"),
            b.partial_text("delta", "half"),
            b.partial_tool_call("start", "c1", name="ls"),
            b.partial_tool_call("delta", "c1", arguments="{"),
            b.partial_thinking("start"),
        ],
    )
    agg.settle(b.thinking(""))  # a complete message closes its own kind's segment
    out = agg.close_open("aborted")
    kinds = [type(m.payload) for m in out]
    assert kinds == [PartialTextPayload, TextPayload, PartialToolCallPayload, ToolCallPayload]
    assert all(getattr(m.payload, "stop_reason", None) == "aborted" for m in out)
    assert out[1].payload.text == "half"  # type: ignore[union-attr]
    assert out[3].payload.arguments == "{"  # type: ignore[union-attr]
    assert agg.open_count == 0


def test_fragment_gives_one_view_of_every_partial_and_none_otherwise() -> None:
    from eventstore.partials import fragment, segment_kind

    f = fragment(b.partial_tool_call_output("delta", "c9", "out", images=["i"]))
    assert f is not None
    assert (f.kind, f.event, f.tool_call_id, f.content, f.images) == (
        "tool_call_output",
        "delta",
        "c9",
        "out",
        ["i"],
    )
    assert fragment(b.user_text("hi")) is None
    assert segment_kind(b.tool_call("ls", "{}", "c1")) == "tool_call"
    assert segment_kind(b.abort()) is None


def test_the_old_module_name_still_imports_with_a_deprecation_warning() -> None:
    import importlib
    import sys

    sys.modules.pop("eventstore.aggregate", None)
    with pytest.warns(DeprecationWarning, match="eventstore.partials"):
        module = importlib.import_module("eventstore.aggregate")
    assert module.PartialAggregator is PartialAggregator


# ---------------------------------------------------------------------------- open segments (R-SRV-6)


def _kid(msg: OmniMessage) -> OmniMessage:
    return msgspec.structs.replace(msg, origin=["kid"])


def test_r_srv_6_open_segments_snapshot_the_content_so_far_as_start_fragments() -> None:
    live = OpenSegments()
    for m in [
        b.partial_text("start", "He", timestamp=ts(1)),
        b.assistant_text("not a fragment"),  # ignored: only a record settles (see below)
        b.partial_text("delta", "llo", timestamp=ts(2)),
        _kid(b.partial_text("start", timestamp=ts(3))),
        _kid(b.partial_text("delta", "child", timestamp=ts(4))),
        b.partial_tool_call("start", "c1", name="ls", timestamp=ts(5)),
        b.partial_tool_call("delta", "c1", arguments='{"p":', timestamp=ts(6)),
        b.partial_thinking("start", "gone", timestamp=ts(7)),
        b.partial_thinking("stop", timestamp=ts(8)),
    ]:
        live.feed(m)
    # Keyed per origin: the child's text segment is not the parent's (R-AGG-2 per origin).
    assert live.snapshots() == [
        b.partial_text("start", "Hello", timestamp=ts(1)),
        _kid(b.partial_text("start", "child", timestamp=ts(3))),
        b.partial_tool_call("start", "c1", name="ls", arguments='{"p":', timestamp=ts(5)),
    ]
    live.settle(b.tool_call("ls", '{"p":1}', "c1"))
    live.settle(b.assistant_text("Hello"))  # the parent's complete text: the child's stays
    assert [m.origin for m in live.snapshots()] == [["kid"]]
    live.feed(_kid(b.partial_text("start", "again", timestamp=ts(9))))  # R-AGG-3: re-opens
    assert live.snapshots() == [_kid(b.partial_text("start", "again", timestamp=ts(9)))]
    live.clear()
    assert len(live) == 0 and live.snapshots() == []


def test_r_agg_4_open_segments_keep_the_last_name_and_the_last_non_empty_images() -> None:
    live = OpenSegments()
    for m in [
        b.partial_tool_call_output("delta", "c1", "ab", images=["data:a"], timestamp=ts(1)),
        b.partial_tool_call_output("delta", "c1", "cd", images=["data:b", "data:c"]),
        b.partial_tool_call_output("delta", "c1", "", images=[]),
        b.partial_tool_call("delta", "c2", name="old", arguments="{"),
        b.partial_tool_call("delta", "c2", name="new", arguments="}"),
        b.partial_tool_call("delta", "c2", arguments=""),
    ]:
        live.feed(m)
    out, call = live.snapshots()
    # A delta with no open segment opens one leniently (R-AGG-4), read as a start.
    assert out == b.partial_tool_call_output(
        "start", "c1", "abcd", images=["data:b", "data:c"], timestamp=ts(1)
    )
    assert (call.payload.name, call.payload.arguments) == ("new", "{}")  # type: ignore[union-attr]
