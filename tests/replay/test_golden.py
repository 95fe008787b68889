"""The golden-trace harness (``replay.golden``, SPEC R-CLI-6) and the corpus in
``fixtures/traces``: every intact fixture replays on every test run; damaged ones are read,
validated and resumed; deliberate changes are reported at the right file:line."""

from __future__ import annotations

import re
import shutil
import textwrap
from pathlib import Path

import msgspec
import pytest
from enginekit import collect

from engine import RetryPolicy, allow_all
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import (
    CompactionEndPayload,
    DataRoot,
    OmniMessage,
    RequestEndPayload,
    TokenCounts,
    ToolDefinition,
    UnknownPayload,
    encode_line,
    read_trace,
)
from eventstore import builders as b
from eventstore.builders import payload_type
from projections import markers as _markers
from replay import _replay_llm, resume_session, validate_session
from replay.golden import (
    GoldenTraceExtension,
    ReplayResult,
    areplay_trace,
    assert_replays,
    normalize,
    replay_trace,
)

pytest_plugins = ["pytester"]

FIXTURES = Path(__file__).parents[2] / "fixtures" / "traces"
REFERENCE = Path(__file__).parents[2].parent / "shared" / "reference-traces"

# Runs per intact scenario: every one is compared (R-GOLD-5), aborts, steering and crashes
# included (R-GOLD-1..3).
RUNS: dict[str, int] = {
    "plain": 2,
    "tools_out_of_order": 1,
    "denial": 1,
    "abort_tool": 3,
    "abort_stream": 3,
    "retry": 1,
    "auth": 3,
    "compaction_summarize": 2,
    "compaction_discard": 2,
    "compaction_mid_task": 1,
    "compaction_manual": 2,
    "steering": 2,
    "max_turns": 2,
    "multi_file": 3,
    "resumed": 2,
    "goal": 1,
    "subagent": 1,
    "abort_backoff": 3,
    "abort_compaction": 2,
    "steering_after_tool": 1,
    "crash_tool": 2,
    "subagents_concurrent": 1,
    "subagent_nested": 1,
}
# A scenario is a directory laid out as <scenario>/<yyyy-mm-dd>/<session_id>_<NNN>.jsonl (other
# corpora beside it, such as hostile/, have their own layout and tests).
SCENARIOS = sorted(
    p.name
    for p in FIXTURES.iterdir()
    if p.is_dir() and any(re.fullmatch(r"\d{4}-\d{2}-\d{2}", d.name) for d in p.iterdir())
)
INTACT = [s for s in SCENARIOS if not s.startswith("damaged_")]
DAMAGED = [s for s in SCENARIOS if s.startswith("damaged_")]


def files(scenario: str | Path) -> list[Path]:
    base = scenario if isinstance(scenario, Path) else FIXTURES / scenario
    return sorted(base.rglob("*.jsonl"))


def copy_scenario(scenario: str, dest: Path) -> list[Path]:
    shutil.copytree(FIXTURES / scenario, dest)
    return files(dest)


def line_of(path: Path, needle: str, *, occurrence: int = 1) -> int:
    hits = [n for n, line in enumerate(path.read_text().splitlines(), 1) if needle in line]
    return hits[occurrence - 1]


# --------------------------------------------------------------------------- the corpus


def test_corpus_is_complete_and_documented() -> None:
    """Every scenario the issue lists is present, and README has one line per trace."""
    assert set(INTACT) == set(RUNS)
    assert set(DAMAGED) == {
        "damaged_torn_tail",
        "damaged_malformed_middle",
        "damaged_dangling_request",
        "damaged_dangling_compaction",
        "damaged_unknown_future",
    }
    readme = (FIXTURES / "README.md").read_text()
    rows = [line for line in readme.splitlines() if line.startswith("| `")]
    assert sorted(row.split("`")[1] for row in rows) == SCENARIOS
    for row in rows:
        name = row.split("`")[1]
        assert ("damaged:" in row) == name.startswith("damaged_"), row
    assert [len(files(s)) for s in ("multi_file", "compaction_summarize")] == [3, 2]
    assert all(sum(f.stat().st_size for f in files(s)) < 16_000 for s in SCENARIOS)


@pytest.mark.parametrize("scenario", INTACT)
def test_every_intact_fixture_replays(scenario: str) -> None:
    """R-CLI-6, R-GOLD-1..5: the engine re-records each fixture exactly (normalized), every
    run compared: steering injected, user aborts fired, crashes stopped and resumed where the
    trace shows them."""
    result = assert_replays(FIXTURES / scenario)
    assert (result.runs_compared, result.runs_total) == (RUNS[scenario], RUNS[scenario])
    assert result.complete and result.stopped is None
    assert result.normalized == result.expected
    assert str(result) == "match"
    assert len(result.normalized) > 5


@pytest.mark.parametrize("scenario", INTACT)
def test_every_intact_fixture_validates(scenario: str) -> None:
    """INV-18: what the engine wrote passes the validator with no finding at all (each
    session of the scenario: a subagent's trace lies beside its parent's)."""
    sessions: dict[str, list[Path]] = {}
    for path in files(scenario):
        sessions.setdefault(path.name.rsplit("_", 1)[0], []).append(path)
    for paths in sessions.values():
        found = [(f.rule, f.severity) for f in validate_session(paths)]
        # V-10: after a crash that a resume continued the warning is expected (its answer was
        # the crash placeholder, R-RESUME-10).
        assert found == ([("V-10", "warning")] if scenario == "crash_tool" else [])


@pytest.mark.skipif(not REFERENCE.is_dir(), reason="reference traces not present")
@pytest.mark.parametrize(
    "scenario",
    [
        "01_plain_text",
        "02_two_tools_out_of_order",
        "03_tool_denied",
        "06a_compaction_summarize_context",
    ],
)
def test_reference_traces_replay(scenario: str) -> None:
    """Traces written by the reference implementation replay too: its recorded workspace
    (``/workspace``) is never needed, the compaction prompt and threshold are read from the
    trace, and the out-of-order outputs keep their recorded order."""
    result = assert_replays(REFERENCE / scenario)
    assert result.runs_compared == result.runs_total >= 1
    assert str(result) == "match"


