"""TraceWriter.append throughput against raw ``os.write`` of the same lines (R-TRACE-11).

The baseline ("raw") writes pre-encoded lines on an ``O_APPEND`` descriptor; the writer also
encodes each record, takes its lock and tracks its offset, so that ratio is the whole cost of
``append``.  Targets: small records ≥ 0.3× raw and ≥ 150k records/s; 4 MB records ≥ 0.8× raw.

A second baseline, "encode+raw" (``encode_line`` then ``os.write``, no writer), is the floor for
any writer that goes through the codec: for multi-MB records encoding alone costs about as much as
the write, so the ratio against it shows what the writer itself adds.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from eventstore import OmniMessage, TraceWriter, encode_line
from eventstore import builders as b

SMALL_COUNT = 200_000
SMALL_DISTINCT = 2_000
LARGE_COUNT = 50
LARGE_BYTES = 4 * 2**20
ROUNDS = 3


def _small_messages() -> list[OmniMessage]:
    base = "the quick brown fox jumps over the lazy dog; " * 5
    msgs = [
        b.assistant_text(f"{i:06d} {base}"[:220], timestamp="2026-01-01T00:00:00.000Z")
        for i in range(SMALL_DISTINCT)
    ]
    return [msgs[i % SMALL_DISTINCT] for i in range(SMALL_COUNT)]


def _large_messages() -> list[OmniMessage]:
    chunk = "0123456789abcdef" * (LARGE_BYTES // 16)
    return [
        b.tool_call_output(
            f"call_{i}",
            chunk[: LARGE_BYTES - 200] + f"{i:04d}",
            timestamp="2026-01-01T00:00:00.000Z",
        )
        for i in range(LARGE_COUNT)
    ]


def _time_raw(path: Path, lines: list[bytes | bytearray]) -> float:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    write = os.write
    try:
        start = time.perf_counter()
        for line in lines:
            write(fd, line)
        return time.perf_counter() - start
    finally:
        os.close(fd)


def _time_encode_raw(path: Path, msgs: list[OmniMessage]) -> float:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    write = os.write
    try:
        start = time.perf_counter()
        for msg in msgs:
            write(fd, encode_line(msg))
        return time.perf_counter() - start
    finally:
        os.close(fd)


def _time_writer(path: Path, msgs: list[OmniMessage]) -> float:
    with TraceWriter(path, fsync="never", max_record_bytes=8 * 2**20) as writer:
        append = writer.append
        start = time.perf_counter()
        for msg in msgs:
            append(msg)
        return time.perf_counter() - start


def _best(run: Callable[[Path], float], root: Path, name: str) -> float:
    """Best of ``ROUNDS`` fresh files: the least disturbed measurement of each side."""
    best = float("inf")
    for i in range(ROUNDS):
        path = root / f"{name}{i}_001.jsonl"
        best = min(best, run(path))
        path.unlink()
    return best


def _report(label: str, msgs: list[OmniMessage], root: Path) -> tuple[float, float]:
    lines = [encode_line(m) for m in msgs]
    total = sum(len(line) for line in lines)
    raw = _best(lambda p: _time_raw(p, lines), root, f"raw-{label}")
    floor = _best(lambda p: _time_encode_raw(p, msgs), root, f"encraw-{label}")
    ours = _best(lambda p: _time_writer(p, msgs), root, f"writer-{label}")
    n, mb = len(msgs), total / 2**20
    print(
        f"{label:>6}: {n} records, {total / n:,.0f} B each\n"
        f"        raw os.write  : {n / raw:12,.0f} records/s {mb / raw:9,.1f} MB/s\n"
        f"        encode+raw    : {n / floor:12,.0f} records/s {mb / floor:9,.1f} MB/s"
        f"   ratio {raw / floor:.2f}x raw\n"
        f"        TraceWriter   : {n / ours:12,.0f} records/s {mb / ours:9,.1f} MB/s"
        f"   ratio {raw / ours:.2f}x raw, {floor / ours:.2f}x encode+raw"
    )
    return n / ours, raw / ours


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-append-") as tmp:
        root = Path(tmp)
        small_rate, small_ratio = _report("small", _small_messages(), root)
        _, large_ratio = _report("4MB", _large_messages(), root)
    ok_small = small_ratio >= 0.3 and small_rate >= 150_000
    ok_large = large_ratio >= 0.8
    print(
        f"targets: small >= 0.30x raw and >= 150,000 records/s: {'met' if ok_small else 'MISSED'}; "
        f"4MB >= 0.80x raw: {'met' if ok_large else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
