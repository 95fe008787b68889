"""The settings fold and the one status (SPEC §23: R-SET-1, R-SET-5), as pure folds."""

from __future__ import annotations

import pytest

from eventstore import OmniMessage, SettingsPayload, TokenCounts, decode, encode
from eventstore import builders as b
from projections import SessionState, session_status, summarize_file
from projections import markers as mk

META = b.session_meta(
    session_id="s",
    provider="p",
    model_id="m",
    model_context_window="unknown",
    system_prompt="",
    agent_state="/a",
    workspace="/w",
)


def settings(**fields: object) -> OmniMessage:
    return b.settings(SettingsPayload(**fields))  # type: ignore[arg-type]


def turn(text: str = "done", *, call: bool = False) -> list[OmniMessage]:
    out = [b.request_begin()]
    if call:
        out.append(b.tool_call("t", {}, "c1"))
    else:
        out.append(b.assistant_text(text))
    out.append(b.token_usage(TokenCounts(total=3)))
    out.append(b.request_end("completed"))
    return out


def test_settings_record_round_trips_and_omits_what_does_not_apply() -> None:
    """R-SET-1: keys that do not apply are omitted on the wire; compaction off is ``false``."""
    msg = settings(approval="deny-all", max_turns=1, compaction=False)
    line = encode(msg)
    assert (
        b'"payload":{"type":"settings","approval":"deny-all","max_turns":1,"compaction":false}'
        in line
    )
    assert decode(line) == msg
    assert b"sandbox" not in line and b"model" not in line


def test_the_last_settings_record_wins() -> None:
    """R-SET-1: complete settings, not a diff: the last record is the settings in effect."""
    first = settings(approval="allow-all", max_turns=5)
    second = settings(approval="deny-all")
    state = SessionState.from_records([META, first, b.user_text("a"), *turn(), second])
    assert state.settings == second.payload
    assert state.settings.max_turns is None  # not merged with the earlier record
    assert SessionState.from_records([META, b.user_text("a"), *turn()]).settings is None


def test_settings_at_a_rotation_head_keep_it_a_head() -> None:
    """R-SET-2c, R-ROOT-10: session_meta, tool_list_ready, settings alone is still a head: the
    state of the file before it stands (no new context)."""
    tools = b.tool_list_ready([])
    first = [META, settings(max_turns=3), b.user_text("a"), tools, *turn()]
    state = SessionState.from_records([*first, META, tools, settings(max_turns=3)])
    assert state.rotation_pending and state.turns_in_context == 1


def test_file_summary_carries_settings_and_run_status() -> None:
    """R-TRACE-19: merging a file's summary gives the same settings and status as its fold."""
    file1 = [META, settings(approval="deny-all"), b.user_text("a"), *turn()]
    file2 = [META, b.user_text("b"), b.request_begin()]
    folded = SessionState.from_records([*file1, *file2])
    merged = SessionState()
    assert summarize_file(file1).merge_into(merged)
    for record in file2:
        merged.apply(record)
    assert merged == folded
    assert merged.settings == folded.settings and merged.settings is not None
    assert merged.status == folded.status == "interrupted"


CASES: list[tuple[str, list[OmniMessage], str]] = [
    ("no run yet", [META], "idle"),
    ("final reply", [META, b.user_text("a"), *turn()], "completed"),
    (
        "max turns",
        [
            META,
            b.user_text("a"),
            *turn(call=True),
            b.assistant_text(mk.max_turns_notice(1), stop_reason="failed"),
        ],
        "max_turns",
    ),
    ("user abort", [META, b.user_text("a"), b.abort(mk.ABORT_BY_USER)], "aborted"),
    ("engine abort", [META, b.user_text("a"), b.abort(mk.abort_reconnect_failed(5))], "failed"),
    ("open request", [META, b.user_text("a"), b.request_begin()], "interrupted"),
    ("input only", [META, *turn(), b.user_text("again")], "interrupted"),
    ("tool calls pending", [META, b.user_text("a"), *turn(call=True)], "interrupted"),
    (
        "goal blocked",
        [META, b.user_text("a"), *turn(), b.goal_finished("blocked", 1, 3)],
        "goal_blocked",
    ),
    (
        "goal budget",
        [META, b.user_text("a"), *turn(), b.goal_finished("budget_limited", 2, 9)],
        "budget_limited",
    ),
    (
        "open compaction",
        [
            META,
            b.user_text("a"),
            *turn(),
            b.compaction_begin("manual", "summarize", context=3, turns=1),
        ],
        "interrupted",
    ),
]


@pytest.mark.parametrize(("name", "records", "expected"), CASES, ids=[c[0] for c in CASES])
def test_one_status_from_the_records(name: str, records: list[OmniMessage], expected: str) -> None:
    """R-SET-5: for a session nobody holds, the way its last run ended; a run left open is
    ``interrupted`` (crashed)."""
    state = SessionState.from_records(records)
    assert session_status(state, locked=False) == expected
    assert state.status == expected


def test_a_held_lock_is_running_only_while_work_is_open() -> None:
    """R-SET-5: ``running`` only while the lock is held (the probe's answer is an input), and a
    host's own knowledge (awaiting approval, compacting) wins."""
    open_run = SessionState.from_records([META, b.user_text("a"), b.request_begin()])
    assert session_status(open_run, locked=True) == "running"
    assert session_status(open_run, locked=False) == "interrupted"
    ended = SessionState.from_records([META, b.user_text("a"), *turn()])
    assert session_status(ended, locked=True) == "completed"
    assert session_status(ended, locked=True, activity="awaiting_approval") == "awaiting_approval"
    compacting = SessionState.from_records(
        [
            META,
            b.user_text("a"),
            *turn(),
            b.compaction_begin("manual", "discard", context=3, turns=1),
        ]
    )
    assert session_status(compacting, locked=True) == "compacting"
