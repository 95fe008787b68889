"""Workspace snapshots taken by a running session (SPEC §27, R-SNAP-1).

Owns: ``SnapshotSettings`` (on/off and the caps), scanning a workspace the way git does —
``.gitignore`` files honoured, ``.git`` skipped, symlinks and special files not followed — into
a manifest, hashing only the files whose size or modification time moved since the previous
snapshot, and ``Snapshots``, which a session asks for a snapshot before the first tool of a turn
runs and at the end of a run whose tools ran; each becomes one ``workspace_snapshot`` record,
written after its blobs and manifest (a crash mid-snapshot leaves no record, only files that
``penguin gc`` removes).  Does not: restore anything (``replay.rewind_session``) or decide
retention.
"""

from __future__ import annotations

import logging
import os
import re
import stat
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import anyio
import pathspec

from eventstore import DataRoot, OmniMessage
from eventstore import builders as b
from eventstore.snapshots import (
    ManifestEntry,
    SnapshotManifest,
    SnapshotStore,
    SnapshotStoreError,
    hash_bytes,
)

__all__ = ["SnapshotSettings", "Snapshots", "scan_workspace"]

_log = logging.getLogger("engine")

# A file modified this close to the scan may change again within the same mtime tick without
# its size moving ("racy git"): its entry keeps mtime 0, so the next scan hashes it again rather
# than trusting size and mtime.
_RACY_NS: Final = 2_000_000_000


@dataclass(frozen=True)
class SnapshotSettings:
    """R-SNAP-1/3: whether snapshots are taken and their caps (a file over ``max_file_bytes``
    is left out and named in the manifest's ``skipped``; so is every file once a snapshot's new
    bytes reach ``max_snapshot_bytes``)."""

    enabled: bool = True
    max_file_bytes: int = 16 * 2**20
    max_snapshot_bytes: int = 512 * 2**20

    def __post_init__(self) -> None:
        if self.max_file_bytes < 0 or self.max_snapshot_bytes < 0:
            raise ValueError("snapshot caps must be >= 0")


@dataclass
class ScanResult:
    manifest: SnapshotManifest
    written: int  # blobs this scan wrote
    hashed: int  # files read and hashed (the rest were trusted by size and mtime)


class _Ignore:
    """One ``.gitignore``: git's rules through pathspec, but a file without negations is one
    alternation of its patterns' regexes (a single ``search`` per path: the scan's hot spot)."""

    def __init__(self, lines: list[str]) -> None:
        self.spec = pathspec.GitIgnoreSpec.from_lines(lines)
        patterns = [p for p in self.spec.patterns if p.include is not None]
        self.fast: re.Pattern[str] | None = None
        regexes = [getattr(p, "regex", None) for p in patterns]
        if all(p.include for p in patterns) and all(isinstance(r, re.Pattern) for r in regexes):
            joined = "|".join(f"(?:{r.pattern})" for r in regexes if isinstance(r, re.Pattern))
            # pathspec names its groups; one alternation may repeat a name, so drop them.
            self.fast = re.compile(re.sub(r"\(\?P<[^>]+>", "(", joined) or "(?!)")

    def match(self, path: str) -> bool:
        if self.fast is not None:
            return self.fast.search(path) is not None
        return bool(self.spec.match_file(path))


def _walk(workspace: Path, skip: frozenset[str]) -> Iterator[tuple[str, os.stat_result]]:
    """Every regular file under ``workspace`` not ignored by a ``.gitignore`` on its way, as
    (relative POSIX path, lstat), in a stable order; directories in ``skip`` (relative paths)
    are not entered."""
    specs: list[tuple[str, _Ignore]] = []

    def visit(directory: Path, rel: str) -> Iterator[tuple[str, os.stat_result]]:
        pushed = False
        ignore = directory / ".gitignore"
        try:
            lines = ignore.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            lines = []
        if lines:
            specs.append((rel, _Ignore(lines)))
            pushed = True
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            entries = []
        for entry in entries:
            path = f"{rel}{entry.name}"
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            is_dir = stat.S_ISDIR(st.st_mode)
            if is_dir and (entry.name == ".git" or path in skip):
                continue
            if specs and _ignored(specs, path, is_dir):
                continue
            if is_dir:
                yield from visit(Path(entry.path), f"{path}/")
            elif stat.S_ISREG(st.st_mode):
                yield path, st
        if pushed:
            specs.pop()

    yield from visit(workspace, "")


def _ignored(specs: list[tuple[str, _Ignore]], path: str, is_dir: bool) -> bool:
    for base, spec in specs:
        local = path[len(base) :]
        if spec.match(local + "/" if is_dir else local):
            return True
    return False


