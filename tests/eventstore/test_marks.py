"""``eventstore.mark_archived``: the archive mark is appended through the session's writer, so
its lock is held while it is written (R-TRACE-18) and a session another writer holds is
refused with nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

from eventstore import (
    DataRoot,
    SessionArchivedPayload,
    SessionLocked,
    TraceWriter,
    encode_line,
    mark_archived,
    probe_lock,
    read_trace,
)
from eventstore import builders as b

SID = "session-2026-12-02-10-00-00-0a0b0c0d"


def _session(home: Path, *files: list[object]) -> list[Path]:
    d = home / "default_project" / "agents" / "default_agent" / "traces" / "2026-12-02"
    d.mkdir(parents=True)
    paths = []
    for n, records in enumerate(files, 1):
        p = d / f"{SID}_{n:03d}.jsonl"
        p.write_bytes(b"".join(encode_line(r) for r in records))  # type: ignore[arg-type]
        paths.append(p)
    return paths


def _meta() -> object:
    return b.session_meta(
        session_id=SID,
        provider="scripted",
        model_id="demo",
        model_context_window="unknown",
        system_prompt="",
        agent_state="",
        workspace="/ws",
    )


def test_marks_append_to_the_latest_file_and_release_the_lock(tmp_path: Path) -> None:
    run = [
        b.user_text("hi"),
        b.request_begin(),
        b.assistant_text("hello"),
        b.request_end("completed"),
    ]
    first, second = _session(tmp_path, [_meta(), *run], [_meta(), *run])
    before = first.read_bytes()
    root = DataRoot(tmp_path)
    assert mark_archived(root, SID) == second
    assert mark_archived(root, SID, archived=False) == second
    assert first.read_bytes() == before
    marks = [
        r.payload
        for r in read_trace([second], report=False).records
        if isinstance(r.payload, SessionArchivedPayload)
    ]
    assert [m.archived for m in marks] == [True, False]
    assert not probe_lock(second.with_name(f"{SID}.lock")).held
    # The wire shape the docs show.
    assert b'{"type":"session_archived","archived":true}' in second.read_bytes()


def test_crash_residue_is_not_the_latest_file_r_root_10(tmp_path: Path) -> None:
    head = [_meta(), b.tool_list_ready([])]
    first, residue = _session(tmp_path, [_meta(), b.user_text("hi")], head)
    residue_bytes = residue.read_bytes()
    assert mark_archived(DataRoot(tmp_path), SID) == first
    assert residue.read_bytes() == residue_bytes


def test_a_held_session_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    (path,) = _session(tmp_path, [_meta(), b.user_text("hi")])
    before = path.read_bytes()
    with TraceWriter(path, fsync="never", session_id=SID), pytest.raises(SessionLocked):
        mark_archived(DataRoot(tmp_path), SID)
    assert path.read_bytes() == before


def test_an_unknown_session_is_not_found(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        mark_archived(DataRoot(tmp_path), SID)
