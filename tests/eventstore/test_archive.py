"""Closed trace files on object storage (``eventstore.archive``), against moto's S3 server on
loopback: upload, hash check, durable record, removal, and every reader of the data root
fetching the files back.  R-ROOT-9 (private record), R-TRACE-18 (never a locked session)."""

from __future__ import annotations

import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import s3fs  # type: ignore[import-untyped]
from s3kit import BUCKET, SECRET_KEY, CuttingProxy, S3Server, s3_env

from eventstore import DataRoot, FileStat, SessionLocked, TraceWriter, read_trace
from eventstore.archive import (
    ArchiveError,
    ArchiveWarning,
    archive_session,
    archived_entry,
    archived_files,
    idle_sessions,
    read_record,
    record_path,
)

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "traces" / "compaction_manual"
SID = "session-2026-11-30-00-34-22-413c4516"
DATE = "2026-11-30"
TO = f"s3://{BUCKET}/fleet"


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


def _session(home: Path, sid: str = SID) -> list[Path]:
    """The two-file fixture session, copied into a data root."""
    folder = home / "default_project" / "agents" / "default_agent" / "traces" / DATE
    folder.mkdir(parents=True)
    out = []
    for src in sorted((FIXTURE / DATE).iterdir()):
        dst = folder / src.name.replace(SID, sid)
        shutil.copy2(src, dst)
        out.append(dst)
    return out


def _prefix(tmp_path: Path) -> str:
    """A prefix of its own per test: the server lives for the module."""
    return f"{TO}/{tmp_path.name}"


def test_archive_uploads_verifies_records_and_removes_r_root_9(
    tmp_path: Path, s3: S3Server
) -> None:
    home = tmp_path / "home"
    files = _session(home)
    content = {f.name: f.read_bytes() for f in files}
    mtimes = {f.name: f.stat().st_mtime_ns for f in files}
    root = DataRoot(home)
    to = _prefix(tmp_path)

    outcomes = archive_session(root, SID, to=to, endpoint_url=s3.endpoint_url)

    assert [(o.path.name, o.status) for o in outcomes] == [(f.name, "archived") for f in files]
    assert not any(f.exists() for f in files)
    objects = s3.objects()
    for f in files:
        key = f"fleet/{tmp_path.name}/default_project/default_agent/{DATE}/{f.name}"
        assert objects[key] == content[f.name]
    record = record_path(files[0].parent, SID)
    assert stat.S_IMODE(record.stat().st_mode) == 0o600
    text = record.read_text()
    assert SECRET_KEY not in text and "AKIA" not in text  # credentials stay in the environment
    entries = archived_files(root, SID)
    assert [e.name for e in entries] == [f.name for f in files]
    assert all(e.endpoint_url == s3.endpoint_url and e.url.startswith(to) for e in entries)

    # A listing that needs no content leaves them away; the record stands in for them.
    (away,) = root.sessions(fetch=False)
    assert away.files == files and not any(f.exists() for f in files)
    entry = archived_entry(files[0])
    assert entry is not None and entry.mtime_ns == mtimes[files[0].name]
    # The cheap listing too: the latest file's stat is its record's (no inode, no ctime).
    (listed,) = root.listing()
    last = archived_entry(files[-1])
    assert last is not None and listed.files == tuple(str(f) for f in files)
    assert listed.latest == FileStat(last.size, last.mtime_ns, None, None)
    assert root.session_info(listed, fetch=False) == away

    # Every reader of the root gets the files back, byte for byte, with their times.
    (info,) = root.sessions()
    assert info.session_id == SID and [p.name for p in info.files] == [f.name for f in files]
    assert {f.name: f.read_bytes() for f in files} == content
    assert {f.name: f.stat().st_mtime_ns for f in files} == mtimes
    assert root.latest_trace(SID) == files[-1]
    assert read_trace(root.trace_files(SID)).records

    # Archiving again uploads nothing: the fetched copies match their entries.
    again = archive_session(root, SID, to=to, endpoint_url=s3.endpoint_url)
    assert [o.status for o in again] == ["evicted", "evicted"]
    assert not any(f.exists() for f in files)


