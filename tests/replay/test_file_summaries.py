"""File summaries in the sidecar (R-TRACE-19, R-RESUME-11, R-PROJ-2, INV-24).

The sidecar is a cache: resume through it, without it, with it truncated, full of garbage, or
with a file changed under it gives the same ``SessionState`` — every field, fold scratch
included — as folding every record of every file.  With it, resume reads no earlier file.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from enginekit import collect, make_env, make_session
from soupkit import (
    MULTI_FILE,
    SID,
    Soup,
    every_field,
    file_records,
    place,
    reference_apply,
    soup_files,
)

import replay._resume as resume_module
from engine import CompactionSettings
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import (
    DataRoot,
    SummaryCache,
    TokenCounts,
    encode_line,
    iter_trace,
    sidecar_path,
)
from eventstore import builders as b
from projections import (
    FileFold,
    FileSummary,
    SessionState,
    Usage,
    UsageSummary,
    summarize_file,
    usage_summary,
)
from replay import load_session, resume_session

# --------------------------------------------------------------------------- helpers


def reference_state(root: DataRoot) -> SessionState:
    """``SessionState`` folded record by record over every file up to the latest."""
    files = root.trace_files(SID)
    latest = root.latest_trace(SID)
    ref = SessionState()
    for record in file_records(files[: files.index(latest) + 1]):
        reference_apply(ref, record)
    return ref


def loaded(root: DataRoot) -> dict[str, Any]:
    """The state ``resume_session`` starts from (it stores missing summaries)."""
    return every_field(load_session(root, SID, store_summaries=True)[3])


def sidecar(root: DataRoot) -> Path:
    return sidecar_path(root.latest_trace(SID))


class Reads:
    """Which earlier files a ``load_session`` opened through ``iter_trace``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.paths: list[Path] = []
        real = resume_module.iter_trace

        def counting(path: Any, **kwargs: Any) -> Iterator[Any]:
            self.paths.append(Path(path))
            return real(path, **kwargs)

        monkeypatch.setattr(resume_module, "iter_trace", counting)


def unstamped(data: bytes) -> list[Any]:
    """The sidecar's entries without the time each was stamped at."""
    entries = [msgspec.json.decode(line) for line in data.splitlines()]
    for entry in entries:
        del entry["fp"]["stamp_ns"]
    return entries


