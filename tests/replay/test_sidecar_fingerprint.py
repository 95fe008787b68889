"""The sidecar's fingerprint detects any change to a closed file (R-TRACE-19, issue 18 item 1).

The sidecar is a cache: whatever happened to an earlier file — a same-length edit in its
middle (a digit of a token count, a flipped byte), that edit with the file's mtime put back, a
``touch``, a copy restored over it — resume gives the state it gives without the sidecar.  A file
whose content is unchanged keeps its summary (verified, not rebuilt), and a file nobody touched
costs a resume one ``fstat`` and a 4 KiB read, never a read of the whole file (flat resume).
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from soupkit import MULTI_FILE, SID, every_field, file_records, place, reference_apply

import eventstore._summaries as summaries_module
import replay._resume as resume_module
from eventstore import (
    DataRoot,
    SummaryCache,
    TokenCounts,
    encode_line,
    iter_trace,
    sidecar_path,
)
from eventstore import builders as b
from projections import FileSummary, SessionState, summarize_file
from replay import load_session

TURNS = 60

# --------------------------------------------------------------------------- helpers


def _turn_lines(k: int, session: TokenCounts) -> tuple[list[bytes], TokenCounts]:
    request = TokenCounts(100, 1000 + 7 * k, 40 + k, 1140 + 8 * k)
    session = session + request
    records = [
        b.request_begin(timestamp="2026-11-30T00:34:22.607Z"),
        b.assistant_text(f"reply {k} " + "word " * 30, timestamp="2026-11-30T00:34:22.607Z"),
        b.token_usage(request, session, timestamp="2026-11-30T00:34:22.607Z"),
        b.request_end("completed", timestamp="2026-11-30T00:34:22.607Z"),
        b.user_text(f"task {k + 1}", timestamp="2026-11-30T00:34:22.607Z"),
    ]
    return [bytes(encode_line(r)) for r in records], session


def big_session() -> list[bytes]:
    """The stored multi-file session with its first file grown to ~{TURNS} turns (~40 KiB),
    so that most of it lies before the 4 KiB tail the fingerprint always hashes."""
    files = [p.read_bytes() for p in MULTI_FILE["traces/multi_file"]]
    lines = files[0].splitlines(keepends=True)
    extra: list[bytes] = []
    session = TokenCounts()
    for k in range(TURNS):
        turn, session = _turn_lines(k, session)
        extra += turn
    first = b"".join(lines[:3] + extra + lines[3:])
    assert len(first) > 10 * 4096
    return [first, *files[1:]]


def reference_state(root: DataRoot) -> dict[str, Any]:
    files = root.trace_files(SID)
    ref = SessionState()
    for record in file_records(files):
        reference_apply(ref, record)
    return every_field(ref)


def outcome(root: DataRoot, *, store: bool = True) -> Any:
    """The state a load gives, or the error it raises (compared by type and text)."""
    try:
        return every_field(load_session(root, SID, store_summaries=store)[3])
    except Exception as exc:  # a damaged file may be refused: then identically
        return (type(exc).__name__, str(exc))


def without_sidecar(root: DataRoot, tmp: Path) -> Any:
    """The outcome of a load of a copy of ``root`` that has no sidecar."""
    copy = tmp / "nosidecar"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(root.home, copy)
    sidecar_path(DataRoot(copy).latest_trace(SID)).unlink(missing_ok=True)
    return outcome(DataRoot(copy), store=False)


def usage_offsets(data: bytes) -> list[tuple[int, int]]:
    """``(start, end)`` of every request count in a ``token_usage`` record of ``data``, before
    its last 4 KiB (what the old size-and-tail fingerprint could not see)."""
    out: list[tuple[int, int]] = []
    for start, end in _offsets(data, b'"token_usage"', rb'"request":\{([^}]*)\}'):
        for m in re.finditer(rb'":(\d+)', data[start:end]):
            out.append((start + m.start(1), start + m.end(1)))
    return out


def status_offsets(data: bytes) -> list[tuple[int, int]]:
    """``(start, end)`` of every ``completed`` status of a ``request_end`` before the tail."""
    return _offsets(data, b'"request_end"', rb'"status":"(completed)"')


def _offsets(data: bytes, kind: bytes, pattern: bytes) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    pos = 0
    for line in data.splitlines(keepends=True):
        if kind in line and pos + len(line) < len(data) - 4096:
            for m in re.finditer(pattern, line):
                out.append((pos + m.start(1), pos + m.end(1)))
        pos += len(line)
    return out


def summaries_honest(root: DataRoot) -> bool:
    """Every summary the sidecar gives for an earlier file is that file's summary now."""
    files = root.trace_files(SID)[:-1]
    cache = SummaryCache.beside(files[0], FileSummary)
    return all(cache.get(p) in (None, summarize_file(iter_trace(p, report=False))) for p in files)