def test_upload_cut_mid_body_keeps_the_local_file(tmp_path: Path, s3: S3Server) -> None:
    """A network failure in the middle of an upload: that file stays, the others move."""
    home = tmp_path / "home"
    files = _session(home)
    second = files[1].read_bytes()
    root = DataRoot(home)
    proxy = CuttingProxy(s3.port, cut_key="_002.jsonl")
    fs = s3fs.S3FileSystem(
        endpoint_url=proxy.endpoint_url,
        skip_instance_cache=True,
        config_kwargs={"retries": {"max_attempts": 1}},
    )
    fs.retries = 1  # s3fs's own retries: one cut is enough to show
    try:
        outcomes = archive_session(root, SID, to=_prefix(tmp_path), fs=fs)
    finally:
        proxy.close()
    assert proxy.cuts >= 1
    assert [o.status for o in outcomes] == ["archived", "kept"]
    assert outcomes[1].error is not None and outcomes[1].error.startswith("upload failed")
    assert not files[0].exists() and files[1].read_bytes() == second
    assert [e.name for e in read_record(record_path(files[0].parent, SID))] == [files[0].name]
    keys = {k.rsplit("/", 1)[1]: v for k, v in s3.objects().items() if tmp_path.name in k}
    # The file that moved, and the session's record beside it (what another machine finds).
    record = record_path(files[0].parent, SID)
    assert sorted(keys) == sorted([files[0].name, record.name])
    assert keys[record.name] == record.read_bytes()


def test_a_hash_that_differs_keeps_the_local_file(tmp_path: Path, s3: S3Server) -> None:
    """Another writer replaces the object between upload and check: the local file stays."""

    class Racing(s3fs.S3FileSystem):  # type: ignore[misc]
        def put_file(self, lpath: str, rpath: str, **kwargs: Any) -> None:
            super().put_file(lpath, rpath, **kwargs)
            self.pipe_file(rpath, b"someone else's bytes\n")

    home = tmp_path / "home"
    files = _session(home)
    before = [f.read_bytes() for f in files]
    fs = Racing(endpoint_url=s3.endpoint_url, skip_instance_cache=True)
    outcomes = archive_session(DataRoot(home), SID, to=_prefix(tmp_path), fs=fs)
    assert [o.status for o in outcomes] == ["kept", "kept"]
    assert all(o.error and o.error.startswith("hash differs") for o in outcomes)
    assert [f.read_bytes() for f in files] == before
    assert not record_path(files[0].parent, SID).exists()


def test_a_session_a_writer_holds_is_left_alone_r_trace_18(tmp_path: Path, s3: S3Server) -> None:
    home = tmp_path / "home"
    files = _session(home)
    with TraceWriter(files[-1], fsync="never"):
        with pytest.raises(SessionLocked):
            archive_session(DataRoot(home), SID, to=_prefix(tmp_path), endpoint_url=s3.endpoint_url)
        assert idle_sessions(DataRoot(home), days=0) == []
    assert all(f.exists() for f in files)
    assert not any(tmp_path.name in k for k in s3.objects())


def test_a_changed_object_is_refused_when_fetched(tmp_path: Path, s3: S3Server) -> None:
    home = tmp_path / "home"
    files = _session(home)
    root = DataRoot(home)
    archive_session(root, SID, to=_prefix(tmp_path), endpoint_url=s3.endpoint_url)
    key = f"fleet/{tmp_path.name}/default_project/default_agent/{DATE}/{files[0].name}"
    s3.client().put_object(Bucket=BUCKET, Key=key, Body=b"tampered\n")
    with pytest.raises(ArchiveError, match="does not match its archive record") as caught:
        root.trace_files(SID)
    assert caught.value.url is not None and caught.value.url.endswith(files[0].name)
    assert not files[0].exists()  # nothing half-fetched is left under the name
    assert not list(files[0].parent.glob(".*.fetch"))
    with pytest.warns(ArchiveWarning, match=SID):
        assert root.sessions() == []  # a listing leaves it out, and says so


