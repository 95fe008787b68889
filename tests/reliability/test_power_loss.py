"""Power-loss suite (simulated): every crash state a file system may leave behind
(R-TRACE-16, R-TRACE-14, R-ROOT-10, R-RESUME-1, R-RESUME-14/14a).

A scripted session (concurrent slow tools, steering, a boundary and a mid-task compaction, so
several rotations) runs with ``fsync="turn"`` while the writer's ``os`` is replaced by a recording
proxy: every ``open`` (creation), ``write`` (file, offset, bytes), ``ftruncate`` and
``fsync``/``fdatasync`` (of a file or a directory) is logged.  Replaying the log gives, at every
moment, each file's *durable* content (what the last fsync of that file covered) and the writes
issued since.  A crash state is: every other file at its durable content (its directory entry
present only if a directory fsync covered it), and the file being written at its durable content
plus any prefix of its un-synced writes, the last of which may also be torn (cut short) or
zero-filled (size extended, data never written — what some file systems leave).

Each distinct state is materialised in a fresh data root and resumed.  With ``fsync="turn"`` no
committed turn may be lost: every durable byte is still there after resume, the reader returns
every durable record, the projections count at least the durable committed turns, the repaired
session validates without error and its next request pairs every tool call (INV-12).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import random
import sys
import time
from collections.abc import Iterator
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
from engine import CompactionSettings, RetryPolicy, Session, allow_all
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import (
    AbortPayload,
    CompactionEndPayload,
    DataRoot,
    OmniMessage,
    RequestEndPayload,
    decode,
    encode_line,
    read_trace,
)
from eventstore import builders as b
from projections import SessionState
from replay import resume_session, validate_session

EXTENDED = bool(os.environ.get("PENGUIN_EXTENDED"))
SEED = 20260310
TASKS = 9 if EXTENDED else 4
# Resuming is cheap; the extra run that checks the next request is sampled in the CI tier.
RUN_SAMPLE = 1.0 if EXTENDED else 0.25


def _load_child() -> ModuleType:
    path = Path(__file__).with_name("_child_session.py")
    spec = importlib.util.spec_from_file_location("_reliability_child", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


child = _load_child()


# ----------------------------------------------------------------------------- recording


@dataclass
class Op:
    kind: str  # "create" | "write" | "truncate" | "sync" | "dirsync"
    path: Path
    offset: int = 0
    data: bytes = b""


# The writer opens trace and lock files through ``_lock`` and syncs directories through
# ``_dirs``: a stand-in for ``os`` must sit in all three to see every open, write and sync.
STORE_OS_MODULES: tuple[ModuleType, ...] = (writer_module, lock_module, dirs_module)


class RecordingOS:
    """Stands in for ``os`` inside ``eventstore._writer``: logs what reaches the disk."""

    def __init__(self, log: list[Op]) -> None:
        self._log = log
        self._paths: dict[int, Path] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(os, name)

    def open(self, path: Any, flags: int, mode: int = 0o777, **kw: Any) -> int:
        fd = os.open(path, flags, mode, **kw)
        self._paths[fd] = Path(path)
        if flags & os.O_CREAT and flags & os.O_EXCL:
            self._log.append(Op("create", Path(path)))
        return fd

    def write(self, fd: int, data: Any) -> int:
        offset = os.fstat(fd).st_size  # O_APPEND: the write lands at the end
        n = os.write(fd, data)
        self._log.append(Op("write", self._paths[fd], offset, bytes(data[:n])))
        return n

    def ftruncate(self, fd: int, length: int) -> None:
        os.ftruncate(fd, length)
        self._log.append(Op("truncate", self._paths[fd], length))

    def _sync(self, fd: int) -> None:
        path = self._paths[fd]
        self._log.append(Op("dirsync" if path.is_dir() else "sync", path))

    def fsync(self, fd: int) -> None:
        os.fsync(fd)
        self._sync(fd)

    def fdatasync(self, fd: int) -> None:
        os.fdatasync(fd)
        self._sync(fd)


async def record_session(home: Path, workspace: Path) -> str:
    llm = ScriptedLLM(child.crash_script(0, tasks=TASKS, seed=SEED))
    session = await Session.create(
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        root=DataRoot(home),
        workspace=workspace,
        system_prompt="You are under test.",
        compaction=CompactionSettings(max_context_length=child.THRESHOLD),
        retry=RetryPolicy(base_ms=1, cap_ms=2),
        fsync="turn",
    )
    llm.bind(session)
    async with session:
        for k in range(TASKS):
            async for _ in session.run([b.user_text(f"task {k}")], approve=allow_all):
                pass
    return session.id


# ----------------------------------------------------------------------------- crash states


@dataclass
class FileModel:
    content: bytes = b""
    durable: bytes = b""
    linked: bool = False  # the directory entry survives (a dirsync covered the creation)
    pending: list[Op] = field(default_factory=list)  # writes/truncates since the last sync


@dataclass(frozen=True)
class CrashState:
    files: tuple[tuple[Path, bytes], ...]  # trace files present on disk, with their content
    durable: tuple[tuple[Path, bytes], ...]  # what the last fsyncs guaranteed
    variant: str


def _apply(content: bytes, op: Op) -> bytes:
    if op.kind == "write":
        assert op.offset == len(content), "writes are appends"
        return content + op.data
    return content[: op.offset]  # truncate


def crash_states(log: list[Op]) -> Iterator[CrashState]:
    """Every distinct state (see the module docstring), in log order."""
    files: dict[Path, FileModel] = {}
    seen: set[str] = set()

    def state(current: Path | None, content: bytes, variant: str) -> CrashState | None:
        present = []
        for path, model in sorted(files.items()):
            if path == current:
                if model.linked or content:
                    present.append((path, content))
            elif model.linked:
                present.append((path, model.durable))
        durable = tuple((p, m.durable) for p, m in sorted(files.items()) if m.linked)
        # Content is append-only here, so a length and the bytes at the end identify it.
        digest = repr([(p, len(c), hashlib.sha1(c[-4096:]).digest()) for p, c in present])
        if digest in seen:
            return None
        seen.add(digest)
        return CrashState(tuple(present), durable, variant)

    for op in log:
        if not op.path.name.endswith(".jsonl") and op.kind != "dirsync":
            continue  # the lock file's pid does not matter after a crash
        if op.kind == "create":
            files[op.path] = FileModel()
        elif op.kind == "dirsync":
            for path, model in files.items():
                if path.parent == op.path:
                    model.linked = True
        elif op.kind == "sync":
            model = files[op.path]
            model.durable = model.content
            model.pending.clear()
        else:
            model = files[op.path]
            model.pending.append(op)
            model.content = _apply(model.content, op)
            # The file system may have applied any prefix of the pending ops; the last one
            # applied may be torn or zero-filled.
            content = model.durable
            candidates: list[tuple[bytes, str]] = [(content, "durable only")]
            for n, pending in enumerate(model.pending, start=1):
                if pending.kind == "write" and pending.data:
                    data = pending.data
                    cuts = sorted({1, len(data) // 2, len(data) - 1} - {0, len(data)})
                    for cut in cuts:
                        candidates.append((content + data[:cut], f"write {n} torn at {cut}"))
                    candidates.append((content + b"\0" * len(data), f"write {n} zero-filled"))
                content = _apply(content, pending)
                candidates.append((content, f"{n} of {len(model.pending)} writes"))
            for content, variant in candidates:
                found = state(op.path, content, variant)
                if found is not None:
                    yield found


# ----------------------------------------------------------------------------- checking


def committed_turns(records: list[OmniMessage]) -> int:
    return SessionState.from_records(records).turns_total


def materialise(state: CrashState, source: Path, target: Path, present: dict[Path, bytes]) -> None:
    """Make ``target`` hold exactly the state's trace files.  Directories, lock files and files
    that did not change since the previous state are reused: creating, truncating and removing
    files is what costs most on a journaling file system."""
    wanted = {target / path.relative_to(source): content for path, content in state.files}
    for directory in {p.parent for p in wanted}:
        directory.mkdir(parents=True, exist_ok=True)
    for existing in target.rglob("*.jsonl"):
        if existing not in wanted:
            existing.unlink()
            present.pop(existing, None)
    for dest, content in wanted.items():
        if dest in present and present[dest] == content:
            # Resume and the run only ever append (or cut a torn tail), so an unchanged size
            # and tail mean an unchanged file.
            with dest.open("rb") as f:
                size = f.seek(0, os.SEEK_END)
                f.seek(max(0, size - 4096))
                if size == len(content) and f.read() == content[-4096:]:
                    continue
        dest.write_bytes(content)
        present[dest] = content


async def check_state(
    state: CrashState,
    source: Path,
    root_dir: Path,
    session_id: str,
    run: bool,
    present: dict[Path, bytes],
) -> str:
    """Resume one crash state; return how it ended ("resumed" or "no session")."""
    materialise(state, source, root_dir, present)
    root = DataRoot(root_dir)
    durable_records: list[OmniMessage] = []
    for _, content in state.durable:
        durable_records += [decode(line) for line in content.split(b"\n") if line]
    llm = ScriptedLLM([[{"text": "after power loss"}, {"usage": {"cache_write": 10}}]])
    try:
        session = await resume_session(
            root,
            session_id,
            llm=llm,
            environment=ScriptedEnvironment.from_llm(llm),
            compaction=CompactionSettings(max_context_length=child.THRESHOLD),
            retry=RetryPolicy(base_ms=1, cap_ms=2),
            fsync="never",
        )
    except FileNotFoundError:
        # Legal only when nothing durable holds a session_meta (R-ROOT-10).
        assert not any(r.type == "session_meta" for r in durable_records), state.variant
        return "no session"
    async with session:
        files = root.trace_files(session_id)
        on_disk = {p.relative_to(root_dir): p.read_bytes() for p in files}
        for path, content in state.durable:
            assert on_disk[path.relative_to(source)].startswith(content), (
                f"durable bytes lost ({state.variant}, {path.name})"
            )
        read = read_trace(files, report=False)
        returned = {bytes(encode_line(r)) for r in read.records}
        residue = {d.path for d in read.diagnostics if d.kind == "empty_file"}
        for path, content in state.durable:
            if root_dir / path.relative_to(source) in residue:
                assert all(
                    decode(line).type == "session_meta" or b'"tool_list_ready"' in line
                    for line in content.split(b"\n")
                    if line
                ), "a residue file held more than its rotation head"
                continue
            for line in content.split(b"\n"):
                if line:
                    assert line + b"\n" in returned, f"durable record not read ({state.variant})"
        assert committed_turns(read.records) >= committed_turns(durable_records)
        errors = [f for f in validate_session(files) if f.severity == "error"]
        assert errors == [], f"{state.variant}: " + "\n".join(map(str, errors))
        if run:
            stream = [m async for m in session.run([b.user_text("go on")], approve=allow_all)]
            assert_requests_paired(llm.requests)
            assert not isinstance(stream[-1].payload, AbortPayload), stream[-1]
    return "resumed"


def test_power_loss_never_loses_a_committed_turn_r_trace_16(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, figures: Any
) -> None:
    """R-TRACE-16 ("turn": a committed turn survives power loss), R-TRACE-14, R-ROOT-10."""
    started = time.monotonic()
    home = tmp_path / "home"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    log: list[Op] = []
    recording = RecordingOS(log)
    for module in STORE_OS_MODULES:  # every module through which the writer reaches the disk
        monkeypatch.setattr(module, "os", recording)
    session_id = anyio.run(record_session, home, workspace)
    monkeypatch.undo()

    writes = sum(op.kind == "write" for op in log)
    syncs = sum(op.kind == "sync" for op in log)
    ends = [op for op in log if op.kind == "write" and _is_turn_end(op.data)]
    assert writes > 50 and syncs >= len(ends) > 5, (writes, syncs, len(ends))
    # Under "turn", every request_end/abort/compaction_end write is followed by an fsync of its
    # file before any other write to that file.
    for i, op in enumerate(log):
        if op in ends:
            nxt = next(o for o in log[i + 1 :] if o.path == op.path and o.kind != "create")
            assert nxt.kind == "sync", f"turn end not synced: {op.data[:80]!r}"

    rng = random.Random(SEED)
    outcomes: dict[str, int] = {}
    states = 0
    scratch = tmp_path / "state"
    present: dict[Path, bytes] = {}
    for state in crash_states(log):
        run = rng.random() < RUN_SAMPLE
        outcome = anyio.run(check_state, state, home, scratch, session_id, run, present)
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
        states += 1
    assert states > 4 * writes // 2
    assert outcomes["resumed"] > states * 0.9
    figures(
        "power_loss",
        {
            "states_checked": states,
            "writes_recorded": writes,
            "fsyncs_recorded": syncs,
            "committed_turns_lost": 0,
            "illegal_resumes": 0,
            "resumed": outcomes.get("resumed", 0),
            "no_session_yet": outcomes.get("no session", 0),
            "runs_checked_fraction": RUN_SAMPLE,
            "seconds": round(time.monotonic() - started, 1),
            "seed": SEED,
        },
    )


def _is_turn_end(line: bytes) -> bool:
    try:
        payload = decode(line.rstrip(b"\n")).payload
    except ValueError:
        return False
    return isinstance(payload, RequestEndPayload | AbortPayload | CompactionEndPayload)
