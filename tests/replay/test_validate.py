"""The trace validator (SPEC §16.1 V-1…V-20): one violating trace per rule, realistic clean traces
and the reference traces."""

from __future__ import annotations

import itertools
import tracemalloc
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest

from eventstore import (
    OmniMessage,
    TokenCounts,
    ToolCallPayload,
    ToolDefinition,
    encode,
    encode_line,
    iter_trace,
)
from eventstore import builders as b
from replay import _validate
from replay._validate import Finding, validate_file, validate_paths, validate_session

SID = "session-2026-07-18-11-10-22-3f8a1c2d"
DATE = "2026-07-18"
TOOLS = [ToolDefinition(name="exec_command", description="Run a shell command.", parameters={})]
USAGE = TokenCounts(cache_read=0, cache_write=3, output=1, total=4)
REFERENCE = Path(__file__).parents[2].parent / "shared" / "reference-traces"

_BASE = datetime(2026, 7, 18, 3, 10, 22, tzinfo=UTC)
_ticks = itertools.count()


# --------------------------------------------------------------------------- fixture builders


def _iso(ms: int) -> str:
    t = _BASE + timedelta(milliseconds=ms)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{t.microsecond // 1000:03d}Z"


def seq(records: Iterable[OmniMessage]) -> list[OmniMessage]:
    """Restamp records with strictly increasing timestamps (deterministic, unlike the clock)."""
    return [msgspec.structs.replace(r, timestamp=_iso(next(_ticks))) for r in records]


def meta(session_id: str = SID, **overrides: str) -> OmniMessage:
    fields = {
        "session_id": session_id,
        "provider": "scripted",
        "model_id": "demo",
        "model_context_window": "unknown",
        "system_prompt": "You are careful.",
        "agent_state": "/home/u/.penguin/data/p/agents/a/agent_state",
        "workspace": "/home/u/project",
    } | overrides
    return b.session_meta(**fields)  # type: ignore[arg-type]


def trace_path(root: Path, index: int = 1, *, sid: str = SID, date: str = DATE) -> Path:
    return root / "traces" / date / f"{sid}_{index:03d}.jsonl"


def write_trace(path: Path, records: Sequence[OmniMessage | str], *, tail: bytes = b"") -> Path:
    """One record per line; a ``str`` entry is written verbatim as a line (malformed or blank
    lines); ``tail`` is appended after the last newline (a torn fragment)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("wb") as f:
        for r in records:
            f.write(r.encode() + b"\n" if isinstance(r, str) else encode_line(r))
        f.write(tail)
    return path


def head(prompt: str = "go") -> list[OmniMessage]:
    return [meta(), b.user_text(prompt), b.tool_list_ready(TOOLS)]


def text_turn(body: str = "Done.") -> list[OmniMessage]:
    return [
        b.request_begin(),
        b.assistant_text(body),
        b.token_usage(USAGE),
        b.request_end("completed"),
    ]


def tool_turn(*ids: str) -> list[OmniMessage]:
    """A completed turn calling ``ids``, each allowed and answered after ``request_end``."""
    out: list[OmniMessage] = [b.request_begin()]
    for cid in ids:
        out += [b.tool_call("exec_command", {"cmd": "ls"}, cid), b.approval_decision("allow", cid)]
    out += [b.token_usage(USAGE), b.request_end("completed")]
    out += [b.tool_call_output(cid, f"out {cid}") for cid in ids]
    return out


def check(
    tmp_path: Path, records: Sequence[OmniMessage | str], *, strict: bool = False, tail: bytes = b""
) -> list[Finding]:
    return validate_file(write_trace(trace_path(tmp_path), records, tail=tail), strict=strict)


def rules(findings: Iterable[Finding]) -> list[tuple[str, str, int]]:
    return [(f.rule, f.severity, f.line) for f in findings]


def of(findings: Iterable[Finding], rule: str) -> list[tuple[str, str, int]]:
    return [x for x in rules(findings) if x[0] == rule]


def errors(findings: Iterable[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "error"]


# --------------------------------------------------------------------------- clean traces


def test_finding_str_is_the_cli_format() -> None:
    """R-CLI-5: ``<path>:<line>: <V-id> <error|warning>: <message>``."""
    f = Finding(Path("/t/x_001.jsonl"), 7, "V-7", "error", "boom")
    assert str(f) == "/t/x_001.jsonl:7: V-7 error: boom"


def test_out_of_order_outputs_and_a_denial_are_clean(tmp_path: Path) -> None:
    """R-RUN-13/14: outputs after request_end in completion order; R-APPROVE-3 denial."""
    records = seq(
        [
            *head("List files and read b.txt"),
            b.request_begin(),
            b.thinking("Two tools."),
            b.assistant_text("I'll run three tools."),
            b.tool_call("exec_command", {"cmd": "sleep 1; ls"}, "call_1"),
            b.approval_decision("allow", "call_1"),
            b.tool_call("exec_command", {"cmd": "rm -rf /"}, "call_2"),
            b.approval_decision("deny", "call_2"),
            b.tool_call_output("call_2", "Tool call denied by user.", stop_reason="aborted"),
            b.tool_call("read_file", {"file_path": "b.txt"}, "call_3"),
            b.approval_decision("forbidden", "call_3"),
            b.tool_call_output("call_3", "Tool call denied by policy.", stop_reason="aborted"),
            b.tool_call("read_file", {"file_path": "c.txt"}, "call_4"),
            b.approval_decision("allow", "call_4"),
            b.token_usage(USAGE),
            b.request_end("completed"),
            b.tool_call_output("call_4", "contents of c.txt"),
            b.tool_call_output("call_1", "a.txt\nb.txt\n"),
            *text_turn("Both done."),
        ]
    )
    assert check(tmp_path, records, strict=True) == []


def test_retry_with_attempt_and_backoff_stamps_is_clean(tmp_path: Path) -> None:
    """R-RETRY-7/8 with the default ladder (base 250 ms, cap 30000 ms), including a dispatched
    tool whose output lands after its failed attempt (R-RETRY-5)."""
    records = seq(
        [
            *head(),
            b.request_begin(),
            b.tool_call("exec_command", {"cmd": "ls"}, "t1"),
            b.approval_decision("allow", "t1"),
            b.assistant_text("half an ans", stop_reason="timeout"),
            b.request_end("timeout", error_message="idle timeout", attempt=1, retry_in_ms=250),
            b.tool_call_output("t1", "a.txt"),
            b.request_begin(),
            b.request_end("malformed", attempt=2, retry_in_ms=500),
            b.request_begin(),
            b.request_end("failed", error_message="503", attempt=3, retry_in_ms=1000),
            b.request_begin(),
            b.assistant_text("Done."),
            b.token_usage(USAGE),
            b.request_end("completed", attempt=4),
        ]
    )
    assert check(tmp_path, records, strict=True) == []


def test_exhausted_retries_then_abort_is_clean(tmp_path: Path) -> None:
    """R-RETRY-9/10: ``retry_in_ms`` 10, 15 (capped), absent on the final failure; then abort."""
    records = seq(
        [
            *head(),
            b.request_begin(),
            b.request_end("timeout", attempt=1, retry_in_ms=10),
            b.request_begin(),
            b.request_end("timeout", attempt=2, retry_in_ms=15),
            b.request_begin(),
            b.request_end("timeout", attempt=3, retry_in_ms=15),
            b.request_begin(),
            b.request_end("timeout", attempt=4),
            b.abort("reconnect failed after 3 retries"),
            b.user_text("try again"),
            *text_turn(),
        ]
    )
    assert check(tmp_path, records, strict=True) == []


def _compacted_session(tmp_path: Path) -> tuple[Path, Path]:
    first = seq(
        [
            *head("Read notes.txt"),
            *tool_turn("call_1"),
            *text_turn("Notes say: ship on Friday."),
            b.compaction_begin("context", "summarize", context=4, turns=2),
            b.user_text("Write the hand-over note."),
            b.request_begin(),
            b.assistant_text("[summary]User read notes.txt: ship on Friday.[/summary]"),
            b.token_usage(USAGE),
            b.request_end("completed"),
            b.compaction_end("context", "summarize", "completed", attempt=1),
        ]
    )
    end = first[-1]
    summary = b.user_text(
        "[context_summary]\nUser read notes.txt: ship on Friday.\n[/context_summary]",
        timestamp=end.timestamp,
    )
    # R-TRACE-9: the rotated head re-writes the session's records with their old timestamps.
    second = [first[0], first[2], summary, *seq([b.user_text("Still Friday?"), *text_turn()])]
    return (
        write_trace(trace_path(tmp_path, 1), first),
        write_trace(trace_path(tmp_path, 2), second),
    )


def test_summarize_compaction_with_rotation_is_clean(tmp_path: Path) -> None:
    """R-COMPACT-12/13, R-TRACE-8/9: the completed compaction_end closes _001; _002 starts
    session_meta, tool_list_ready and the [context_summary] (stamped in the past, R-PROJ-3a)."""
    files = _compacted_session(tmp_path)
    assert validate_session(list(files), strict=True) == []
    assert validate_paths([tmp_path], strict=True) == []


def test_case_a_abort_is_clean(tmp_path: Path) -> None:
    """R-CARRY-3: a committed call skipped after the signal fired has no decision and no output;
    the abort explains it (V-10), and the next run starts with its prompt (V-14)."""
    records = seq(
        [
            *head(),
            b.request_begin(),
            b.tool_call("exec_command", {"cmd": "ls"}, "c1"),
            b.approval_decision("allow", "c1"),
            b.tool_call("exec_command", {"cmd": "make"}, "c2"),
            b.token_usage(USAGE),
            b.request_end("completed"),
            b.tool_call_output("c1", "[interrupted: tool aborted by user]", stop_reason="aborted"),
            b.abort("aborted by user"),
            b.user_text("continue the fix"),
            *text_turn(),
        ]
    )
    assert check(tmp_path, records, strict=True) == []


def test_case_b_abort_and_a_steering_message_are_clean(tmp_path: Path) -> None:
    """R-CARRY-4 (an aborted span), R-STEER-7/9 (delivered steering continues the task)."""
    records = seq(
        [
            *head(),
            b.request_begin(),
            b.assistant_text("I was say", stop_reason="aborted"),
            b.request_end("aborted", attempt=1),
            b.abort("aborted by user"),
            b.user_text("go on"),
            *text_turn("First answer."),
            b.user_text("[user_steering]\nalso check b.txt\n[/user_steering]"),
            *text_turn(),
        ]
    )
    assert check(tmp_path, records, strict=True) == []


def test_crash_trace_only_warns_about_the_open_request(tmp_path: Path) -> None:
    """V-4: a request open at the end of the file is a crash (W), nothing else is reported."""
    records = seq(
        [
            *head(),
            b.request_begin(),
            b.tool_call("exec_command", {"cmd": "ls"}, "c1"),
            b.approval_decision("allow", "c1"),
        ]
    )
    assert rules(check(tmp_path, records)) == [("V-4", "warning", 4)]


def test_resume_closures_after_an_in_span_abort_are_clean(tmp_path: Path) -> None:
    """R-TRACE-15a + R-RESUME-14a/14: an abort inside the spans, then the resume closures."""
    records = seq(
        [
            *head(),
            *text_turn(),
            b.compaction_begin("turns", "summarize", context=4, turns=1),
            b.user_text("Write the hand-over note."),
            b.request_begin(),
            b.abort("trace write failed: ENOSPC"),
            b.request_end(
                "aborted", error_message="process exited before the request ended", attempt=1
            ),
            b.compaction_end(
                "turns",
                "summarize",
                "failed",
                attempt=1,
                error_message="process exited before the compaction ended",
            ),
        ]
    )
    assert check(tmp_path, records, strict=True) == []


def test_compaction_with_unusable_attempt_and_repair_is_clean(tmp_path: Path) -> None:
    """R-COMPACT-14/15/19: a committed attempt calling a tool gets a repair (V-9, no approval),
    a corrective note, and the retry completes with ``attempt: 2``; compaction_end counts 2."""
    records = seq(
        [
            *head(),
            *text_turn(),
            b.compaction_begin("context", "summarize", context=4, turns=1),
            b.user_text("Write the hand-over note."),
            b.request_begin(),
            b.tool_call("exec_command", {"cmd": "ls"}, "k1"),
            b.token_usage(USAGE),
            b.request_end("completed"),
            b.tool_call_output(
                "k1",
                "[tool error] the compaction request expects a summary, not tool calls",
                stop_reason="failed",
            ),
            b.user_text("That reply cannot be used as a summary."),
            b.request_begin(),
            b.assistant_text("[summary]all done[/summary]"),
            b.token_usage(USAGE),
            b.request_end("completed", attempt=2),
            b.compaction_end("context", "summarize", "completed", attempt=2),
        ]
    )
    assert check(tmp_path, records, strict=True) == []


def test_discard_compaction_then_rotation_is_clean(tmp_path: Path) -> None:
    """R-COMPACT-5: discard writes no request and no attempt; the next file has no summary."""
    first = seq(
        [
            *head(),
            *text_turn(),
            b.compaction_begin("manual", "discard", context=4, turns=1),
            b.compaction_end("manual", "discard", "completed"),
        ]
    )
    second = [first[0], first[2], *seq([b.user_text("fresh start"), *text_turn()])]
    files = [
        write_trace(trace_path(tmp_path, 1), first),
        write_trace(trace_path(tmp_path, 2), second),
    ]
    assert validate_session(files, strict=True) == []


@pytest.mark.needs_shared(REFERENCE)
@pytest.mark.parametrize(
    "path",
    sorted(REFERENCE.glob("*/*/*.jsonl")) if REFERENCE.is_dir() else [],
    ids=lambda p: p.name,
)
def test_reference_traces_have_no_errors(path: Path) -> None:
    """INV-18 for traces the reference wrote (their fake usage totals only earn V-11 warnings)."""
    findings = validate_file(path)
    assert errors(findings) == []
    assert {f.rule for f in findings} <= {"V-11"}


@pytest.mark.needs_shared(REFERENCE)
def test_reference_sessions_have_no_errors() -> None:
    findings = validate_paths(sorted(REFERENCE.glob("*/")))
    traces = [f for f in findings if not f.path.name.endswith(".stream.jsonl")]
    assert errors(traces) == []


# --------------------------------------------------------------------------- V-1


def test_v1_malformed_middle_line_is_an_error(tmp_path: Path) -> None:
    records = seq(head())
    findings = check(tmp_path, [records[0], "{not json", records[1], records[2]])
    assert rules(findings) == [("V-1", "error", 2)]


def test_v1_not_an_envelope_is_malformed(tmp_path: Path) -> None:
    """R-READ-4: valid JSON that is not an envelope is malformed."""
    records = seq(head())
    findings = check(tmp_path, [records[0], '{"type":"model_msg"}', *records[1:]])
    assert rules(findings) == [("V-1", "error", 2)]


def test_v1_torn_last_line_is_a_warning(tmp_path: Path) -> None:
    findings = check(tmp_path, seq(head()), tail=b'{"timestamp":"2026-07-18T0')
    assert rules(findings) == [("V-1", "warning", 4)]


def test_v1_malformed_last_line_with_newline_is_a_warning(tmp_path: Path) -> None:
    findings = check(tmp_path, [*seq(head()), '{"timestamp":"2026'])
    assert rules(findings) == [("V-1", "warning", 4)]


def test_v1_decodable_last_line_without_newline_is_dropped(tmp_path: Path) -> None:
    """R-READ-2 [ours]: readers drop it, so the request it would have closed stays open."""
    records = seq([*head(), b.request_begin()])
    findings = check(tmp_path, records, tail=encode(b.request_end("completed")))
    assert rules(findings) == [("V-4", "warning", 4), ("V-1", "warning", 5)]


def test_v1_blank_line_is_a_warning(tmp_path: Path) -> None:
    records = seq([*head(), *text_turn()])
    findings = check(tmp_path, [*records[:3], "   ", *records[3:]])
    assert rules(findings) == [("V-1", "warning", 4)]


def test_v1_overlong_line_is_malformed_without_being_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-TRACE-17: a line over the limit is malformed; the records after it are still read."""
    monkeypatch.setattr(_validate, "_MAX_LINE_BYTES", 1000)
    records = seq([*head(), *text_turn("x" * 5000), *text_turn()])
    findings = check(tmp_path, records)
    assert rules(findings) == [("V-1", "error", 5)]


# --------------------------------------------------------------------------- V-2


def test_v2_first_record_must_be_session_meta(tmp_path: Path) -> None:
    records = seq(head())
    findings = check(tmp_path, [records[1], records[0], records[2]])
    assert rules(findings) == [("V-2", "error", 1)]


def test_v2_second_session_meta_is_an_error(tmp_path: Path) -> None:
    records = seq([*head(), meta(), *text_turn()])
    assert rules(check(tmp_path, records)) == [("V-2", "error", 4)]


def test_v2_crash_residue_latest_file_is_a_warning(tmp_path: Path) -> None:
    """R-ROOT-10: a highest-index file with no decodable session_meta (a torn first record)."""
    first = write_trace(trace_path(tmp_path, 1), seq([*head(), *text_turn()]))
    residue = write_trace(trace_path(tmp_path, 2), [], tail=b'{"timestamp":"2026-07-18T03')
    findings = validate_session([first, residue])
    assert [(f.path, *x) for f, x in zip(findings, rules(findings), strict=True)] == [
        (residue, "V-2", "warning", 0),
        (residue, "V-1", "warning", 1),
    ]
    # The same file is an error when it is not the latest one.
    later = write_trace(trace_path(tmp_path, 3), seq(head()))
    assert ("V-2", "error", 0) in rules(
        validate_file(residue, session_files=[first, residue, later])
    )


def test_v2_head_only_latest_file_is_a_warning(tmp_path: Path) -> None:
    """R-ROOT-10: an index > 1 latest file holding only its rotation head."""
    _compacted_session(tmp_path)
    records = seq(head())
    residue = write_trace(trace_path(tmp_path, 3), [records[0], records[2]])
    findings = validate_paths([tmp_path])
    assert [(f.path.name, f.rule, f.severity) for f in findings] == [
        (residue.name, "V-2", "warning")
    ]


# --------------------------------------------------------------------------- V-3


def test_v3_partial_record_is_an_error(tmp_path: Path) -> None:
    records = seq([*head(), b.request_begin(), b.partial_text("start"), b.assistant_text("x")])
    records += seq([b.token_usage(USAGE), b.request_end("completed")])
    assert rules(check(tmp_path, records)) == [("V-3", "error", 5)]


def test_v3_origin_tagged_record_is_an_error(tmp_path: Path) -> None:
    child = b.tool_call_output("c9", "child output", origin=["session-child"])
    records = seq([*head(), *text_turn(), child])
    assert rules(check(tmp_path, records)) == [("V-3", "error", 8)]


# --------------------------------------------------------------------------- V-4 / V-5


def test_v4_request_end_without_request(tmp_path: Path) -> None:
    records = seq([*head(), b.request_end("completed")])
    assert rules(check(tmp_path, records)) == [("V-4", "error", 4)]


def test_v4_request_begin_while_open(tmp_path: Path) -> None:
    records = seq([*head(), b.request_begin(), *text_turn()])
    assert rules(check(tmp_path, records)) == [("V-4", "error", 5)]


def test_v5_compaction_end_without_begin(tmp_path: Path) -> None:
    records = seq([*head(), *text_turn(), b.compaction_end("turns", "summarize", "failed")])
    assert rules(check(tmp_path, records)) == [("V-5", "error", 8)]


def test_v5_nested_compaction_and_mismatched_end(tmp_path: Path) -> None:
    records = seq(
        [
            *head(),
            *text_turn(),
            b.compaction_begin("turns", "discard", context=4, turns=1),
            b.compaction_begin("manual", "discard", context=4, turns=1),
            b.compaction_end("context", "discard", "failed"),
        ]
    )
    assert of(check(tmp_path, records), "V-5") == [("V-5", "error", 9), ("V-5", "error", 10)]


def test_v5_open_compaction_at_end_of_file_is_a_warning(tmp_path: Path) -> None:
    records = seq(
        [
            *head(),
            *text_turn(),
            b.compaction_begin("turns", "summarize", context=4, turns=1),
            b.user_text("Write the hand-over note."),
        ]
    )
    assert rules(check(tmp_path, records)) == [("V-5", "warning", 8)]


# --------------------------------------------------------------------------- V-6


def _closure(summary_text: str) -> list[OmniMessage]:
    return [
        b.compaction_begin("context", "summarize", context=4, turns=1),
        b.user_text("Write the hand-over note."),
        b.request_begin(),
        b.assistant_text(summary_text),
        b.token_usage(USAGE),
        b.request_end("completed"),
        b.compaction_end("context", "summarize", "completed", attempt=1),
    ]


def test_v6_record_after_completed_compaction_end_is_an_error(tmp_path: Path) -> None:
    records = seq([*head(), *text_turn(), *_closure("[summary]ok[/summary]"), *text_turn()])
    assert rules(check(tmp_path, records)) == [("V-6", "error", 14)]


def test_v6_void_closure_is_only_a_warning(tmp_path: Path) -> None:
    """R-RESUME-15: no usable summary (an empty pair) → void closure; the resumed session appends
    to the same file, which is then not an error."""
    records = seq([*head(), *text_turn(), *_closure("[summary]\n[/summary]"), *text_turn()])
    assert rules(check(tmp_path, records)) == [("V-6", "warning", 14)]


def test_v6_rotated_file_must_start_with_tool_list_ready(tmp_path: Path) -> None:
    first, _ = _compacted_session(tmp_path)
    second = trace_path(tmp_path, 2)
    write_trace(second, [meta(), *seq([b.user_text("no toolset head"), *text_turn()])])
    findings = validate_session([first, second])
    assert [(f.path, *x) for f, x in zip(findings, rules(findings), strict=True)] == [
        (second, "V-6", "error", 2)
    ]


def test_v6_context_summary_only_first_in_a_rotated_file(tmp_path: Path) -> None:
    summary = "[context_summary]\nwritten twice\n[/context_summary]"
    in_first_file = seq([meta(), b.user_text(summary), b.tool_list_ready(TOOLS), *text_turn()])
    assert rules(check(tmp_path, in_first_file)) == [("V-6", "warning", 2)]
    not_first = seq([*head(), b.user_text(summary), *text_turn()])
    assert rules(check(tmp_path, not_first)) == [("V-6", "warning", 4)]


# --------------------------------------------------------------------------- V-7


def test_v7_output_without_call(tmp_path: Path) -> None:
    records = seq([*head(), *text_turn(), b.tool_call_output("ghost", "boo")])
    findings = check(tmp_path, records)
    assert rules(findings) == [("V-7", "error", 8)]
    assert "ghost" in findings[0].message


def test_v7_output_for_an_interrupted_call(tmp_path: Path) -> None:
    """R-MSG-15 / R-RUN-12: a call with stop_reason aborted is never paired."""
    records = seq(
        [
            *head(),
            b.request_begin(),
            b.tool_call("exec_command", "{", "c1", stop_reason="aborted"),
            b.request_end("aborted", attempt=1),
            b.tool_call_output("c1", "x"),
        ]
    )
    assert of(check(tmp_path, records), "V-7") == [("V-7", "error", 7)]


def test_v7_second_output_for_a_call(tmp_path: Path) -> None:
    records = seq([*head(), *tool_turn("c1"), b.tool_call_output("c1", "again")])
    assert rules(check(tmp_path, records)) == [("V-7", "error", 10)]


def test_v7_call_outside_a_request_span(tmp_path: Path) -> None:
    records = seq(
        [
            *head(),
            b.tool_call("exec_command", "{}", "c1"),
            b.approval_decision("allow", "c1"),
            b.tool_call_output("c1", "x"),
        ]
    )
    assert rules(check(tmp_path, records)) == [("V-7", "error", 6)]


def test_v7_a_tool_call_id_used_twice_in_a_file_r_run_20(tmp_path: Path) -> None:
    """R-RUN-20: ids are unique in a session.  A call approved in an attempt a crash left open
    (closed aborted by resume), then a new call under the same id: no second decision for the
    first call, so V-8 alone does not see it."""
    records = seq(
        [
            *head(),
            b.request_begin(),
            b.tool_call("exec_command", "{}", "read_file"),
            b.request_end("aborted", attempt=1),
            *tool_turn("read_file"),
        ]
    )
    findings = errors(check(tmp_path, records))
    assert rules(findings) == [("V-7", "error", 8)]
    assert "read_file" in findings[0].message and "line 5" in findings[0].message


def test_v7_a_tool_call_id_used_again_in_a_later_file_r_run_20(tmp_path: Path) -> None:
    first, second = _compacted_session(tmp_path)
    assert errors(validate_session([first, second])) == []
    lines = second.read_bytes().splitlines(keepends=True)
    reused = seq([b.user_text("more"), *tool_turn(_first_call_id(first))])
    second.write_bytes(b"".join(lines) + b"".join(encode_line(r) for r in reused))
    findings = errors(validate_session([first, second]))
    assert [(f.rule, f.path) for f in findings] == [("V-7", second)]
    assert first.name in findings[0].message


def _first_call_id(path: Path) -> str:
    for record in iter_trace(path, report=False):
        if isinstance(record.payload, ToolCallPayload):
            return record.payload.tool_call_id
    raise AssertionError(f"{path}: no tool_call")


# --------------------------------------------------------------------------- V-8 / V-9


def test_v8_output_without_decision(tmp_path: Path) -> None:
    """A written case-A placeholder (no decision) is caught here, not by V-15."""
    records = seq(
        [
            *head(),
            b.request_begin(),
            b.tool_call("exec_command", "{}", "c1"),
            b.token_usage(USAGE),
            b.request_end("completed"),
            b.tool_call_output("c1", "[interrupted: tool aborted by user]", stop_reason="aborted"),
            b.abort("aborted by user"),
        ]
    )
    assert rules(check(tmp_path, records)) == [("V-8", "error", 8)]


@pytest.mark.parametrize(
    ("decision", "output", "stop_reason"),
    [
        ("deny", "ran anyway", "completed"),
        ("deny", "Tool call denied by policy.", "aborted"),
        ("forbidden", "Tool call denied by policy.", "completed"),
    ],
)
def test_v8_output_after_denial_must_be_the_denial(
    tmp_path: Path, decision: str, output: str, stop_reason: str
) -> None:
    records = seq(
        [
            *head(),
            b.request_begin(),
            b.tool_call("exec_command", "{}", "c1"),
            b.approval_decision(decision, "c1"),  # type: ignore[arg-type]
            b.tool_call_output("c1", output, stop_reason=stop_reason),  # type: ignore[arg-type]
            b.token_usage(USAGE),
            b.request_end("completed"),
        ]
    )
    findings = check(tmp_path, records)
    assert rules(findings) == [("V-8", "error", 7)]
    assert decision in findings[0].message


def test_v8_second_decision_and_decision_before_call(tmp_path: Path) -> None:
    records = seq(
        [
            *head(),
            b.request_begin(),
            b.approval_decision("allow", "c1"),
            b.tool_call("exec_command", "{}", "c1"),
            b.approval_decision("allow", "c1"),
            b.token_usage(USAGE),
            b.request_end("completed"),
            b.tool_call_output("c1", "x"),
        ]
    )
    assert rules(check(tmp_path, records)) == [("V-8", "error", 5), ("V-8", "error", 7)]


def test_v9_decision_inside_compaction_span(tmp_path: Path) -> None:
    records = seq(
        [
            *head(),
            *text_turn(),
            b.compaction_begin("context", "summarize", context=4, turns=1),
            b.user_text("Write the note."),
            b.request_begin(),
            b.tool_call("exec_command", "{}", "k1"),
            b.approval_decision("allow", "k1"),
            b.token_usage(USAGE),
            b.request_end("completed"),
            b.tool_call_output("k1", "listing", stop_reason="completed"),
            b.compaction_end(
                "context",
                "summarize",
                "failed",
                attempt=1,
                error_message="the response called tools instead of writing a summary",
            ),
        ]
    )
    assert rules(check(tmp_path, records)) == [("V-9", "error", 12), ("V-9", "error", 15)]


# --------------------------------------------------------------------------- V-10


def _call_without_output() -> list[OmniMessage]:
    return [
        b.request_begin(),
        b.tool_call("exec_command", "{}", "c1"),
        b.approval_decision("allow", "c1"),
        b.token_usage(USAGE),
        b.request_end("completed"),
    ]


def test_v10_call_without_output_before_the_next_task_is_a_warning(tmp_path: Path) -> None:
    """A crash that a resume continued: the call's answer was the crash placeholder."""
    records = seq([*head(), *_call_without_output(), b.user_text("next task"), *text_turn()])
    findings = check(tmp_path, records)
    assert rules(findings) == [("V-10", "warning", 5)]
    assert "c1" in findings[0].message


def test_v10_end_of_file_explains_the_missing_output(tmp_path: Path) -> None:
    assert check(tmp_path, seq([*head(), *_call_without_output()])) == []


def test_v10_a_later_run_s_abort_does_not_explain_it(tmp_path: Path) -> None:
    """R-RESUME-10: the abort must come before any run boundary (here an empty-prompt run)."""
    records = seq(
        [
            *head(),
            *_call_without_output(),
            b.tool_list_ready(TOOLS),
            b.request_begin(),
            b.request_end("aborted", attempt=1),
            b.abort("aborted by user"),
        ]
    )
    assert rules(check(tmp_path, records)) == [("V-10", "warning", 5)]


def test_v10_an_output_later_in_the_file_satisfies_it(tmp_path: Path) -> None:
    """ "never gets an output in the file": a late output (a V-8 matter) is still an output."""
    records = seq(
        [*head(), *_call_without_output(), b.user_text("next"), b.tool_call_output("c1", "late")]
    )
    assert of(check(tmp_path, records), "V-10") == []


def test_v10_ignores_uncommitted_and_interrupted_calls(tmp_path: Path) -> None:
    records = seq(
        [
            *head(),
            b.request_begin(),
            b.tool_call("exec_command", "{}", "c1"),
            b.approval_decision("allow", "c1"),
            b.request_end("auth", error_message="bad key", attempt=1),
            b.abort("llm request error: bad key"),
            b.user_text("again"),
            b.request_begin(),
            b.tool_call("exec_command", "{", "c2", stop_reason="timeout"),
            b.token_usage(USAGE),
            b.request_end("completed"),
            b.user_text("next"),
            *text_turn(),
        ]
    )
    assert check(tmp_path, records) == []


# --------------------------------------------------------------------------- V-11


def test_v11_token_usage_placement(tmp_path: Path) -> None:
    records = seq(
        [
            *head(),
            b.request_begin(),
            b.assistant_text("x"),
            b.request_end("completed"),
            b.token_usage(USAGE),  # right after its request_end (reference order): fine
            b.user_text("next"),
            b.request_begin(),
            b.token_usage(USAGE),
            b.request_end("completed"),
            b.token_usage(USAGE),  # attributed to the request just ended: its second
            b.token_usage(USAGE),  # not right after a request_end: outside any span
            b.request_begin(),
            b.token_usage(USAGE),
            b.token_usage(USAGE),  # second in one span
            b.request_end("completed"),
        ]
    )
    assert rules(check(tmp_path, records)) == [
        ("V-11", "error", 12),
        ("V-11", "warning", 13),
        ("V-11", "error", 16),
    ]


def test_v11_counts_must_add_up(tmp_path: Path) -> None:
    bad = TokenCounts(cache_read=1, cache_write=2, output=3, total=7)
    negative = TokenCounts(cache_read=-1, cache_write=2, output=3, total=4)
    records = seq(
        [
            *head(),
            b.request_begin(),
            b.token_usage(bad, negative),
            b.request_end("completed"),
        ]
    )
    findings = check(tmp_path, records)
    assert rules(findings) == [("V-11", "warning", 5), ("V-11", "warning", 5)]
    assert "negative" in findings[0].message
    assert "total 7" in findings[1].message


# --------------------------------------------------------------------------- V-12 / V-13


def _attempts(*ends: OmniMessage) -> list[OmniMessage]:
    out: list[OmniMessage] = [*head()]
    for end in ends:
        out += [b.request_begin(), end]
    return seq(out)


@pytest.mark.parametrize(
    ("ends", "line"),
    [
        # attempt missing on a failure
        ((b.request_end("timeout", retry_in_ms=250),), 5),
        # attempt on a clean first-try completion
        ((b.request_end("completed", attempt=1),), 5),
        # wrong numbering
        (
            (
                b.request_end("timeout", attempt=1, retry_in_ms=250),
                b.request_end("timeout", attempt=3),
            ),
            7,
        ),
        # completion after a retry without attempt
        ((b.request_end("timeout", attempt=1, retry_in_ms=250), b.request_end("completed")), 7),
        # retry_in_ms decreasing
        (
            (
                b.request_end("timeout", attempt=1, retry_in_ms=500),
                b.request_end("timeout", attempt=2, retry_in_ms=250),
            ),
            7,
        ),
        # grows faster than doubling
        (
            (
                b.request_end("timeout", attempt=1, retry_in_ms=250),
                b.request_end("timeout", attempt=2, retry_in_ms=1000),
            ),
            7,
        ),
        # changes after reaching its cap
        (
            (
                b.request_end("timeout", attempt=1, retry_in_ms=100),
                b.request_end("timeout", attempt=2, retry_in_ms=150),
                b.request_end("timeout", attempt=3, retry_in_ms=200),
            ),
            9,
        ),
        # retry_in_ms on auth (never retried)
        ((b.request_end("auth", attempt=1, retry_in_ms=250),), 5),
        # retry_in_ms on a completion
        ((b.request_end("completed", retry_in_ms=250),), 5),
        # a retried failure without retry_in_ms
        ((b.request_end("failed", attempt=1), b.request_end("completed", attempt=2)), 5),
    ],
)
def test_v12_attempt_and_retry_stamps(
    tmp_path: Path, ends: tuple[OmniMessage, ...], line: int
) -> None:
    assert of(check(tmp_path, _attempts(*ends)), "V-12") == [("V-12", "warning", line)]


def test_v12_attempts_restart_with_each_turn(tmp_path: Path) -> None:
    """A completed turn ends the attempt group; an abort ends a failed one."""
    records = seq(
        [
            *head(),
            b.request_begin(),
            b.request_end("timeout", attempt=1, retry_in_ms=250),
            b.request_begin(),
            b.request_end("completed", attempt=2),
            b.request_begin(),
            b.request_end("timeout", attempt=1),
            b.abort("reconnect failed after 0 retries"),
            b.user_text("again"),
            b.request_begin(),
            b.request_end("failed", attempt=1, error_message="x"),
        ]
    )
    assert check(tmp_path, records) == []


def test_v12_compaction_end_attempt_counts_its_requests(tmp_path: Path) -> None:
    records = seq(
        [
            *head(),
            *text_turn(),
            b.compaction_begin("turns", "summarize", context=4, turns=1),
            b.user_text("note"),
            b.request_begin(),
            b.request_end("timeout", attempt=1, retry_in_ms=250),
            b.request_begin(),
            b.request_end("timeout", attempt=2),
            b.compaction_end("turns", "summarize", "failed", attempt=1, error_message="x"),
        ]
    )
    assert rules(check(tmp_path, records)) == [("V-12", "warning", 14)]


def test_v13_retry_stamped_failure_must_be_retried(tmp_path: Path) -> None:
    records = seq(
        [
            *head(),
            b.request_begin(),
            b.tool_call("exec_command", "{}", "c1"),
            b.approval_decision("allow", "c1"),
            b.request_end("timeout", attempt=1, retry_in_ms=250),
            b.tool_call_output("c1", "x"),
            b.user_text("something else"),
        ]
    )
    assert rules(check(tmp_path, records)) == [("V-13", "warning", 7)]


def test_v13_abort_during_backoff_and_crash_are_fine(tmp_path: Path) -> None:
    during_backoff = _attempts(b.request_end("timeout", attempt=1, retry_in_ms=250))
    assert (
        check(tmp_path, [*during_backoff, *seq([b.abort("aborted during reconnect backoff")])])
        == []
    )
    assert check(tmp_path, during_backoff) == []


# --------------------------------------------------------------------------- V-14


def test_v14_abort_must_end_its_run(tmp_path: Path) -> None:
    records = seq([*head(), *text_turn(), b.abort("aborted by user"), b.assistant_text("more")])
    assert rules(check(tmp_path, records)) == [("V-14", "warning", 8)]


def test_v14_accepts_every_start_of_a_new_run(tmp_path: Path) -> None:
    for nxt in (
        b.user_text("next"),
        b.image_url("https://example.com/a.png"),
        b.tool_list_ready(TOOLS),
        b.request_begin(),
        b.compaction_begin("manual", "discard", context=4, turns=1),
    ):
        records = seq([*head(), *text_turn(), b.abort("aborted by user"), nxt])
        assert of(check(tmp_path, records), "V-14") == [], nxt


# --------------------------------------------------------------------------- V-15 / V-16


@pytest.mark.parametrize(
    "body",
    [
        "[turn_aborted]\n  [user_input]go[/user_input]\n[/turn_aborted]",
        "[turn_retried]\n  [text]half[/text]\n[/turn_retried]\n",
        "<turn_aborted>\n</turn_aborted>",
    ],
)
def test_v15_written_synthetic_block(tmp_path: Path, body: str) -> None:
    records = seq([*head(), b.user_text(body), *text_turn()])
    assert rules(check(tmp_path, records)) == [("V-15", "warning", 4)]


def test_v15_written_crash_placeholder(tmp_path: Path) -> None:
    records = seq(
        [
            *head(),
            *tool_turn("c1")[:-1],
            b.tool_call_output(
                "c1",
                "[interrupted: process exited before the tool finished]",
                stop_reason="aborted",
            ),
        ]
    )
    assert rules(check(tmp_path, records)) == [("V-15", "warning", 9)]


def test_v16_malformed_steering(tmp_path: Path) -> None:
    records = seq(
        [
            *head(),
            *text_turn(),
            b.user_text("[user_steering]no newlines[/user_steering]"),
            *text_turn(),
        ]
    )
    assert rules(check(tmp_path, records)) == [("V-16", "warning", 8)]


# --------------------------------------------------------------------------- V-17 / V-18


def test_v17_session_id_must_match_file_name(tmp_path: Path) -> None:
    records = seq([meta("session-2026-07-18-11-10-22-00000000"), *head()[1:], *text_turn()])
    assert rules(check(tmp_path, records)) == [("V-17", "error", 1)]


def test_v17_files_share_system_prompt_and_workspace(tmp_path: Path) -> None:
    first, _ = _compacted_session(tmp_path)
    second = trace_path(tmp_path, 2)
    write_trace(
        second,
        [
            meta(workspace="/elsewhere"),
            *seq([b.tool_list_ready(TOOLS), b.user_text("hi"), *text_turn()]),
        ],
    )
    findings = validate_session([second, first])
    assert [(f.path, *x) for f, x in zip(findings, rules(findings), strict=True)] == [
        (second, "V-17", "error", 1)
    ]
    assert "workspace" in findings[0].message


def test_v18_gap_and_second_date_directory(tmp_path: Path) -> None:
    _, second = _compacted_session(tmp_path)
    moved = trace_path(tmp_path, 3, date="2026-07-19")
    moved.parent.mkdir(parents=True)
    second.rename(moved)
    findings = validate_paths([tmp_path / "traces"])
    assert [(f.path, *x) for f, x in zip(findings, rules(findings), strict=True)] == [
        (moved, "V-18", "warning", 0),
        (moved, "V-18", "warning", 0),
    ]
    assert "2 missing" in findings[0].message


# --------------------------------------------------------------------------- V-19


@pytest.mark.parametrize(
    "line",
    [
        # a known model payload with an out-of-range enum
        '{"timestamp":"2026-07-18T03:10:22.531Z","type":"model_msg","payload":{"type":"text","role":"system","text":"x"}}',
        # a required key missing
        '{"timestamp":"2026-07-18T03:10:22.531Z","type":"event_msg","payload":{"type":"abort"}}',
        # the wrong JSON type
        '{"timestamp":"2026-07-18T03:10:22.531Z","type":"event_msg","payload":{"type":"approval_decision","decision":"allow","tool_call_id":7}}',
        # an event payload in a model_msg envelope
        '{"timestamp":"2026-07-18T03:10:22.531Z","type":"model_msg","payload":{"type":"request_begin"}}',
        # a role outside its type's range
        '{"timestamp":"2026-07-18T03:10:22.531Z","type":"model_msg","payload":{"type":"thinking","role":"user","thinking":"x"}}',
        # mcp_connect_end result with a bad transport
        '{"timestamp":"2026-07-18T03:10:22.531Z","type":"event_msg","payload":{"type":"mcp_connect_end","status":"completed","results":[{"server":"s","transport":"ftp","status":"completed","duration_ms":3}]}}',
    ],
)
def test_v19_known_payload_with_wrong_shape(tmp_path: Path, line: str) -> None:
    records = seq([*head(), *text_turn()])
    findings = check(tmp_path, [*records, line])
    assert rules(findings) == [("V-19", "error", 8)]


def test_v19_session_meta_with_wrong_shape(tmp_path: Path) -> None:
    """Readers cannot use it, so the latest file it heads is crash residue (R-ROOT-10)."""
    bad = '{"timestamp":"2026-07-18T03:10:22.531Z","type":"session_meta","payload":{"session_id":"x"}}'
    findings = check(tmp_path, [bad, *seq(head()[1:])])
    assert rules(findings) == [("V-2", "warning", 0), ("V-19", "error", 1)]


def test_v19_unknown_future_types_are_accepted(tmp_path: Path) -> None:
    """R-MSG-7, R-READ-4: a newer writer's payload and envelope types are kept, not flagged."""
    records = seq([*head(), *text_turn()])
    future = [
        '{"timestamp":"2026-07-18T03:10:22.531Z","type":"event_msg","payload":{"type":"heartbeat","n":1}}',
        '{"timestamp":"2026-07-18T03:10:22.531Z","type":"model_msg","payload":{"type":"audio","role":"user"}}',
        '{"timestamp":"2026-07-18T03:10:22.531Z","type":"telemetry_msg","payload":{"x":1}}',
    ]
    assert check(tmp_path, [*records, *future]) == []


# --------------------------------------------------------------------------- V-20


def test_v20_decreasing_timestamps_only_with_strict(tmp_path: Path) -> None:
    records = seq([*head(), *text_turn()])
    records[5] = msgspec.structs.replace(records[5], timestamp="2020-01-01T00:00:00.000Z")
    assert check(tmp_path, records) == []
    assert rules(check(tmp_path, records, strict=True)) == [("V-20", "warning", 6)]


# --------------------------------------------------------------------------- entry points


def test_validate_paths_groups_sessions_and_ignores_locks(tmp_path: Path) -> None:
    _compacted_session(tmp_path)
    other_sid = "session-2026-07-18-12-00-00-aaaaaaaa"
    other = write_trace(
        trace_path(tmp_path, 1, sid=other_sid),
        seq([meta(other_sid), b.user_text("x"), b.request_end("completed")]),
    )
    (other.parent / f"{other_sid}.lock").write_text("123")
    findings = validate_paths([tmp_path])
    assert [(f.path, *x) for f, x in zip(findings, rules(findings), strict=True)] == [
        (other, "V-4", "error", 3)
    ]
    # A file named twice (directly and through its directory) is validated once.
    assert validate_paths([other, other.parent]) == findings
    with pytest.raises(FileNotFoundError):
        validate_paths([tmp_path / "missing"])


def test_validate_file_finds_its_siblings(tmp_path: Path) -> None:
    """Without ``session_files`` the directory tells whether the file is the latest one."""
    residue = write_trace(trace_path(tmp_path, 1), [])
    assert rules(validate_file(residue)) == [("V-2", "warning", 0)]
    write_trace(trace_path(tmp_path, 2), seq(head()))
    assert rules(validate_file(residue)) == [("V-2", "error", 0)]


def test_validate_session_rejects_two_sessions(tmp_path: Path) -> None:
    a = write_trace(trace_path(tmp_path, 1), seq(head()))
    other = "session-2026-07-18-12-00-00-aaaaaaaa"
    c = write_trace(trace_path(tmp_path, 1, sid=other), seq([meta(other)]))
    with pytest.raises(ValueError, match="more than one session"):
        validate_session([a, c])


def test_large_file_streams_in_bounded_memory(tmp_path: Path) -> None:
    """The validator streams: peak memory stays far below the file size (~8 MB here)."""
    body = "x" * 4000
    records: list[OmniMessage] = [*head()]
    for i in range(2000):
        records += tool_turn(f"c{i}")[:-1]
        records.append(b.tool_call_output(f"c{i}", body))
    path = write_trace(trace_path(tmp_path), seq(records))
    size = path.stat().st_size
    tracemalloc.start()
    try:
        findings = validate_file(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert findings == []
    assert size > 8_000_000
    assert peak < size / 4
