"""Synthetic text blocks and the exact strings of SPEC Appendix A.

Owns: the spelling of every marker block the engine writes or parses (``[context_summary]``,
``[turn_aborted]`` / ``[turn_retried]`` transcripts, ``[user_steering]``, the goal downgrade,
the summary extraction ladder) and every fixed sentence the engine emits (placeholders, denial
texts, compaction repair and corrective note, abort reasons, notices, prompts).  Does not: build
OmniMessages from scratch (``eventstore.builders``), decide *when* any of these is used
(``engine``, ``projections._context``), or do I/O.  Every function here is pure; all but the
message-level goal downgrade (:func:`downgrade_goal_message`) are ``str -> str``.

Regular expressions follow SPEC's conventions: Python ``re`` syntax without MULTILINE, with the
JavaScript end anchor ``$`` written as ``\\Z`` (Python's ``$`` would also match before a final
newline, which the reference's patterns do not).
"""

from __future__ import annotations

import re
from typing import Final, Literal, TypeAlias

import msgspec

from eventstore import ImageUrlPayload, OmniMessage, TextPayload

__all__ = [
    "ABORT_BY_USER",
    "ABORT_COMPACTION_FAILED",
    "ABORT_DURING_BACKOFF",
    "ABORT_DURING_COMPACTION",
    "ABORT_LLM_REQUEST_ERROR_PREFIX",
    "ABORT_TRACE_WRITE_FAILED_PREFIX",
    "COMPACTION_ERROR_NO_SUMMARY",
    "COMPACTION_ERROR_TOOL_CALLS",
    "COMPACTION_REPAIR",
    "CORRECTIVE_NOTE",
    "DEFAULT_COMPACTION_PROMPT",
    "DENIED_BY_POLICY",
    "DENIED_BY_USER",
    "IMAGE_DROPPED_LINE",
    "LLM_STREAM_NO_OUTCOME",
    "UNCLOSED_SEGMENT",
    "NO_OUTPUT",
    "PLACEHOLDER_ABORTED",
    "PLACEHOLDER_CRASH",
    "REQUEST_CLOSURE_ERROR",
    "COMPACTION_CLOSURE_ERROR",
    "TAG_CONTEXT_SUMMARY",
    "TAG_SUMMARY",
    "TAG_TURN_ABORTED",
    "TAG_TURN_RETRIED",
    "TAG_USER_STEERING",
    "TITLE_MARKER_TAGS",
    "TITLE_PROMPT",
    "TranscriptTag",
    "abort_llm_failed",
    "abort_llm_request_error",
    "abort_malformed_failed",
    "abort_reconnect_failed",
    "abort_record_too_large",
    "abort_trace_write_failed",
    "approve_threw_warning",
    "arguments_empty",
    "arguments_invalid_json",
    "arguments_schema_mismatch",
    "attached_file_line",
    "attached_image_line",
    "GOAL_WRAPUP_LINE",
    "downgrade_goal",
    "downgrade_goal_message",
    "is_goal_text",
    "goal_block",
    "goal_budget_line",
    "parse_goal_budget",
    "parse_goal_file",
    "goal_round_of",
    "environment_threw_warning",
    "extract_summary",
    "invalid_approval_message",
    "is_context_summary",
    "is_steering",
    "is_task_starting",
    "line_text",
    "line_thinking",
    "line_tool_call",
    "line_tool_output",
    "line_user_input",
    "max_turns_notice",
    "request_timeout_message",
    "output_archived_note",
    "output_truncated_note",
    "steering_block",
    "strip_marker_blocks",
    "title_prompt",
    "tool_error",
    "tool_timeout_note",
    "transcript_block",
    "unknown_tool",
    "unwrap_synthetic_block",
    "wrap_context_summary",
    "parse_max_turns_notice",
    "parse_retries_exhausted",
    "parse_attached_line",
    "attached_line",
]

TranscriptTag: TypeAlias = Literal["turn_aborted", "turn_retried"]

