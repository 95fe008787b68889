"""Workspace snapshots (SPEC §27): the cost of one snapshot of a 10,000-file workspace in which
one file changed, against ``git status`` on the same tree in the same run, and the store's growth
over 100 turns that each change one file.

Target: a snapshot within 2x of ``git status`` (a scan by size and mtime, no copies).
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from engine import ScanCache, SnapshotSettings, scan_workspace
from eventstore import DataRoot
from eventstore.snapshots import SnapshotStore

FILES = 10_000
DIRS = 100
TURNS = 100
REPEATS = 7
_OLD_NS = 1_700_000_000 * 10**9


def _tree(ws: Path) -> list[Path]:
    paths = []
    for d in range(DIRS):
        sub = ws / f"pkg{d:03d}"
        sub.mkdir(parents=True)
        for f in range(FILES // DIRS):
            path = sub / f"module_{f:03d}.py"
            path.write_text(f"# module {d}/{f}\n" + "x = 1\n" * (20 + f % 40))
            os.utime(path, ns=(_OLD_NS, _OLD_NS))
            paths.append(path)
    (ws / ".gitignore").write_text("__pycache__/\n*.pyc\n")
    # Old, as every file here: a file modified within the last two seconds is hashed again by
    # each snapshot ("racy git"), which is not what this measures.
    os.utime(ws / ".gitignore", ns=(_OLD_NS, _OLD_NS))
    # Directories too: a directory changed within the last two seconds is listed again by each
    # scan (its listing is not trusted, ScanCache), and a workspace's directories are not all
    # seconds old.  A turn that adds or removes a file lists that one directory again.
    for d in range(DIRS):
        os.utime(ws / f"pkg{d:03d}", ns=(_OLD_NS, _OLD_NS))
    os.utime(ws, ns=(_OLD_NS, _OLD_NS))
    return paths


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _git(ws: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=ws, check=True, capture_output=True)


def main() -> None:
    if shutil.which("git") is None:
        print("bench_snapshots: git not found; skipped")
        return
    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        paths = _tree(ws)
        root = DataRoot(Path(tmp) / "home")
        store = SnapshotStore(root, project="bench", agent="bench")
        settings = SnapshotSettings()
        _git(ws, "init", "-q")
        _git(ws, "add", "-A")
        _git(ws, "-c", "user.name=b", "-c", "user.email=b@b", "commit", "-qm", "init")

        t0 = time.perf_counter()
        cache = ScanCache()  # as a session keeps it from one snapshot to the next
        first = scan_workspace(ws, store, settings, cache=cache)
        last_id = store.put_manifest(first.manifest, groups=first.groups)
        cold = time.perf_counter() - t0
        base_size = _du(store.path)

        snap_times: list[float] = []
        git_times: list[float] = []
        previous = first.manifest
        for turn in range(TURNS):
            target = paths[(turn * 37) % len(paths)]
            target.write_text(target.read_text() + f"y = {turn}\n")
            os.utime(target, ns=(_OLD_NS + turn + 1, _OLD_NS + turn + 1))
            t0 = time.perf_counter()
            result = scan_workspace(ws, store, settings, previous, cache=cache)
            last_id = store.put_manifest(result.manifest, groups=result.groups)
            elapsed = time.perf_counter() - t0
            previous = result.manifest
            if turn < REPEATS:
                snap_times.append(elapsed)
                t0 = time.perf_counter()
                _git(ws, "status", "--porcelain")
                git_times.append(time.perf_counter() - t0)
                assert result.hashed == 1, result.hashed
        growth = _du(store.path) - base_size
        snap = statistics.median(snap_times)
        git = statistics.median(git_times)
        print(f"workspace: {FILES:,} files in {DIRS} directories")
        print(f"first snapshot (hash and store all):      {cold * 1000:8.1f} ms")
        print(f"snapshot, one file changed (median of {REPEATS}): {snap * 1000:8.1f} ms")
        print(f"git status --porcelain (median of {REPEATS}):   {git * 1000:8.1f} ms")
        print(f"ratio snapshot / git status:             {snap / git:8.2f}x  (target <= 2.0x)")
        print(f"store after the first snapshot:          {base_size / 2**20:8.2f} MiB")
        print(
            f"store growth over {TURNS} one-file turns:   {growth / 2**10:8.1f} KiB "
            f"({growth / TURNS / 2**10:.1f} KiB per turn)"
        )
        assert store.read_manifest(last_id).files.keys() == previous.files.keys()


if __name__ == "__main__":
    main()
