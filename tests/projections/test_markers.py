"""Marker blocks and exact strings (SPEC Appendix A, R-COMPACT-10, R-CARRY-6, R-CARRY-12,
R-RETRY-11, R-STEER-5, R-STEER-9, R-RESUME-16, R-FORK-3)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from eventstore import TextPayload, decode
from eventstore import builders as b
from projections import markers as m

SHARED = Path(__file__).parents[2].parent / "shared"


# --------------------------------------------------------------------------- R-COMPACT-10


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("preamble [summary]new form[/summary] postscript", "new form"),
        ("[summary]a[/summary] <summary>b</summary>", "a"),
        ("[summary]\n[/summary]\nBody.", "Body."),
        ("[summary]\n[summary]\nBody inside.[/summary]", "Body inside."),
        ("[summary][/summary]<summary>legacy body</summary>", "legacy body"),
        ("[summary]\n[/summary]", ""),
    ],
)
def test_extract_summary_spec_examples_r_compact_10(raw: str, expected: str) -> None:
    assert m.extract_summary(raw) == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        # Tagless output is returned verbatim, trimmed.
        ("  plain hand-over note\n", "plain hand-over note"),
        ("", ""),
        ("   \n\t", ""),
        # The first non-empty square pair wins over later ones.
        ("[summary] [/summary][summary]second[/summary][summary]third[/summary]", "second"),
        # Square pairs are all scanned before any angle pair.
        ("<summary>angle</summary>[summary]square[/summary]", "square"),
        # Angle-only, with stray tags inside the pair stripped.
        ("<summary>a <summary>b</summary>", "a b"),
        # A lone opening tag: step (2) strips the stray tag.
        ("[summary]only an opening tag", "only an opening tag"),
        ("only a closing tag[/summary]", "only a closing tag"),
        # Step (2) removes whole blocks (content included), both forms, and stray tags.
        ("[summary] [/summary]kept<summary></summary> too</summary>", "kept too"),
        # Inner content is kept verbatim apart from the trim.
        ("[summary]\n  line 1\n  line 2\n[/summary]", "line 1\n  line 2"),
        # JavaScript trim: U+FEFF is whitespace, U+001C is not.
        ("\ufeff[summary]\ufeffx\ufeff[/summary]", "x"),
        ("[summary]\x1cx[/summary]", "\x1cx"),
    ],
)
def test_extract_summary_ladder_details_r_compact_10(raw: str, expected: str) -> None:
    assert m.extract_summary(raw) == expected


def test_strip_marker_blocks_order() -> None:
    """R-COMPACT-10 *strip*: square blocks, stray square tags, angle blocks, stray angle tags."""
    text = "a[summary]x[/summary]b[/summary]c<summary>y</summary>d<summary>e"
    assert m.strip_marker_blocks(text, "summary") == "abcde"
    # Another tag is left alone.
    assert m.strip_marker_blocks("[goal]x[/goal]", "summary") == "[goal]x[/goal]"
    assert m.strip_marker_blocks("a[goal]x[/goal]b<goal>", "goal") == "ab"


def test_context_summary_wrap_and_detect_r_resume_16() -> None:
    assert m.wrap_context_summary("S") == "[context_summary]\nS\n[/context_summary]"
    assert m.is_context_summary(m.wrap_context_summary("S"))
    assert m.is_context_summary("<context_summary>\nold\n</context_summary>")
    assert m.is_context_summary("[context_summary]")
    assert not m.is_context_summary(" [context_summary]\nS\n[/context_summary]")
    assert not m.is_context_summary("see [context_summary]")
    assert not m.is_context_summary("[summary]x[/summary]")


# --------------------------------------------------------------------------- R-CARRY-6


@pytest.mark.parametrize(
    ("text", "inner"),
    [
        ("[turn_aborted]\n  [text]a[/text]\n[/turn_aborted]", "  [text]a[/text]"),
        (
            "[turn_retried]\n  [text]a[/text]\n  [text]b[/text]\n[/turn_retried]",
            "  [text]a[/text]\n  [text]b[/text]",
        ),
        ("[turn_aborted]\n[/turn_aborted]", ""),
        ("[turn_aborted][/turn_aborted]", ""),
        ("[turn_retried]x[/turn_retried]", "x"),
        ("[turn_aborted]\nx\n[/turn_aborted]\n  \n", "x"),
        ("<turn_aborted>\n  [text]legacy[/text]\n</turn_aborted>", "  [text]legacy[/text]"),
        ("<turn_retried>\n</turn_retried>", ""),
        # A nested closing tag inside the body: the non-greedy body stops at the last close
        # that reaches the end of the text.
        ("[turn_aborted]\na [/turn_aborted] b\n[/turn_aborted]", "a [/turn_aborted] b"),
    ],
)
def test_unwrap_synthetic_block_r_carry_6(text: str, inner: str) -> None:
    assert m.unwrap_synthetic_block(text) == inner


@pytest.mark.parametrize(
    "text",
    [
        "[turn_aborted]\nx\n[/turn_retried]",  # tags must match
        "<turn_aborted>\nx\n</turn_retried>",
        "[turn_aborted]\nx\n</turn_aborted>",  # forms do not mix
        "prefix [turn_aborted]\nx\n[/turn_aborted]",  # must be the whole text
        "[turn_aborted]\nx\n[/turn_aborted] trailing",
        "[user_steering]\nx\n[/user_steering]",
        "[turn_aborted]\nunterminated",
        "plain",
    ],
)
def test_unwrap_synthetic_block_rejects_r_carry_6(text: str) -> None:
    assert m.unwrap_synthetic_block(text) is None


def test_unwrap_round_trips_transcript_block_r_carry_6() -> None:
    lines = [m.line_text("a"), m.line_thinking("b\nc")]
    for tag in ("turn_aborted", "turn_retried"):
        assert m.unwrap_synthetic_block(m.transcript_block(tag, lines)) == "\n".join(lines)
        assert m.unwrap_synthetic_block(m.transcript_block(tag, [])) == ""


# --------------------------------------------------------------------------- R-RETRY-11


def test_transcript_lines_exact_r_retry_11() -> None:
    assert m.line_thinking("t") == "  [thinking]t[/thinking]"
    assert m.line_text("x\ny") == "  [text]x\ny[/text]"
    assert (
        m.line_tool_call("exec_command", "t1", '{"cmd":"ls"}')
        == '  [tool_call name="exec_command" id="t1"]{"cmd":"ls"}[/tool_call]'
    )
    assert (
        m.line_tool_output("t1", "failed", "boom")
        == '  [tool_call_output id="t1" status="failed"]boom[/tool_call_output]'
    )
    assert (
        m.line_tool_output("t1", None, "a.txt")
        == '  [tool_call_output id="t1" status="completed"]a.txt[/tool_call_output]'
    )
    assert m.line_user_input("go <on>") == "  [user_input]go <on>[/user_input]"


def test_transcript_block_spec_example_r_retry_11() -> None:
    lines = [
        m.line_text("Let me check."),
        m.line_tool_call("exec_command", "t1", '{"cmd":"ls"}'),
        m.line_tool_output("t1", "completed", "a.txt"),
        m.line_thinking("second try"),
    ]
    assert m.transcript_block("turn_retried", lines) == (
        "[turn_retried]\n"
        "  [text]Let me check.[/text]\n"
        '  [tool_call name="exec_command" id="t1"]{"cmd":"ls"}[/tool_call]\n'
        '  [tool_call_output id="t1" status="completed"]a.txt[/tool_call_output]\n'
        "  [thinking]second try[/thinking]\n"
        "[/turn_retried]"
    )


def test_transcript_block_empty_r_carry_4() -> None:
    assert m.transcript_block("turn_aborted", []) == "[turn_aborted]\n[/turn_aborted]"
    assert m.transcript_block("turn_retried", []) == "[turn_retried]\n[/turn_retried]"
    assert m.transcript_block("turn_aborted", ["x"]) == "[turn_aborted]\nx\n[/turn_aborted]"


# --------------------------------------------------------------------------- steering


def test_steering_block_r_steer_5() -> None:
    assert m.steering_block(["also keep backups"]) == (
        "[user_steering]\nalso keep backups\n[/user_steering]"
    )
    assert m.steering_block(["a", "b"]) == "[user_steering]\na\n\nb\n[/user_steering]"
    # An image-only entry.
    assert m.steering_block([]) == "[user_steering]\n\n[/user_steering]"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[user_steering]\nhi\n[/user_steering]", True),
        ("[user_steering]\n\n[/user_steering]", True),
        ("[user_steering]\na\n\nb\n[/user_steering]  \n", True),
        ("[user_steering]hi[/user_steering]", False),  # newlines are part of the form
        ("<user_steering>\nhi\n</user_steering>", False),  # no legacy form
        ("note: [user_steering]\nhi\n[/user_steering]", False),
        ("[user_steering]\nhi\n[/user_steering] and more", False),
        ("hello", False),
    ],
)
def test_is_steering_r_steer_9(text: str, expected: bool) -> None:
    assert m.is_steering(text) is expected


def test_steering_block_is_steering_r_steer_9() -> None:
    for bodies in ([], ["x"], ["a\n[/user_steering]", "b"]):
        assert m.is_steering(m.steering_block(bodies))


# --------------------------------------------------------------------------- R-CARRY-12

NOTE = "of an ended goal run — protocol omitted; do not act on it]"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[goal]\nround: 3\nobjective: x\n[/goal]\nFix it", f"[goal round 3 {NOTE}\nFix it"),
        ("[goal]\nround: 1\nobjective: x\n[/goal]\n\n\nbody\n", f"[goal round 1 {NOTE}\nbody\n"),
        ("[goal]\nround: 2\nobjective: x\n[/goal]", f"[goal round 2 {NOTE}\n"),
        # The closing tag is line-anchored: one mid-line does not end the block.
        (
            "[goal]\nround: 4\nobjective: a [/goal] b\n[/goal]\nrest",
            f"[goal round 4 {NOTE}\nrest",
        ),
        # The number is read as a number, as the reference does.
        ("[goal]\nround: 007\nx\n[/goal]\nr", f"[goal round 7 {NOTE}\nr"),
    ],
)
def test_downgrade_goal_r_carry_12(text: str, expected: str) -> None:
    assert m.downgrade_goal(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "plain text",
        "intro\n[goal]\nround: 1\nx\n[/goal]\n",  # must start the text
        "[goal]\nround: x\nx\n[/goal]\n",
        "[goal]\nround: 1\nx\n[/goal]tail",  # closing tag must end its line
        "[goal]\nround: 1\n[/goal]\n",  # the block has a body line before the close
        "[goal]\nround: 0\nx\n[/goal]\n",  # not a goal round
        "<goal>\nround: 1\nx\n</goal>\n",  # no angle form
    ],
)
def test_downgrade_goal_leaves_other_text_r_carry_12(text: str) -> None:
    assert m.downgrade_goal(text) == text


# --------------------------------------------------------------------------- R-FORK-3


def test_is_task_starting_r_fork_3() -> None:
    assert m.is_task_starting(b.user_text("do it"))
    assert m.is_task_starting(b.image_url("https://x/y.png"))
    assert not m.is_task_starting(b.user_text(m.steering_block(["more"])))
    assert not m.is_task_starting(b.user_text(m.wrap_context_summary("S")))
    assert not m.is_task_starting(b.user_text("<context_summary>\nS\n</context_summary>"))
    assert not m.is_task_starting(b.assistant_text("done"))
    assert not m.is_task_starting(b.tool_call_output("c1", "out"))
    assert not m.is_task_starting(b.request_begin())
    # A user text merely mentioning a marker still starts a task.
    assert m.is_task_starting(b.user_text("what is [user_steering]?"))
    # A child's message belongs to another session.
    tagged = msgspec.structs.replace(b.user_text("x"), origin=["session-child"])
    assert not m.is_task_starting(tagged)


# --------------------------------------------------------------------------- Appendix A


def test_exact_strings_appendix_a() -> None:
    assert m.PLACEHOLDER_ABORTED == "[interrupted: tool aborted by user]"
    assert m.PLACEHOLDER_CRASH == "[interrupted: process exited before the tool finished]"
    assert m.REQUEST_CLOSURE_ERROR == "process exited before the request ended"
    assert m.COMPACTION_CLOSURE_ERROR == "process exited before the compaction ended"
    assert m.DENIED_BY_USER == "Tool call denied by user."
    assert m.DENIED_BY_POLICY == "Tool call denied by policy."
    assert m.max_turns_notice(7) == "[reached max turns (7); stopping]"
    assert m.COMPACTION_REPAIR == (
        "[tool error] the compaction request expects a summary, not tool calls"
    )
    assert m.COMPACTION_ERROR_TOOL_CALLS == "the response called tools instead of writing a summary"
    assert m.COMPACTION_ERROR_NO_SUMMARY == "the response contained no usable summary"
    assert m.CORRECTIVE_NOTE == (
        "That reply cannot be used as a summary. Answer again with plain text and no tool calls,"
        " exactly in this form and with nothing after it:\n\n[summary]<the summary>[/summary]"
    )
    assert m.DEFAULT_COMPACTION_PROMPT.startswith("Your working context is about to be replaced")
    assert m.DEFAULT_COMPACTION_PROMPT.endswith("and write nothing after the closing tag.")
    assert "\n" not in m.DEFAULT_COMPACTION_PROMPT
    assert m.tool_error("boom") == "[tool error] boom"
    assert m.NO_OUTPUT == "[no output]"
    assert m.output_truncated_note(16000) == "[output truncated: exceeded 16000 chars]"
    assert m.output_archived_note("/p/x.txt") == "[output archived: /p/x.txt]"
    assert m.tool_timeout_note(120000) == "[tool timeout: exceeded 120000ms]"
    assert m.unknown_tool("nope") == "Unknown tool: nope"
    assert m.attached_image_line("/s/upload-1.png") == "[attached image: /s/upload-1.png]"
    assert m.attached_file_line("/s/f.txt") == "[attached file: /s/f.txt]"
    assert m.IMAGE_DROPPED_LINE == "[an attached image could not be saved and was dropped]"
    assert m.LLM_STREAM_NO_OUTCOME == "LLM stream ended without an outcome"


def test_tool_argument_errors_r_tool_5() -> None:
    assert m.arguments_invalid_json("read_file", "Expecting value") == (
        'Tool call "read_file" failed: the arguments are not valid JSON (Expecting value). '
        "Re-issue the call with one complete, valid JSON object."
    )
    assert m.arguments_empty("read_file") == (
        'Tool call "read_file" failed: the arguments field is empty. '
        "Re-issue the call with a complete JSON object."
    )
    assert m.arguments_schema_mismatch("read_file", "d") == (
        'Tool call "read_file" failed: the arguments do not match the tool schema (d). '
        "Re-issue the call with one complete, valid JSON object."
    )


def test_abort_reasons_r_carry_9() -> None:
    assert m.ABORT_BY_USER == "aborted by user"
    assert m.ABORT_DURING_BACKOFF == "aborted during reconnect backoff"
    assert m.ABORT_DURING_COMPACTION == "aborted during compaction"
    assert m.ABORT_COMPACTION_FAILED == "compaction failed"
    assert m.abort_llm_request_error("401 bad key") == "llm request error: 401 bad key"
    assert m.abort_llm_request_error(None) == "llm request error: unknown"
    assert m.abort_llm_request_error("") == "llm request error: unknown"
    assert m.abort_llm_request_error("x").startswith(m.ABORT_LLM_REQUEST_ERROR_PREFIX)
    assert m.abort_reconnect_failed(5) == "reconnect failed after 5 retries"
    assert m.abort_malformed_failed(2) == "malformed response failed after 2 retries"
    assert m.abort_llm_failed(3, "500") == "llm request failed after 3 retries: 500"
    assert m.abort_llm_failed(3, None) == "llm request failed after 3 retries: unknown"
    assert m.abort_trace_write_failed("ENOSPC") == "trace write failed: ENOSPC"
    assert m.abort_record_too_large(99) == "trace write failed: record too large (99 bytes)"


def test_warnings_r_run_2_r_tool_6() -> None:
    assert m.approve_threw_warning("x") == "[penguin] approve callback threw: x; denying."
    assert m.invalid_approval_message("maybe") == "invalid approval 'maybe'"
    assert m.environment_threw_warning("y") == "[penguin] environment threw after tool output: y"


def test_title_prompt_r_title_4() -> None:
    head = (
        "Give this conversation a short title (at most 6 words, or about 16 CJK characters) in "
        "the language the user writes in. Output the title only, without quotes or final "
        "punctuation."
    )
    assert head == m.TITLE_PROMPT
    assert m.title_prompt("Fix the bug") == f"{head}\n\n[User]\nFix the bug"
    assert m.title_prompt("Fix", "Done.") == f"{head}\n\n[User]\nFix\n\n[Assistant]\nDone."
    assert m.TITLE_MARKER_TAGS == (
        "use_skills",
        "handoff_from",
        "scheduled_task",
        "model_switch_from",
        "goal",
        "background_task_done",
    )


def test_exact_strings_appear_in_spec() -> None:
    """Cross-check against the SPEC text itself, so a typo in either side is caught."""
    spec_path = SHARED / "SPEC.md"
    if not spec_path.exists():
        pytest.skip("SPEC.md not available")
    spec = spec_path.read_text(encoding="utf-8")
    for value in (
        m.PLACEHOLDER_ABORTED,
        m.PLACEHOLDER_CRASH,
        m.REQUEST_CLOSURE_ERROR,
        m.COMPACTION_CLOSURE_ERROR,
        m.DENIED_BY_USER,
        m.DENIED_BY_POLICY,
        m.COMPACTION_REPAIR,
        m.COMPACTION_ERROR_TOOL_CALLS,
        m.COMPACTION_ERROR_NO_SUMMARY,
        m.DEFAULT_COMPACTION_PROMPT,
        m.CORRECTIVE_NOTE.replace("\n", "\\n"),
        m.TITLE_PROMPT,
        m.ABORT_BY_USER,
        m.ABORT_DURING_BACKOFF,
        m.ABORT_DURING_COMPACTION,
        m.ABORT_COMPACTION_FAILED,
        m.LLM_STREAM_NO_OUTCOME,
        m.IMAGE_DROPPED_LINE,
        m.NO_OUTPUT,
    ):
        assert value in spec, value


def test_reference_trace_summary_round_trip_r_compact_12() -> None:
    """06a: the summary recorded at the head of ``_002`` is the wrapped extraction of the
    compaction request's reply in ``_001``."""
    folder = SHARED / "reference-traces" / "06a_compaction_summarize_context"
    files = sorted(folder.glob("*/*.jsonl"))
    if len(files) != 2:
        pytest.skip("reference traces not available")
    first = [decode(line) for line in files[0].read_bytes().splitlines() if line.strip()]
    second = [decode(line) for line in files[1].read_bytes().splitlines() if line.strip()]
    reply = first[-4].payload
    recorded = second[2].payload
    assert isinstance(reply, TextPayload)
    assert reply.role == "assistant"
    assert isinstance(recorded, TextPayload)
    assert m.wrap_context_summary(m.extract_summary(reply.text)) == recorded.text