TAG_SUMMARY: Final = "summary"
TAG_CONTEXT_SUMMARY: Final = "context_summary"
TAG_TURN_ABORTED: Final = "turn_aborted"
TAG_TURN_RETRIED: Final = "turn_retried"
TAG_USER_STEERING: Final = "user_steering"

# --------------------------------------------------------------------------- exact strings

# R-CARRY-3 (and the environment's own abort note, R-TOOL-2).
PLACEHOLDER_ABORTED: Final = "[interrupted: tool aborted by user]"
# R-RESUME-10: a committed call whose output never came and no `abort` explains why.
PLACEHOLDER_CRASH: Final = "[interrupted: process exited before the tool finished]"
# R-RESUME-14a / R-RESUME-14: `error_message` of the resume-time closures.
REQUEST_CLOSURE_ERROR: Final = "process exited before the request ended"
COMPACTION_CLOSURE_ERROR: Final = "process exited before the compaction ended"

# R-APPROVE-3.
DENIED_BY_USER: Final = "Tool call denied by user."
DENIED_BY_POLICY: Final = "Tool call denied by policy."

# R-COMPACT-14 / R-COMPACT-15.
COMPACTION_REPAIR: Final = "[tool error] the compaction request expects a summary, not tool calls"
COMPACTION_ERROR_TOOL_CALLS: Final = "the response called tools instead of writing a summary"
COMPACTION_ERROR_NO_SUMMARY: Final = "the response contained no usable summary"
CORRECTIVE_NOTE: Final = (
    "That reply cannot be used as a summary. Answer again with plain text and no tool calls, "
    "exactly in this form and with nothing after it:\n\n[summary]<the summary>[/summary]"
)

# SPEC §10.7.
DEFAULT_COMPACTION_PROMPT: Final = (
    "Your working context is about to be replaced by a hand-over note. Write that note now, "
    "covering everything needed to carry on from it alone: the user's original request and any "
    "later instructions, decisions taken and why, files and commands involved, what is done, "
    "what is in progress or blocked, open questions, and the concrete next steps. Do not call "
    "any tools. Reply with plain text only, in the form [summary]<the note>[/summary], and "
    "write nothing after the closing tag."
)

# R-CARRY-9 abort reasons (the parametrized ones are functions below).
ABORT_BY_USER: Final = "aborted by user"
ABORT_DURING_BACKOFF: Final = "aborted during reconnect backoff"
ABORT_DURING_COMPACTION: Final = "aborted during compaction"
ABORT_COMPACTION_FAILED: Final = "compaction failed"
# R-RESUME-7b keys the case-B shape of a permanent failure on this prefix.
ABORT_LLM_REQUEST_ERROR_PREFIX: Final = "llm request error: "
ABORT_TRACE_WRITE_FAILED_PREFIX: Final = "trace write failed: "

# R-RUN-3.
LLM_STREAM_NO_OUTCOME: Final = "LLM stream ended without an outcome"
# [ours] A stream that reported `completed` but left a segment open (R-STREAM-4).
UNCLOSED_SEGMENT: Final = "the response ended with an unclosed segment"

# R-TOOL-2 / R-TOOL-4, R-IMG-1.
NO_OUTPUT: Final = "[no output]"
IMAGE_DROPPED_LINE: Final = "[an attached image could not be saved and was dropped]"

# R-TITLE-4 / R-TITLE-2.
TITLE_PROMPT: Final = (
    "Give this conversation a short title (at most 6 words, or about 16 CJK characters) in the "
    "language the user writes in. Output the title only, without quotes or final punctuation."
)
TITLE_MARKER_TAGS: Final[tuple[str, ...]] = (
    "use_skills",
    "handoff_from",
    "scheduled_task",
    "model_switch_from",
    "goal",
    "background_task_done",
)


def _detail(detail: str | None) -> str:
    # R-CARRY-9: "<detail> is the outcome message or `unknown`"; an empty message says nothing.
    return detail if detail else "unknown"


def abort_llm_request_error(detail: str | None) -> str:
    """R-RETRY-14: auth and permanent failures."""
    return f"{ABORT_LLM_REQUEST_ERROR_PREFIX}{_detail(detail)}"


