"""The span tree (runs → turns → requests / tool calls / compactions, R-SET-5 run boundaries,
R-SUB-3 child pointers) and the cost estimate (R-USAGE-2 totals priced per model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventstore import (
    RequestBeginPayload,
    TextPayload,
    TokenCounts,
    ToolCallPayload,
    iter_trace,
)
from projections import (
    DEFAULT_PRICES,
    Price,
    SessionState,
    Span,
    SpanTree,
    Usage,
    estimate_cost,
    price_for,
    priced_total,
)

FIXTURES = Path(__file__).parents[2] / "fixtures" / "traces"


def _sessions(name: str) -> dict[str, list[Path]]:
    by: dict[str, list[Path]] = {}
    for f in sorted((FIXTURES / name).rglob("*.jsonl")):
        by.setdefault(f.name.rsplit("_", 1)[0], []).append(f)
    return by


def _tree(files: list[Path]) -> SpanTree:
    return SpanTree.from_records(r for f in files for r in iter_trace(f, report=False))


def _parent(name: str) -> tuple[str, list[Path]]:
    for sid, files in _sessions(name).items():
        first = next(iter(iter_trace(files[0], report=False)))
        if getattr(first.payload, "source", None) != "subagent":
            return sid, files
    raise AssertionError(name)


def _shape(span: Span) -> object:
    return (span.kind, span.name, span.status, [_shape(c) for c in span.children])


def test_runs_turns_requests_and_tools_with_positions_and_tokens_r_set_5() -> None:
    _, files = _parent("abort_tool")
    records = [r for f in files for r in iter_trace(f, report=False)]
    tree = SpanTree.from_records(records)
    # Three runs, as many as the one status projection counts, ending as it says.
    assert len(tree.roots) == SessionState.from_records(records).runs == 3
    assert [r.status for r in tree.roots] == ["completed", "aborted", "completed"]
    aborted = tree.roots[1]
    assert _shape(aborted) == (
        "run",
        None,
        "aborted",
        [
            (
                "turn",
                None,
                "completed",
                [("request", None, "completed", []), ("tool_call", "exec_command", "aborted", [])],
            )
        ],
    )
    # The position is the record that opened the span.
    (turn,) = aborted.children
    assert isinstance(records[turn.ordinal].payload, RequestBeginPayload)
    call = turn.children[1]
    assert isinstance(records[call.ordinal].payload, ToolCallPayload)
    # Tokens: a request's own, summed upwards; the session total is the sum of the runs'.
    total = TokenCounts()
    for run in tree.roots:
        counts = run.total_tokens()
        assert counts is not None
        total = total + counts
    assert total == Usage.from_records(records).totals


def test_retries_stay_in_their_turn() -> None:
    _, files = _parent("retry")
    (run,) = _tree(files).roots
    (turn,) = run.children
    assert [c.status for c in turn.children] == ["timeout", "malformed", "completed"]
    assert turn.status == "completed"


def test_a_mid_task_compaction_is_a_span_of_its_run_across_files() -> None:
    _, files = _parent("compaction_mid_task")
    (run,) = _tree(files).roots
    kinds = [(c.kind, c.file) for c in run.children]
    assert kinds == [("turn", 1), ("compaction", 1), ("turn", 2)]
    compaction = run.children[1]
    assert compaction.status == "completed"
    assert [c.kind for c in compaction.children] == ["request"]
    assert compaction.total_tokens() == compaction.children[0].tokens


def test_concurrent_subagent_calls_each_name_their_child_r_sub_3() -> None:
    sid, files = _parent("subagents_concurrent")
    children = {s: f for s, f in _sessions("subagents_concurrent").items() if s != sid}
    (run,) = _tree(files).roots
    calls = [c for t in run.children for c in t.children if c.kind == "tool_call"]
    assert [c.name for c in calls] == ["run_subagent", "run_subagent"]
    # Both ran at once (the second began before the first ended) and each names its own child:
    # the child whose first prompt is the call's prompt.
    assert calls[1].start < (calls[0].end or "")
    assert {c.subagent for c in calls} == set(children)
    for call in calls:
        assert call.subagent is not None
        first_prompt = next(
            r.payload.text
            for r in iter_trace(children[call.subagent][0], report=False)
            if isinstance(r.payload, TextPayload)
        )
        assert call.tool_call_id is not None
        args = next(
            r.payload.arguments
            for r in iter_trace(files[0], report=False)
            if isinstance(r.payload, ToolCallPayload)
            and r.payload.tool_call_id == call.tool_call_id
        )
        assert first_prompt in args
    # A caller hangs the child's tree under the call; the call's tokens then include it.
    child = _tree(children[calls[0].subagent or ""])
    calls[0].children.extend(child.roots)
    assert calls[0].total_tokens() == child.roots[0].total_tokens()
    assert calls[0].latency_ms() is not None


def test_nested_subagents_link_at_every_level() -> None:
    sessions = _sessions("subagent_nested")
    linked = []
    for files in sessions.values():
        for span in (s for root in _tree(files).roots for s in root.walk()):
            if span.subagent is not None:
                linked.append(span.subagent)
    assert sorted(linked) == sorted(s for s in sessions if s != _parent("subagent_nested")[0])


def test_a_run_cut_by_a_crash_stays_open() -> None:
    _, files = _parent("abort_tool")
    records = [r for f in files for r in iter_trace(f, report=False)]
    cut = next(i for i, r in enumerate(records) if isinstance(r.payload, ToolCallPayload)) + 1
    crashed = SpanTree.from_records(records[:cut])
    run = crashed.roots[-1]
    assert run.end is None and run.status is None  # open: the tree does not invent an end
    (call,) = [s for s in run.walk() if s.kind == "tool_call"]
    assert call.end is None and call.latency_ms() is None
    # Its status is the one status projection's: a run left open.
    assert SessionState.from_records(records[:cut]).run_open


def test_price_lookup_exact_then_longest_pattern() -> None:
    table = {"gpt-4o*": Price(2.5, 10), "gpt-4o-mini*": Price(0.15, 0.6), "x": Price(1, 1)}
    assert price_for("gpt-4o-mini-2024-07-18", table) == Price(0.15, 0.6)
    assert price_for("gpt-4o", table) == Price(2.5, 10)
    assert price_for("x", table) == Price(1, 1)
    assert price_for("unknown-model", table) is None
    assert price_for("claude-sonnet-4-20250514", DEFAULT_PRICES) is not None


def test_cost_is_per_kind_of_token_and_none_without_a_price() -> None:
    counts = TokenCounts(
        cache_read=1_000_000, cache_write=2_000_000, output=500_000, total=3_500_000
    )
    assert estimate_cost(counts, Price(input=3, output=15, cached_input=0.3)) == pytest.approx(
        0.3 + 6 + 7.5
    )
    # No cached price: cache reads cost as input.
    assert estimate_cost(counts, Price(input=1, output=0)) == pytest.approx(3.0)
    assert estimate_cost(counts, None) is None
    cost, unpriced = priced_total(
        [("a", counts), ("unknown", TokenCounts(total=7))], {"a": Price(1, 0)}
    )
    assert cost == pytest.approx(3.0)
    assert unpriced == 7
    assert priced_total([("unknown", counts)], {}) == (None, 3_500_000)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_a_price_is_finite_and_not_negative(bad: float) -> None:
    with pytest.raises(ValueError, match="finite price"):
        Price(input=bad, output=1)
