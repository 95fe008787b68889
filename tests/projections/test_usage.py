"""The ``Usage`` fold (R-USAGE-1..3, R-RUN-16, R-PROJ-4)."""

from __future__ import annotations

import copy
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from eventstore import (
    OmniMessage,
    RequestBeginPayload,
    RequestEndPayload,
    SessionMetaPayload,
    TokenCounts,
    ToolDefinition,
    decode,
)
from eventstore import builders as b
from projections._usage import ErrorRow, Usage, UsageRow

REFERENCE = Path(__file__).parents[2].parent / "shared" / "reference-traces"


def tc(total: int) -> TokenCounts:
    return TokenCounts(cache_read=1, cache_write=total - 2, output=1, total=total)


def meta() -> OmniMessage:
    return b.session_meta(
        session_id="session-2026-07-18-11-10-22-3f8a1c2d",
        provider="scripted",
        model_id="demo",
        model_context_window=4096,
        system_prompt="sys",
        agent_state="/a",
        workspace="/w",
        timestamp="T0",
    )


def tools() -> OmniMessage:
    return b.tool_list_ready([ToolDefinition(name="t", description="d")], timestamp="T0")


def usage(request: int, session: int, ts: str = "Tu") -> OmniMessage:
    return b.token_usage(tc(request), tc(session), timestamp=ts)


def test_empty() -> None:
    u = Usage()
    assert u == Usage.from_records([])
    assert u.rows == []
    assert u.errors == []
    assert u.totals == TokenCounts()
    assert u.requests_by() == {}
    assert u.tokens_by_kind() == {"turn": TokenCounts(), "compaction": TokenCounts()}


def test_one_row_per_request_span_r_usage_1() -> None:
    records = [
        meta(),
        b.user_text("go", timestamp="T1"),
        tools(),
        b.request_begin(timestamp="T2"),
        b.tool_call("t", "{}", "c1", timestamp="T3"),
        usage(100, 100),
        b.request_end("completed", timestamp="T4"),
        b.tool_call_output("c1", "ok", timestamp="T5"),
        b.request_begin(timestamp="T6"),
        b.assistant_text("done", timestamp="T7"),
        usage(150, 250),
        b.request_end("completed", timestamp="T8"),
    ]
    u = Usage.from_records(records)
    assert u.rows == [
        UsageRow(
            file_index=1, kind="turn", status="completed", request=tc(100), begin="T2", end="T4"
        ),
        UsageRow(
            file_index=1, kind="turn", status="completed", request=tc(150), begin="T6", end="T8"
        ),
    ]
    assert u.totals == tc(250)  # R-USAGE-2: the last token_usage.session
    assert u.errors == []
    assert u.retries == 0
    assert u.requests_by() == {("turn", "completed"): 2}
    assert u.tokens_by_kind()["turn"] == tc(100) + tc(150)


def test_retries_and_error_rows_r_usage_3() -> None:
    records = [
        meta(),
        b.request_begin(timestamp="T1"),
        b.request_end("timeout", error_message="idle", attempt=1, retry_in_ms=250, timestamp="T2"),
        b.request_begin(timestamp="T3"),
        b.request_end("failed", error_message="500", attempt=2, timestamp="T4"),
        b.abort("llm request failed after 1 retries: 500", timestamp="T5"),
    ]
    u = Usage.from_records(records)
    assert u.rows[0] == UsageRow(
        file_index=1,
        kind="turn",
        status="timeout",
        attempt=1,
        error_message="idle",
        retry_in_ms=250,
        begin="T1",
        end="T2",
    )
    assert u.rows[1].request is None  # no token_usage in a failed span
    assert u.retries == 1
    assert u.errors == [
        ErrorRow(1, "turn", "T2", "timeout", "idle", 1, 250),
        ErrorRow(1, "turn", "T4", "failed", "500", 2, None),
        ErrorRow(1, "abort", "T5", reason="llm request failed after 1 retries: 500"),
    ]
    assert u.requests_by() == {("turn", "timeout"): 1, ("turn", "failed"): 1}


def test_abort_with_null_reason_is_an_error_row_r_usage_3() -> None:
    u = Usage.from_records([meta(), b.abort(None, timestamp="T1")])
    assert u.errors == [ErrorRow(1, "abort", "T1", reason=None)]