def test_idle_sessions_and_delete_keep_the_record_straight(tmp_path: Path, s3: S3Server) -> None:
    home = tmp_path / "home"
    old = _session(home, SID)
    new_sid = "session-2026-11-30-00-40-00-0a0b0c0d"
    new = _session(home / "x", new_sid)
    for f in new:  # the same date directory, written now
        shutil.move(f, old[0].parent / f.name)
    long_ago = 1_700_000_000
    for f in old:
        os.utime(f, (long_ago, long_ago))
    root = DataRoot(home)
    assert idle_sessions(root, days=1) == [(SID, "default_project", "default_agent")]
    archive_session(root, SID, to=_prefix(tmp_path), endpoint_url=s3.endpoint_url)
    assert idle_sessions(root, days=1) == []  # nothing of it is local any more
    removed = root.delete_session(SID)  # fetches nothing back to delete it
    assert record_path(old[0].parent, SID) in removed
    assert [i.session_id for i in root.sessions()] == [new_sid]


@pytest.mark.parametrize(
    ("to", "endpoint"),
    [
        (f"s3://AKIAX:{SECRET_KEY}@{BUCKET}/p", None),
        (TO, f"http://user:{SECRET_KEY}@127.0.0.1:9"),
        (f"{TO}?X-Amz-Signature={SECRET_KEY}", None),
    ],
)
def test_credentials_in_a_url_are_refused_and_never_recorded(
    tmp_path: Path, to: str, endpoint: str | None
) -> None:
    home = tmp_path / "home"
    files = _session(home)
    with pytest.raises(ArchiveError, match="credentials or a query") as caught:
        archive_session(DataRoot(home), SID, to=to, endpoint_url=endpoint)
    assert SECRET_KEY not in str(caught.value)
    assert all(f.exists() for f in files) and not record_path(files[0].parent, SID).exists()


def test_a_writer_that_chose_its_file_before_an_archive_fetches_it_back(tmp_path: Path) -> None:
    """The race of resume against archive, ordered by hand: the writer picks the session's
    latest file (as ``resume`` does), an archive then takes the lock, uploads and removes it,
    and only then does the writer take the lock.  It must fetch the file back before opening
    it: opening it would create an empty file under the archived one's name, which every reader
    would take for the truth (``fetch_to_write``).  Local directory target: no server needed."""
    from eventstore import builders as b

    home = tmp_path / "home"
    files = _session(home)
    root = DataRoot(home)
    before = read_trace(root.trace_files(SID)).records
    chosen = root.latest_trace(SID)  # the writer's choice, before its lock
    outcomes = archive_session(root, SID, to=f"file://{tmp_path / 'bucket'}")
    assert [o.status for o in outcomes] == ["archived", "archived"]
    assert not chosen.exists()

    with TraceWriter(chosen, fsync="never") as writer:
        assert writer.offset == len(_archived_bytes(tmp_path, files[-1].name))
        writer.append(b.user_text("after the archive"))

    after = read_trace(root.trace_files(SID)).records
    assert len(after) == len(before) + 1
    assert after[:-1] == before
    # The writer holds the lock while it checks: an archive waits for it, or is refused.
    with TraceWriter(chosen, fsync="never"), pytest.raises(SessionLocked):
        archive_session(root, SID, to=f"file://{tmp_path / 'bucket'}")


