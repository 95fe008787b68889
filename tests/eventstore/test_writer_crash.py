"""Crashes: a killed writer loses no acknowledged record, and the next writer repairs a torn tail
(R-TRACE-11, R-TRACE-14, R-TRACE-18)."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from eventstore import Diagnostic, TraceWriter, decode, encode_line
from eventstore import builders as b

TS = "2026-03-01T10:00:00.000Z"

# Appends records of random sizes forever, acknowledging each returned append on stdout.
CHILD = """
import random, sys
from eventstore import TraceWriter
from eventstore import builders as b
path, seed, seq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(seed)
sizes = (40, 400, 4000, 40_000, 1_000_000)
out = sys.stdout
with TraceWriter(path, fsync="never") as w:
    while True:
        w.append(b.user_text(f"{seq}:" + "x" * rng.choice(sizes), timestamp="2026-03-01T10:00:00.000Z"))
        out.write(f"{seq}\\n")
        out.flush()
        seq += 1
"""


def seqs_of(complete: bytes) -> list[int]:
    """The sequence number of every complete line (each must decode)."""
    out: list[int] = []
    for line in complete.split(b"\n"):
        if line:
            body = decode(line).payload.text  # type: ignore[union-attr]
            out.append(int(body.partition(":")[0]))
    return out


@pytest.mark.slow
def test_sigkilled_writer_loses_no_acknowledged_record_r_trace_11_14(tmp_path: Path) -> None:
    """A child appending in a loop is SIGKILLed at seeded random moments.  Every record whose
    append returned is in the file as a complete line, in order and once; reopening the file
    repairs a torn tail (with a diagnostic exactly when there was one) and leaves no torn line."""
    path = tmp_path / "s_001.jsonl"
    rng = random.Random(20260301)
    kills = 40 if os.environ.get("PENGUIN_EXTENDED") else 8
    acked: set[int] = set()
    next_seq = 0
    for _ in range(kills):
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path), str(rng.randrange(2**32)), str(next_seq)],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert proc.stdout is not None
        try:
            for _ in range(rng.randint(1, 25)):
                line = proc.stdout.readline()
                assert line, "child died before it was killed"
                acked.add(int(line))
        finally:
            proc.kill()
            proc.wait()
        # Acks written before the kill count too: their appends had returned.
        acked.update(int(line) for line in proc.stdout.read().split())
        proc.stdout.close()

        data = path.read_bytes()
        cut = data.rfind(b"\n") + 1
        complete, tail = data[:cut], data[cut:]
        seqs = seqs_of(complete)
        assert acked <= set(seqs)
        assert seqs == sorted(set(seqs))

        with TraceWriter(path, fsync="never") as w:
            if tail:
                assert [d.kind for d in w.diagnostics] == ["torn_tail_repaired"]
            else:
                assert w.diagnostics == []
        assert path.read_bytes() == complete
        next_seq = max(seqs, default=-1) + 1


def two_records() -> bytes:
    return encode_line(b.user_text("one", timestamp=TS)) + encode_line(
        b.request_end("completed", timestamp=TS)
    )


def test_torn_fragment_is_truncated_with_an_exact_diagnostic_r_trace_14(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The fragment after the last newline is cut on open; the diagnostic names the 1-based line,
    the byte count and the offset; the writer prints nothing (R-TRACE-14)."""
    path = tmp_path / "s_001.jsonl"
    good = two_records()
    fragment = b'{"timestamp":"2026-03-01T10:00:00.000Z","ty'
    path.write_bytes(good + fragment)
    with TraceWriter(path, fsync="turn") as w:
        assert w.diagnostics == [
            Diagnostic(
                path,
                3,
                "torn_tail_repaired",
                f"truncated {len(fragment)} byte(s) at offset {len(good)}",
            )
        ]
        assert str(w.diagnostics[0]) == (
            f"{path}:3: torn_tail_repaired: truncated 43 byte(s) at offset {len(good)}"
        )
        assert w.offset == len(good)
        w.append(b.user_text("two", timestamp=TS))
    assert path.read_bytes() == good + encode_line(b.user_text("two", timestamp=TS))
    assert capsys.readouterr() == ("", "")


def test_a_decodable_last_line_without_newline_is_cut_too_r_read_2(tmp_path: Path) -> None:
    """Readers drop it (R-READ-2), so the writer does too: the fold reads the same before and
    after the repair."""
    path = tmp_path / "s_001.jsonl"
    good = two_records()
    last = encode_line(b.user_text("whole but unterminated", timestamp=TS))[:-1]
    path.write_bytes(good + last)
    with TraceWriter(path, fsync="never") as w:
        assert w.diagnostics == [
            Diagnostic(
                path,
                3,
                "torn_tail_repaired",
                f"truncated {len(last)} byte(s) at offset {len(good)}",
            )
        ]
    assert path.read_bytes() == good


def test_a_file_that_is_only_a_fragment_is_emptied_r_trace_14(tmp_path: Path) -> None:
    path = tmp_path / "s_001.jsonl"
    path.write_bytes(b'{"timest')
    with TraceWriter(path, fsync="never") as w:
        assert w.diagnostics == [
            Diagnostic(path, 1, "torn_tail_repaired", "truncated 8 byte(s) at offset 0")
        ]
        assert w.offset == 0
    assert path.read_bytes() == b""


def test_a_multi_megabyte_fragment_after_many_lines_is_found_r_trace_14(tmp_path: Path) -> None:
    """The backward scan crosses read chunks; the line count covers the whole file."""
    path = tmp_path / "s_001.jsonl"
    good = encode_line(b.user_text("x" * 3000, timestamp=TS)) * 700  # ~2 MB of whole lines
    fragment = b'{"timestamp":"' + b"y" * (3 * 2**20)
    path.write_bytes(good + fragment)
    with TraceWriter(path, fsync="never") as w:
        assert w.diagnostics == [
            Diagnostic(
                path,
                701,
                "torn_tail_repaired",
                f"truncated {len(fragment)} byte(s) at offset {len(good)}",
            )
        ]
    assert path.read_bytes() == good


@pytest.mark.parametrize(
    "content", [None, b"", b"\n", two_records()], ids=["missing", "empty", "newline", "clean"]
)
def test_clean_files_are_not_touched_r_trace_14(tmp_path: Path, content: bytes | None) -> None:
    path = tmp_path / "s_001.jsonl"
    if content is not None:
        path.write_bytes(content)
    with TraceWriter(path, fsync="never") as w:
        assert w.diagnostics == []
        assert w.offset == len(content or b"")
    assert path.read_bytes() == (content or b"")