def _hash_file(path: Path) -> tuple[str, bytes] | None:
    try:
        data = path.read_bytes()
    except OSError:
        return None
    return hash_bytes(data), data


def scan_workspace(
    workspace: Path,
    store: SnapshotStore | None,
    settings: SnapshotSettings,
    previous: SnapshotManifest | None = None,
    *,
    exclude: Path | None = None,
) -> ScanResult:
    """Scan ``workspace`` into ``store`` (``None``: hash only, store nothing).  Blocking: run it
    in a worker thread."""
    now = time.time_ns()
    files: dict[str, ManifestEntry] = {}
    skipped: list[str] = []
    old = previous.files if previous is not None else {}
    written = hashed = new_bytes = 0
    for rel, st in _walk(workspace, _skipped(workspace, exclude)):
        if st.st_size > settings.max_file_bytes:
            skipped.append(rel)
            continue
        prior = old.get(rel)
        mode = stat.S_IMODE(st.st_mode)
        mtime = st.st_mtime_ns if now - st.st_mtime_ns > _RACY_NS else 0
        if prior is not None and prior.size == st.st_size and prior.mtime_ns == st.st_mtime_ns:
            same = prior.mode == mode and prior.mtime_ns == mtime
            files[rel] = prior if same else ManifestEntry(prior.hash, st.st_size, mode, mtime)
            continue
        if new_bytes + st.st_size > settings.max_snapshot_bytes:
            skipped.append(rel)
            continue
        read = _hash_file(workspace / rel)
        if read is None:  # vanished or unreadable between the walk and the read
            continue
        digest, data = read
        hashed += 1
        if store is not None and not store.has_blob(digest):
            store.put_blob(data, digest)
            written += 1
            new_bytes += len(data)
        files[rel] = ManifestEntry(digest, len(data), mode, mtime)
    manifest = SnapshotManifest(files=files, skipped=skipped)
    return ScanResult(manifest=manifest, written=written, hashed=hashed)


def _skipped(workspace: Path, exclude: Path | None) -> frozenset[str]:
    """``exclude`` (the data root, where the snapshots themselves live) as a path relative to
    the workspace, when it lies inside it: a snapshot never copies the store or the traces."""
    if exclude is None:
        return frozenset()
    try:
        rel = exclude.resolve().relative_to(workspace.resolve())
    except ValueError:
        return frozenset()
    return frozenset({rel.as_posix()}) if rel.parts else frozenset()


class Snapshots:
    """One session's snapshots: what the last one was, and whether a tool ran since."""

    def __init__(
        self,
        store: SnapshotStore,
        workspace: Path,
        settings: SnapshotSettings,
        *,
        last_id: str | None = None,
        exclude: Path | None = None,
    ) -> None:
        self.store = store
        self.exclude = exclude
        self.workspace = workspace
        self.settings = settings
        self._last: SnapshotManifest | None = None
        self._last_id = last_id
        self.dirty = False  # a tool was started since the last snapshot

    @classmethod
    def of(
        cls,
        settings: SnapshotSettings | None,
        root: DataRoot,
        project: str,
        agent: str,
        workspace: Path,
        *,
        last_id: str | None = None,
    ) -> Snapshots | None:
        """A session's snapshots, or ``None`` when they are off."""
        if settings is None or not settings.enabled:
            return None
        store = SnapshotStore(root, project=project, agent=agent)
        return cls(store, workspace, settings, last_id=last_id, exclude=root.home)

    def _previous(self) -> SnapshotManifest | None:
        if self._last is None and self._last_id is not None:
            try:
                self._last = self.store.read_manifest(self._last_id)
            except Exception:
                self._last_id = None  # unreadable: hash everything once
        return self._last

    def _take(self) -> tuple[str, SnapshotManifest]:
        result = scan_workspace(
            self.workspace, self.store, self.settings, self._previous(), exclude=self.exclude
        )
        snapshot_id = self.store.put_manifest(result.manifest)
        self._last, self._last_id = result.manifest, snapshot_id
        return snapshot_id, result.manifest

    async def take(self, emit: Callable[[OmniMessage], None]) -> None:
        """Scan in a worker thread, then record the ``workspace_snapshot`` (R-SNAP-1).  A store
        that cannot be written costs the snapshot, not the run: a warning, and no record."""
        try:
            snapshot_id, manifest = await anyio.to_thread.run_sync(self._take)
        except (OSError, SnapshotStoreError) as exc:
            _log.warning("[penguin] workspace snapshot skipped: %s", exc)
            return
        self.dirty = False
        emit(
            b.workspace_snapshot(
                snapshot_id, len(manifest.files), manifest.bytes, skipped=len(manifest.skipped)
            )
        )
