"""Crash suite: a live session SIGKILLed at seeded random moments (R-TRACE-11, R-TRACE-14,
R-TRACE-18, R-RESUME-1, R-RESUME-14, R-RESUME-14a, R-RESUME-18, INV-12).

A child process (``_child_session.py crash``) creates or resumes a session and runs scripted
tasks without end — three concurrent tools of different delays per turn (one output of 300 KB
every fourth task), steering, a boundary compaction and a mid-task compaction every three tasks
— and acknowledges on a side file every append that *returned*.  The parent kills it after a
seeded random delay, copies the data root, starts the next child on the original (which resumes
what the killed one left: each kill lands on a trace that already survived the previous ones),
and checks the copy:

1. the reader returns every acknowledged record, byte for byte at its acknowledged offset;
2. only the latest file may end in a torn fragment, and resuming cuts exactly that fragment
   (R-TRACE-14) and appends nothing but the crash closures (R-RESUME-14a/14), after which the
   file reads as before plus the closures.  A kill rarely lands inside an ``os.write`` (the
   writes take microseconds), so a quarter of the clean crash states get a planted fragment —
   a cut copy of one of the file's lines — to exercise the repair on every lineage;
3. ``resume_session`` succeeds and the repaired session passes ``validate_session`` with no error;
4. the first request of a new run pairs every completed tool_call with exactly one output.

A new session is started every ``KILLS_PER_SESSION`` kills, so that the copies stay small.
Three kill pipelines run side by side.  Each kill costs one interpreter start (~0.2 s of CPU),
so the CI tier's 300 kills take about a minute on two cores; the extended tier
(``PENGUIN_EXTENDED=1``) makes 5,000.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
import zlib
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from enginekit import assert_requests_paired

from engine import CompactionSettings, RetryPolicy, allow_all
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import (
    AbortPayload,
    CompactionEndPayload,
    DataRoot,
    RequestEndPayload,
    decode,
    encode_line,
    read_trace,
)
from eventstore import builders as b
from replay import resume_session, validate_session

CHILD = Path(__file__).with_name("_child_session.py")
EXTENDED = bool(os.environ.get("PENGUIN_EXTENDED"))
SEED = 20260309
# CI tier: as many kills as fit in ~35 s on two cores (one interpreter start per kill).
KILLS = 5000 if EXTENDED else 300
WORKERS = 3  # kill pipelines run side by side: a child's start-up is mostly waiting on CPU
KILLS_PER_SESSION = 20
PLANTED_TORN_TAILS = 0.25
THRESHOLD = 1000  # the child's compaction threshold (_child_session.THRESHOLD)


@dataclass
class Ack:
    gen: int
    name: str
    end: int
    crc: int
    head: bool


@dataclass
class Lineage:
    """One session across the children that created and resumed it."""

    home: Path
    session_id: str | None = None
    acks: list[Ack] = field(default_factory=list)


def spawn(lineage: Lineage, gen: int, acks: Path, workspace: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            str(CHILD),
            "crash",
            "--home",
            str(lineage.home),
            "--workspace",
            str(workspace),
            "--session",
            lineage.session_id or "-",
            "--gen",
            str(gen),
            "--acks",
            str(acks),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def read_acks(path: Path, gen: int) -> tuple[str | None, list[Ack]]:
    sid: str | None = None
    out: list[Ack] = []
    if not path.exists():
        return None, out
    for line in path.read_bytes().split(b"\n"):
        parts = line.decode().split()
        if not parts:
            continue
        if parts[0] == "S":
            sid = parts[1]
        elif parts[0] == "A" and len(parts) == 5:
            out.append(Ack(gen, parts[1], int(parts[2]), int(parts[3]), parts[4] == "h"))
    return sid, out


def check_acknowledged(
    lineage: Lineage, gen: int, data: dict[Path, bytes], returned: set[bytes], residue: set[Path]
) -> int:
    """Every acknowledged record is in its file at its offset and returned by the reader."""
    by_name = {p.name: p for p in data}
    checked = 0
    for ack in lineage.acks:
        path = by_name.get(ack.name)
        if ack.head and (ack.gen != gen or path in residue):
            # Rotation heads are copies (R-TRACE-9): a residue file holding only them is ignored
            # by readers and emptied by the next rotation (R-ROOT-10).
            continue
        assert path is not None, f"acknowledged record lost with its file: {ack}"
        content = data[path]
        assert ack.end <= len(content) and content[ack.end - 1 : ack.end] == b"\n", ack
        line = content[content.rfind(b"\n", 0, ack.end - 1) + 1 : ack.end]
        assert zlib.crc32(line) == ack.crc, f"acknowledged record changed: {ack}"
        assert path not in residue, f"a real record in an ignored residue file: {ack}"
        assert line in returned, f"the reader did not return an acknowledged record: {ack}"
        checked += 1
    return checked


async def resume_and_run(root: DataRoot, session_id: str) -> list[Any]:
    llm = ScriptedLLM([[{"text": "verified"}, {"usage": {"cache_write": 10}}]])
    session = await resume_session(
        root,
        session_id,
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        compaction=CompactionSettings(max_context_length=THRESHOLD),
        retry=RetryPolicy(base_ms=1, cap_ms=2),
        fsync="never",  # checking, not durability
    )
    files = root.trace_files(session_id)
    errors = [f for f in validate_session(files) if f.severity == "error"]
    assert errors == [], "\n".join(map(str, errors))
    async with session:
        stream = [m async for m in session.run([b.user_text("after the crash")], approve=allow_all)]
    assert len(llm.requests) == 1
    assert_requests_paired(llm.requests)
    assert not isinstance(stream[-1].payload, AbortPayload), stream[-1]
    return stream


def verify(lineage: Lineage, gen: int, snap: Path, stats: Counter[str], rng: random.Random) -> bool:
    """Check one crash state (a copy of the data root); return whether the session resumes."""
    sid = lineage.session_id
    root = DataRoot(snap)
    if sid is None:
        assert not lineage.acks
        stats["before_session"] += 1
        return False
    try:
        files = root.trace_files(sid)
    except FileNotFoundError:
        assert not lineage.acks, "acknowledged records but no trace file"
        stats["before_first_record"] += 1
        return False
    data = {p: p.read_bytes() for p in files}
    read = read_trace(files, report=False)
    assert not [d for d in read.diagnostics if d.kind == "malformed"], read.diagnostics
    residue = {d.path for d in read.diagnostics if d.kind == "empty_file"}
    returned = {bytes(encode_line(r)) for r in read.records}
    stats["acks_checked"] += check_acknowledged(lineage, gen, data, returned, residue)
    if not read.records:
        # Killed while writing the first session_meta: no record, so no session (R-ROOT-10).
        assert not [a for a in lineage.acks if not a.head]
        stats["before_first_record"] += 1
        return False

    latest = root.latest_trace(sid)
    for path, content in data.items():
        if path != latest and path not in residue:
            assert content.endswith(b"\n"), f"torn fragment in a non-latest file {path.name}"
    before = data[latest]
    cut = before.rfind(b"\n") + 1
    records_before = read_trace(latest, report=False).records
    if cut < len(before):
        stats["torn_tails_from_kills"] += 1
    elif before and rng.random() < PLANTED_TORN_TAILS:
        # A kill inside os.write leaves a prefix of the record (rare here: the writes are
        # short), so some crash states get one planted: a cut copy of one of the file's lines.
        model = rng.choice([line for line in before.split(b"\n") if line])
        before += model[: rng.randint(1, len(model) - 1)]
        latest.write_bytes(before)
        assert read_trace(latest, report=False).records == records_before  # R-READ-2
        stats["torn_tails_planted"] += 1

    anyio.run(resume_and_run, root, sid)

    after = latest.read_bytes()
    assert after[:cut] == before[:cut], "resume changed bytes that were already written"
    # What resume appended (before the new run's own records): only R-RESUME-14a/14 closures.
    records_after = read_trace(latest, report=False).records
    assert records_after[: len(records_before)] == records_before
    closures = 0
    for rec in records_after[len(records_before) :]:
        if isinstance(rec.payload, RequestEndPayload | CompactionEndPayload):
            closures += 1
            continue
        break
    stats["closures_written"] += closures
    for line in after[cut:].split(b"\n"):
        if line:
            decode(line)  # the repaired tail holds whole records only
    assert after.endswith(b"\n")
    stats["resumes_ok"] += 1
    return True


def run_worker(worker: int, kills: int, base: Path) -> tuple[Counter[str], int, list[float]]:
    """One pipeline of kills: ``kills`` children in a row, each resuming what the last left."""
    rng = random.Random(SEED + worker)
    base.mkdir()
    workspace = base / "ws"
    workspace.mkdir()
    stats: Counter[str] = Counter()
    lineages = 0

    def new_lineage() -> Lineage:
        nonlocal lineages
        lineages += 1
        return Lineage(home=base / f"home{lineages}")

    lineage = new_lineage()
    ack_file = base / "acks-0"
    proc = spawn(lineage, 0, ack_file, workspace)
    lived: list[float] = []
    try:
        for gen in range(kills):
            assert proc.stdout is not None
            ready = proc.stdout.readline()
            assert ready == b"ready\n", proc.communicate()[1].decode()
            # Half of the kills land early (resume, its closures, the first records), half later.
            delay = rng.uniform(0, 0.03) if rng.random() < 0.5 else rng.uniform(0, 0.2)
            time.sleep(delay)
            lived.append(delay)
            proc.kill()
            _, err = proc.communicate()
            assert proc.returncode == -signal.SIGKILL, err.decode()
            sid, acks = read_acks(ack_file, gen)
            ack_file.unlink(missing_ok=True)
            if sid is not None:
                lineage.session_id = sid
            lineage.acks += acks
            stats["records_acknowledged"] += len(acks)
            snap = base / "snap"
            shutil.rmtree(snap, ignore_errors=True)
            if lineage.home.exists():
                shutil.copytree(lineage.home, snap, symlinks=True)
            else:
                snap.mkdir()  # killed before the first record: nothing on disk at all
            current = lineage
            # The next child starts (and pays for its interpreter) while this copy is checked.
            if gen + 1 < kills:
                if not _resumable(lineage) or (gen + 1) % KILLS_PER_SESSION == 0:
                    lineage = new_lineage()
                ack_file = base / f"acks-{gen + 1}"
                proc = spawn(lineage, gen + 1, ack_file, workspace)
            verify(current, gen, snap, stats, rng)
            stats["kills_survived"] += 1
            if current is not lineage:
                shutil.rmtree(current.home, ignore_errors=True)  # its last child is dead
    finally:
        if proc.returncode is None:
            proc.kill()
            proc.communicate()
    return stats, lineages, lived


def test_sigkill_at_random_moments_loses_nothing_and_resumes(tmp_path: Path, figures: Any) -> None:
    """R-TRACE-14/18, R-RESUME-14/14a/18, INV-12: see the module docstring."""
    started = time.monotonic()
    shares = [KILLS // WORKERS + (1 if w < KILLS % WORKERS else 0) for w in range(WORKERS)]
    with ThreadPoolExecutor(WORKERS) as pool:
        futures = [pool.submit(run_worker, w, n, tmp_path / f"w{w}") for w, n in enumerate(shares)]
        results = [f.result() for f in futures]
    elapsed = time.monotonic() - started
    stats: Counter[str] = Counter()
    lived: list[float] = []
    for part, _, delays in results:
        stats += part
        lived += delays
    assert stats["kills_survived"] == KILLS
    assert stats["resumes_ok"] > KILLS // 2
    figures(
        "crash",
        {
            **stats,
            "kills": KILLS,
            "sessions": sum(n for _, n, _ in results),
            "records_lost": 0,
            "illegal_resumes": 0,
            "mean_kill_delay_ms": round(1000 * sum(lived) / len(lived), 1),
            "seconds": round(elapsed, 1),
            "seed": SEED,
        },
    )


def _resumable(lineage: Lineage) -> bool:
    """Whether the original root holds a session the next child can resume."""
    if lineage.session_id is None:
        return False
    try:
        DataRoot(lineage.home).latest_trace(lineage.session_id)
    except FileNotFoundError:
        return False
    return True