def test_compaction_rows_and_failures_r_usage_3() -> None:
    records = [
        meta(),
        b.request_begin(timestamp="T1"),
        usage(500, 500),
        b.request_end("completed", timestamp="T2"),
        b.compaction_begin("context", "summarize", context=500, turns=1, timestamp="T3"),
        b.user_text("Summarize.", timestamp="T3"),
        b.request_begin(timestamp="T4"),
        b.assistant_text("no summary here? ", timestamp="T4"),
        usage(40, 540),
        b.request_end("completed", timestamp="T5"),
        b.request_begin(timestamp="T6"),
        b.request_end("auth", error_message="bad key", attempt=2, timestamp="T7"),
        b.compaction_end(
            "context", "summarize", "failed", attempt=2, error_message="bad key", timestamp="T8"
        ),
        b.compaction_begin("manual", "summarize", context=500, turns=1, timestamp="T9"),
        b.compaction_end("manual", "summarize", "aborted", timestamp="T10"),
        b.compaction_begin("manual", "discard", context=500, turns=1, timestamp="T11"),
        b.compaction_end("manual", "discard", "completed", timestamp="T12"),
    ]
    u = Usage.from_records(records)
    assert [r.kind for r in u.rows] == ["turn", "compaction", "compaction"]
    assert u.rows[1].request == tc(40)
    assert u.rows[2].status == "auth"
    assert u.compactions_failed == 1
    assert u.compactions_aborted == 1
    assert u.compactions_completed == 1
    assert u.errors == [
        ErrorRow(1, "compaction", "T7", "auth", "bad key", 2),
        ErrorRow(1, "compaction_failed", "T8", "failed", "bad key", 2),
    ]
    assert u.tokens_by_kind() == {"turn": tc(500), "compaction": tc(40)}
    # A request after the compaction span is a turn again.
    u.apply(b.request_begin(timestamp="T13"))
    assert u.rows[-1].kind == "turn"


def test_token_usage_right_after_request_end_r_run_16() -> None:
    records = [
        meta(),
        b.request_begin(timestamp="T1"),
        b.assistant_text("a", timestamp="T1"),
        b.request_end("completed", timestamp="T2"),
        usage(70, 70),
    ]
    u = Usage.from_records(records)
    assert u.rows[0].request == tc(70)
    assert u.totals == tc(70)


def test_token_usage_not_right_after_is_unattributed_r_run_16() -> None:
    records = [
        meta(),
        b.request_begin(timestamp="T1"),
        b.request_end("completed", timestamp="T2"),
        b.tool_call_output("c1", "ok", timestamp="T3"),
        usage(70, 70),
    ]
    u = Usage.from_records(records)
    assert u.rows[0].request is None
    assert u.totals == tc(70)


def test_open_span_at_end_r_usage_1() -> None:
    """A crash leaves the row open: status and end are None."""
    records = [meta(), b.request_begin(timestamp="T1"), usage(9, 9)]
    u = Usage.from_records(records)
    assert u.rows == [UsageRow(1, "turn", request=tc(9), begin="T1")]
    # The R-RESUME-14a closure ends it.
    u.apply(b.request_end("completed", timestamp="T2"))
    assert u.rows == [UsageRow(1, "turn", status="completed", request=tc(9), begin="T1", end="T2")]


def test_request_begin_while_open_leaves_the_old_row_open() -> None:
    records = [meta(), b.request_begin(timestamp="T1"), b.request_begin(timestamp="T2")]
    u = Usage.from_records(records)
    u.apply(b.request_end("completed", timestamp="T3"))
    assert u.rows == [
        UsageRow(1, "turn", begin="T1"),
        UsageRow(1, "turn", status="completed", begin="T2", end="T3"),
    ]
    assert u.requests_by() == {("turn", None): 1, ("turn", "completed"): 1}


def test_stray_request_end_gets_a_row() -> None:
    u = Usage.from_records([meta(), b.request_end("timeout", attempt=1, timestamp="T1")])
    assert u.rows == [UsageRow(1, "turn", status="timeout", attempt=1, begin=None, end="T1")]
    assert len(u.errors) == 1


def test_file_index_counts_session_meta_r_usage_1() -> None:
    records = [
        meta(),
        tools(),
        b.request_begin(timestamp="T1"),
        usage(10, 10),
        b.request_end("completed", timestamp="T2"),
        b.compaction_begin("manual", "discard", context=10, turns=1, timestamp="T3"),
        b.compaction_end("manual", "discard", "completed", timestamp="T4"),
        meta(),
        tools(),
        b.user_text("next", timestamp="T5"),
        b.request_begin(timestamp="T6"),
        usage(5, 15),
        b.request_end("completed", timestamp="T7"),
        b.abort("aborted by user", timestamp="T8"),
    ]
    u = Usage.from_records(records)
    assert [r.file_index for r in u.rows] == [1, 2]
    assert u.errors[-1].file_index == 2
    assert u.totals == tc(15)