def damaged_variants(data: bytes) -> Iterator[tuple[str, bytes]]:
    """The sidecar truncated at many offsets, its lines shuffled into garbage, and worse."""
    step = max(1, len(data) // 23)
    for cut in range(0, len(data), step):
        yield f"truncated at {cut}", data[:cut]
    rng = random.Random(len(data))
    noisy = bytearray(data)
    for _ in range(40):
        noisy[rng.randrange(len(noisy))] = rng.randrange(256)
    yield "flipped bytes", bytes(noisy)
    yield "garbage", bytes(rng.randrange(256) for _ in range(2000))
    yield "not json lines", b"[1, 2, 3]\n{}\nnull\n"
    # Well-formed entries whose summaries lie: the fingerprint still guards them only when the
    # file changed, so they are checked through the schema and the file fingerprint, not trust.
    lines = data.splitlines(keepends=True)
    yield "entries reversed", b"".join(reversed(lines))
    yield "one entry twice", b"".join(lines[:1] * 2 + lines[1:])


# --------------------------------------------------------------------------- merge is exact


def check_merge(files: list[list[Any]]) -> None:
    """Merging per-file summaries (or folding a file whose summary is not mergeable) equals
    the record-by-record fold after every file, fold scratch included."""
    merged, ref = SessionState(), SessionState()
    for records in files:
        summary = summarize_file(records)
        assert msgspec.json.decode(msgspec.json.encode(summary), type=FileSummary) == summary
        if not summary.merge_into(merged):
            for record in records:
                merged.apply(record)
        for record in records:
            reference_apply(ref, record)
        assert every_field(merged) == every_field(ref)


def split_at_meta(
    records: list[Any], rng: random.Random, *, elsewhere: float = 0.03
) -> list[list[Any]]:
    """Records split into files at their session_meta records, sometimes elsewhere too."""
    files: list[list[Any]] = []
    for record in records:
        if record.type == "session_meta" or not files or rng.random() < elsewhere:
            files.append([])
        files[-1].append(record)
    return files


def test_merge_of_file_summaries_equals_the_fold_r_trace_19_r_proj_2() -> None:
    merged_files = 0
    for seed in range(300):
        rng = random.Random(seed)
        files = split_at_meta(Soup(seed).records(90), rng)
        check_merge(files)
        merged_files += sum(summarize_file(f).state.mergeable for f in files[1:])
    assert merged_files > 300  # the merge path, not the fallback, did most of the work


@pytest.mark.parametrize("name", sorted(MULTI_FILE))
def test_merge_over_stored_sessions_r_trace_19(name: str) -> None:
    files = [list(iter_trace(p, report=False)) for p in MULTI_FILE[name]]
    assert all(summarize_file(f).state.mergeable for f in files if len(f) > 2)
    check_merge(files)


def test_fragments_are_not_mergeable_r_trace_19() -> None:
    soup = Soup(1)
    meta = soup.meta()
    tools = b.tool_list_ready([], timestamp=soup.ts())
    begin = b.request_begin(timestamp=soup.ts())
    assert summarize_file([meta, begin]).state.mergeable
    assert not summarize_file([begin, meta]).state.mergeable  # a fragment before its meta
    assert not summarize_file([meta, tools]).state.mergeable  # a rotation head only
    assert not summarize_file([meta, meta, begin]).state.mergeable
    assert not summarize_file([]).state.mergeable
    # A fresh state takes a mergeable first file; one that already folded a fragment does not.
    state = SessionState()
    state.apply(begin)
    assert not summarize_file([meta, begin]).merge_into(state)
    assert state == SessionState.from_records([begin])


def test_usage_summaries_add_up_to_the_session_r_usage_2() -> None:
    checked = 0
    for seed in range(150):
        rng = random.Random(seed)
        files = split_at_meta(Soup(seed).records(90), rng, elsewhere=0.01 * (seed % 2))
        summaries = [summarize_file(f).usage for f in files]
        if not all(s.mergeable for s in summaries[1:]):
            with pytest.raises(ValueError, match="cannot be merged"):
                sum(summaries[1:], summaries[0])
            continue
        total = sum(summaries[1:], summaries[0])
        whole = usage_summary(Usage.from_records(r for f in files for r in f))
        if total.totals is None:
            total = msgspec.structs.replace(total, totals=whole.totals)
        assert total == whole
        checked += 1
    assert checked > 80
    assert UsageSummary() + UsageSummary() == UsageSummary()


def test_file_fold_is_incremental() -> None:
    records = Soup(3).records(60)
    fold = FileFold()
    for record in records:
        fold.apply(record)
    assert fold.summary() == summarize_file(records)


# --------------------------------------------------------------------------- the sidecar


def test_sidecar_is_built_then_used_and_resume_reads_only_the_latest_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-TRACE-19: the first load builds the summaries of the earlier files (0600); the next
    reads the latest file only, and gives the same state."""
    files = [p.read_bytes() for p in MULTI_FILE["traces/multi_file"]]
    files = files + files[1:] * 3  # more earlier files
    root = place(tmp_path / "home", files)
    expected = every_field(reference_state(root))
    reads = Reads(monkeypatch)
    assert loaded(root) == expected
    earlier = root.trace_files(SID)[:-1]
    assert reads.paths[: len(earlier)] == earlier
    assert sidecar(root).stat().st_mode & 0o777 == 0o600
    cache = SummaryCache.beside(earlier[0], FileSummary)
    assert all(cache.get(p) is not None for p in earlier)
    reads.paths.clear()
    assert loaded(root) == expected
    assert reads.paths == [root.latest_trace(SID)]


@pytest.mark.parametrize("name", sorted(MULTI_FILE))
def test_same_state_with_without_and_with_a_damaged_sidecar_r_trace_19(
    name: str, tmp_path: Path
) -> None:
    files = [p.read_bytes() for p in MULTI_FILE[name]]
    root = place(tmp_path / "home", files + files[1:])
    expected = every_field(reference_state(root))
    assert loaded(root) == expected  # builds it
    data = sidecar(root).read_bytes()
    assert data.count(b"\n") == len(root.trace_files(SID)) - 1
    assert loaded(root) == expected  # uses it
    sidecar(root).unlink()
    assert loaded(root) == expected  # without it (and rebuilds it)
    assert unstamped(sidecar(root).read_bytes()) == unstamped(data)
    for label, damaged in damaged_variants(data):
        sidecar(root).write_bytes(damaged)
        assert loaded(root) == expected, label
        assert loaded(root) == expected, label  # and again, after the repair it wrote


def test_random_sessions_through_the_sidecar_r_trace_19(tmp_path: Path) -> None:
    for seed in range(40):
        root = place(tmp_path / "home", soup_files(seed))
        expected = every_field(reference_state(root))
        assert loaded(root) == expected, seed
        assert loaded(root) == expected, seed


def test_a_file_changed_under_its_summary_is_rebuilt_r_trace_19(tmp_path: Path) -> None:
    """An earlier file that grows, shrinks or changes in its last 4 KiB no longer matches its
    entry: the summary is rebuilt from the file, whatever the entry said."""
    paths = MULTI_FILE["traces/multi_file"]
    files = [p.read_bytes() for p in paths]
    root = place(tmp_path / "home", files + files[1:])
    loaded(root)
    first = root.trace_files(SID)[0]
    soup = Soup(7)
    extra = b"".join(
        bytes(encode_line(r))
        for r in [
            b.request_begin(timestamp=soup.ts()),
            b.token_usage(TokenCounts(5, 5, 5, 15), TokenCounts(9, 9, 9, 27), timestamp=soup.ts()),
            b.request_end("completed", timestamp=soup.ts()),
        ]
    )
    original = first.read_bytes()
    changes = {
        "grown": original + extra,
        "cut": b"".join(original.splitlines(keepends=True)[:-2]),
        # Same size, a different tail: the last record damaged (so it no longer counts).
        "same size": original[:-20] + b"X" * 19 + b"\n",
    }
    cache = SummaryCache.beside(first, FileSummary)
    before = cache.get(first)
    assert before is not None
    for label, content in changes.items():
        first.write_bytes(content)
        assert SummaryCache.beside(first, FileSummary).get(first) is None, label
        assert loaded(root) == every_field(reference_state(root)), label
        rebuilt = SummaryCache.beside(first, FileSummary).get(first)
        assert rebuilt == summarize_file(iter_trace(first, report=False)) != before, label
        assert loaded(root) == every_field(reference_state(root)), label
        assert loaded(root) == every_field(reference_state(root)), label


def test_an_entry_of_another_schema_is_ignored(tmp_path: Path) -> None:
    """A summary type that gains a field (a new projection) never reads an old entry."""
    files = [p.read_bytes() for p in MULTI_FILE["traces/multi_file"]]
    root = place(tmp_path / "home", files)
    loaded(root)
    earlier = root.trace_files(SID)[0]

    class Wider(msgspec.Struct):
        state: Any
        usage: Any
        goal: int = 0

    assert SummaryCache.beside(earlier, FileSummary).get(earlier) is not None
    assert SummaryCache.beside(earlier, Wider).get(earlier) is None


def test_a_planted_symlink_is_neither_read_nor_written_through(tmp_path: Path) -> None:
    files = [p.read_bytes() for p in MULTI_FILE["traces/multi_file"]]
    root = place(tmp_path / "home", files)
    target = tmp_path / "outside"
    target.write_bytes(b"keep me\n")
    os.symlink(target, sidecar(root))
    expected = every_field(reference_state(root))
    assert loaded(root) == expected
    assert target.read_bytes() == b"keep me\n"
    assert not sidecar(root).is_symlink()  # replaced by a real file, the link's target intact


def test_an_unreadable_unwritable_sidecar_changes_nothing(tmp_path: Path) -> None:
    """A directory in the sidecar's place can be neither read nor replaced: resume folds the
    files and leaves it alone."""
    files = [p.read_bytes() for p in MULTI_FILE["traces/multi_file"]]
    root = place(tmp_path / "home", files)
    sidecar(root).mkdir()
    (sidecar(root) / "inside").write_bytes(b"x")
    assert loaded(root) == every_field(reference_state(root))
    assert sidecar(root).is_dir()
    assert [p.name for p in sidecar(root).parent.iterdir() if p.name.startswith(".")] == []


# --------------------------------------------------------------------------- live == rebuilt


@pytest.mark.anyio
async def test_rotation_writes_the_summary_and_live_equals_rebuilt_inv_24(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-TRACE-19 at rotation: each closed file's summary is in the sidecar as soon as the
    session rotates out of it; the state rebuilt through it — and without it — equals the live
    state (INV-24), and the rebuilt resume reads no earlier file."""
    env = make_env(tmp_path)
    script = {"responses": [[{"text": f"reply {n}"}] for n in range(6)]}
    settings = CompactionSettings(max_session_turns=1, mode="discard")
    session, _ = await make_session(env, script, compaction=settings)
    async with session:
        for n in range(6):
            await collect(session.run([b.user_text(f"go {n}")]))
        live = session.state
        files = env.root.trace_files(session.id)
        assert len(files) == 6
        cache = SummaryCache.beside(files[0], FileSummary)
        for path in files[:-1]:
            assert cache.get(path) == summarize_file(iter_trace(path, report=False))
    sid = session.id
    reads = Reads(monkeypatch)
    state = load_session(env.root, sid)[3]
    assert reads.paths == [files[-1]]
    assert state == live
    sidecar_path(files[0]).unlink()
    assert load_session(env.root, sid)[3] == live
    llm = ScriptedLLM([])
    resumed = await resume_session(
        env.root, sid, llm=llm, environment=ScriptedEnvironment.from_llm(llm)
    )
    async with resumed:
        assert resumed.state == live


def test_read_only_load_writes_nothing_but_uses_the_sidecar(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Read-only inspection (R-CLI-2) changes no file; it still reads a sidecar resume wrote."""
    files = [p.read_bytes() for p in MULTI_FILE["traces/multi_file"]]
    root = place(tmp_path / "home", files + files[1:])
    expected = every_field(reference_state(root))
    assert every_field(load_session(root, SID)[3]) == expected
    assert not sidecar(root).exists()
    loaded(root)
    reads = Reads(monkeypatch)
    assert every_field(load_session(root, SID)[3]) == expected
    assert reads.paths == [root.latest_trace(SID)]


def test_every_goal_control_state_has_its_effect() -> None:
    """The goal summary's effects are indexed by the control state a file is entered in."""
    from projections._summary import _CONTROLS, _control_index, _probe

    for variant in (0, 1):
        indexes = [_control_index(_probe(control, variant)) for control in _CONTROLS]
        assert indexes == list(range(len(_CONTROLS)))
    assert len(summarize_file(Soup(2).records(30)).goal.effects) == len(_CONTROLS)