def abort_reconnect_failed(retries: int) -> str:
    """R-RETRY-10, last attempt neither ``malformed`` nor ``failed``."""
    return f"reconnect failed after {retries} retries"


def abort_malformed_failed(retries: int) -> str:
    """R-RETRY-10, last attempt ``malformed``."""
    return f"malformed response failed after {retries} retries"


def abort_llm_failed(retries: int, detail: str | None) -> str:
    """R-RETRY-10, last attempt ``failed``."""
    return f"llm request failed after {retries} retries: {_detail(detail)}"


_RETRIES_EXHAUSTED: Final = re.compile(
    r"^(?:reconnect|malformed response|llm request) failed after (\d+) retries"
)


def parse_retries_exhausted(reason: str) -> int | None:
    """The retry budget an ``abort_*_failed`` reason spells out (R-RETRY-10), else ``None``."""
    m = _RETRIES_EXHAUSTED.search(reason)
    return int(m.group(1)) if m else None


def abort_trace_write_failed(detail: str) -> str:
    """R-TRACE-15."""
    return f"{ABORT_TRACE_WRITE_FAILED_PREFIX}{detail}"


def abort_record_too_large(size: int) -> str:
    """R-TRACE-15a."""
    return f"{ABORT_TRACE_WRITE_FAILED_PREFIX}record too large ({size} bytes)"


def request_timeout_message(timeout_ms: int) -> str:
    """``error_message`` of a request the engine timed out (``RetryPolicy.request_timeout_ms``)."""
    return f"request timed out: no response from the model for {timeout_ms} ms"


def max_turns_notice(max_turns: int) -> str:
    """R-MAXT-2 (no leading newline)."""
    return f"[reached max turns ({max_turns}); stopping]"


_MAX_TURNS_NOTICE: Final = re.compile(r"^\[reached max turns \((\d+)\); stopping\]\Z")


def parse_max_turns_notice(text: str) -> int | None:
    """The ``max_turns`` a ``max_turns_notice`` states, or ``None`` when ``text`` is none."""
    m = _MAX_TURNS_NOTICE.match(text)
    return int(m.group(1)) if m else None


def approve_threw_warning(message: str) -> str:
    """R-RUN-2 stderr line."""
    return f"[penguin] approve callback threw: {message}; denying."


def invalid_approval_message(value: object) -> str:
    """R-RUN-2: the ``<msg>`` of :func:`approve_threw_warning` for an invalid return value."""
    return f"invalid approval {value!r}"


def environment_threw_warning(message: str) -> str:
    """R-TOOL-6 stderr line."""
    return f"[penguin] environment threw after tool output: {message}"


def tool_error(message: str) -> str:
    """R-TOOL-2 / R-TOOL-6."""
    return f"[tool error] {message}"


def unknown_tool(name: str) -> str:
    """R-TOOL-5."""
    return f"Unknown tool: {name}"


def arguments_invalid_json(name: str, detail: str) -> str:
    """R-TOOL-5."""
    return (
        f'Tool call "{name}" failed: the arguments are not valid JSON ({detail}). '
        "Re-issue the call with one complete, valid JSON object."
    )


def arguments_schema_mismatch(name: str, detail: str) -> str:
    """R-TOOL-5 [ours]: pydantic validation errors, worded like the invalid-JSON case."""
    return (
        f'Tool call "{name}" failed: the arguments do not match the tool schema ({detail}). '
        "Re-issue the call with one complete, valid JSON object."
    )


def arguments_empty(name: str) -> str:
    """R-TOOL-5."""
    return (
        f'Tool call "{name}" failed: the arguments field is empty. '
        "Re-issue the call with a complete JSON object."
    )


def output_truncated_note(max_chars: int) -> str:
    """R-TOOL-2."""
    return f"[output truncated: exceeded {max_chars} chars]"


def output_archived_note(path: str) -> str:
    """R-TOOL-2."""
    return f"[output archived: {path}]"


def tool_timeout_note(timeout_ms: int) -> str:
    """R-TOOL-2."""
    return f"[tool timeout: exceeded {timeout_ms}ms]"


