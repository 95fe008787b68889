"""Disk-fault suite: ENOSPC, EIO and short writes injected at the writer's ``os.write`` and
``os.fsync``/``os.fdatasync`` during a live run (R-TRACE-11, R-TRACE-14, R-TRACE-15, R-TRACE-15a,
R-TRACE-16, R-RESUME-1).

The writer looks its syscalls up on ``os`` when it calls them, so replacing the ``os`` of
``eventstore._writer`` with a proxy injects a fault at the N-th call without touching anything
else in the process.  A scripted session (concurrent tools, steering, a boundary and a mid-task
compaction, hence rotations) is run once clean to count its calls, then once per fault and call
number.  Every faulty run must end by the fail-stop path:

- the last streamed message is an ``abort`` whose reason starts ``trace write failed: ``, and the
  next ``run()`` raises ``SessionBroken``;
- nothing already written changes: every file starts with the bytes it held before the failed
  operation (minus the record a failed ``fdatasync`` took back), followed by at most the final
  ``abort`` — or, when the truncation of a half-written record failed too, by that torn
  fragment, which the next writer cuts (R-TRACE-14);
- no line is spliced: every complete line decodes;
- once the fault is gone, ``resume_session`` (while the broken object is still open: its lock
  was released when the run ended) continues the session, a new run completes, its first request
  pairs every tool call (INV-12) and the whole session validates without error.

Short writes that the loop can complete (R-TRACE-11) are injected too: those runs must complete.
"""

from __future__ import annotations

import errno
import importlib.util
import os
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import pytest
from enginekit import assert_requests_paired

import eventstore._dirs as dirs_module
import eventstore._lock as lock_module
import eventstore._writer as writer_module
from engine import CompactionSettings, RetryPolicy, Session, SessionBroken, allow_all
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import AbortPayload, DataRoot, OmniMessage, decode
from eventstore import builders as b
from replay import resume_session, validate_session

EXTENDED = bool(os.environ.get("PENGUIN_EXTENDED"))
SEED = 20260311
TASKS = 3  # one of each shape: tools + steering, boundary compaction, mid-task compaction
# The CI tier injects every write fault kind at a seeded sample of call numbers (always the
# first and last ones); the extended tier at every call number.
SAMPLE = 1.0 if EXTENDED else 0.3
REASON = "trace write failed: "


