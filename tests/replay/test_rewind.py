"""Workspace snapshots and rewind (SPEC §27: R-SNAP-1, R-SNAP-2, R-SNAP-3)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import anyio
import pytest

from engine import LocalEnvironment, Session, SnapshotSettings, allow_all
from engine.llm import ScriptedLLM
from eventstore import DataRoot, WorkspaceSnapshotPayload, read_trace
from eventstore.builders import user_text
from eventstore.snapshots import SnapshotStore
from projections import ModelContext
from replay import (
    RewindRefused,
    collect_snapshots,
    plan_rewind,
    resume_session,
    rewind_session,
    session_timeline,
)
from replay.golden import replay_trace


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"items": [{"tool_call": {"name": name, "arguments": arguments}}]}


def _text(text: str) -> dict[str, Any]:
    return {"items": [{"text": text}]}


# Three tasks: write files with the file tool, change and delete with the shell, then more of
# both in one turn.
SCRIPT = {
    "responses": [
        _call("write_file", path="a.txt", content="one\n"),
        _call("write_file", path="dir/b.txt", content="bee\n"),
        _text("task 1 done"),
        _call("exec_command", cmd="echo two > a.txt; rm keep.txt; mkdir -p new; echo n > new/c"),
        _text("task 2 done"),
        _call("exec_command", cmd="rm -r dir; chmod 755 a.txt"),
        _text("task 3 done"),
    ]
}


def _age(path: Path) -> None:
    """An old modification time: a file written just now is hashed again by every snapshot
    until its mtime is safely in the past ("racy git"), which these tests do not measure."""
    os.utime(path, ns=(1_700_000_000 * 10**9, 1_700_000_000 * 10**9))


def _hashes(root: DataRoot, snapshot_id: str) -> dict[str, str]:
    store = SnapshotStore(root, project="default_project", agent="default_agent")
    return {n: e.hash for n, e in store.read_manifest(snapshot_id).files.items()}


def _state(ws: Path) -> dict[str, tuple[bytes, int]]:
    out = {}
    for path in sorted(ws.rglob("*")):
        if path.is_file():
            out[path.relative_to(ws).as_posix()] = (path.read_bytes(), path.stat().st_mode & 0o777)
    return out


async def _record(tmp_path: Path, script: Any = SCRIPT, tasks: int = 3, **settings: Any):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "keep.txt").write_text("keep\n")
    _age(ws / "keep.txt")
    root = DataRoot(tmp_path / "home")
    states = [_state(ws)]
    async with await Session.create(
        llm=ScriptedLLM(script),
        environment=LocalEnvironment(ws),
        root=root,
        workspace=ws,
        snapshots=SnapshotSettings(**settings),
    ) as session:
        for n in range(tasks):
            async for _ in session.run([user_text(f"task {n + 1}")], approve=allow_all):
                pass
            states.append(_state(ws))
        sid = session.id
    return root, ws, sid, states


def _snapshots(root: DataRoot, sid: str) -> list[WorkspaceSnapshotPayload]:
    records = read_trace(root.trace_files(sid), report=False).records
    return [r.payload for r in records if isinstance(r.payload, WorkspaceSnapshotPayload)]


def test_r_snap_2_rewind_to_each_task_restores_its_state_byte_for_byte(tmp_path: Path) -> None:
    root, ws, sid, states = anyio.run(_record, tmp_path)
    assert states[1] != states[2] != states[3]
    # Each rewind forks; the original keeps its records, so it can be rewound again.
    before = root.trace_files(sid)[0].read_bytes()
    for task in (1, 3, 2, 1):
        result = rewind_session(root, sid, to=task, force=True)
        assert _state(ws) == states[task], f"task {task}"
        assert result.new_session_id != sid
        forked = read_trace(root.trace_files(result.new_session_id), report=False).records
        texts = [getattr(r.payload, "text", "") for r in forked]
        assert f"task {task} done" in texts and f"task {task + 1}" not in texts
    assert root.trace_files(sid)[0].read_bytes() == before


def test_r_snap_1_a_snapshot_before_tools_and_at_run_end_nothing_stored_twice(
    tmp_path: Path,
) -> None:
    root, _ws, sid, _states = anyio.run(_record, tmp_path)
    snaps = _snapshots(root, sid)
    # Task 1: before its two tool turns, and at its end; tasks 2 and 3: before the tools, at end.
    assert len(snaps) == 7
    # Before task 2's tools the workspace is as task 1 left it.
    assert _hashes(root, snaps[2].id) == _hashes(root, snaps[3].id)
    store = SnapshotStore(root, project="default_project", agent="default_agent")
    trees = [p for p in (store.path / "trees").rglob("*") if p.is_file()]
    # One tree per directory per distinct state: the root's five states, dir/ once (task 3
    # removed it) and new/ once.
    assert len({s.id for s in snaps}) == 5
    assert len(trees) == 5 + 1 + 1
    blobs = [p for p in (store.path / "blobs").rglob("*") if p.is_file()]
    # keep, one, bee, two, n: each content stored once.
    assert len(blobs) == 5
    for path in [*trees, *(store.path / "blobs").rglob("*")]:
        if path.is_file():
            assert path.stat().st_mode & 0o777 == 0o600


def test_r_snap_1_an_unchanged_workspace_costs_a_scan_and_no_write(tmp_path: Path) -> None:
    script = {"responses": [_call("read_file", path="keep.txt"), _text("read")] * 3}
    root, _ws, _sid, _states = anyio.run(_record, tmp_path, script, 3)
    store = SnapshotStore(root, project="default_project", agent="default_agent")
    assert len([p for p in (store.path / "trees").rglob("*") if p.is_file()]) == 1
    assert len([p for p in (store.path / "blobs").rglob("*") if p.is_file()]) == 1


def test_r_snap_1_gitignore_and_caps(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / ".gitignore").write_text("build/\n*.log\n")
    (ws / "build").mkdir()
    (ws / "build" / "out.bin").write_bytes(b"x" * 10)
    (ws / "run.log").write_text("log")
    (ws / "big.dat").write_bytes(b"b" * 2000)
    (ws / "src.py").write_text("print(1)\n")
    script = {"responses": [_call("exec_command", cmd="echo changed > src.py"), _text("ok")]}
    root = DataRoot(tmp_path / "home")

    async def go() -> str:
        async with await Session.create(
            llm=ScriptedLLM(script),
            environment=LocalEnvironment(ws),
            root=root,
            workspace=ws,
            snapshots=SnapshotSettings(max_file_bytes=1000),
        ) as s:
            async for _ in s.run([user_text("go")], approve=allow_all):
                pass
            return s.id

    sid = anyio.run(go)
    first = _snapshots(root, sid)[0]
    store = SnapshotStore(root, project="default_project", agent="default_agent")
    manifest = store.read_manifest(first.id)
    assert sorted(manifest.files) == [".gitignore", "src.py"]
    assert manifest.skipped == ["big.dat"] and first.skipped == 1
    (ws / "run.log").write_text("more log")
    rewind_session(root, sid, to=1, force=True)
    # Ignored and skipped files are left as they are.
    assert (ws / "run.log").read_text() == "more log"
    assert (ws / "big.dat").read_bytes() == b"b" * 2000
    assert (ws / "build" / "out.bin").exists()
    assert (ws / "src.py").read_text() == "changed\n"


def test_r_snap_2_refused_when_a_file_changed_outside_the_session(tmp_path: Path) -> None:
    root, ws, sid, states = anyio.run(_record, tmp_path)
    plan = plan_rewind(root, sid, to=1)
    assert plan.outside == []
    assert plan.create == ["dir/b.txt", "keep.txt"] and plan.delete == ["new/c"]
    assert plan.change == ["a.txt"]
    (ws / "a.txt").write_text("edited by hand\n")
    (ws / "notes.md").write_text("mine\n")
    with pytest.raises(RewindRefused) as refused:
        rewind_session(root, sid, to=1)
    assert refused.value.outside == ["a.txt", "notes.md"]
    assert (ws / "a.txt").read_text() == "edited by hand\n"  # nothing was written
    assert len(list(root.sessions())) == 1  # and nothing forked
    rewind_session(root, sid, to=1, force=True)
    assert _state(ws) == states[1]


def test_r_snap_2_a_point_that_is_not_a_task_end_is_refused(tmp_path: Path) -> None:
    root, _ws, sid, _states = anyio.run(_record, tmp_path)
    tl = session_timeline(root, sid)
    assert [t.prompt for t in tl.tasks] == ["task 1", "task 2", "task 3"]
    with pytest.raises(ValueError, match="4"):
        plan_rewind(root, sid, to=4)
    with pytest.raises(ValueError, match="not the final reply"):
        plan_rewind(root, sid, to=tl.tasks[0].start)
    assert plan_rewind(root, sid, to=tl.tasks[1].reply).task == 2  # type: ignore[arg-type]


def test_resume_ignores_snapshots_and_continues_from_the_last_manifest(tmp_path: Path) -> None:
    root, ws, sid, _states = anyio.run(_record, tmp_path)
    records = read_trace(root.trace_files(sid), report=False).records
    with_snaps, without = ModelContext(), ModelContext()
    for r in records:
        with_snaps.apply(r)
        if not isinstance(r.payload, WorkspaceSnapshotPayload):
            without.apply(r)
    assert with_snaps.request_messages() == without.request_messages()

    script = {"responses": [_call("read_file", path="a.txt"), _text("fine")]}

    async def again() -> None:
        session = await resume_session(
            root,
            sid,
            llm=ScriptedLLM(script),
            environment=LocalEnvironment(ws),
            snapshots=SnapshotSettings(),
        )
        async with session:
            async for _ in session.run([user_text("task 4")], approve=allow_all):
                pass

    anyio.run(again)
    snaps = _snapshots(root, sid)
    assert len(snaps) == 7 + 2
    # The first snapshot after the resume: nothing changed since task 3 ended.
    assert _hashes(root, snaps[-2].id) == _hashes(root, snaps[-3].id)


def test_golden_replay_ignores_snapshots(tmp_path: Path) -> None:
    root, _ws, sid, _states = anyio.run(_record, tmp_path)
    result = replay_trace(root.trace_files(sid))
    assert result.matched, result.divergence


def test_r_snap_3_gc_keeps_what_kept_sessions_name(tmp_path: Path) -> None:
    root, ws, sid, states = anyio.run(_record, tmp_path)
    store = SnapshotStore(root, project="default_project", agent="default_agent")
    orphan, _ = store.put_blob(b"nobody refers to me")
    assert collect_snapshots(root, dry_run=True)["blobs"] == 1
    assert store.has_blob(orphan)
    done = collect_snapshots(root)
    assert done["blobs"] == 1 and not store.has_blob(orphan)
    rewind_session(root, sid, to=2, force=True)
    assert _state(ws) == states[2]
    # The session goes: its snapshots go with it.
    for path in root.trace_files(sid):
        path.unlink()
    fork = [s for s in root.sessions()]
    for info in fork:
        for path in info.files:
            path.unlink()
    assert collect_snapshots(root)["trees"] >= 1
    assert [p for p in (store.path / "trees").rglob("*") if p.is_file()] == []
    assert [p for p in (store.path / "blobs").rglob("*") if p.is_file()] == []


CRASH = textwrap.dedent(
    """
    import os, sys, anyio
    from engine import LocalEnvironment, Session, SnapshotSettings, allow_all
    from engine.llm import ScriptedLLM
    from eventstore import DataRoot
    from eventstore.builders import user_text
    from eventstore.snapshots import SnapshotStore

    def die(self, manifest, **kw):
        os._exit(17)  # the process dies after the blobs, before the manifest and the record

    SnapshotStore.put_manifest = die
    ws, home = sys.argv[1], sys.argv[2]
    script = {"responses": [
        {"items": [{"tool_call": {"name": "write_file", "arguments": {"path": "x", "content": "1"}}}]},
        {"items": [{"text": "done"}]}]}

    async def main():
        async with await Session.create(llm=ScriptedLLM(script), environment=LocalEnvironment(ws),
                root=DataRoot(home), workspace=ws, snapshots=SnapshotSettings()) as s:
            async for _ in s.run([user_text("go")], approve=allow_all):
                pass

    anyio.run(main)
    """
)


def test_r_snap_1_a_crash_mid_snapshot_records_no_half_snapshot(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "data.txt").write_text("payload\n")
    home = tmp_path / "home"
    proc = subprocess.run(
        [sys.executable, "-c", CRASH, str(ws), str(home)],
        capture_output=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        check=False,
    )
    assert proc.returncode == 17, proc.stderr
    root = DataRoot(home)
    [info] = list(root.sessions())
    assert _snapshots(root, info.session_id) == []
    store = SnapshotStore(root, project="default_project", agent="default_agent")
    assert store.has_blob(__import__("hashlib").sha256(b"payload\n").hexdigest())
    assert collect_snapshots(root)["blobs"] == 1  # the residue goes at the next gc


def test_r_snap_3_gc_leaves_an_agent_alone_while_a_session_is_open(tmp_path: Path) -> None:
    root, ws, sid, _states = anyio.run(_record, tmp_path)
    store = SnapshotStore(root, project="default_project", agent="default_agent")
    orphan, _ = store.put_blob(b"residue")

    async def with_open_session() -> dict[str, int]:
        session = await resume_session(
            root, sid, llm=ScriptedLLM({"responses": []}), environment=LocalEnvironment(ws)
        )
        async with session:  # the resumed session holds the lock
            return collect_snapshots(root)

    done = anyio.run(with_open_session)
    assert done["skipped_agents"] == 1 and store.has_blob(orphan)
    assert collect_snapshots(root)["blobs"] == 1 and not store.has_blob(orphan)


def test_r_snap_2_penguin_rewind_and_gc_commands(tmp_path: Path) -> None:
    from clikit import invoke

    root, ws, sid, states = anyio.run(_record, tmp_path)
    home = str(root.home)
    dry = invoke("--home", home, "rewind", sid, "--to", "1", "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "create keep.txt" in dry.output and "delete new/c" in dry.output
    assert _state(ws) == states[3]
    bad = invoke("--home", home, "rewind", sid, "--to", "x")
    assert bad.exit_code != 0 and "task number" in bad.output
    (ws / "outside.txt").write_text("mine")
    refused = invoke("--home", home, "rewind", sid, "--to", "1", "--yes")
    assert refused.exit_code != 0 and "outside" in refused.output
    assert (ws / "outside.txt").exists()
    done = invoke("--home", home, "rewind", sid, "--to", "2", "--yes", "--force", "--json")
    assert done.exit_code == 0, done.output
    import json

    shown = json.loads(done.output)
    assert shown["task"] == 2 and shown["new_session_id"] != sid
    assert _state(ws) == states[2]
    gc = invoke("--home", home, "gc", "--dry-run")
    assert gc.exit_code == 0 and "would remove 0 snapshot tree(s)" in gc.output


def test_r_set_1_sandbox_network_and_snapshots_are_recorded_and_resume_takes_them(
    tmp_path: Path,
) -> None:
    """R-SET-1/3 with R-BOX-4 and R-SNAP-3: the settings record states the sandbox, the network
    and the snapshot settings; a resume that passes none of them runs with the recorded ones."""
    from eventstore import SettingsPayload

    root, ws, sid, _states = anyio.run(_record, tmp_path, SCRIPT, 1)
    records = read_trace(root.trace_files(sid), report=False).records
    [first] = [r.payload for r in records if isinstance(r.payload, SettingsPayload)]
    assert first.sandbox == "workspace-write" and first.network is False
    assert first.snapshots == {"max_file_bytes": 16 * 2**20, "max_snapshot_bytes": 512 * 2**20}

    async def resumed() -> tuple[Any, Any]:
        session = await resume_session(
            root, sid, llm=ScriptedLLM({"responses": []}), environment=LocalEnvironment(ws)
        )
        async with session:
            return session.sandbox, session.settings()

    box, settings = anyio.run(resumed)
    assert box is not None and box.mode == "workspace-write" and box.network is False
    assert settings.snapshots == first.snapshots  # still on after the resume

    async def off() -> Any:
        async with await Session.create(
            llm=ScriptedLLM({"responses": []}),
            environment=LocalEnvironment(ws),
            root=root,
            workspace=ws,
            sandbox="off",
        ) as session:
            return session.settings()

    plain = anyio.run(off)
    assert plain.sandbox == "off" and plain.network is True and plain.snapshots is False