def rewrite(path: Path, data: bytes, *, keep_mtime: bool) -> None:
    """Overwrite ``path`` in place (same inode), optionally putting its times back."""
    before = path.stat()
    with path.open("r+b") as f:
        f.write(data)
    if keep_mtime:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        assert path.stat().st_mtime_ns == before.st_mtime_ns


class Reads:
    """Which trace files a load folded through ``iter_trace``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.paths: list[Path] = []
        real = resume_module.iter_trace

        def counting(path: Any, **kwargs: Any) -> Iterator[Any]:
            self.paths.append(Path(path))
            return real(path, **kwargs)

        monkeypatch.setattr(resume_module, "iter_trace", counting)


class Hashes:
    """How many bytes the sidecar read to hash whole files."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.files = 0
        real = summaries_module._content_digest

        def counting(fd: int, size: int) -> str:
            self.files += 1
            return real(fd, size)

        monkeypatch.setattr(summaries_module, "_content_digest", counting)


def later(monkeypatch: pytest.MonkeyPatch, seconds: float = 60.0) -> None:
    """The sidecar's clock moved ``seconds`` on: entries stamped now are past the
    timestamp-granularity window, as they are for any file closed more than a moment ago."""
    real = summaries_module._now_ns
    monkeypatch.setattr(summaries_module, "_now_ns", lambda: real() + int(seconds * 1e9))


# --------------------------------------------------------------------------- same-length edits

