"""The workspace snapshot store (SPEC §27, R-SNAP-1/3): blobs by hash, manifests by hash.

Owns: ``<agent_state>/snapshots/`` — ``blobs/<h[:2]>/<h>`` (a file's bytes, named by their
SHA-256) and ``manifests/<id>.json`` (one snapshot: every file's relative path, size, mode,
mtime and blob hash; ``id`` is the SHA-256 of the manifest's canonical bytes) — writing each
once (0600, atomically, never through a symlink), reading them back verified, and removing the
ones no kept snapshot names (``collect``).  The store is shared by the sessions of one agent, so
a fork or a rewind refers to the same blobs without copying them.  Does not: scan a workspace
(``engine``), decide when a snapshot is taken, or restore files (``replay``).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgspec

from ._layout import DataRoot

__all__ = [
    "CollectResult",
    "ManifestEntry",
    "SnapshotManifest",
    "SnapshotStore",
    "SnapshotStoreError",
    "hash_bytes",
]

_HASH: Final = re.compile(r"^[0-9a-f]{64}\Z")


class SnapshotStoreError(Exception):
    """A blob or manifest that is missing or does not match its hash."""

    def __init__(self, message: str, *, path: Path) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


class ManifestEntry(msgspec.Struct, frozen=True, array_like=True):
    """One file of a snapshot: its blob, size, permission bits and modification time."""

    hash: str
    size: int
    mode: int
    mtime_ns: int


class SnapshotManifest(msgspec.Struct, frozen=True, omit_defaults=True):
    """A workspace at one moment: relative POSIX paths -> entries.  ``skipped`` names the files
    left out by a size cap (R-SNAP-1): a restore leaves them as they are."""

    files: dict[str, ManifestEntry]
    skipped: list[str] = msgspec.field(default_factory=list)
    version: int = 1

    @property
    def bytes(self) -> int:
        return sum(e.size for e in self.files.values())


_ENCODER: Final = msgspec.json.Encoder(order="sorted")


def hash_bytes(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class CollectResult:
    manifests: int
    blobs: int
    bytes: int


class SnapshotStore:
    """Blobs and manifests under ``<agent_state>/snapshots`` of one agent."""

    def __init__(self, root: DataRoot, *, project: str, agent: str) -> None:
        self._root = root
        self.path = root.agent_state(project, agent) / "snapshots"

    # ------------------------------------------------------------------ blobs

    def blob_path(self, digest: str) -> Path:
        if not _HASH.match(digest):
            raise ValueError(f"not a blob hash: {digest!r}")
        return self.path / "blobs" / digest[:2] / digest

    def has_blob(self, digest: str) -> bool:
        return self.blob_path(digest).is_file()

    def put_blob(self, data: bytes, digest: str | None = None) -> tuple[str, bool]:
        """Store ``data`` once; returns its hash and whether this call wrote it."""
        digest = digest or hash_bytes(data)
        target = self.blob_path(digest)
        if target.is_file():
            return digest, False
        self._root.write_private(target, data)
        return digest, True

    def read_blob(self, digest: str) -> bytes:
        path = self.blob_path(digest)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise SnapshotStoreError("blob missing (removed by gc?)", path=path) from None
        if hash_bytes(data) != digest:
            raise SnapshotStoreError("blob does not match its hash", path=path)
        return data

    # ------------------------------------------------------------------ manifests

    def manifest_path(self, snapshot_id: str) -> Path:
        if not _HASH.match(snapshot_id):
            raise ValueError(f"not a snapshot id: {snapshot_id!r}")
        return self.path / "manifests" / f"{snapshot_id}.json"

    def put_manifest(self, manifest: SnapshotManifest) -> str:
        """Store ``manifest`` once (after its blobs: a crash leaves at most unreferenced
        files, which ``collect`` removes); returns its id."""
        data = _ENCODER.encode(manifest)
        snapshot_id = hash_bytes(data)
        target = self.manifest_path(snapshot_id)
        if not target.is_file():
            self._root.write_private(target, data)
        return snapshot_id

    def read_manifest(self, snapshot_id: str) -> SnapshotManifest:
        path = self.manifest_path(snapshot_id)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise SnapshotStoreError("snapshot manifest missing", path=path) from None
        if hash_bytes(data) != snapshot_id:
            raise SnapshotStoreError("manifest does not match its id", path=path)
        try:
            return msgspec.json.decode(data, type=SnapshotManifest)
        except msgspec.DecodeError as exc:
            raise SnapshotStoreError(f"unreadable manifest: {exc}", path=path) from None

    def has_manifest(self, snapshot_id: str) -> bool:
        return self.manifest_path(snapshot_id).is_file()

    # ------------------------------------------------------------------ garbage collection

    def collect(self, keep: Iterable[str], *, dry_run: bool = False) -> CollectResult:
        """Remove every manifest not in ``keep`` and every blob no kept manifest names
        (R-SNAP-3).  A kept id whose manifest is unreadable keeps nothing of its own."""
        kept = set(keep)
        live: set[str] = set()
        manifests = blobs = size = 0
        mdir = self.path / "manifests"
        for entry in _list(mdir):
            snapshot_id = entry.name.removesuffix(".json")
            if snapshot_id in kept and _HASH.match(snapshot_id):
                try:
                    live.update(e.hash for e in self.read_manifest(snapshot_id).files.values())
                except SnapshotStoreError:
                    pass
                continue
            manifests += 1
            size += _size(entry)
            if not dry_run:
                _unlink(entry)
        for bucket in _list(self.path / "blobs"):
            for entry in _list(bucket):
                if entry.name in live:
                    continue
                blobs += 1
                size += _size(entry)
                if not dry_run:
                    _unlink(entry)
        return CollectResult(manifests=manifests, blobs=blobs, bytes=size)


def _list(directory: Path) -> list[Path]:
    try:
        return sorted(p for p in directory.iterdir() if not p.is_symlink())
    except (FileNotFoundError, NotADirectoryError):
        return []


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