def attached_image_line(target: str) -> str:
    """R-IMG-1."""
    return f"[attached image: {target}]"


def attached_file_line(path: str) -> str:
    """Appendix A (R-FORK-7 rewrites these)."""
    return f"[attached file: {path}]"


_ATTACHED: Final = re.compile(r"^\[attached (image|file): ([^\n]*)\]\Z")


def parse_attached_line(line: str) -> tuple[Literal["image", "file"], str] | None:
    """``(kind, target)`` of an ``attached_image_line`` / ``attached_file_line``, else ``None``."""
    m = _ATTACHED.match(line)
    if m is None:
        return None
    return ("image" if m.group(1) == "image" else "file"), m.group(2)


def attached_line(kind: Literal["image", "file"], target: str) -> str:
    """The attachment line of ``kind`` (what ``parse_attached_line`` reads back)."""
    return attached_image_line(target) if kind == "image" else attached_file_line(target)


def title_prompt(user_material: str, assistant_material: str = "") -> str:
    """R-TITLE-4: the single message of the title request."""
    text = f"{TITLE_PROMPT}\n\n[User]\n{user_material}"
    if assistant_material:
        text += f"\n\n[Assistant]\n{assistant_material}"
    return text


# --------------------------------------------------------------------------- marker primitives

# JavaScript's String.prototype.trim set (WhiteSpace + LineTerminator).  SPEC's ladder says
# "trim", and Python's str.strip() disagrees on a few code points (U+001C..U+001F, U+0085,
# U+FEFF); using the JS set keeps our summaries identical to the reference's.
_JS_WHITESPACE: Final = (
    "\t\n\v\f\r \u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a"
    "\u2028\u2029\u202f\u205f\u3000\ufeff"
)


def _trim(text: str) -> str:
    return text.strip(_JS_WHITESPACE)


def strip_marker_blocks(text: str, tag: str) -> str:
    """Remove every ``[tag]…[/tag]`` block, every stray ``[tag]``/``[/tag]``, every
    ``<tag>…</tag>`` block and every stray ``<tag>``/``</tag>``, in that order (R-COMPACT-10's
    *strip*, also R-TITLE-2's marker stripping)."""
    t = re.escape(tag)
    text = re.sub(rf"\[{t}\][\s\S]*?\[/{t}\]", "", text)
    text = re.sub(rf"\[/?{t}\]", "", text)
    text = re.sub(rf"<{t}>[\s\S]*?</{t}>", "", text)
    return re.sub(rf"</?{t}>", "", text)


_SUMMARY_SQUARE: Final = re.compile(r"\[summary\]([\s\S]*?)\[/summary\]")
_SUMMARY_ANGLE: Final = re.compile(r"<summary>([\s\S]*?)</summary>")


def extract_summary(text: str) -> str:
    """R-COMPACT-10: the summary in a compaction attempt's concatenated assistant text.

    The first square pair, then the first angle pair, whose stripped content is non-empty wins;
    otherwise the stripped whole output.  ``""`` means the attempt produced no summary.
    """
    for pattern in (_SUMMARY_SQUARE, _SUMMARY_ANGLE):
        for match in pattern.finditer(text):
            candidate = _trim(strip_marker_blocks(match.group(1), TAG_SUMMARY))
            if candidate:
                return candidate
    return _trim(strip_marker_blocks(text, TAG_SUMMARY))


def wrap_context_summary(summary: str) -> str:
    """R-COMPACT-12: the new context's first input text."""
    return f"[{TAG_CONTEXT_SUMMARY}]\n{summary}\n[/{TAG_CONTEXT_SUMMARY}]"


def is_context_summary(text: str) -> bool:
    """R-RESUME-16: both bracket forms are accepted as a prefix."""
    return text.startswith((f"[{TAG_CONTEXT_SUMMARY}]", f"<{TAG_CONTEXT_SUMMARY}>"))


_SYNTHETIC_SQUARE: Final = re.compile(
    r"^\[(turn_aborted|turn_retried)\]\n?([\s\S]*?)\n?\[/\1\]\s*\Z"
)
_SYNTHETIC_ANGLE: Final = re.compile(r"^<(turn_aborted|turn_retried)>\n?([\s\S]*?)\n?</\1>\s*\Z")


