"""Repair into a copy (SPEC R-TOOL-3): the source is never modified (bytes and mtime), the copy
validates, every change is listed, and resuming the copy sends the same next request as
resuming the damaged original — over the hostile corpus and truncations of a real trace
(after every record, and inside every other one; every byte offset under
``PENGUIN_EXTENDED=1``)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import anyio
import pytest

from engine import LLMRequest, allow_all
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import DataRoot, encode
from eventstore import builders as b
from replay import repair_trace, resume_session, validate_session

ROOT = Path(__file__).resolve().parents[2]
HOSTILE = ROOT / "fixtures" / "traces" / "hostile"
EXTENDED = bool(os.environ.get("PENGUIN_EXTENDED"))
DATE = "2026-01-01"
PROMPT = b.user_text("what next?")


def stamp(paths: list[Path]) -> list[tuple[bytes, int]]:
    return [(p.read_bytes(), p.stat().st_mtime_ns) for p in paths]


async def next_request(files: list[Path], home: Path, workspace: Path) -> str | list[bytes]:
    """Resume the session ``files`` hold (copied into a fresh data root) and send one prompt:
    the request's messages, encoded, or the error resume raised."""
    if not files:
        return "FileNotFoundError"  # no file: as resume says for an unknown session
    root = DataRoot(home)
    day = root.ensure_dir(root.traces_dir() / DATE)
    for f in files:
        shutil.copyfile(f, day / f.name)
    sid = files[0].name.rsplit("_", 1)[0]
    llm = ScriptedLLM(
        {"responses": [[{"text": "ok"}]], "tools": [{"name": "t", "description": "test tool"}]}
    )
    try:
        session = await resume_session(
            root,
            sid,
            llm=llm,
            environment=ScriptedEnvironment.from_llm(llm),
            workspace=workspace,
            compaction=None,
            fsync="never",
        )
    except (ValueError, OSError, LookupError) as exc:
        return f"{type(exc).__name__}"
    async with session:
        async for _ in session.run([PROMPT], approve=allow_all):
            pass
    request: LLMRequest = llm.requests[0]
    return [encode(m) for m in request.messages]


def check(source: list[Path], work: Path) -> list[str]:
    """Repair ``source`` into ``work/copy`` and run every check; return the change lines."""
    before = stamp(source)
    result = repair_trace(source, work / "copy")
    assert stamp(source) == before, "the source was modified"
    if not result.changed:
        assert result.files == []
        assert not (work / "copy").exists() or not any((work / "copy").iterdir())
        return []
    errors = [f for f in validate_session(result.files) if f.severity == "error"]
    assert errors == [], [str(e) for e in errors]
    workspace = work / "ws"
    workspace.mkdir(exist_ok=True)

    async def both() -> tuple[object, object]:
        original = await next_request(source, work / "a", workspace)
        repaired = await next_request(result.files, work / "b", workspace)
        return original, repaired

    original, repaired = anyio.run(both)
    assert repaired == original
    return [str(c) for c in result.changes]


@pytest.mark.parametrize("name", sorted(p.name for p in HOSTILE.glob("*.jsonl")))
def test_hostile_corpus(name: str, tmp_path: Path) -> None:
    changes = check([HOSTILE / name], tmp_path)
    if name.startswith("base_"):
        assert changes == []
    else:
        assert changes, "a hostile file always needs a repair"


def test_every_change_is_listed_and_the_copy_never_overwrites(tmp_path: Path) -> None:
    src = HOSTILE / "truncated_midfile_001.jsonl"
    result = repair_trace(src, tmp_path / "copy")
    actions = [c.action for c in result.changes]
    assert any(a.startswith("dropped malformed line") for a in actions)
    assert sum(a.startswith("dropped record: V-7") for a in actions) == 2
    assert all(c.path == src and c.line > 0 for c in result.changes)
    assert (tmp_path / "copy" / src.name).stat().st_mode & 0o777 == 0o600
    with pytest.raises(FileExistsError):
        repair_trace(src, tmp_path / "copy")


def _cuts(sizes: list[int]) -> list[int]:
    total = sum(sizes)
    if EXTENDED:
        return list(range(1, total))
    data = b"".join((HOSTILE / f"base_00{i}.jsonl").read_bytes() for i in (1, 2))
    ends = [i + 1 for i, c in enumerate(data) if c == ord("\n")]
    starts = [0, *ends[:-1]]
    out = set()
    for n, (start, end) in enumerate(zip(starts, ends, strict=True)):
        out.add(end)  # a crash right after a record
        if n % 2:  # a torn record: cut mid-line, or just before its newline
            out.add(end - 1 if n % 4 == 1 else (start + end) // 2)
    return sorted(o for o in out if 0 < o < total)


def test_every_truncation_of_a_real_trace(tmp_path: Path) -> None:
    """A crash at any byte: the two-file base session cut there (later bytes lost)."""
    originals = [HOSTILE / "base_001.jsonl", HOSTILE / "base_002.jsonl"]
    data = [p.read_bytes() for p in originals]
    for n, cut in enumerate(_cuts([len(d) for d in data])):
        work = tmp_path / str(n)
        src = work / "src"
        src.mkdir(parents=True)
        files: list[Path] = []
        left = cut
        for original, body in zip(originals, data, strict=True):
            if left <= 0:
                break
            path = src / original.name
            path.write_bytes(body[:left])
            files.append(path)
            left -= len(body)
        try:
            check(files, work)
        except AssertionError as exc:
            raise AssertionError(f"cut at byte {cut}: {exc}") from exc
        shutil.rmtree(work)
