"""The ``session_archived`` mark (issue 35 item 6: archive from the sessions list).

The archive flag is a record in the session's trace, so it survives an index rebuild and a
restart; it is no part of the conversation: the session's state and status (R-SET-5), its
context (``request_at``/``context_at``), its file summaries (R-TRACE-19), the validator, resume
and golden replay all read a trace with marks exactly as they read it without them."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from engine import RetryPolicy, allow_all
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import DataRoot, encode_line, iter_trace, mark_archived, read_trace
from eventstore import builders as b
from projections import archived_after, is_archived, project, summarize_file
from replay import request_at, resume_session, validate_session
from replay.golden import replay_trace

FIXTURES = Path(__file__).parents[2] / "fixtures" / "traces"
# Intact recordings (the damaged and hostile ones are about damage, not about marks).
INTACT = sorted(
    p
    for p in FIXTURES.rglob("*.jsonl")
    if re.search(r"_\d{3}\.jsonl$", p.name)
    and not p.relative_to(FIXTURES).parts[0].startswith(("damaged_", "hostile"))
)
MARK = encode_line(b.session_archived(True, timestamp="2026-12-02T10:00:00.000Z"))


def _with_mark(lines: list[bytes], at: int, mark: bytes = MARK) -> bytes:
    return b"".join(lines[:at]) + mark + b"".join(lines[at:])


def test_the_last_mark_wins() -> None:
    records = [b.user_text("hi"), b.session_archived(True), b.session_archived(False)]
    assert is_archived(records[:2]) is True
    assert is_archived(records) is False
    assert is_archived(records[:1]) is False  # no mark: not archived
    assert is_archived([*records, b.session_archived(True)]) is True
    # A child's record copied into its parent's stream (origin-tagged) is not the parent's.
    child = b.session_archived(True)
    tagged = type(child)(child.timestamp, child.type, child.payload, origin=["call_1"])
    assert archived_after(False, tagged) is False


@pytest.mark.parametrize("path", INTACT, ids=lambda p: str(p.relative_to(FIXTURES).parts[0]))
def test_a_mark_anywhere_changes_no_projection_and_no_finding(path: Path, tmp_path: Path) -> None:
    """Wherever the mark lands (a crash can leave a run open at any record, and the mark is
    appended after it), the state, status, context, file summary and validator findings are
    those of the trace without it."""
    lines = path.read_bytes().splitlines(keepends=True)
    ctx0, state0, _ = project(iter_trace(path, report=False))
    summary0 = summarize_file(iter_trace(path, report=False))
    found0 = sorted((f.rule, f.severity) for f in validate_session([path]))
    marked = tmp_path / path.name
    for at in range(1, len(lines) + 1):
        marked.write_bytes(_with_mark(lines, at))
        records = list(iter_trace(marked, report=False))
        ctx, state, _ = project(records)
        assert state == state0, at
        assert state.status == state0.status and state.run_open == state0.run_open
        assert (state.rotation_pending, state.from_compaction) == (
            state0.rotation_pending,
            state0.from_compaction,
        )
        assert ctx.history == ctx0.history and ctx.pending == ctx0.pending, at
        assert summarize_file(records) == summary0, at
        assert sorted((f.rule, f.severity) for f in validate_session([marked])) == found0, at
        assert is_archived(records)


def test_request_at_is_the_same_request(tmp_path: Path) -> None:
    path = next(p for p in INTACT if "compaction_mid_task" in str(p))
    lines = path.read_bytes().splitlines(keepends=True)
    begins = [i for i, line in enumerate(lines) if b'"request_begin"' in line]
    marked = tmp_path / path.name
    marked.write_bytes(_with_mark(lines, begins[1]))  # between two requests
    # Ordinals after the mark move by one; the request sent there is the same.
    for i in begins:
        at = i if i < begins[1] else i + 1
        got, want = request_at([marked], (1, at)), request_at([path], (1, i))
        assert (got.system_prompt, got.tools, got.messages, got.new_messages) == (
            want.system_prompt,
            want.tools,
            want.messages,
            want.new_messages,
        )


def test_golden_replay_leaves_marks_out(tmp_path: Path) -> None:
    shutil.copytree(FIXTURES / "plain", tmp_path / "plain")
    (path,) = sorted((tmp_path / "plain").rglob("*.jsonl"))
    lines = path.read_bytes().splitlines(keepends=True)
    second_run = next(
        i for i, line in enumerate(lines) if b'"role":"user"' in line and i > 3
    )  # before the second prompt: between two runs
    unmarked = replay_trace(FIXTURES / "plain")
    off = encode_line(b.session_archived(False, timestamp="2026-12-02T10:00:01.000Z"))
    path.write_bytes(_with_mark(lines, second_run) + off)
    result = replay_trace(path)
    assert result.matched, result.divergence
    assert result.passed()
    assert result.normalized == unmarked.normalized


@pytest.mark.anyio
@pytest.mark.parametrize("scenario", ["damaged_dangling_request", "abort_tool"])
async def test_an_archived_session_resumes_runs_and_validates(
    scenario: str, tmp_path: Path
) -> None:
    """An interrupted (crashed) session and an aborted one, archived, then resumed: resume
    closes what the crash left open after the mark, the run is appended, the trace validates as
    the unmarked one would, and the session is still archived (resume ignores the mark)."""
    home = tmp_path / "home"
    traces = home / "default_project" / "agents" / "default_agent" / "traces"
    shutil.copytree(FIXTURES / scenario, traces)
    before = sorted(traces.rglob("*.jsonl"))
    found0 = {(f.rule, f.severity) for f in validate_session(before)}
    session_id = before[0].name.rsplit("_", 1)[0]
    root = DataRoot(home)
    written = mark_archived(root, session_id)
    assert written == before[-1]
    assert is_archived(read_trace(before, report=False).records)

    ws = tmp_path / "ws"
    ws.mkdir()
    llm = ScriptedLLM({"responses": [[{"text": "resumed fine"}]]})
    session = await resume_session(
        root,
        session_id,
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        workspace=ws,
        compaction=None,
        retry=RetryPolicy(base_ms=1, cap_ms=2),
    )
    async with session:
        async for _ in session.run([b.user_text("are you there?")], approve=allow_all):
            pass
        assert session.state.status == "completed"
    after = sorted(traces.rglob("*.jsonl"))
    records = read_trace(after, report=False).records
    assert records[-3].payload.text == "resumed fine"  # type: ignore[union-attr]
    # Resume repairs the dangling request (V-4) as it does without the mark.
    left = {(f.rule, f.severity) for f in validate_session(after)}
    assert left == (set() if scenario.startswith("damaged_") else found0)
    assert is_archived(records)