# --------------------------------------------------------------------------- damaged


def validator_summary(paths: list[Path]) -> set[tuple[str, str, int]]:
    return {(f.rule, f.severity, f.line) for f in validate_session(paths)}


DAMAGE_FINDINGS: dict[str, set[tuple[str, str]]] = {
    "damaged_torn_tail": {("V-1", "warning"), ("V-4", "warning")},
    "damaged_malformed_middle": {("V-1", "error")},
    "damaged_dangling_request": {("V-4", "warning")},
    "damaged_dangling_compaction": {("V-5", "warning")},
    "damaged_unknown_future": set(),
}


@pytest.mark.anyio
@pytest.mark.parametrize("scenario", DAMAGED)
async def test_damaged_fixture_is_read_validated_and_resumed(scenario: str, tmp_path: Path) -> None:
    """R-READ-2/3, R-RESUME-14/14a/17, R-TRACE-14: a damaged trace reads without error, the
    validator names the damage, and a resumed copy repairs what resume repairs and runs."""
    original = files(scenario)
    before = {(rule, sev) for rule, sev, _ in validator_summary(original)}
    assert before == DAMAGE_FINDINGS[scenario]
    read = read_trace(original, report=False)
    assert read.records and read.records[0].type == "session_meta"

    home = tmp_path / "home"
    traces = home / "default_project" / "agents" / "default_agent" / "traces"
    copied = copy_scenario(scenario, traces)
    session_id = copied[0].name.rsplit("_", 1)[0]
    ws = tmp_path / "ws"
    ws.mkdir()
    llm = ScriptedLLM({"responses": [[{"text": "resumed fine"}]]})
    session = await resume_session(
        DataRoot(home),
        session_id,
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        workspace=ws,
        compaction=None,
        retry=RetryPolicy(base_ms=1, cap_ms=2),
    )
    async with session:
        await collect(session.run([b.user_text("are you there?")], approve=allow_all))
    assert llm.requests, "the resumed session sent a request"
    after = files(traces)
    records = read_trace(after, report=False).records
    assert [payload_type(r) for r in records[-3:]] == ["text", "token_usage", "request_end"]
    assert records[-3].payload.text == "resumed fine"  # type: ignore[union-attr]
    remaining = {(rule, sev) for rule, sev, _ in validator_summary(after)}
    # Resume repaired the torn tail and closed the open spans; a malformed middle line stays.
    assert remaining == ({("V-1", "error")} if scenario == "damaged_malformed_middle" else set())
    assert after[-1].read_bytes().endswith(b"\n")
    kinds = [r.payload for r in records]
    if scenario == "damaged_dangling_request":
        closure = next(
            p
            for p in kinds
            if isinstance(p, RequestEndPayload)
            and p.error_message == _markers.REQUEST_CLOSURE_ERROR
        )
        assert closure.status == "aborted"
    if scenario == "damaged_torn_tail":
        # The torn record was the run's request_end; its usage was recorded (R-RESUME-7a).
        ends = [p for p in kinds if isinstance(p, RequestEndPayload)]
        assert [e.status for e in ends] == ["completed"] * len(ends)
    if scenario == "damaged_dangling_compaction":
        closure_c = next(p for p in kinds if isinstance(p, CompactionEndPayload))
        assert (closure_c.status, closure_c.error_message, closure_c.attempt) == (
            "failed",
            _markers.COMPACTION_CLOSURE_ERROR,
            1,
        )
    if scenario == "damaged_unknown_future":
        unknown = [p.raw["type"] for p in kinds if isinstance(p, UnknownPayload)]
        assert unknown == ["future_event", "hologram"]
        assert b'"future_event"' in after[0].read_bytes()  # kept byte for byte (R-MSG-7)


def test_damaged_traces_replay_or_report_without_crashing() -> None:
    """R-GOLD-3: a trace that ends in a crash (an open request or compaction span, a torn last
    record) is replayed up to the recorded cut and compared whole; unknown future records are
    a divergence the harness reports at their line, since this engine cannot write them."""
    for scenario in (
        "damaged_dangling_request",
        "damaged_dangling_compaction",
        "damaged_torn_tail",
    ):
        result = replay_trace(FIXTURES / scenario)
        assert result.matched and result.complete, result
        assert result.normalized == result.expected
    result = replay_trace(FIXTURES / "damaged_unknown_future")
    assert result.divergence is not None
    path = files("damaged_unknown_future")[0]
    assert result.divergence.file == path
    assert result.divergence.line == line_of(path, "future_event")
    assert "future_event" in result.divergence.reason


# --------------------------------------------------------------------------- divergences


def test_swapped_completion_order_is_reported_at_the_right_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A deliberately changed behaviour: outputs delivered in dispatch order instead of the
    recorded completion order.  The report names the first recorded output's line."""

    async def immediately(self: object, cid: str, signal: object) -> None:
        return None

    monkeypatch.setattr(_replay_llm._Pacer, "before_env", immediately)
    result = replay_trace(FIXTURES / "tools_out_of_order")
    assert not result.matched
    d = result.divergence
    assert d is not None
    path = files("tools_out_of_order")[0]
    assert (d.file, d.line) == (path, line_of(path, '"tool_call_output"'))
    assert d.expected is not None and '"tool_call_id":"call_1_2"' in d.expected
    assert d.actual is not None and '"tool_call_id":"call_1_1"' in d.actual
    assert d.reason == "tool_call_output: payload.output differs"
    text = str(result)
    assert text.startswith(f"{path}:{d.line}: expected {d.expected} / actual {d.actual} (")
    with pytest.raises(AssertionError, match=rf":{d.line}: expected "):
        assert_replays(FIXTURES / "tools_out_of_order")


def test_changed_engine_text_is_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """A deliberately changed engine behaviour (the denial sentence, R-APPROVE-3)."""
    monkeypatch.setattr(_markers, "DENIED_BY_USER", "Denied.")
    result = replay_trace(FIXTURES / "denial")
    d = result.divergence
    assert d is not None
    path = files("denial")[0]
    assert (d.file, d.line) == (path, line_of(path, "Tool call denied by user."))
    assert d.actual is not None and '"output":"Denied."' in d.actual


