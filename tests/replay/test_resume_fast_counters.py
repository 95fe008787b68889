"""Resume's hot-path shortcuts change nothing (R-PROJ-1, R-PROJ-2, R-RESUME-9, R-RESUME-11,
R-READ-1…4, INV-24).

A resume folds every record of the latest file into ``ModelContext`` and ``SessionState`` and
every record of the earlier files into ``SessionState``; three shortcuts keep that cheap:

- ``SessionState.apply`` re-derives ``from_compaction`` / ``rotation_pending`` /
  ``task_running`` only when a record changed one of their inputs;
- ``ModelContext`` takes pending as the carry-over view when the general rule (R-RESUME-9)
  would reorder, drop and add nothing;
- the reader runs the codec's fast path inline and hands every other line to ``decode``.

Each is checked against its general path on every record of: the fixture corpus, the
reference traces, the hostile corpus (reader), sessions cut after every line (a crash after any
record, earlier files included), and seeded random record soups in orders no engine writes.
The earlier files of a session count in full (through their summaries, R-TRACE-19, whose own
tests are in ``test_file_summaries``): ``records`` counts every decodable line, and a completed
tool call before a rotation keeps ``task_running`` set.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from soupkit import (
    HOSTILE,
    MULTI_FILE,
    SESSIONS,
    SID,
    Soup,
    cuts,
    every_field,
    file_records,
    place,
    reference_apply,
    soup_files,
)

from eventstore import (
    DataRoot,
    OmniMessage,
    TokenCounts,
    ToolCallOutputPayload,
    ToolCallPayload,
    decode,
    encode_line,
    iter_trace,
    read_trace,
)
from eventstore import _reader as reader
from eventstore import builders as b
from projections import ModelContext, SessionState
from replay import load_session

# --------------------------------------------------------------------------- references


def check_folds(records: list[OmniMessage], views: dict[str, int]) -> SessionState:
    """Fold ``records`` with and without the shortcuts, comparing after every record."""
    state, ref = SessionState(), SessionState()
    ctx = ModelContext()
    for record in records:
        state.apply(record)
        reference_apply(ref, record)
        assert every_field(state) == every_field(ref), record
        ctx.apply(record)
        view, general = ctx._compute_view(), ctx._general_view()
        assert view == general, record
        outputs = sum(isinstance(m.payload, ToolCallOutputPayload) for m in ctx._pending)
        if outputs and view == ctx._pending:
            views["shortcut"] += 1
        elif outputs:
            views["general"] += 1
    return state


# --------------------------------------------------------------------------- random soups


def test_random_soups_shortcuts_equal_general_paths_r_proj_2_r_resume_9() -> None:
    views = {"shortcut": 0, "general": 0}
    for seed in range(150):
        check_folds(Soup(seed).records(70), views)
    # Both paths of the view were taken, so the comparison above tested something.
    assert views["shortcut"] > 10
    assert views["general"] > 100


@pytest.mark.parametrize(
    ("outputs", "expected"),
    [
        (["c1", "c2"], ["c1", "c2"]),  # the shortcut: in call order, all answered once
        (["c2", "c1"], ["c1", "c2"]),  # reordered into call order
        (["c1", "c1"], ["c1", "placeholder c2"]),  # a second answer dropped
        (["c1", "zz", "c2"], ["c1", "c2"]),  # an answer to no committed call dropped
        (["c1"], ["c1", "placeholder c2"]),  # an unanswered call gets its placeholder
    ],
)
def test_view_shortcut_boundaries_r_resume_9(outputs: list[str], expected: list[str]) -> None:
    soup = Soup(0)
    ctx = ModelContext()
    for record in [
        soup.meta(),
        b.user_text("go", timestamp=soup.ts()),
        b.request_begin(timestamp=soup.ts()),
        b.tool_call("t", {}, "c1", timestamp=soup.ts()),
        b.tool_call("t", {}, "c2", timestamp=soup.ts()),
        b.request_end("completed", timestamp=soup.ts()),
        *(b.tool_call_output(cid, "out", timestamp=soup.ts()) for cid in outputs),
    ]:
        ctx.apply(record)
    view = ctx._compute_view()
    assert view == ctx._general_view() == ctx.pending
    shown = []
    for msg in view:
        assert isinstance(msg.payload, ToolCallOutputPayload)
        placeholder = msg.payload.stop_reason == "aborted"
        shown.append(
            f"placeholder {msg.payload.tool_call_id}" if placeholder else msg.payload.tool_call_id
        )
    assert shown == expected


@pytest.mark.parametrize("name", sorted(SESSIONS))
def test_stored_sessions_shortcuts_equal_general_paths_inv_24(name: str) -> None:
    records = list(file_records(SESSIONS[name]))
    state = check_folds(records, {"shortcut": 0, "general": 0})
    assert state == SessionState.from_records(records)


# --------------------------------------------------------------------------- load_session


def check_load(root: DataRoot) -> None:
    used, latest, ctx, state, meta = load_session(root, SID)
    assert used == root.trace_files(SID)[: used.index(latest) + 1]
    ref = SessionState()
    for record in file_records(used):
        reference_apply(ref, record)
    assert every_field(state) == every_field(ref)
    latest_records = list(iter_trace(latest, report=False))
    assert ctx == ModelContext.from_records(latest_records)
    assert ctx._compute_view() == ctx._general_view()
    assert meta == next(r for r in latest_records if r.type == "session_meta")


@pytest.mark.parametrize("name", sorted(MULTI_FILE))
def test_load_session_after_a_crash_at_every_line_r_resume_11(name: str, tmp_path: Path) -> None:
    files = [p.read_bytes() for p in MULTI_FILE[name]]
    checked = 0
    for variant in cuts(files):
        root = place(tmp_path / "home", variant)
        check_load(root)
        checked += 1
    assert checked == sum(len(f.splitlines()) for f in files)


def test_load_session_of_random_multi_file_soups_r_proj_2(tmp_path: Path) -> None:
    checked = 0
    for seed in range(40):
        check_load(place(tmp_path / "home", soup_files(seed)))
        checked += 1
    assert checked == 40


def test_earlier_files_are_needed_record_by_record_r_proj_2(tmp_path: Path) -> None:
    """Why earlier files count in full (record by record, or through a summary of all their
    records): a model_msg line there changes what survives into the latest file — ``records`` counts it, and a completed tool call before a mid-task
    rotation leaves the task running (R-PROJ-2 ``task_running``)."""
    soup = Soup(0)
    first = [
        soup.meta(),
        b.user_text("go", timestamp=soup.ts()),
        b.request_begin(timestamp=soup.ts()),
        b.tool_call("t", {}, "c1", timestamp=soup.ts()),
        b.token_usage(TokenCounts(1, 1, 1, 3), timestamp=soup.ts()),
        b.request_end("completed", timestamp=soup.ts()),
        b.tool_call_output("c1", "out", timestamp=soup.ts()),
        b.compaction_begin("context", "discard", context=1, turns=1, timestamp=soup.ts()),
        b.compaction_end("context", "discard", "completed", timestamp=soup.ts()),
    ]
    second = [soup.meta(), b.user_text("next", timestamp=soup.ts())]
    encoded = [b"".join(encode_line(r) for r in part) for part in (first, second)]
    state = load_session(place(tmp_path / "home", encoded), SID)[3]
    assert state.task_running
    assert state.records == len(first) + len(second)
    without_call = [r for r in first if not isinstance(r.payload, ToolCallPayload)]
    encoded = [b"".join(encode_line(r) for r in part) for part in (without_call, second)]
    state = load_session(place(tmp_path / "home", encoded), SID)[3]
    assert not state.task_running


def test_load_session_leaves_the_collector_as_it_found_it(tmp_path: Path) -> None:
    """The fold pauses the cyclic collector and hands its records to the oldest generation;
    the collector's switch and objects the program froze itself are left alone."""
    root = place(tmp_path / "home", [p.read_bytes() for p in SESSIONS["traces/multi_file"]])
    assert gc.isenabled()
    load_session(root, SID)
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        load_session(root, SID)
        assert gc.get_freeze_count() == frozen
        assert gc.isenabled()
    finally:
        gc.unfreeze()
    gc.disable()
    try:
        load_session(root, SID)
        assert not gc.isenabled()
    finally:
        gc.enable()


