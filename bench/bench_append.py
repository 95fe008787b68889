"""TraceWriter.append throughput against raw ``os.write`` of the same lines (R-TRACE-11).

The baseline ("raw") writes pre-encoded lines on an ``O_APPEND`` descriptor; the writer also
encodes each record, takes its lock and tracks its offset, so that ratio is the whole cost of
``append``.  Target for small records: ≥ 0.3× raw and ≥ 150k records/s.

A second baseline, "encode+raw" (msgspec ``encode_line`` then one raw ``os.write``, no writer),
is the floor for any writer that goes through the codec.  For 4 MB records encoding alone costs
about as much as the write, so the old target (≥ 0.8× raw) measured msgspec, not the writer; it
is retired (issue 18) in favour of what the writer adds: 4 MB records ≥ 0.95× encode+raw.  The
raw ratio is still printed.

Times are the process's CPU time (user + system: the write's copy into the page cache is
system time), taken per block of about 1 MiB of records; each block's figure is its best over
``ROUNDS`` rounds with the three sides interleaved.  Other load on a shared machine then moves
the ratios little (wall time swung the 4 MB ratio between 0.8x and 1.0x).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from eventstore import OmniMessage, TraceWriter, encode_line
from eventstore import builders as b

SMALL_COUNT = 200_000
SMALL_DISTINCT = 2_000
LARGE_COUNT = 50
LARGE_BYTES = 4 * 2**20
ROUNDS = 5
_clock = time.process_time


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


def _blocks(items: list[Any], block: int, step: Callable[[Any], object]) -> list[float]:
    """CPU time of ``step`` over ``items``, one figure per ``block`` consecutive items."""
    times: list[float] = []
    for first in range(0, len(items), block):
        chunk = items[first : first + block]
        start = _clock()
        for item in chunk:
            step(item)
        times.append(_clock() - start)
    return times


def _time_raw(path: Path, lines: list[bytes | bytearray], block: int) -> list[float]:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        return _blocks(lines, block, lambda line: os.write(fd, line))
    finally:
        os.close(fd)


def _time_encode_raw(path: Path, msgs: list[OmniMessage], block: int) -> list[float]:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        return _blocks(msgs, block, lambda msg: os.write(fd, encode_line(msg)))
    finally:
        os.close(fd)


def _time_writer(path: Path, msgs: list[OmniMessage], block: int) -> list[float]:
    with TraceWriter(path, fsync="never", max_record_bytes=8 * 2**20) as writer:
        return _blocks(msgs, block, writer.append)


def _report(label: str, msgs: list[OmniMessage], root: Path) -> tuple[float, float, float]:
    lines = [encode_line(m) for m in msgs]
    total = sum(len(line) for line in lines)
    block = max(1, 2**20 // (total // len(msgs)))  # about 1 MiB of records per timed block
    sides: dict[str, Callable[[Path], list[float]]] = {
        "raw": lambda p: _time_raw(p, lines, block),
        "encraw": lambda p: _time_encode_raw(p, msgs, block),
        "writer": lambda p: _time_writer(p, msgs, block),
    }
    best: dict[str, list[float]] = {}
    for i in range(ROUNDS):
        for name, run in sides.items():  # interleaved: one disturbance hits one round
            path = root / f"{name}-{label}{i}_001.jsonl"
            times = run(path)
            path.unlink()
            # Best of the rounds block by block: a disturbance costs one block, not a side.
            best[name] = [min(a, b) for a, b in zip(best.get(name, times), times, strict=True)]
    raw, floor, ours = (sum(best[name]) for name in ("raw", "encraw", "writer"))
    n, mb = len(msgs), total / 2**20
    print(
        f"{label:>6}: {n} records, {total / n:,.0f} B each (CPU time, best of {ROUNDS} per block)\n"
        f"        raw os.write  : {n / raw:12,.0f} records/s {mb / raw:9,.1f} MB/s   1.00x\n"
        f"        encode+raw    : {n / floor:12,.0f} records/s {mb / floor:9,.1f} MB/s"
        f"   {raw / floor:.2f}x raw\n"
        f"        TraceWriter   : {n / ours:12,.0f} records/s {mb / ours:9,.1f} MB/s"
        f"   {raw / ours:.2f}x raw, {floor / ours:.2f}x encode+raw"
    )
    return n / ours, raw / ours, floor / ours


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-append-") as tmp:
        root = Path(tmp)
        small_rate, small_ratio, _ = _report("small", _small_messages(), root)
        _, _, large_vs_floor = _report("4MB", _large_messages(), root)
    ok_small = small_ratio >= 0.3 and small_rate >= 150_000
    ok_large = large_vs_floor >= 0.95
    print(
        f"targets: small >= 0.30x raw and >= 150,000 records/s: {'met' if ok_small else 'MISSED'}; "
        f"4MB >= 0.95x encode+raw: {'met' if ok_large else 'MISSED'} "
        "(the old 4MB >= 0.80x raw target is retired: it measured msgspec's encoder)"
    )


if __name__ == "__main__":
    main()