_SETTINGS = settings(
    max_examples=30,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@_SETTINGS
@given(
    which=st.integers(min_value=0, max_value=10_000),
    digit=st.integers(min_value=0, max_value=9),
    status=st.booleans(),
    keep_mtime=st.booleans(),
)
@example(which=0, digit=9, status=False, keep_mtime=True)
@example(which=3, digit=0, status=True, keep_mtime=True)
def test_a_same_length_edit_in_the_middle_is_detected_r_trace_19(
    tmp_path: Path, which: int, digit: int, status: bool, keep_mtime: bool
) -> None:
    """A digit of a token count, or a request's status (``completed`` -> ``malformed``),
    changed in the middle of a closed file (same length, the last 4 KiB untouched, the mtime
    put back or not): resume gives the state of a resume without the sidecar and of the fold
    of every record, and the sidecar never gives the old summary for the new file."""
    root = place(tmp_path / "home", big_session())
    outcome(root)  # builds and stores the sidecar
    first = root.trace_files(SID)[0]
    data = first.read_bytes()
    offsets = status_offsets(data) if status else usage_offsets(data)
    start, end = offsets[which % len(offsets)]
    old = data[start:end]
    if status:
        new = b"malformed"
    else:
        new = bytes([48 + digit]) + old[1:]
        if new == old:
            new = bytes([48 + (digit + 1) % 10]) + old[1:]
    edited = data[:start] + new + data[end:]
    assert len(edited) == len(data) and edited[-4096:] == data[-4096:]
    summary = summarize_file(iter_trace(first, report=False))
    rewrite(first, edited, keep_mtime=keep_mtime)
    assert summarize_file(iter_trace(first, report=False)) != summary  # the edit matters
    assert summaries_honest(root)
    expected = reference_state(root)
    assert outcome(root, store=False) == expected
    assert outcome(root) == expected  # stores the rebuilt entry
    assert summaries_honest(root)
    assert outcome(root) == expected == without_sidecar(root, tmp_path)


@_SETTINGS
@given(position=st.floats(min_value=0.0, max_value=1.0), byte=st.integers(0, 255))
def test_a_flipped_byte_anywhere_gives_the_result_of_no_sidecar_r_trace_19(
    tmp_path: Path, position: float, byte: int
) -> None:
    root = place(tmp_path / "home", big_session())
    outcome(root)
    first = root.trace_files(SID)[0]
    data = bytearray(first.read_bytes())
    at = min(len(data) - 1, int(position * len(data)))
    if data[at] == byte:
        byte ^= 0x01
    data[at] = byte
    rewrite(first, bytes(data), keep_mtime=True)
    expected = without_sidecar(root, tmp_path)
    assert summaries_honest(root)
    assert outcome(root, store=False) == expected
    assert outcome(root) == expected
    assert outcome(root) == expected
    assert summaries_honest(root)


# --------------------------------------------------------------------------- the stat fields


@pytest.mark.parametrize("field", ["size", "mtime_ns", "ctime_ns", "ino", "dev"])
def test_each_recorded_stat_field_is_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, field: str
) -> None:
    """An entry whose recorded ``field`` no longer matches the file is verified against the
    file's content: still the same, it is used (no rebuild); changed, it is rebuilt.  (A size
    that differs is a different content: rebuilt at once.)"""
    later(monkeypatch)
    root = place(tmp_path / "home", big_session())
    expected = outcome(root)
    first = root.trace_files(SID)[0]
    side = sidecar_path(first)
    entries = [msgspec.json.decode(line) for line in side.read_bytes().splitlines()]

    def perturb() -> None:
        for entry in entries:
            entry["fp"][field] += 1
        side.write_bytes(b"".join(msgspec.json.encode(e) + b"\n" for e in entries))

    perturb()
    reads, hashes = Reads(monkeypatch), Hashes(monkeypatch)
    assert outcome(root) == expected
    if field == "size":
        assert first in reads.paths and hashes.files == 2  # rebuilt (fingerprinted first)
    else:
        assert reads.paths == [root.latest_trace(SID)] and hashes.files == 2  # verified
    hashes.files = 0
    assert outcome(root) == expected
    assert hashes.files == 0  # the verified entries were refreshed
    # The same mismatch over a changed file: rebuilt from the file.
    data = first.read_bytes()
    start, end = status_offsets(data)[1]
    rewrite(first, data[:start] + b"malformed" + data[end:], keep_mtime=True)
    entries = [msgspec.json.decode(line) for line in side.read_bytes().splitlines()]
    for entry in entries:  # the recorded stat as the file has it now, but for ``field``
        if entry["file"] == first.name:
            st_ = first.stat()
            entry["fp"].update(
                size=st_.st_size,
                mtime_ns=st_.st_mtime_ns,
                ctime_ns=st_.st_ctime_ns,
                ino=st_.st_ino,
                dev=st_.st_dev,
            )
    perturb()
    reads.paths.clear()
    assert outcome(root) == reference_state(root) != expected
    assert first in reads.paths
    assert summaries_honest(root)


def test_an_untouched_file_is_never_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Flat resume: with every closed file as its entry recorded it, a load reads neither
    trace file nor whole-file hash of any earlier file."""
    files = big_session()
    later(monkeypatch)
    root = place(tmp_path / "home", [files[0], files[1], files[0], files[1], files[2]])
    expected = reference_state(root)
    assert outcome(root) == expected
    reads, hashes = Reads(monkeypatch), Hashes(monkeypatch)
    for _ in range(3):
        assert outcome(root, store=False) == expected
    assert reads.paths == [root.latest_trace(SID)] * 3
    assert hashes.files == 0


def test_an_entry_made_within_the_timestamp_granularity_is_verified(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A file changed in the same timestamp tick as its entry was made keeps its mtime and
    ctime: such an entry ("racy", as git calls it) is checked against the file's content until
    it is refreshed after the window has passed."""
    root = place(tmp_path / "home", big_session())
    expected = outcome(root)  # entries made right after the files were written: racy
    hashes = Hashes(monkeypatch)
    assert outcome(root, store=False) == expected
    assert hashes.files == 2
    later(monkeypatch)
    hashes.files = 0
    assert outcome(root) == expected  # verified once more, and refreshed (stored)
    assert hashes.files == 2
    hashes.files = 0
    assert outcome(root, store=False) == expected
    assert hashes.files == 0