def _load_child() -> ModuleType:
    path = Path(__file__).with_name("_child_session.py")
    spec = importlib.util.spec_from_file_location("_reliability_child_faults", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


child = _load_child()


@dataclass
class Fault:
    """What happens at the ``at``-th call of ``target`` ("write" or "sync")."""

    kind: str
    target: str
    at: int
    fired: bool = False
    before: dict[Path, bytes] = field(default_factory=dict, repr=False)
    synced_path: Path | None = field(default=None, repr=False)  # its record was taken back
    torn: bool = False  # a half-written record could not be taken back
    file: str = ""  # the file the failed operation was on


WRITE_FAULTS = {
    "enospc": "ENOSPC before any byte, and for every later write until space returns",
    "eio": "EIO before any byte, once",
    "short+enospc": "half the record written, then ENOSPC",
    "short+zero": "half the record written, then a write that makes no progress",
    "short+enospc+truncate-eio": "half written, ENOSPC, and the truncation back fails with EIO",
}
SYNC_FAULTS = {"fsync-eio": "fsync/fdatasync fails with EIO (the writer is poisoned)"}


# The writer opens trace and lock files through ``_lock`` and syncs directories through
# ``_dirs``: a stand-in for ``os`` must sit in all three to see every open, write and sync.
STORE_OS_MODULES: tuple[ModuleType, ...] = (writer_module, lock_module, dirs_module)


def _patch_store_os(monkeypatch: pytest.MonkeyPatch, proxy: Any) -> None:
    for module in STORE_OS_MODULES:
        monkeypatch.setattr(module, "os", proxy)


class FaultyOS:
    """Stands in for ``os`` inside ``eventstore._writer``; counts calls and injects one fault."""

    def __init__(self, fault: Fault | None, home: Path) -> None:
        self.fault = fault
        self.home = home
        self.writes = 0
        self.syncs = 0
        self.paths: dict[int, Path] = {}
        self.short_pending = False
        self.full = False

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def open(self, path: Any, flags: int, mode: int = 0o777, **kw: Any) -> int:
        fd = os.open(path, flags, mode, **kw)
        self.paths[fd] = Path(path)
        return fd

    def _snapshot(self) -> dict[Path, bytes]:
        return {p: p.read_bytes() for p in self.home.rglob("*.jsonl")}

    def _fire(self, target: str, count: int, fd: int) -> Fault | None:
        fault = self.fault
        if fault is None or fault.fired or fault.target != target or fault.at != count:
            return None
        fault.fired = True
        fault.before = self._snapshot()
        fault.file = self.paths[fd].name
        return fault

    def write(self, fd: int, data: Any) -> int:
        if self.full:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if self.short_pending:
            self.short_pending = False
            kind = self.fault.kind if self.fault else ""
            if kind == "short+zero":
                return 0
            if kind.startswith("short+enospc"):
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.writes += 1
        fault = self._fire("write", self.writes, fd)
        if fault is None:
            return os.write(fd, data)
        if fault.kind == "enospc":
            self.full = True
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        if fault.kind == "eio":
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        half = max(1, len(data) // 2)
        self.short_pending = True
        return os.write(fd, data[:half])

    def ftruncate(self, fd: int, length: int) -> None:
        fault = self.fault
        if (
            fault is not None
            and fault.fired
            and fault.kind == "short+enospc+truncate-eio"
            and not fault.torn
        ):
            fault.torn = True
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        os.ftruncate(fd, length)

    def _sync(self, real: Callable[[int], None], fd: int) -> None:
        self.syncs += 1
        fault = self._fire("sync", self.syncs, fd)
        if fault is None:
            real(fd)
            return
        if real is os.fdatasync:
            fault.synced_path = self.paths.get(fd)
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    def fsync(self, fd: int) -> None:
        self._sync(os.fsync, fd)

    def fdatasync(self, fd: int) -> None:
        self._sync(os.fdatasync, fd)


OPTIONS: dict[str, Any] = {
    "compaction": CompactionSettings(max_context_length=child.THRESHOLD),
    "retry": RetryPolicy(base_ms=1, cap_ms=2),
}


async def run_tasks(session: Session, llm: ScriptedLLM) -> list[OmniMessage]:
    llm.bind(session)
    stream: list[OmniMessage] = []
    for k in range(TASKS):
        part = [m async for m in session.run([b.user_text(f"task {k}")], approve=allow_all)]
        stream += part
        if part and isinstance(part[-1].payload, AbortPayload):
            break
    return stream


async def count_calls(
    home: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[int, int]:
    """The writer's write and sync calls during a clean run (closing excluded)."""
    proxy = FaultyOS(None, home)
    _patch_store_os(monkeypatch, proxy)
    llm = ScriptedLLM(child.crash_script(0, tasks=TASKS, seed=SEED, delays=False))
    session = await Session.create(
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        root=DataRoot(home),
        workspace=workspace,
        **OPTIONS,
    )
    async with session:
        stream = await run_tasks(session, llm)
        assert not isinstance(stream[-1].payload, AbortPayload)
        counts = proxy.writes, proxy.syncs
    monkeypatch.undo()
    return counts


def committed_prefix(fault: Fault, path: Path) -> bytes:
    before = fault.before.get(path, b"")
    if path == fault.synced_path:
        # A failed fdatasync takes its record back (R-TRACE-16: not durable, not written).
        return before[: before.rfind(b"\n", 0, len(before) - 1) + 1]
    return before


def check_files(fault: Fault, home: Path) -> None:
    """Nothing already written changed; no line is spliced; what follows is at most the final
    abort, or the torn fragment of a record whose truncation failed."""
    after = {p: p.read_bytes() for p in home.rglob("*.jsonl")}
    assert set(fault.before) <= set(after)
    aborts = 0
    for path, content in after.items():
        prefix = committed_prefix(fault, path)
        assert content.startswith(prefix), f"{fault}: bytes already written changed in {path.name}"
        extra = content[len(prefix) :]
        *lines, tail = content.split(b"\n")
        for line in lines:
            if line:
                decode(line)  # raises on a spliced line
        if tail:
            assert fault.torn, f"{fault}: torn tail without a failed truncation"
        for line in extra.split(b"\n")[:-1]:
            payload = decode(line).payload
            assert isinstance(payload, AbortPayload), f"{fault}: unexpected record {line[:80]!r}"
            assert payload.reason.startswith(REASON)
            aborts += 1
    assert aborts <= 1


async def faulty_run(
    fault: Fault, home: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> str:
    """One run with one fault; returns how the resume after it went."""
    proxy = FaultyOS(fault, home)
    _patch_store_os(monkeypatch, proxy)
    llm = ScriptedLLM(child.crash_script(0, tasks=TASKS, seed=SEED, delays=False))
    session = await Session.create(
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        root=DataRoot(home),
        workspace=workspace,
        **OPTIONS,
    )
    async with session:
        stream = await run_tasks(session, llm)
        assert fault.fired, fault
        last = stream[-1].payload
        assert isinstance(last, AbortPayload), f"{fault}: run did not fail-stop: {last}"
        assert last.reason.startswith(REASON), last.reason
        with pytest.raises(SessionBroken):
            async for _ in session.run([b.user_text("again")], approve=allow_all):
                pass
        monkeypatch.undo()  # space returns / the disk recovers
        check_files(fault, home)
        return await resume_after(home, session.id, fault)


async def resume_after(home: Path, session_id: str, fault: Fault) -> str:
    root = DataRoot(home)
    llm = ScriptedLLM([[{"text": "recovered"}, {"usage": {"cache_write": 10}}]])
    try:
        resumed = await resume_session(
            root,
            session_id,
            llm=llm,
            environment=ScriptedEnvironment.from_llm(llm),
            fsync="never",
            **OPTIONS,
        )
    except FileNotFoundError:
        # The very first record never made it: there is no session (R-ROOT-10, R-TRACE-6).
        assert not any(b"session_meta" in c for c in fault.before.values()), fault
        return "no session"
    async with resumed:
        stream = [m async for m in resumed.run([b.user_text("continue")], approve=allow_all)]
    assert not isinstance(stream[-1].payload, AbortPayload), f"{fault}: {stream[-1]}"
    assert len(llm.requests) == 1
    assert_requests_paired(llm.requests)
    files = root.trace_files(session_id)
    errors = [f for f in validate_session(files) if f.severity == "error"]
    assert errors == [], f"{fault}:\n" + "\n".join(map(str, errors))
    return "resumed"


def test_injected_disk_faults_fail_stop_and_resume_r_trace_15(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, figures: Any
) -> None:
    started = time.monotonic()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    writes, syncs = anyio.run(count_calls, tmp_path / "clean", workspace, monkeypatch)
    assert writes > 50 and syncs > 10, (writes, syncs)

    rng = random.Random(SEED)
    plan: list[Fault] = []
    for kind in WRITE_FAULTS:
        for at in range(1, writes + 1):
            if at in (1, writes) or rng.random() < SAMPLE:
                plan.append(Fault(kind, "write", at))
    for kind in SYNC_FAULTS:
        plan += [Fault(kind, "sync", at) for at in range(1, syncs + 1)]

    outcomes: dict[str, int] = {}
    for n, fault in enumerate(plan):
        home = tmp_path / f"h{n}"
        outcome = anyio.run(faulty_run, fault, home, workspace, monkeypatch)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    assert set(outcomes) <= {"resumed", "no session"}
    assert outcomes.get("resumed", 0) > len(plan) * 0.8

    figures(
        "disk_faults",
        {
            "faults_injected": len(plan),
            "by_kind": {k: sum(f.kind == k for f in plan) for k in (*WRITE_FAULTS, *SYNC_FAULTS)},
            "write_calls_per_run": writes,
            "sync_calls_per_run": syncs,
            "torn_fragments_left_for_repair": sum(f.torn for f in plan),
            "resumed": outcomes.get("resumed", 0),
            "no_session_yet": outcomes.get("no session", 0),
            "records_lost": 0,
            "illegal_resumes": 0,
            "seconds": round(time.monotonic() - started, 1),
            "seed": SEED,
        },
    )


async def short_writes_run(home: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class ShortOS(FaultyOS):
        def write(self, fd: int, data: Any) -> int:
            # Every write stops short of its end; the writer's loop must finish the record.
            return os.write(fd, data[: max(1, len(data) - 7)])

    _patch_store_os(monkeypatch, ShortOS(None, home))
    llm = ScriptedLLM(child.crash_script(0, tasks=TASKS, seed=SEED, delays=False))
    session = await Session.create(
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        root=DataRoot(home),
        workspace=workspace,
        **OPTIONS,
    )
    async with session:
        stream = await run_tasks(session, llm)
    monkeypatch.undo()
    assert not isinstance(stream[-1].payload, AbortPayload)
    files = DataRoot(home).trace_files(session.id)
    for path in files:
        content = path.read_bytes()
        assert content.endswith(b"\n")
        for line in content.split(b"\n")[:-1]:
            decode(line)
    assert [f for f in validate_session(files) if f.severity == "error"] == []


def test_short_writes_are_completed_r_trace_11(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-TRACE-11: a short write is continued in a loop; the run never notices."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    anyio.run(short_writes_run, tmp_path / "home", workspace, monkeypatch)


class _FailOneWrite:
    """``os`` for the writer: once ``armed``, the first write whose record contains ``marker``
    fails with EIO (once)."""

    def __init__(self, marker: bytes) -> None:
        self.marker = marker
        self.armed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def write(self, fd: int, data: Any) -> int:
        if self.armed and self.marker in bytes(data[:300]):
            self.armed = False
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return os.write(fd, data)


async def _failed_rotation_head(home: Path, workspace: Path, marker: bytes) -> list[Any]:
    """A boundary compaction leaves a rotation pending; the next run's first records go to a
    new file.  One of them fails; after the fault, the session is resumed and runs again."""
    proxy = _FailOneWrite(marker)
    for module in STORE_OS_MODULES:
        module.os = proxy  # type: ignore[attr-defined]
    script = {
        "tools": [{"name": "t", "description": "a tool"}],
        "responses": [
            [{"text": "one"}, {"usage": {"cache_write": 5000}}],  # over the threshold
            [{"text": "[summary]KEEP ME[/summary]"}],  # the boundary compaction's summary
            [{"text": "two"}],
        ],
    }
    try:
        llm = ScriptedLLM(script)
        session = await Session.create(
            llm=llm,
            environment=ScriptedEnvironment.from_llm(llm),
            root=DataRoot(home),
            workspace=workspace,
            **OPTIONS,
        )
        async with session:
            [_ async for _ in session.run([b.user_text("a")], approve=allow_all)]
            proxy.armed = True
            out = [m async for m in session.run([b.user_text("b")], approve=allow_all)]
    finally:
        for module in STORE_OS_MODULES:
            module.os = os  # type: ignore[attr-defined]
    failed = out[-1].payload
    assert isinstance(failed, AbortPayload) and failed.reason.startswith(REASON)
    llm2 = ScriptedLLM([[{"text": "three"}]])
    resumed = await resume_session(
        DataRoot(home),
        session.id,
        llm=llm2,
        environment=ScriptedEnvironment.from_llm(llm2),
        **OPTIONS,
    )
    async with resumed:
        again = [m async for m in resumed.run([b.user_text("c")], approve=allow_all)]
    assert not isinstance(again[-1].payload, AbortPayload), again[-1]
    files = DataRoot(home).trace_files(session.id)
    assert [str(f) for f in validate_session(files) if f.severity == "error"] == []
    return [getattr(m.payload, "text", None) for m in llm2.requests[0].messages]


@pytest.mark.parametrize(
    "marker",
    [b'"session_meta"', b'"tool_list_ready"', b"[context_summary]"],
    ids=["session_meta", "tool_list_ready", "summary"],
)
def test_failed_rotation_head_write_keeps_the_context(tmp_path: Path, marker: bytes) -> None:
    """R-TRACE-5, R-TRACE-15, R-ROOT-10, R-RESUME-15: a write that fails between a rotation
    and the record that triggered it leaves residue; the resumed session continues from the
    compacted file and sends the rebuilt summary."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    sent = anyio.run(_failed_rotation_head, tmp_path / "home", workspace, marker)
    assert sent[0] == "[context_summary]\nKEEP ME\n[/context_summary]", sent