def test_mutated_record_is_reported_at_its_line(tmp_path: Path) -> None:
    """Edit one engine-computed value in a copy of a recorded trace: the session counts of
    the last token_usage (R-RUN-10)."""
    paths = copy_scenario("plain", tmp_path / "plain")
    lines = paths[0].read_text().splitlines(keepends=True)
    n = max(i for i, line in enumerate(lines) if '"token_usage"' in line)
    obj = msgspec.json.decode(lines[n])
    obj["payload"]["session"]["output"] += 1
    lines[n] = msgspec.json.encode(obj).decode() + "\n"
    paths[0].write_text("".join(lines))
    result = replay_trace(paths)
    assert result.divergence is not None
    assert (result.divergence.file, result.divergence.line) == (paths[0], n + 1)
    assert result.divergence.reason == "token_usage: payload.session.output differs"


def test_missing_record_is_reported(tmp_path: Path) -> None:
    """A recorded record the replay does not write (a deleted ``approval_decision`` makes
    the expected sequence shorter: the replay writes one more record there)."""
    paths = copy_scenario("tools_out_of_order", tmp_path / "t")
    lines = paths[0].read_text().splitlines(keepends=True)
    n = next(i for i, line in enumerate(lines) if '"approval_decision"' in line)
    del lines[n]
    paths[0].write_text("".join(lines))
    result = replay_trace(paths)
    d = result.divergence
    assert d is not None
    assert (d.file, d.line) == (paths[0], n + 1)  # the record now at that line
    assert d.actual is not None and '"approval_decision"' in d.actual


def test_options_override_what_the_trace_says() -> None:
    """Explicit settings win over inference: no compaction, and a lower max_turns."""
    no_compaction = replay_trace(FIXTURES / "compaction_summarize", max_context_length=0)
    path = files("compaction_summarize")[0]
    assert no_compaction.divergence is not None
    assert no_compaction.divergence.line == line_of(path, '"compaction_begin"')
    one_turn = replay_trace(FIXTURES / "max_turns", max_turns=1)
    assert one_turn.divergence is not None
    assert "reached max turns (1)" in (one_turn.divergence.actual or "")


# --------------------------------------------------------------------------- hand-made traces


def write(path: Path, records: list[OmniMessage]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(encode_line(r) for r in records))
    return path


SID = "session-2026-07-18-11-10-22-3f8a1c2d"
TOOLS = [ToolDefinition(name="t", description="test tool")]


def hand_meta(home: str = "/h") -> OmniMessage:
    return b.session_meta(
        session_id=SID,
        provider="acme",
        model_id="m",
        model_context_window="unknown",
        system_prompt="sys",
        agent_state=f"{home}/p/agents/a/agent_state",
        workspace=f"{home}/ws",
    )


def test_a_tool_output_recorded_inside_the_request_span_replays_in_place(tmp_path: Path) -> None:
    """Pacing: an output the trace holds *before* the model's usage/request_end (a fast tool)
    is delivered there again, because the paced model waits for it."""
    records = [
        hand_meta(),
        b.user_text("go"),
        b.tool_list_ready(TOOLS),
        b.request_begin(),
        b.tool_call("t", "{}", "a"),
        b.approval_decision("allow", "a"),
        b.tool_call_output("a", "fast"),
        b.tool_call("t", "{}", "b"),
        b.approval_decision("allow", "b"),
        b.token_usage(TokenCounts(0, 1, 2, 3)),
        b.request_end("completed"),
        b.tool_call_output("b", "slow"),
        b.request_begin(),
        b.assistant_text("both done"),
        b.token_usage(TokenCounts(0, 5, 1, 6), TokenCounts(0, 6, 3, 9)),
        b.request_end("completed"),
    ]
    path = write(tmp_path / "2026-07-18" / f"{SID}_001.jsonl", records)
    assert_replays(path)


def test_normalization_hides_ids_and_paths_only(tmp_path: Path) -> None:
    """Timestamps dropped; session_meta keeps the model identity but not ids/paths; ids and
    scratchpad paths inside other records are placeholders on both sides."""
    pad = f"/h/p/agents/a/scratchpad/{SID}/img.png"
    records = [hand_meta(), b.user_text(f"see [attached image: {pad}] in /h/ws")]
    lines = normalize(records)
    assert lines[0] == (
        '{"type":"session_meta","payload":{"provider":"acme","model_id":"m",'
        '"model_context_window":"unknown","system_prompt":"sys"}}'
    )
    assert "[attached image: <scratchpad>/img.png] in <workspace>" in lines[1]
    assert "timestamp" not in lines[1]


def test_syrupy_extension_serializes_one_record_per_line(tmp_path: Path) -> None:
    """GoldenTraceExtension stores a replay's normalized records, one JSON line each."""
    result = replay_trace(FIXTURES / "plain")
    ext = GoldenTraceExtension()
    text = ext.serialize(result)
    assert text.splitlines() == result.normalized
    assert text.endswith("\n")
    assert ext.serialize(result.normalized) == text
    assert isinstance(result, ReplayResult)
    with pytest.raises(TypeError):
        ext.serialize(42)


def test_syrupy_snapshot_round_trip(pytester: pytest.Pytester) -> None:
    """The documented use: ``assert replay_trace(path).normalized == snapshot(
    extension_class=GoldenTraceExtension)`` records, then checks, a ``.jsonl`` snapshot."""
    pytester.makepyfile(
        test_golden_user=textwrap.dedent(
            f"""
            from replay.golden import GoldenTraceExtension, replay_trace

            def test_plain(snapshot):
                result = replay_trace({str(FIXTURES / "plain")!r})
                assert result.matched, result
                assert result.normalized == snapshot(extension_class=GoldenTraceExtension)
            """
        )
    )
    created = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "--snapshot-update"
    )
    created.assert_outcomes(passed=1)
    (snap,) = pytester.path.rglob("*.jsonl")
    assert snap.read_text().splitlines() == replay_trace(FIXTURES / "plain").normalized
    pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-p", "no:hypothesispytest"
    ).assert_outcomes(passed=1)
    snap.write_text(snap.read_text().replace("2 + 2 = 4.", "2 + 2 = 5."))
    pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-p", "no:hypothesispytest"
    ).assert_outcomes(failed=1)