def unwrap_synthetic_block(text: str) -> str | None:
    """R-CARRY-6: the inner content of a whole ``[turn_aborted]``/``[turn_retried]`` block
    (square form first, then the legacy angle form), or ``None`` when ``text`` is not one."""
    match = _SYNTHETIC_SQUARE.match(text) or _SYNTHETIC_ANGLE.match(text)
    return match.group(2) if match else None


def transcript_block(tag: TranscriptTag, lines: list[str]) -> str:
    """R-RETRY-11 / R-CARRY-4: ``[tag]`` + ``\\n`` + lines + ``\\n`` + ``[/tag]``; with no
    lines ``[tag]\\n[/tag]``."""
    return "\n".join([f"[{tag}]", *lines, f"[/{tag}]"])


def _line(tag: str, body: str, attrs: str = "") -> str:
    # R-RETRY-11: two leading spaces, bodies verbatim (no escaping, newlines kept).
    return f"  [{tag}{attrs}]{body}[/{tag}]"


def line_thinking(thinking: str) -> str:
    return _line("thinking", thinking)


def line_text(text: str) -> str:
    return _line("text", text)


def line_tool_call(name: str, tool_call_id: str, arguments: str) -> str:
    return _line("tool_call", arguments, f' name="{name}" id="{tool_call_id}"')


def line_tool_output(tool_call_id: str, status: str | None, output: str) -> str:
    """``status`` is the output's stop_reason; absent reads as ``completed`` (R-MSG-14)."""
    return _line(
        "tool_call_output", output, f' id="{tool_call_id}" status="{status or "completed"}"'
    )


def line_user_input(text: str) -> str:
    """Only inside ``[turn_aborted]`` (R-CARRY-4)."""
    return _line("user_input", text)


def steering_block(bodies: list[str]) -> str:
    """R-STEER-5: one queued entry's user-text bodies as a single steering text."""
    return f"[{TAG_USER_STEERING}]\n" + "\n\n".join(bodies) + f"\n[/{TAG_USER_STEERING}]"


_STEERING: Final = re.compile(r"^\[user_steering\]\n([\s\S]*?)\n\[/user_steering\]\s*\Z")


def is_steering(text: str) -> bool:
    """R-STEER-9 (square form only)."""
    return _STEERING.match(text) is not None


# The round number is ASCII digits as in the reference (Python's \d would accept any Nd digit).
_GOAL: Final = re.compile(r"^\[goal\]\nround: ([0-9]+)\n[\s\S]*?\n\[/goal\](?:\n|\Z)")


def downgrade_goal(text: str) -> str:
    """R-CARRY-12: replace a leading goal block by a one-line past-tense note.

    As in the reference, the round is read as a number (``007`` → ``7``) and a round of ``0``
    is not a goal round; any other text is returned unchanged.
    """
    match = _GOAL.match(text)
    if match is None:
        return text
    round_no = int(match.group(1))
    if round_no <= 0:
        return text
    rest = text[match.end() :].lstrip("\n")
    return (
        f"[goal round {round_no} of an ended goal run — protocol omitted; do not act on it]\n{rest}"
    )


def is_goal_text(text: str) -> bool:
    """The text opens with a goal block that R-CARRY-12 downgrades."""
    return text.startswith("[goal]\n") and downgrade_goal(text) != text


def downgrade_goal_message(msg: OmniMessage) -> OmniMessage:
    """R-CARRY-12 on one message: a user text opening with a goal block becomes a copy (same
    envelope and timestamp) whose text is :func:`downgrade_goal`'s; any other message is
    returned as it is (the same object).  The one spelling of the rule for every consumption
    point: next-run input (R-RUN-5), manual-compaction fold (R-COMPACT-28), goal mode."""
    p = msg.payload
    if not isinstance(p, TextPayload) or p.role != "user" or not p.text.startswith("[goal]\n"):
        return msg
    text = downgrade_goal(p.text)
    if text == p.text:
        return msg
    return msgspec.structs.replace(msg, payload=msgspec.structs.replace(p, text=text))