def test_a_writer_whose_file_cannot_be_fetched_creates_nothing(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _session(home)
    root = DataRoot(home)
    chosen = root.latest_trace(SID)
    archive_session(root, SID, to=f"file://{tmp_path / 'bucket'}")
    shutil.rmtree(tmp_path / "bucket")  # the object store lost it
    with pytest.raises(ArchiveError):
        TraceWriter(chosen, fsync="never")
    assert not chosen.exists()
    assert [e.name for e in read_record(record_path(chosen.parent, SID))][-1] == chosen.name


def _archived_bytes(tmp_path: Path, name: str) -> bytes:
    (obj,) = (tmp_path / "bucket").rglob(name)
    return obj.read_bytes()


class _NoRecordUploads:
    """A local fsspec filesystem that refuses to write the session's record object."""

    def __new__(cls) -> Any:
        from fsspec.implementations.local import LocalFileSystem  # type: ignore[import-untyped]

        class Refusing(LocalFileSystem):  # type: ignore[misc]
            def pipe_file(self, path: str, value: bytes, **kwargs: Any) -> None:
                if str(path).endswith(".archived.json"):
                    raise PermissionError("write refused")
                super().pipe_file(path, value, **kwargs)

        return Refusing(skip_instance_cache=True)


def test_the_record_goes_to_the_bucket_before_any_local_file_is_removed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    files = _session(home)
    root = DataRoot(home)
    bucket = tmp_path / "bucket"
    outcomes = archive_session(root, SID, to=str(bucket), fs=_NoRecordUploads())
    assert [o.status for o in outcomes] == ["kept", "kept"]
    assert all(o.error is not None and "record" in o.error for o in outcomes)
    assert all(f.exists() for f in files)
    # Uploaded and recorded locally (the next archive only evicts them), never removed.
    again = archive_session(root, SID, to=f"file://{bucket}")
    assert [o.status for o in again] == ["evicted", "evicted"]
    assert not any(f.exists() for f in files)
    (manifest,) = bucket.rglob("*.archived.json")
    assert manifest.read_bytes() == record_path(files[0].parent, SID).read_bytes()
    # A session archived before records went to the bucket: archiving it again uploads it.
    manifest.unlink()
    assert archive_session(root, SID, to=f"file://{bucket}") == []
    assert manifest.read_bytes() == record_path(files[0].parent, SID).read_bytes()


def test_another_machine_restores_the_records_and_reads_the_sessions(tmp_path: Path) -> None:
    """``restore_records``: the bucket describes itself; a second data root gets the record,
    nothing else, and reads the session through it (fetched on first read, hash-checked)."""
    from eventstore.archive import restore_records

    here, there = tmp_path / "here", tmp_path / "there"
    files = _session(here)
    records = read_trace(files).records
    to = f"file://{tmp_path / 'bucket'}"
    archive_session(DataRoot(here), SID, to=to)

    other = DataRoot(there)
    (outcome,) = restore_records(other, to)
    assert (outcome.session_id, outcome.status, outcome.files) == (SID, "restored", 2)
    assert (outcome.project, outcome.agent, outcome.date) == (
        "default_project",
        "default_agent",
        DATE,
    )
    assert list(there.rglob("*.jsonl")) == []  # only the record: files come on first read
    (info,) = other.sessions(fetch=False)
    assert info.session_id == SID
    assert read_trace(other.trace_files(SID)).records == records
    # Again: the root has it now, and it is left as it is.
    assert [o.status for o in restore_records(other, to)] == ["present"]
    assert restore_records(DataRoot(tmp_path / "third"), to, sessions=["session-other"]) == []


def test_a_record_from_a_bucket_is_checked_before_it_is_written(tmp_path: Path) -> None:
    """A record read from a bucket decides which object a file is fetched from, nothing else:
    another scheme, another server, a name that is not the session's: refused, nothing written."""
    from eventstore.archive import restore_records

    here = tmp_path / "here"
    _session(here)
    bucket = tmp_path / "bucket"
    archive_session(DataRoot(here), SID, to=str(bucket))
    (manifest,) = bucket.rglob("*.archived.json")
    good = manifest.read_bytes()
    evil = b'"endpoint_url":"http://evil.example"'
    cases = [
        (good.replace(str(bucket).encode(), b"s3://elsewhere/x", 1), "not a file URL"),
        (good.replace(b'"endpoint_url":null', evil, 1), "fetched from 'http://evil.example'"),
        (good.replace(f"{SID}_001".encode(), b"../escape_001", 1), "is not a trace file"),
        (b"{", "not an archive record"),
    ]
    for i, (data, why) in enumerate(cases):
        manifest.write_bytes(data)
        there = tmp_path / f"there-{i}"
        (outcome,) = restore_records(DataRoot(there), str(bucket))
        assert outcome.status == "refused" and outcome.error is not None, why
        assert why in outcome.error, (why, outcome.error)
        assert not there.exists() or not list(there.rglob("*.archived.json"))