# --------------------------------------------------------------------------- the reader


ODD_LINES = [
    b'{"timestamp":"t","type":"model_msg","payload":{"type":"text","role":"user","text":"a"}}',
    b'{"timestamp":"t","type":"model_msg","payload":{"type":"text","role":"user","text":"a","x":1}}',
    b'{"timestamp":"t","type":"model_msg","payload":{"type":"text","role":"user","text":"a",'
    b'"$extra":{"k":2}}}',
    b'{"timestamp":"t","type":"model_msg","payload":{"type":"text","role":"user","text":5}}',
    b'{"timestamp":"t","type":"event_msg","payload":{"type":"future","n":1}}',
    b'{"timestamp":"t","type":"future_msg","payload":{"type":"text"}}',
    b'{"timestamp":"t","type":"event_msg","payload":{"type":"request_begin"},"extra":true}',
    b'{"timestamp":"t","type":"event_msg","payload":{"type":"request_begin"},"origin":[]}',
    b'{"timestamp":"t","type":"event_msg","payload":{"type":"request_begin"},"origin":["a"]}',
    b'{"timestamp":"t","type":"event_msg","payload":{"type":"request_begin"}}\r',
    b'\x0b{"timestamp":"t","type":"event_msg","payload":{"type":"request_begin"}}\x0c',
    b"",
    b"   ",
    b'{"timestamp":"t","type":"event_msg","payload":[]}',
    b'{"timestamp":"t","type":"event_msg","payload":{"type":"request_begin"}} trailing',
    b'{"timestamp":"t","type":"session_meta","payload":{"session_id":"s","provider":"p",'
    b'"model_id":"m","model_context_window":1,"system_prompt":"","agent_state":"a",'
    b'"workspace":"w","source":"later"}}',
    b'{"timestamp":"t","type":"event_msg","payload":{"type":"request_end","status":"completed"}}',
]