def is_task_starting(msg: OmniMessage) -> bool:
    """R-FORK-3: an ``image_url``, or a user text that is neither a steering message nor a
    context summary.  Origin-tagged messages belong to another session and never start a task
    of this one."""
    if msg.origin is not None:
        return False
    payload = msg.payload
    if isinstance(payload, ImageUrlPayload):
        return True
    if isinstance(payload, TextPayload) and payload.role == "user":
        return not (is_steering(payload.text) or is_context_summary(payload.text))
    return False


# --------------------------------------------------------------------------- goal blocks (§18)

_GOAL_INTRO: Final = (
    "You are working toward a goal. When this task ends, the system checks the goal file and "
    "starts the next round by itself: ending a turn does not end the goal."
)
_GOAL_CHANGE: Final = "Change only its `status`, and only to `complete` or `blocked`. It reads:"
_GOAL_RULES: Final = (
    "Rules: before setting `complete`, prove it with evidence (run the checks, read the "
    "results); never shrink the objective to what is already done; set `blocked` only when the "
    "same blocker has stopped all progress for three rounds in a row; keep progress notes in "
    "PLAN.md next to the goal file, since earlier turns may be compacted away."
)
GOAL_WRAPUP_LINE: Final = (
    "The token budget is spent. Do no new work: summarize what was done, list what remains, and "
    "leave one clear next step. Do not set complete because the budget ran out."
)


def goal_budget_line(used: int, budget: int | None) -> str:
    """Appendix A budget line (R-GOAL-3)."""
    if budget is None:
        return "Budget: unbounded."
    return f"Budget: {used} / {budget} tokens used (remaining: {max(0, budget - used)})."


_GOAL_BUDGET: Final = re.compile(r"^Budget: [0-9]+ / ([0-9]+) tokens used \(", re.MULTILINE)


def parse_goal_budget(text: str) -> int | None:
    """The budget a goal round input's block states (``None``: unbounded, or no goal block)."""
    found = goal_round_of(text)
    if found is None:
        return None
    match = _GOAL_BUDGET.search(text[: len(text) - len(found[1])])
    return int(match.group(1)) if match else None


_GOAL_FILE_LINE: Final = re.compile(r"^Goal file: (.*)$", re.MULTILINE)


def parse_goal_file(text: str) -> str | None:
    """The goal file path a goal round input's block names, or ``None``."""
    found = goal_round_of(text)
    if found is None:
        return None
    match = _GOAL_FILE_LINE.search(text[: len(text) - len(found[1])])
    return match.group(1) if match else None


def goal_block(
    round_no: int,
    *,
    goal_file: str,
    goal_yaml: str,
    used: int,
    budget: int | None,
    wrap_up: bool = False,
) -> str:
    """Appendix A ``GOAL_BLOCK`` (or ``GOAL_WRAPUP_BLOCK`` with ``wrap_up``), from ``[goal]``
    to ``[/goal]`` without a trailing newline.  ``goal_yaml`` is the file as created; each of
    its lines is indented by two spaces, so no objective line can sit in column 0 and close the
    block (the closing tag is matched line-anchored, R-GOAL-3)."""
    lines = [
        "[goal]",
        f"round: {round_no}",
        _GOAL_INTRO,
        f"Goal file: {goal_file}",
        _GOAL_CHANGE,
        *("  " + line for line in goal_yaml.splitlines()),
        goal_budget_line(used, budget),
        GOAL_WRAPUP_LINE if wrap_up else _GOAL_RULES,
        "[/goal]",
    ]
    return "\n".join(lines)


def goal_round_of(text: str) -> tuple[int, str] | None:
    """A goal round input's round number and body (the text after the block, leading newlines
    removed), or ``None`` when ``text`` does not start with a goal block (R-CARRY-12 pattern,
    round > 0)."""
    match = _GOAL.match(text)
    if match is None:
        return None
    round_no = int(match.group(1))
    if round_no <= 0:
        return None
    return round_no, text[match.end() :].lstrip("\n")