# --------------------------------------------------------------------------- unchanged content


@pytest.mark.parametrize("how", ["touch", "copy restored", "copy with times"])
def test_a_file_with_the_same_content_keeps_its_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """``touch``, or a backup copied back over the file (a new inode, with or without its
    times): the content is the same, so the summary is used without folding the file again."""
    later(monkeypatch)
    root = place(tmp_path / "home", big_session())
    expected = outcome(root)
    first = root.trace_files(SID)[0]
    if how == "touch":
        os.utime(first, ns=(1, 1_000_000_000))
    else:
        backup = tmp_path / "backup.jsonl"
        (shutil.copy2 if how == "copy with times" else shutil.copyfile)(first, backup)
        first.unlink()
        shutil.move(backup, first)
    assert without_sidecar(root, tmp_path) == expected
    reads = Reads(monkeypatch)
    assert outcome(root) == expected
    assert reads.paths == [root.latest_trace(SID)]


# --------------------------------------------------------------------------- a damaged sidecar


def test_a_deleted_truncated_or_garbage_sidecar_changes_nothing(tmp_path: Path) -> None:
    root = place(tmp_path / "home", big_session())
    expected = reference_state(root)
    assert outcome(root) == expected
    side = sidecar_path(root.latest_trace(SID))
    data = side.read_bytes()
    variants = [data[:cut] for cut in range(0, len(data), max(1, len(data) // 17))]
    variants += [b"\x00\xff" * 300, data.replace(b'"fp"', b'"xx"'), b"{}\n[]\nnull\n"]
    for damaged in variants:
        side.write_bytes(damaged)
        assert outcome(root, store=False) == expected
        assert outcome(root) == expected
        assert outcome(root) == expected
    side.unlink()
    assert outcome(root) == expected


def test_an_entry_of_the_old_format_is_rebuilt(tmp_path: Path) -> None:
    """Entries written before the stat fields and content hash (size and tail only) are not
    trusted: the first resume rebuilds them."""
    root = place(tmp_path / "home", big_session())
    expected = outcome(root)
    first = root.trace_files(SID)[0]
    side = sidecar_path(first)
    old = []
    for line in side.read_bytes().splitlines():
        entry = msgspec.json.decode(line)
        fp = entry.pop("fp")
        old.append({**entry, "size": fp["size"], "tail": fp["tail"]})
    side.write_bytes(b"".join(msgspec.json.encode(e) + b"\n" for e in old))
    # A lie the old format would have believed: the file's middle changed, size and tail kept.
    data = first.read_bytes()
    start, end = status_offsets(data)[2]
    rewrite(first, data[:start] + b"malformed" + data[end:], keep_mtime=True)
    assert outcome(root) == reference_state(root) != expected
    assert b'"fp"' in side.read_bytes()


def test_a_rotation_settles_the_entries_of_earlier_rotations(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Entries written at rotation are racy (stamped right after the file's last write); the
    next write of the sidecar, once their window has passed, verifies and re-stamps them, so a
    resume after a long live run hashes at most the files closed in the last moments."""
    root = place(tmp_path / "home", big_session())
    outcome(root, store=True)  # racy entries, as a rotation writes them
    files = root.trace_files(SID)
    later(monkeypatch)
    cache = SummaryCache.beside(files[0], FileSummary)
    cache.put(files[-1], summarize_file(iter_trace(files[-1], report=False)))  # a new rotation
    assert cache.save()
    hashes, reads = Hashes(monkeypatch), Reads(monkeypatch)
    assert outcome(root, store=False) == reference_state(root)
    assert hashes.files == 0 and reads.paths == [files[-1]]