def test_records_before_any_session_meta_belong_to_file_1() -> None:
    u = Usage.from_records([b.request_begin(timestamp="T1")])
    assert u.rows[0].file_index == 1


def test_origin_tagged_and_partials_ignored_r_proj_4() -> None:
    base = [meta(), b.request_begin(timestamp="T1"), b.request_end("completed", timestamp="T2")]
    child = [
        msgspec.structs.replace(r, origin=["session-child"])
        for r in [
            b.request_begin(timestamp="C1"),
            usage(999, 999),
            b.request_end("failed", timestamp="C2"),
            b.abort("x", timestamp="C3"),
        ]
    ]
    # The child's token_usage right after our request_end must not be attributed to it.
    noisy = [*base, *child, b.partial_text("start")]
    assert Usage.from_records(noisy) == Usage.from_records(base)


def test_equality_ignores_scratch() -> None:
    u = Usage.from_records([meta(), b.request_begin(timestamp="T1")])
    other = copy.copy(u)
    other._open = None
    other._in_compaction = True
    assert other == u
    other.retries = 3
    assert other != u


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="reference traces not available")
def test_reference_trace_06a() -> None:
    folder = REFERENCE / "06a_compaction_summarize_context"
    records = [
        decode(line)
        for path in sorted(folder.glob("*/*.jsonl"))
        for line in path.read_bytes().splitlines()
        if line.strip()
    ]
    u = Usage.from_records(records)
    assert [(r.file_index, r.kind, r.status) for r in u.rows] == [
        (1, "turn", "completed"),
        (1, "turn", "completed"),
        (1, "compaction", "completed"),
        (2, "turn", "completed"),
    ]
    assert [r.request.total for r in u.rows if r.request] == [600, 1100, 1180, 180]
    assert u.totals.total == 3060
    assert u.compactions_completed == 1
    assert u.errors == []
    # R-USAGE-2: the per-kind sums add up to the session total for this trace.
    sums = u.tokens_by_kind()
    assert (sums["turn"] + sums["compaction"]).total == u.totals.total


def _record_strategy() -> st.SearchStrategy[OmniMessage]:
    return st.sampled_from(
        [
            meta(),
            b.request_begin(timestamp="B"),
            b.request_end("completed", timestamp="E"),
            b.request_end("timeout", attempt=1, retry_in_ms=250, timestamp="E"),
            usage(5, 50),
            b.compaction_begin("manual", "summarize", context=1, turns=1, timestamp="C"),
            b.compaction_end("manual", "summarize", "failed", attempt=1, timestamp="D"),
            b.compaction_end("manual", "summarize", "completed", attempt=1, timestamp="D"),
            b.abort("aborted by user", timestamp="A"),
            b.assistant_text("x", timestamp="X"),
        ]
    )


@settings(max_examples=80, derandomize=True, deadline=None)
@given(records=st.lists(_record_strategy(), max_size=30), data=st.data())
def test_prefix_then_rest_equals_whole(records: list[OmniMessage], data: st.DataObject) -> None:
    cut = data.draw(st.integers(0, len(records)))
    u = Usage.from_records(records[:cut])
    for record in records[cut:]:
        u.apply(record)
    whole = Usage.from_records(records)
    assert u == whole
    # Structural facts that hold for any record sequence.
    assert len(whole.rows) == sum(
        1
        for i, r in enumerate(records)
        if isinstance(r.payload, RequestBeginPayload)
        or (isinstance(r.payload, RequestEndPayload) and not _has_open_begin(records[:i]))
    )
    assert whole.retries == sum(
        1 for r in records if getattr(r.payload, "retry_in_ms", None) is not None
    )


def _has_open_begin(records: list[OmniMessage]) -> bool:
    """Whether a request span is open at the end of ``records`` (a session_meta closes it)."""
    open_ = False
    for r in records:
        if isinstance(r.payload, RequestBeginPayload):
            open_ = True
        elif isinstance(r.payload, (RequestEndPayload, SessionMetaPayload)):
            open_ = False
    return open_