@pytest.mark.anyio
async def test_async_entry_point() -> None:
    result = await areplay_trace(FIXTURES / "retry")
    assert result.matched and result.runs_compared == 1


def test_a_trace_without_session_meta_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path / f"{SID}_001.jsonl", [b.user_text("hi")])
    with pytest.raises(ValueError, match="session_meta"):
        replay_trace(path)


@pytest.mark.anyio
async def test_failed_boundary_compaction_replays_with_the_inferred_budget(
    tmp_path: Path,
) -> None:
    """A compaction that spends its budget at a task boundary ends no run (R-COMPACT-23), so
    it is compared: the budget (R-COMPACT-19), the repairs and corrective note (R-COMPACT-14/15)
    and the ladder values must all be re-derived from the trace."""
    from engine import CompactionSettings, Session

    script = {
        "tools": [{"name": "t", "description": "test tool"}],
        "responses": [
            [{"text": "Done."}, {"usage": {"cache_write": 900}}],
            [{"tool_call": {"name": "t", "arguments": {}}}],  # unusable: calls a tool
            [{"text": "no tags and"}, {"fail": {"status": "timeout", "message": "slow"}}],
            [{"text": ""}],  # unusable: empty
            [{"text": "Next answer."}, {"usage": {"cache_write": 10}}],
        ],
    }
    llm = ScriptedLLM(script)
    ws = tmp_path / "ws"
    ws.mkdir()
    session = await Session.create(
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        root=tmp_path / "home",
        workspace=ws,
        compaction=CompactionSettings(max_context_length=500),
        retry=RetryPolicy(max_reconnects=5, base_ms=1, cap_ms=2, compaction_max_reconnects=2),
    )
    async with session:
        await collect(session.run([b.user_text("go")], approve=allow_all))
        await collect(session.run([b.user_text("again")], approve=allow_all))
    paths = DataRoot(tmp_path / "home").trace_files(session.id)
    ends = [
        r.payload for r in read_trace(paths).records if isinstance(r.payload, CompactionEndPayload)
    ]
    assert [(e.status, e.attempt) for e in ends] == [("failed", 3)]
    result = await areplay_trace(paths)
    assert result.matched, result
    assert result.runs_compared == 2


def test_records_in_memory_replay_and_report_without_a_file() -> None:
    """``replay_trace`` takes records too; a divergence then names ``<records>:<n>``."""
    records = read_trace(files("plain")).records
    assert replay_trace(records).matched
    changed = list(records)
    n = next(i for i, r in enumerate(changed) if payload_type(r) == "request_end")
    changed[n] = b.request_end("completed", attempt=7, timestamp=changed[n].timestamp)
    result = replay_trace(changed)
    assert result.divergence is not None
    assert result.divergence.file is None
    assert str(result).startswith(f"<records>:{n + 1}: expected ")
    assert result.divergence.reason == "request_end: payload.attempt missing"


# --------------------------------------------------------------------------- subagents


def subagent_files(base: Path) -> tuple[Path, Path]:
    """The parent's and the child's trace file of a copy of the ``subagent`` scenario."""
    (parent,) = [p for p in files(base) if b'"type":"subagent"' in p.read_bytes()]
    (child,) = [p for p in files(base) if p != parent]
    return parent, child


def test_a_session_with_a_subagent_replays_with_its_child() -> None:
    """R-SUB-3, R-CLI-6: the child is replayed from its own trace as its own session, so the
    parent writes its ``subagent`` pointer again; the child id is named by its order."""
    result = assert_replays(FIXTURES / "subagent")
    pointers = [line for line in result.normalized if '"type":"subagent"' in line]
    assert pointers == [
        '{"type":"event_msg","payload":{"type":"subagent","session_id":"<subagent:1>"}}'
    ]
    parent, _ = subagent_files(FIXTURES / "subagent")
    assert str(assert_replays(parent)) == "match"  # the child is found beside the parent's file


def test_a_tampered_child_trace_diverges_naming_the_child(tmp_path: Path) -> None:
    """R-SUB-3: each replayed child is compared with its recorded trace.  The child's prompt
    comes from the parent's call, so a child trace that disagrees with it diverges there."""
    copy_scenario("subagent", tmp_path / "s")
    _, child = subagent_files(tmp_path / "s")
    child.write_text(child.read_text().replace('"Read notes.txt"', '"Read other.txt"'))
    result = replay_trace(tmp_path / "s")
    assert not result.matched
    d = result.divergence
    assert d is not None and d.file == child
    assert d.line == line_of(child, "Read other.txt")
    assert d.reason.startswith(f"in subagent {child.name.rsplit('_', 1)[0]}: text:")


def test_a_missing_child_trace_is_a_clear_error(tmp_path: Path) -> None:
    """R-SUB-3: the pointer names a child whose trace is not there: the error names it."""
    copy_scenario("subagent", tmp_path / "s")
    parent, child = subagent_files(tmp_path / "s")
    child.unlink()
    child_id = child.name.rsplit("_", 1)[0]
    with pytest.raises(FileNotFoundError, match=f"subagent {child_id} .* not found"):
        replay_trace(parent)


# --------------------------------------------------------------------------- R-GOLD-1..5


def test_steering_is_injected_at_the_turn_that_delivered_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """R-GOLD-1: without the injection the replay ends the task where the recording went on
    with the steering message; the report names the steering record's line."""
    from engine import Session

    assert_replays(FIXTURES / "steering_after_tool")
    monkeypatch.setattr(Session, "steer", lambda self, messages: True)
    result = replay_trace(FIXTURES / "steering_after_tool")
    d = result.divergence
    assert d is not None
    path = files("steering_after_tool")[0]
    assert (d.file, d.line) == (path, line_of(path, "[user_steering]"))


