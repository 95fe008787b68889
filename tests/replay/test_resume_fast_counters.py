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
The earlier files of a session must be decoded whole: ``records`` counts every decodable
line, and a completed tool call before a rotation keeps ``task_running`` set (the last test).
"""

from __future__ import annotations

import copy
import gc
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eventstore import (
    CompactionMode,
    DataRoot,
    OmniMessage,
    StopReason,
    TokenCounts,
    ToolCallOutputPayload,
    ToolCallPayload,
    ToolDefinition,
    decode,
    encode_line,
    iter_trace,
    read_trace,
)
from eventstore import _reader as reader
from eventstore import builders as b
from projections import ModelContext, SessionState
from projections._state import _HANDLERS as STATE_HANDLERS
from projections._state import _PARTIALS
from replay import load_session

ROOT = Path(__file__).parents[2]
FIXTURES = ROOT / "fixtures" / "traces"
HOSTILE = FIXTURES / "hostile"
REFERENCE = ROOT.parent / "shared" / "reference-traces"
SID = "session-2026-07-18-11-10-22-3f8a1c2d"
DATE = "2026-07-18"
SLOTS = SessionState.__slots__


def sessions() -> dict[str, list[Path]]:
    """Every stored session as its files in index order: fixtures, then reference traces."""
    out: dict[str, list[Path]] = {}
    for base in (FIXTURES, REFERENCE):
        if not base.is_dir():
            continue
        for scenario in sorted(p for p in base.iterdir() if p.is_dir() and p != HOSTILE):
            files = sorted(scenario.rglob("*.jsonl"))
            if files:
                out[f"{base.name}/{scenario.name}"] = files
    return out


SESSIONS = sessions()
MULTI_FILE = {name: files for name, files in SESSIONS.items() if len(files) > 1}


def file_records(files: list[Path]) -> Iterator[OmniMessage]:
    """The records of ``files`` read one by one, as ``load_session`` reads them."""
    for path in files:
        yield from iter_trace(path, report=False)


# --------------------------------------------------------------------------- references


def reference_apply(state: SessionState, record: OmniMessage) -> None:
    """``SessionState.apply`` without its shortcut: every record re-derives the flags."""
    if record.origin is not None:
        return
    kind = type(record.payload)
    if kind in _PARTIALS:
        return
    state.records += 1
    state._apply_rare(kind, record.payload, STATE_HANDLERS.get(kind))


def every_field(state: SessionState) -> dict[str, Any]:
    """Public fields and fold scratch: the shortcut must not even change the scratch."""
    return {name: copy.copy(getattr(state, name)) for name in SLOTS}


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


class Soup:
    """Seeded random records: engine-shaped pieces in any order, damage included."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.tick = 0
        self.calls: list[str] = []
        self.session = TokenCounts()

    def ts(self) -> str:
        self.tick += 1
        return f"2026-07-18T10:{self.tick // 60 % 60:02d}:{self.tick % 60:02d}.000Z"

    def meta(self) -> OmniMessage:
        return b.session_meta(
            session_id=SID,
            provider="p",
            model_id="m",
            model_context_window=1000,
            system_prompt="s",
            agent_state="/a",
            workspace="/w",
            timestamp=self.ts(),
        )

    def record(self) -> OmniMessage:
        rng, ts = self.rng, self.ts()
        pick = rng.randrange(22)
        if pick == 0:
            return self.meta()
        if pick == 1:
            return b.tool_list_ready([ToolDefinition(name="t", description="d")], timestamp=ts)
        if pick in (2, 3):
            return b.user_text(
                rng.choice(["go", "[context_summary]\nx\n[/context_summary]"]), timestamp=ts
            )
        if pick == 4:
            body = rng.choice(["done", "[summary]kept[/summary]", "[summary][/summary]", ""])
            return b.assistant_text(body, timestamp=ts)
        if pick in (5, 6):
            cid = f"c{rng.randrange(6)}"
            self.calls.append(cid)
            stop: StopReason = rng.choice(["completed", "completed", "aborted"])
            return b.tool_call("t", {"n": 1}, cid, stop_reason=stop, timestamp=ts)
        if pick in (7, 8, 9):
            cid = rng.choice(self.calls) if self.calls and rng.random() < 0.9 else "zz"
            return b.tool_call_output(cid, "out", timestamp=ts)
        if pick in (10, 11):
            return b.request_begin(timestamp=ts)
        if pick in (12, 13):
            statuses: list[StopReason] = ["completed", "completed", "aborted", "failed", "auth"]
            return b.request_end(
                rng.choice(statuses), attempt=rng.choice([None, 1, 2]), timestamp=ts
            )
        if pick == 14:
            request = TokenCounts(1, 2, 3, 6)
            self.session = self.session + request
            return b.token_usage(request, self.session, timestamp=ts)
        if pick == 15:
            reason = rng.choice([None, "user", "llm request error: boom"])
            return b.abort(reason, timestamp=ts)
        modes: list[CompactionMode] = ["summarize", "discard"]
        if pick == 16:
            return b.compaction_begin(
                "context", rng.choice(modes), context=1, turns=1, timestamp=ts
            )
        if pick == 17:
            ends: list[StopReason] = ["completed", "completed", "failed"]
            return b.compaction_end("context", rng.choice(modes), rng.choice(ends), timestamp=ts)
        if pick == 18:
            return b.partial_text("start", "x", timestamp=ts)
        if pick == 19:
            return OmniMessage(ts, "model_msg", b.assistant_text("sub").payload, ["child"])
        if pick == 20:
            return b.approval_decision("allow", rng.choice(self.calls or ["c0"]), timestamp=ts)
        return b.thinking("hmm", timestamp=ts)

    def records(self, n: int) -> list[OmniMessage]:
        return [self.meta(), *(self.record() for _ in range(n))]


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


def place(home: Path, files: list[bytes]) -> DataRoot:
    """``files`` (their bytes) as the files of session ``SID`` under a fresh data root."""
    if home.exists():
        shutil.rmtree(home)
    root = DataRoot(home)
    for index, data in enumerate(files, start=1):
        path = root.trace_path(SID, index, date=DATE)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def cuts(files: list[bytes]) -> Iterator[list[bytes]]:
    """The session as a crash after each of its lines left it (earlier files included)."""
    for index, data in enumerate(files):
        lines = data.splitlines(keepends=True)
        for keep in range(1, len(lines) + 1):
            yield [*files[:index], b"".join(lines[:keep])]


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


def soup_files(seed: int) -> list[bytes]:
    """A soup split into files at its session_meta records, with a malformed line and a torn
    tail sprinkled in by the seed."""
    soup = Soup(seed)
    files: list[list[bytes]] = []
    for record in soup.records(120):
        if record.type == "session_meta" or not files:
            files.append([])
        files[-1].append(bytes(encode_line(record)))
    rng = random.Random(seed)
    for lines in files:
        if rng.random() < 0.3:
            lines.insert(rng.randrange(1, len(lines) + 1), b'{"timestamp": "x", "type\n')
    out = [b"".join(lines) for lines in files]
    if rng.random() < 0.3:
        out[-1] = out[-1][:-7]
    return out


def test_load_session_of_random_multi_file_soups_r_proj_2(tmp_path: Path) -> None:
    checked = 0
    for seed in range(40):
        check_load(place(tmp_path / "home", soup_files(seed)))
        checked += 1
    assert checked == 40


def test_earlier_files_are_needed_record_by_record_r_proj_2(tmp_path: Path) -> None:
    """Why earlier files are decoded whole: a model_msg line there changes what survives into
    the latest file — ``records`` counts it, and a completed tool call before a mid-task
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