def read_slow(path: Path, monkeypatch: pytest.MonkeyPatch) -> reader.TraceRead:
    """``read_trace`` with the inlined fast path refusing every line (all go to ``decode``)."""

    def refuse(line: Any) -> Any:
        raise ValueError("not taken")

    with monkeypatch.context() as m:
        m.setattr(reader, "_decode_typed_line", refuse)
        return read_trace(path, report=False)


def reader_inputs(tmp_path: Path) -> Iterator[Path]:
    odd = tmp_path / "odd.jsonl"
    odd.write_bytes(b"\n".join(ODD_LINES) + b"\n" + ODD_LINES[0])  # and a torn tail
    yield odd
    yield from sorted(HOSTILE.glob("*.jsonl"))
    for files in SESSIONS.values():
        yield from files


def test_reader_fast_path_equals_decode_r_read_1_to_4(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen_extra = 0
    for path in reader_inputs(tmp_path):
        fast = read_trace(path, report=False)
        slow = read_slow(path, monkeypatch)
        assert fast.records == slow.records, path
        assert fast.diagnostics == slow.diagnostics, path
        assert [type(r.payload) for r in fast.records] == [type(r.payload) for r in slow.records]
        seen_extra += sum(r.extra is not None or r.payload.extra is not None for r in fast.records)
    assert seen_extra >= 3  # the lines the fast path hands on were there


def test_reader_odd_lines_match_decode_line_by_line(tmp_path: Path) -> None:
    path = tmp_path / "odd.jsonl"
    path.write_bytes(b"\n".join(ODD_LINES) + b"\n")
    expected: list[OmniMessage] = []
    for line in ODD_LINES:
        for candidate in (line, line.strip()):
            try:
                expected.append(decode(candidate))
                break
            except Exception:
                continue
    assert list(iter_trace(path, report=False)) == expected