@pytest.mark.parametrize(
    ("scenario", "first_effect", "partial"),
    [
        ("abort_stream", '"text":"Here is a long ","stop_reason":"aborted"', True),
        ("abort_tool", "[interrupted: tool aborted by user]", False),  # mid-tool
        ("abort_compaction", '"stop_reason":"aborted"', True),  # the summary request
        ("abort_backoff", '"aborted during reconnect backoff"', False),  # in the wait
    ],
)
def test_user_aborts_are_fired_at_the_recorded_point(
    scenario: str, first_effect: str, partial: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-GOLD-2: the replay fires the run's signal where the recording shows its first effect
    (the model's partial output streamed, or the tool running), before anything the abort
    produced is written."""
    from engine import AbortSignal
    from replay import golden as _golden

    written: list[str] = []
    fired_at: list[int] = []
    real_abort = AbortSignal.abort
    real_on_record = _golden._Driver.on_record

    def spy(self: AbortSignal, reason: str | None = None) -> None:
        if not self.aborted:
            fired_at.append(len(written))
        real_abort(self, reason)

    def counting(self: object, msg: OmniMessage, path: Path) -> None:
        if payload_type(msg) != "settings":  # the replay's input, not a recorded position
            written.append(encode_line(msg).decode())
        real_on_record(self, msg, path)  # type: ignore[arg-type]

    monkeypatch.setattr(AbortSignal, "abort", spy)
    monkeypatch.setattr(_golden._Driver, "on_record", counting)
    cuts: list[int] = []
    real_on_cut = _golden._Driver.on_cut

    def on_cut(self: object, begin: int) -> None:
        cuts.append(begin)
        real_on_cut(self, begin)  # type: ignore[arg-type]

    monkeypatch.setattr(_golden._Driver, "on_cut", on_cut)
    assert str(replay_trace(FIXTURES / scenario)) == "match"
    assert fired_at, "the replay fired no abort"
    recorded = files(scenario)[0].read_text().splitlines()
    n = fired_at[0]  # records written when the signal fired
    assert first_effect in recorded[n], recorded[n]  # the next record is the abort's first
    assert '"aborted' not in "".join(written[:n])
    # Mid-stream: fired by the model once the partial output had streamed (R-GOLD-2).
    assert bool(cuts) == partial


@pytest.mark.parametrize(
    ("scenario", "where"),
    [("abort_tool", '"type":"abort"'), ("abort_backoff", '"aborted during reconnect backoff"')],
)
def test_without_the_fired_abort_the_replay_diverges_there(
    scenario: str, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-GOLD-2: a mid-tool abort and an abort in a backoff wait are not in the model's
    answers: with the firing switched off, the replay goes on where the recording stopped."""
    from engine import AbortSignal

    monkeypatch.setattr(AbortSignal, "abort", lambda self, reason=None: None)
    d = replay_trace(FIXTURES / scenario, stall_timeout=0.2).divergence
    path = files(scenario)[0]
    assert d is not None and (d.file, d.line) == (path, line_of(path, where))


def test_an_engine_made_abort_happens_on_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """R-GOLD-2: an auth failure's abort is not fired by the replay: it must come from the
    engine (a changed reason is reported at the abort's line)."""
    assert str(replay_trace(FIXTURES / "auth")) == "match"
    monkeypatch.setattr(_markers, "abort_llm_request_error", lambda detail: "something else")
    d = replay_trace(FIXTURES / "auth").divergence
    path = files("auth")[0]
    assert d is not None and (d.file, d.line) == (path, line_of(path, '"type":"abort"'))


@pytest.mark.anyio
async def test_a_crash_inside_a_request_is_stopped_at_the_cut_and_resumed(
    tmp_path: Path,
) -> None:
    """R-GOLD-3: a session that crashed inside a request span and was resumed: the replay
    stops at the recorded cut, resumes with ``resume_session``, which must write the same
    closure record (R-RESUME-14a), and goes on."""
    home = tmp_path / "home"
    traces = home / "default_project" / "agents" / "default_agent" / "traces"
    copied = copy_scenario("damaged_dangling_request", traces)
    session_id = copied[0].name.rsplit("_", 1)[0]
    llm = ScriptedLLM({"responses": [[{"text": "resumed fine"}]]})
    session = await resume_session(
        DataRoot(home),
        session_id,
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        workspace=tmp_path,
        compaction=None,
        retry=RetryPolicy(base_ms=1, cap_ms=2),
    )
    async with session:
        await collect(session.run([b.user_text("are you there?")], approve=allow_all))
    paths = files(traces)
    closure = line_of(paths[0], _markers.REQUEST_CLOSURE_ERROR)
    result = await areplay_trace(paths)
    assert result.matched and result.complete, result
    assert result.runs_total == 2
    # A resume that wrote a different closure record is the divergence, at its line.
    import projections._context as folding

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(folding, "REQUEST_CLOSURE_ERROR", "a different closure")
        d = (await areplay_trace(paths)).divergence
    assert d is not None and (d.file, d.line) == (paths[0], closure)


def test_a_crash_mid_tool_is_resumed_and_its_placeholder_sent() -> None:
    """R-GOLD-3, R-RESUME-10: the replay stops at the cut after ``request_end`` (the tool
    still running) and resumes; the resumed request carries the crash placeholder."""
    result = assert_replays(FIXTURES / "crash_tool")
    assert result.runs_total == 2
    assert sum('"type":"tool_list_ready"' in line for line in result.normalized) == 2


def test_partial_comparison_is_a_failure_unless_allowed(tmp_path: Path) -> None:
    """R-GOLD-5: a run the replay cannot reproduce (a disk that failed, R-TRACE-15) leaves
    fewer runs compared than the session holds: not a match, "N of M runs compared: <why>",
    unless partial comparisons are allowed."""
    records = read_trace(files("plain")).records
    # The second run ended by a write failure instead of its reply.
    n = max(i for i, r in enumerate(records) if payload_type(r) == "request_begin")
    cut = [*records[:n], b.abort(_markers.abort_trace_write_failed("disk full"))]
    result = replay_trace(cut)
    assert result.matched and not result.complete
    assert (result.runs_compared, result.runs_total) == (1, 2)
    assert (
        result.partial_reason
        == "1 of 2 runs compared: run 2 contains a trace write failure (R-TRACE-15)"
    )
    assert str(result).startswith("partial match (1 of 2 runs compared")
    assert not result.passed() and result.passed(allow_partial=True)
    with pytest.raises(AssertionError, match="1 of 2 runs compared"):
        assert_replays(cut)
    assert assert_replays(cut, allow_partial=True) is not None


@pytest.mark.anyio
async def test_live_tools_run_for_real_in_a_scratch_copy(tmp_path: Path) -> None:
    """R-GOLD-7: the model is answered from the recording, the tools run for real in a copy of
    the named workspace; a tool output that differs from the recorded one is the divergence,
    and the workspace itself is never touched."""
    from engine import LocalEnvironment, Session

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("ship on friday\n")
    script = {
        "responses": [
            [
                {"tool_call": {"name": "read_file", "arguments": {"path": "notes.txt"}}},
                {
                    "tool_call": {
                        "name": "write_file",
                        "arguments": {"path": "out.txt", "content": "done"},
                    }
                },
            ],
            [{"text": "Friday; out.txt written."}],
        ]
    }
    llm = ScriptedLLM(script)
    session = await Session.create(
        llm=llm, environment=LocalEnvironment(ws), root=tmp_path / "home", workspace=ws
    )
    async with session:
        await collect(session.run([b.user_text("What is the deadline?")], approve=allow_all))
    (ws / "out.txt").unlink()
    paths = DataRoot(tmp_path / "home").trace_files(session.id)
    same = await areplay_trace(paths, live_tools=ws)
    assert same.matched and same.complete, same
    assert not (ws / "out.txt").exists()  # written in the scratch copy only
    (ws / "notes.txt").write_text("ship on monday\n")
    changed = await areplay_trace(paths, live_tools=ws)
    d = changed.divergence
    assert d is not None, changed
    assert "output" in d.reason and "monday" in (d.actual or ""), d
    assert d.file == paths[0]
    assert d.line == line_of(paths[0], '"output":"ship on friday')
    with pytest.raises(NotADirectoryError, match="live-tools"):
        await areplay_trace(paths, live_tools=tmp_path / "absent")


def test_a_nested_child_is_replayed_and_compared(tmp_path: Path) -> None:
    """R-SUB-3: a subagent's own subagent is re-run from its trace too; a grandchild trace that
    disagrees with what its parent asked diverges, naming the grandchild."""
    base = tmp_path / "n"
    copy_scenario("subagent_nested", base)
    assert replay_trace(base).matched
    (grandchild,) = [
        p
        for p in files(base)
        if b"Read notes.txt" in p.read_bytes() and b'"type":"subagent"' not in p.read_bytes()
    ]
    grandchild.write_text(grandchild.read_text().replace('"Read notes.txt"', '"Read a.txt"'))
    d = replay_trace(base).divergence
    assert d is not None and d.file == grandchild
    assert d.reason.startswith(f"in subagent {grandchild.name.rsplit('_', 1)[0]}:")


def test_concurrent_children_are_paired_with_their_calls_by_prompt(tmp_path: Path) -> None:
    """Two children that ran at once may write their pointers in either order: each is
    compared with the call whose prompt it received, whatever the pointer order."""
    base = tmp_path / "c"
    copy_scenario("subagents_concurrent", base)
    (parent,) = [p for p in files(base) if b'"type":"subagent"' in p.read_bytes()]
    lines = parent.read_text().splitlines(keepends=True)
    at = [i for i, line in enumerate(lines) if '"type":"subagent"' in line]
    assert len(at) == 2
    lines[at[0]], lines[at[1]] = lines[at[1]], lines[at[0]]
    parent.write_text("".join(lines))
    result = replay_trace(base)
    assert result.matched and result.complete, result


@pytest.mark.anyio
async def test_an_aborted_goal_and_its_continuation_are_compared(tmp_path: Path) -> None:
    """R-GOLD-4, R-GOAL-7: a goal whose round 2 ended by an auth failure (an abort the engine
    made) and its continuation with ``GoalOptions(resume=True)`` are two runs, both compared."""
    from engine import GoalOptions, LocalEnvironment, Session

    ws = tmp_path / "ws"
    ws.mkdir()
    edit = {"path": "${GOAL_FILE}", "old": "\nstatus: active", "new": "\nstatus: complete"}
    llm = ScriptedLLM(
        {
            "responses": [
                [{"text": "Round 1: working."}],
                [{"fail": {"status": "auth", "message": "key revoked"}}],
                [{"tool_call": {"name": "edit_file", "arguments": edit}}],
                [{"text": "Done."}],
            ]
        }
    )
    session = await Session.create(
        llm=llm,
        environment=LocalEnvironment(ws),
        root=tmp_path / "home",
        workspace=ws,
        retry=RetryPolicy(base_ms=1, cap_ms=2),
    )
    async with session:
        first = await collect(
            session.run(
                [b.user_text("Ship it")], approve=allow_all, goal=GoalOptions(budget=50_000)
            )
        )
        again = await collect(
            session.run(None, approve=allow_all, goal=GoalOptions(resume=True, budget=50_000))
        )
    assert [m.payload.outcome for m in (first[-1], again[-1])] == ["aborted", "complete"]  # type: ignore[union-attr]
    result = await areplay_trace(DataRoot(tmp_path / "home").trace_files(session.id))
    assert result.matched and result.complete, result
    assert result.runs_total == 2


@pytest.mark.anyio
async def test_manual_compactions_aborted_mid_stream_and_in_backoff_replay(tmp_path: Path) -> None:
    """R-GOLD-2, R-GOLD-4: a manual compaction aborted while its summary streams and one
    aborted in its backoff wait (``compaction_end`` aborted, no ``abort``) are fired again at
    those points; the run after them is compared too."""
    from engine import AbortSignal, CompactionSettings, Session

    llm = ScriptedLLM(
        {
            "responses": [
                [{"text": "Hi there."}],
                [{"text": ["[summary]Greet", "ing so far"]}],
                [{"text": "half"}, {"fail": {"status": "timeout", "message": "slow"}}],
                [{"text": "Next."}],
            ]
        }
    )
    ws = tmp_path / "ws"
    ws.mkdir()
    session = await Session.create(
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        root=tmp_path / "home",
        workspace=ws,
        compaction=CompactionSettings(max_context_length=0),
        retry=RetryPolicy(base_ms=5, cap_ms=10),
    )
    async with session:
        await collect(session.run([b.user_text("hello")], approve=allow_all))
        streamed = AbortSignal()
        seen: list[OmniMessage] = []

        def on_message(msg: OmniMessage) -> None:
            seen.append(msg)
            if len(seen) == 2:  # the summary's start and first delta
                streamed.abort()

        assert await session.compact(signal=streamed, on_message=on_message) == "aborted"
        waiting = AbortSignal()
        session.add_backoff_listener(lambda _ms: waiting.abort())
        assert await session.compact(signal=waiting) == "aborted"
        await collect(session.run([b.user_text("again")], approve=allow_all))
    paths = DataRoot(tmp_path / "home").trace_files(session.id)
    ends = [
        r.payload for r in read_trace(paths).records if isinstance(r.payload, CompactionEndPayload)
    ]
    assert [(e.reason, e.status) for e in ends] == [("manual", "aborted")] * 2
    result = await areplay_trace(paths)
    assert str(result) == "match" and result.runs_total == 2


@pytest.mark.anyio
async def test_exhausted_reconnects_end_the_run_on_their_own(tmp_path: Path) -> None:
    """R-GOLD-2: ``reconnect failed after N retries`` is an abort the engine makes: nothing is
    fired, the replayed engine must give up after the same retries (the budget is read from
    the reason), and the run after it is compared too."""
    from engine import Session

    fail = [{"fail": {"status": "timeout", "message": "slow"}}]
    llm = ScriptedLLM({"responses": [fail, fail, fail, [{"text": "ok"}]]})
    ws = tmp_path / "ws"
    ws.mkdir()
    session = await Session.create(
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        root=tmp_path / "home",
        workspace=ws,
        retry=RetryPolicy(max_reconnects=2, base_ms=1, cap_ms=2),
    )
    async with session:
        await collect(session.run([b.user_text("go")], approve=allow_all))
        await collect(session.run([b.user_text("again")], approve=allow_all))
    paths = DataRoot(tmp_path / "home").trace_files(session.id)
    assert "reconnect failed after 2 retries" in paths[0].read_text()
    assert str(await areplay_trace(paths)) == "match"
    # One retry more than recorded: the last attempt announces a retry the recording never made.
    longer = await areplay_trace(paths, retry=RetryPolicy(max_reconnects=3, base_ms=1, cap_ms=2))
    d = longer.divergence
    assert d is not None and d.reason == "request_end: unexpected payload.retry_in_ms"
    assert d.line == line_of(paths[0], '"type":"abort"') - 1


def test_records_the_recording_lacks_do_not_shift_the_recorded_positions(tmp_path: Path) -> None:
    """R-GOLD-1..3 count recorded positions: a ``settings`` record (SPEC §23) that the replayed
    engine writes into a recording made before such records existed is not a position, so
    steering, aborts and crash cuts stay where the recording has them."""
    from eventstore import decode
    from replay import golden as _golden

    settings = decode(
        b'{"timestamp":"2026-12-02T00:00:00.000Z","type":"event_msg",'
        b'"payload":{"type":"settings","max_turns":100}}'
    )
    driver = _golden._Driver(
        _golden._Timing(), DataRoot(tmp_path), uncounted=frozenset({"settings"})
    )
    driver.on_record(settings, tmp_path)
    assert driver.count == 0
    driver.on_record(b.request_begin(), tmp_path)
    assert driver.count == 1


@pytest.mark.anyio
async def test_settings_changed_between_runs_are_the_replays_settings(tmp_path: Path) -> None:
    """SPEC §23 + R-GOLD-4/5: each run is replayed with the last settings record in force before
    it, not the session's first.  Run 1 under max_turns 5, no compaction, 3 reconnects; the
    session resumed with max_turns 1, a turns compaction and 1 reconnect: run 2 stops at its
    turn limit and compacts, run 3 gives up after 1 retry."""
    from engine import CompactionSettings, Session

    home, ws = tmp_path / "home", tmp_path / "ws"
    ws.mkdir()
    tool = {"tool_call": {"name": "t", "arguments": {}, "result": {"output": "ok"}}}
    fail = {"fail": {"status": "timeout", "message": "idle timeout"}}
    tools = [{"name": "t", "description": "test tool"}]
    first = ScriptedLLM({"tools": tools, "responses": [[tool], [{"text": "done"}]]})
    session = await Session.create(
        llm=first,
        environment=ScriptedEnvironment.from_llm(first),
        root=home,
        workspace=ws,
        max_turns=5,
        compaction=None,
        retry=RetryPolicy(max_reconnects=3, base_ms=1, cap_ms=2),
    )
    async with session:
        await collect(session.run([b.user_text("one")], approve=allow_all))
    second = ScriptedLLM(
        {
            "tools": tools,
            "responses": [[tool], [{"text": "[summary]s[/summary]"}], [fail], [fail]],
        }
    )
    resumed = await resume_session(
        DataRoot(home),
        session.id,
        llm=second,
        environment=ScriptedEnvironment.from_llm(second),
        max_turns=1,
        compaction=CompactionSettings(max_context_length=0, max_session_turns=1),
        retry=RetryPolicy(max_reconnects=1, base_ms=1, cap_ms=1),
    )
    async with resumed:
        await collect(resumed.run([b.user_text("two")], approve=allow_all))
        await collect(resumed.run([b.user_text("three")], approve=allow_all))
    paths = DataRoot(home).trace_files(session.id)
    text = "".join(p.read_text() for p in paths)
    assert text.count('"type":"settings"') >= 2
    assert "[reached max turns (1); stopping]" in text
    assert '"type":"compaction_begin"' in text and "failed after 1 retries" in text
    result = await areplay_trace(paths)
    assert str(result) == "match" and result.runs_total == 3, result
    # The first settings record alone replays run 2 with 5 turns and no compaction.
    (only_first,) = [s for s in read_trace(paths).records if payload_type(s) == "settings"][:1]
    kept = [
        r for r in read_trace(paths).records if payload_type(r) != "settings" or r is only_first
    ]
    assert not (await areplay_trace(kept)).matched


@pytest.mark.anyio
async def test_live_tools_run_the_subagents_tools_too(tmp_path: Path) -> None:
    """R-GOLD-7 with subagents (R-SUB-3): a child and its own child are re-run from their
    recorded answers, their tools for real in the same scratch workspace as the parent's (the
    parent reads what the child wrote); a grandchild's tool output that differs is the
    divergence, at the grandchild's recorded line."""
    from engine import LocalEnvironment, Session, SessionSubagentRunner

    home, ws = tmp_path / "home", tmp_path / "ws"
    ws.mkdir()
    (ws / "notes.txt").write_text("ship on friday\n")

    def call(name: str, **args: str) -> dict[str, object]:
        return {"tool_call": {"name": name, "arguments": args}}

    made = [
        ScriptedLLM(
            {
                "responses": [
                    [call("write_file", path="out.txt", content="from the child")],
                    [call("run_subagent", prompt="Read notes.txt")],
                    [{"text": "Wrote out.txt; the notes say friday."}],
                ]
            }
        ),
        ScriptedLLM({"responses": [[call("read_file", path="notes.txt")], [{"text": "Friday."}]]}),
    ]
    pending = list(made)
    runner = SessionSubagentRunner(
        lambda: pending.pop(0), root=home, workspace=ws, max_depth=2, sandbox="workspace-write"
    )
    parent = ScriptedLLM(
        {
            "responses": [
                [call("run_subagent", prompt="Write out.txt, then ask for the notes")],
                [call("read_file", path="out.txt")],
                [{"text": "Done: friday."}],
            ]
        }
    )
    session = await Session.create(
        llm=parent,
        environment=LocalEnvironment(ws, subagents=runner),
        root=home,
        workspace=ws,
    )
    async with runner, session:
        await collect(session.run([b.user_text("Prepare the release")], approve=allow_all))
    assert not pending
    (ws / "out.txt").unlink()
    base = tmp_path / "golden"
    for f in home.rglob("*.jsonl"):
        (base / f.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, base / f.parent.name / f.name)
    traces = files(base)
    assert len(traces) == 3
    text = "".join(p.read_text() for p in traces)
    assert '"output":"from the child"' in text and "ship on friday" in text
    same = await areplay_trace(base, live_tools=ws)
    assert same.matched and same.complete, same
    assert not (ws / "out.txt").exists()  # the child wrote into the scratch copy only
    (ws / "notes.txt").write_text("ship on monday\n")
    changed = await areplay_trace(base, live_tools=ws)
    d = changed.divergence
    assert d is not None, changed
    (grandchild,) = [
        p
        for p in traces
        if b'"name":"read_file"' in p.read_bytes()
        and b"notes.txt" in p.read_bytes()
        and b"run_subagent" not in p.read_bytes()
    ]
    assert d.file == grandchild and d.reason.startswith("in subagent "), d
    assert "monday" in (d.actual or ""), d
    assert d.line == line_of(grandchild, '"output":"ship on friday')


@pytest.mark.anyio
async def test_a_child_started_after_another_calls_output_replays_in_that_order(
    tmp_path: Path,
) -> None:
    """R-SUB-3, R-GOLD-5: two ``run_subagent`` calls of one turn where the second child started
    only after the first call's output was written (it was slow to list its tools): the replay
    holds the second child until the recording's records before its pointer are written, so
    the pointer stays after that output, every time."""
    import anyio

    from engine import LocalEnvironment, Session, SessionSubagentRunner

    home, ws = tmp_path / "home", tmp_path / "ws"
    ws.mkdir()
    first_output = anyio.Event()

    class Slow(ScriptedEnvironment):
        async def list_tools(self) -> list[ToolDefinition]:
            await first_output.wait()  # the second child starts once the first call is done
            return await super().list_tools()

    scripts = [{"responses": [[{"text": "first"}]]}, {"responses": [[{"text": "second"}]]}]
    made: list[ScriptedLLM] = []

    def environment_factory(_runner: object) -> ScriptedEnvironment:
        made.append(ScriptedLLM(scripts[len(made)]))
        return (Slow if len(made) == 2 else ScriptedEnvironment).from_llm(made[-1])

    runner = SessionSubagentRunner(
        lambda: made[-1], root=home, workspace=ws, environment_factory=environment_factory
    )
    spawn = [
        {"tool_call": {"name": "run_subagent", "arguments": {"prompt": p}}} for p in ("a", "b")
    ]
    parent = ScriptedLLM({"responses": [spawn, [{"text": "both done"}]]})
    session = await Session.create(
        llm=parent,
        environment=LocalEnvironment(ws, tools=[], subagents=runner),
        root=home,
        workspace=ws,
    )

    def on_record(msg: OmniMessage, _path: Path) -> None:
        if payload_type(msg) == "tool_call_output":
            first_output.set()

    session.add_record_listener(on_record)
    async with runner, session:
        await collect(session.run([b.user_text("do both")], approve=allow_all))
    paths = DataRoot(home).trace_files(session.id)
    kinds = [payload_type(r) for r in read_trace(paths).records]
    kinds = [k for k in kinds if k in ("subagent", "tool_call_output")]
    assert kinds == ["subagent", "tool_call_output", "subagent", "tool_call_output"]
    base = tmp_path / "golden"
    for f in home.rglob("*.jsonl"):
        (base / f.parent.name).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(f, base / f.parent.name / f.name)
    for _ in range(3):
        result = await areplay_trace(base)
        assert str(result) == "match", result
