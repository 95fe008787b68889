"""``penguin archive`` against moto's S3 server on loopback: the readers (sessions, show,
inspect, validate, replay, export, query, search, stats) read archived sessions as if they never left, and
``resume`` fetches what it needs and appends.  R-TRACE-18: never a session a writer holds."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from clikit import FAST, invoke, run_script, session_ids, write_script
from s3kit import BUCKET, SECRET_KEY, S3Server, s3_env

from eventstore import DataRoot, TraceWriter, read_trace
from eventstore.archive import read_record, record_path

MORE = {
    "tools": FAST["tools"],
    "responses": [[{"text": "Done again."}]],
}


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    saved = {k: os.environ.get(k) for k in s3_env()}
    os.environ.update(s3_env())
    server = S3Server()
    try:
        yield server
    finally:
        server.close()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _archive(home: Path, s3: S3Server, to: str, *args: str) -> dict[str, object]:
    result = invoke(
        "--home", home, "archive", *args, "--to", to, "--endpoint-url", s3.endpoint_url, "--json"
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data: dict[str, object] = json.loads(result.stdout)
    return data


def _local(home: Path, sid: str) -> list[Path]:
    return [p for p in home.rglob(f"{sid}_*.jsonl")]


def test_readers_read_an_archived_session_and_resume_appends(tmp_path: Path, s3: S3Server) -> None:
    home = tmp_path / "home"
    assert run_script(tmp_path, home, FAST).exit_code == 0
    (sid,) = session_ids(home)
    to = f"s3://{BUCKET}/cli/{tmp_path.name}"
    original = {p.name: p.read_bytes() for p in _local(home, sid)}

    data = _archive(home, s3, to, sid)
    (entry,) = data["sessions"]  # type: ignore[misc]
    assert [f["status"] for f in entry["files"]] == ["archived"]
    assert _local(home, sid) == []

    # Each reader, each time from object storage (archived again after every read); the first
    # listing indexes the session, so it fetches it too.
    readers = [
        (("sessions", "--json"), sid),
        (("show", sid), "Here are two files."),
        (("inspect", sid), sid),
        (("validate", sid), ""),
        (("replay", sid), ""),
        (("export", sid, "--format", "md"), "Here are two files."),
        (("query", "SELECT count(*) AS n FROM sessions", "--format", "json"), '"n": 1'),
        (("stats", "--all"), "1"),
    ]
    for args, shown in readers:
        result = invoke("--home", home, *args)
        assert result.exit_code == 0, (args, result.output)
        assert shown in result.stdout, (args, result.stdout)
        assert {p.name: p.read_bytes() for p in _local(home, sid)} == original, args
        again = _archive(home, s3, to, sid)
        assert [f["status"] for f in again["sessions"][0]["files"]] == ["evicted"]  # type: ignore[index]

    # Once indexed, listing and searching do not fetch an archived session back: the record
    # says the files that left are the ones indexed.
    for args in (("sessions", "--json"), ("search", "files", "--json")):
        result = invoke("--home", home, *args)
        assert result.exit_code == 0 and sid in result.stdout, (args, result.output)
        assert _local(home, sid) == [], args

    result = invoke(
        "--home", home, "resume", sid, "-m", "And now?", "--script",
        write_script(tmp_path, MORE, "more.json"),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "Done again." in result.stdout
    users = [
        r.payload.text  # type: ignore[union-attr]
        for r in read_trace(DataRoot(home).trace_files(sid)).records
        if type(r.payload).__name__ == "TextPayload" and r.payload.role == "user"  # type: ignore[union-attr]
    ]
    assert users == ["What is here?", "And now?"]

    # The resumed file differs from its entry: --idle archives it again, uploading it anew.
    data = _archive(home, s3, to, "--idle", "0")
    (entry,) = data["sessions"]  # type: ignore[misc]
    assert [f["status"] for f in entry["files"]] == ["archived"]
    (latest,) = read_record(record_path(DataRoot(home).traces_dir() / _date(home), sid))
    key = latest.url.removeprefix(f"s3://{BUCKET}/")
    assert b"And now?" in s3.objects()[key]
    assert SECRET_KEY.encode() not in s3.objects()[key]


def _date(home: Path) -> str:
    (record,) = home.rglob("*.archived.json")
    return record.parent.name


def test_archive_refuses_a_session_in_use_and_reports_failures(
    tmp_path: Path, s3: S3Server
) -> None:
    home = tmp_path / "home"
    assert run_script(tmp_path, home, FAST).exit_code == 0
    (sid,) = session_ids(home)
    (path,) = _local(home, sid)
    with TraceWriter(path, fsync="never"):
        result = invoke(
            "--home", home, "archive", sid, "--to", f"s3://{BUCKET}/x",
            "--endpoint-url", s3.endpoint_url,
        )  # fmt: skip
    assert result.exit_code == 1
    assert "in use" in result.stdout and path.exists()
    # Nothing to choose from: neither ids nor --idle.
    assert invoke("--home", home, "archive", "--to", "s3://b/p").exit_code == 2
    assert invoke("--home", home, "archive", sid).exit_code == 2  # no --to


def test_resume_against_an_archive_between_its_look_and_its_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``resume`` finds the session's latest file, then takes the lock; an archive that runs
    in between (it takes the lock first) removes that file.  Ordered by hand, no timing: the
    archive runs inside ``latest_trace``, after the answer is computed.  The resumed session
    continues its archived file; nothing of it is hidden behind an empty one."""
    from eventstore.archive import archive_session

    home = tmp_path / "home"
    assert run_script(tmp_path, home, FAST).exit_code == 0
    (sid,) = session_ids(home)
    real = DataRoot.latest_trace
    archived: list[Path] = []

    def then_archive(self: DataRoot, *args: object, **kwargs: object) -> Path:
        latest = real(self, *args, **kwargs)  # type: ignore[arg-type]
        if not archived:
            archive_session(DataRoot(home), sid, to=f"file://{tmp_path / 'bucket'}")
            assert not latest.exists()
            archived.append(latest)
        return latest

    monkeypatch.setattr(DataRoot, "latest_trace", then_archive)
    result = invoke(
        "--home", home, "resume", sid, "-m", "And now?", "--script",
        write_script(tmp_path, MORE, "more.json"),
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert archived and "Done again." in result.stdout
    monkeypatch.undo()
    users = [
        r.payload.text  # type: ignore[union-attr]
        for r in read_trace(DataRoot(home).trace_files(sid)).records
        if type(r.payload).__name__ == "TextPayload" and r.payload.role == "user"  # type: ignore[union-attr]
    ]
    assert users == ["What is here?", "And now?"]


def test_another_machine_reads_the_archive_with_archive_from(tmp_path: Path, s3: S3Server) -> None:
    """The bucket describes itself: each session's record lies beside its files, so a second
    data root (another machine) takes the records with ``archive --from`` and reads the
    sessions, fetching their files when first read."""
    here, there = tmp_path / "here", tmp_path / "there"
    assert run_script(tmp_path, here, FAST).exit_code == 0
    (sid,) = session_ids(here)
    to = f"s3://{BUCKET}/moved/{tmp_path.name}"
    _archive(here, s3, to, sid)

    result = invoke(
        "--home", there, "--init", "archive", "--from", to, "--endpoint-url", s3.endpoint_url,
        "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    (entry,) = json.loads(result.stdout)["sessions"]
    assert (entry["session_id"], entry["status"], entry["files"]) == (sid, "restored", 1)
    assert list(there.rglob("*.jsonl")) == []
    shown = invoke("--home", there, "show", sid)
    assert shown.exit_code == 0 and "Here are two files." in shown.stdout
    again = invoke("--home", there, "archive", "--from", to, "--endpoint-url", s3.endpoint_url)
    assert again.exit_code == 0 and "present" in again.stdout
    assert invoke("--home", there, "archive", "--from", to, "--to", to).exit_code == 2
