"""The one session index (``penguin._index``): a projection of the traces (R-SRV-13) that
catches up by byte offsets, notices file faults and is shared by the CLI and the server.

Every test compares what the index holds after incremental catch-ups with what a fresh index
built from the same files holds: the rows must be the same."""

from __future__ import annotations

import itertools
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

from clikit import meta, trace_file, turn, write_records
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from eventstore import DataRoot, TokenCounts, encode_line, mark_archived
from eventstore import builders as b
from penguin._index import OUTPUT_CHARS, Index

SID = "session-2026-07-18-11-10-22-3f8a1c2d"


def sid_of(n: int) -> str:
    return f"session-2026-07-18-11-{n // 60 % 60:02d}-{n % 60:02d}-{n:08x}"


def dump(db: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every table's content, without SQLite's own row ids (an incremental index numbers its
    documents in another order than a fresh one)."""
    con = sqlite3.connect(db)
    try:
        out: dict[str, list[tuple[Any, ...]]] = {}
        for table, cols in (
            ("files", "*"),
            ("sessions", "*"),
            ("usage", "*"),
            ("errors", "*"),
            (
                "docs",
                "skey, kind, file, ordinal, time, (SELECT body FROM fts WHERE rowid = docs.rowid)",
            ),
        ):
            out[table] = sorted(con.execute(f"SELECT {cols} FROM {table}").fetchall(), key=repr)
        return out
    finally:
        con.close()


def fresh(home: Path) -> dict[str, list[tuple[Any, ...]]]:
    """What an index built from scratch holds (in another file, the traces untouched)."""
    db = home.parent / f"fresh-{os.getpid()}.sqlite3"
    for p in home.parent.glob(db.name + "*"):
        p.unlink()
    with Index(DataRoot(home), db) as index:
        index.refresh()
    return dump(db)


def indexed(home: Path) -> dict[str, list[tuple[Any, ...]]]:
    with Index(DataRoot(home)) as index:
        index.refresh()
    return dump(home / "index.sqlite3")


def session_records(sid: str, n: int) -> list[Any]:
    records: list[Any] = [meta(sid), b.user_text(f"find the parser bug {n}")]
    for k in range(n):
        cid = f"call_{k}"
        records += [
            b.request_begin(),
            b.assistant_text(f"looking {k}"),
            b.tool_call("exec_command", f'{{"cmd": "grep -n needle{k} src"}}', cid),
            b.token_usage(TokenCounts(cache_write=10, output=k + 1, total=11 + k)),
            b.request_end("completed"),
            b.tool_call_output(cid, f"src/p.py:{k}: needle{k}"),
        ]
    records += turn(f"fixed it {n}")
    return records


# --------------------------------------------------------------------------- projection


def test_deleted_index_rebuilds_identical_rows_r_srv_13(tmp_path: Path) -> None:
    home = tmp_path / "home"
    for n in range(4):
        sid = sid_of(n)
        write_records(trace_file(home, sid=sid), session_records(sid, n))
    first = indexed(home)
    assert len(first["sessions"]) == 4 and first["docs"]
    for p in home.glob("index.sqlite3*"):
        p.unlink()
    assert indexed(home) == first == fresh(home)


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cuts=st.lists(st.integers(min_value=1, max_value=10_000), min_size=1, max_size=6))
def test_appends_caught_up_piecewise_equal_a_fresh_build(tmp_path: Path, cuts: list[int]) -> None:
    """Byte-offset catch-up (R-SRV-13): whatever byte boundaries the appends fall on (mid-line
    too), and across a rotation to a second file, the rows equal a fresh build's."""
    home = tmp_path / f"home{len(list(tmp_path.iterdir()))}"
    sid = SID
    one = b"".join(encode_line(r) for r in session_records(sid, 3))
    two = b"".join(encode_line(r) for r in [meta(sid), *session_records(sid, 2)[1:]])
    files = [(trace_file(home, 1, sid), one), (trace_file(home, 2, sid), two)]
    for path, data in files:
        marks = sorted({0, len(data), *(c % len(data) for c in cuts)})
        for a, c in itertools.pairwise(marks):
            with path.open("ab") as out:
                out.write(data[a:c])
            indexed(home)
    assert indexed(home) == fresh(home)


# --------------------------------------------------------------------------- archive marks
# The ``archived`` column projects the ``session_archived`` marks (issue 35 item 6): rebuilt,
# it gives the same flag (R-SRV-13); a mark does not move a session in "recent first".
def _rows(home: Path) -> dict[str, dict[str, object]]:
    with Index(DataRoot(home)) as index:
        index.refresh()
        rows = {r["id"]: r for r in index.session_rows()}
        listed = {s.info.session_id: s.archived for s in index.listed()}
    assert {sid: r["archived"] for sid, r in rows.items()} == listed
    return rows


def test_marks_are_projected_and_survive_a_rebuild(tmp_path: Path) -> None:
    home = tmp_path / "home"
    sids = [sid_of(n) for n in range(3)]
    for sid in sids:
        write_records(trace_file(home, sid=sid), [meta(sid), b.user_text("hi"), *turn("ok")])
    before = _rows(home)
    assert [before[s]["archived"] for s in sids] == [False, False, False]

    root = DataRoot(home)
    mark_archived(root, sids[0])
    mark_archived(root, sids[1])
    mark_archived(root, sids[1], archived=False)  # the last one wins
    rows = _rows(home)  # caught up incrementally
    assert [rows[s]["archived"] for s in sids] == [True, False, False]
    # A mark is not activity: the session keeps its place in the listing.
    assert [rows[s]["last_active"] for s in sids] == [before[s]["last_active"] for s in sids]
    # Nor is it a record of the conversation: records, turns and status are unchanged.
    for s in sids:
        for key in ("records", "turns", "status", "runs"):
            assert rows[s][key] == before[s][key]

    # Deleted and rebuilt (and built fresh elsewhere): the same rows, the same flag.
    first = indexed(home)
    for p in home.glob("index.sqlite3*"):
        p.unlink()
    assert indexed(home) == first == fresh(home)
    assert [_rows(home)[s]["archived"] for s in sids] == [True, False, False]


# --------------------------------------------------------------------------- file faults


def _write(path: Path, records: list[Any], raw: bytes = b"") -> None:
    write_records(path, records, raw=raw)


def _search(home: Path, text: str) -> list[str]:
    with Index(DataRoot(home)) as index:
        index.refresh()
        return [h.session_id for h in index.search(text)]


def test_truncated_file_is_folded_again(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = trace_file(home)
    _write(path, session_records(SID, 3))
    assert _search(home, "needle2") == [SID]
    data = path.read_bytes()
    keep = data[: data.index(b"needle1")]
    path.write_bytes(keep[: keep.rindex(b"\n") + 1])  # same inode, shorter
    assert _search(home, "needle2") == []
    assert indexed(home) == fresh(home)


def test_replaced_file_is_folded_again(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = trace_file(home)
    _write(path, session_records(SID, 1))
    assert _search(home, "needle0") == [SID]
    other = path.with_name("tmp.jsonl.part")
    _write(other, [meta(SID), b.user_text("an entirely different walrus story"), *turn("x" * 500)])
    os.replace(other, path)  # another inode, longer than the checkpoint
    assert _search(home, "needle0") == [] and _search(home, "walrus") == [SID]
    assert indexed(home) == fresh(home)


def test_file_rewritten_in_place_is_noticed_by_its_head(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = trace_file(home)
    _write(path, session_records(SID, 1))
    assert _search(home, "parser") == [SID]
    data = path.read_bytes().replace(b"find the parser bug", b"find the lexer  bug")
    with path.open("r+b") as f:  # same inode, same size, other bytes: only the head hash sees it
        f.write(data)
        f.write(b"\n")  # grows by a blank line, so the stat changes
    assert _search(home, "parser") == [] and _search(home, "lexer") == [SID]
    assert indexed(home) == fresh(home)


def test_deleted_files_and_sessions(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first, second = trace_file(home, 1), trace_file(home, 2)
    _write(first, session_records(SID, 1))
    _write(second, [meta(SID), b.user_text("second file octopus"), *turn("ok")])
    other = sid_of(7)
    _write(trace_file(home, sid=other), session_records(other, 0))
    assert sorted(_search(home, "octopus OR parser")) == sorted([SID, other])
    second.unlink()
    assert _search(home, "octopus") == []
    assert indexed(home) == fresh(home)
    trace_file(home, sid=other).unlink()
    assert _search(home, "parser") == [SID]
    rows = indexed(home)
    assert [r[1] for r in rows["sessions"]] == [SID] and rows == fresh(home)


def test_a_session_deleted_during_a_refresh_is_not_an_error(tmp_path: Path) -> None:
    """A session deleted between the refresh's walk and its catch-up (a server's DELETE while
    another request lists sessions) is skipped, then dropped by the next refresh; it raised
    FileNotFoundError("Session does not exist"), a 500 seen by the server's fuzz test."""
    home = tmp_path / "home"
    _write(trace_file(home, 1), session_records(SID, 1))
    other = sid_of(8)
    _write(trace_file(home, sid=other), session_records(other, 0))
    root = DataRoot(home)
    walked = root.listing()

    class DeletingRoot(DataRoot):
        def listing(self, *args: Any, **kwargs: Any) -> Any:
            # The walk as it was; the other session's files removed right after it.
            trace_file(home, sid=other).unlink()
            return walked

    with Index(DeletingRoot(home), tmp_path / "idx.sqlite3") as index:
        index.refresh()
    assert _search_db(tmp_path / "idx.sqlite3", home, "parser") == [SID]
    assert indexed(home) == fresh(home)


def _search_db(db: Path, home: Path, text: str) -> list[str]:
    with Index(DataRoot(home), db) as index:
        return [hit.session_id for hit in index.search(text)]


def test_garbled_lines_are_diagnosed_and_the_rest_indexed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = trace_file(home)
    _write(path, session_records(SID, 1), raw=b"\x00\xff garbage \xfe\n{not json}\n")
    with path.open("ab") as f:
        f.write(b"".join(encode_line(r) for r in [b.user_text("after the garbage: pelican")]))
    assert _search(home, "pelican") == [SID]
    with Index(DataRoot(home)) as index:
        (row,) = index.listed()
    assert [d.kind for d in row.diagnostics] == ["malformed", "malformed"]
    assert indexed(home) == fresh(home)


def test_crash_residue_is_skipped_until_it_grows_r_root_10(tmp_path: Path) -> None:
    """A second file holding nothing but its rotation head (a crash between rotation and the
    next record) is not folded; once a record follows, it is."""
    home = tmp_path / "home"
    _write(trace_file(home, 1), session_records(SID, 1))
    head = [meta(SID), b.tool_list_ready([])]
    _write(trace_file(home, 2), head)
    with Index(DataRoot(home)) as index:
        index.refresh()
        (row,) = index.listed()
        assert row.latest == trace_file(home, 1) and row.records == len(session_records(SID, 1))
        assert row.diagnostics[-1].kind == "empty_file"
    assert indexed(home) == fresh(home)
    with trace_file(home, 2).open("ab") as f:
        f.write(encode_line(b.user_text("the rotation went on: heron")))
    assert _search(home, "heron") == [SID]
    with Index(DataRoot(home)) as index:
        (row,) = index.listed()
        assert row.latest == trace_file(home, 2) and not row.diagnostics
    assert indexed(home) == fresh(home)


def test_long_outputs_are_capped(tmp_path: Path) -> None:
    home = tmp_path / "home"
    big = "start " + "x " * OUTPUT_CHARS + " tailword"
    _write(trace_file(home), [meta(SID), b.user_text("go"), b.tool_call_output("c", big)])
    assert _search(home, "start") == [SID] and _search(home, "tailword") == []


def test_an_index_of_another_version_is_rebuilt(tmp_path: Path) -> None:
    home = tmp_path / "home"
    _write(trace_file(home), session_records(SID, 1))
    first = indexed(home)
    con = sqlite3.connect(home / "index.sqlite3")
    con.execute("PRAGMA user_version=2")
    con.execute("DELETE FROM sessions")
    con.commit()
    con.close()
    assert indexed(home) == first
    # Folds encoded by another shape of the session state are not continued: all refolded.
    con = sqlite3.connect(home / "index.sqlite3")
    con.execute("UPDATE meta SET value = 'another shape' WHERE key = 'fold'")
    con.execute("UPDATE sessions SET records = -1")
    con.commit()
    con.close()
    with trace_file(home).open("ab") as f:
        f.write(encode_line(b.user_text("one more")))
    assert indexed(home) == fresh(home)


def test_an_index_that_cannot_be_opened_is_kept_in_memory(tmp_path: Path) -> None:
    """A root where the database cannot be written (read-only, or the name taken) still
    lists and searches: the same projection, in memory."""
    home = tmp_path / "home"
    _write(trace_file(home), session_records(SID, 1))
    (home / "index.sqlite3").mkdir()
    with Index(DataRoot(home)) as index:
        assert index.path is None
        index.refresh()
        assert [h.session_id for h in index.search("parser")] == [SID]


# --------------------------------------------------------------------------- the warm check


class CountingRoot(DataRoot):
    """A root that counts the sessions a refresh looks into (``session_info`` peeks at their
    first lines; an unchanged session is decided from the listing's stat alone)."""

    looked: list[str]

    def session_info(self, listed: Any, *, fetch: bool = True) -> Any:
        self.looked.append(listed.session_id)
        return super().session_info(listed, fetch=fetch)


def test_unchanged_sessions_are_not_opened(tmp_path: Path) -> None:
    home = tmp_path / "home"
    sids = [sid_of(n) for n in range(3)]
    for sid in sids:
        _write(trace_file(home, sid=sid), session_records(sid, 1))
    root = CountingRoot(home)
    root.looked = []
    with Index(root) as index:
        assert sorted(index.refresh()) == sorted(sids)
        assert sorted(root.looked) == sorted(sids)
        root.looked.clear()
        assert index.refresh() == [] and root.looked == []
        with trace_file(home, sid=sids[1]).open("ab") as f:
            f.write(encode_line(b.user_text("one more: kestrel")))
        assert index.refresh() == [sids[1]] and root.looked == [sids[1]]
        assert [h.session_id for h in index.search("kestrel")] == [sids[1]]
    assert indexed(home) == fresh(home)


def _big(sid: str, word: str) -> bytes:
    """A session longer than the hashed head (HEAD_BYTES), ``word`` in its last turn."""
    return b"".join(encode_line(r) for r in [*session_records(sid, 40), *turn(f"end {word}")])


def test_a_same_size_rewrite_is_noticed_where_it_can_be(tmp_path: Path) -> None:
    """Rewrites the size alone would miss: the same size in another file (its mtime set back:
    the inode differs), the same size written in place between the hashed start and end (the
    mtime differs), a file cut short and written again past its checkpoint (the bytes just
    before the checkpoint differ), and the same size written in place with its mtime set back
    (the ctime differs)."""
    home = tmp_path / "home"
    path = trace_file(home)
    data = _big(SID, "walrus")
    assert len(data) > 3 * 4096
    path.write_bytes(data)
    assert _search(home, "walrus") == [SID]
    # 1. Replaced by a file of the same size, its mtime set to the old one's.
    before = path.stat()
    other = path.with_name("tmp.part")
    other.write_bytes(data.replace(b"end walrus", b"end narwal"))
    os.utime(other, ns=(before.st_atime_ns, before.st_mtime_ns))
    os.replace(other, path)
    assert path.stat().st_size == before.st_size
    assert _search(home, "walrus") == [] and _search(home, "narwal") == [SID]
    assert indexed(home) == fresh(home)
    # 2. The same size written in place, between the hashed start and end.
    now = path.read_bytes()
    assert 4096 < now.index(b"needle20") < now.rindex(b"needle20") < len(now) - 4096
    with path.open("r+b") as f:
        f.write(now.replace(b"needle20", b"dugong20"))
    assert _search(home, "needle20") == [] and _search(home, "dugong20") == [SID]
    assert indexed(home) == fresh(home)
    # 3. Cut short and written again, longer than before: the start is the same.
    now = path.read_bytes()
    keep = now[: now.index(b"\n", len(now) - 3000) + 1]
    again = keep + b"".join(encode_line(r) for r in turn("x" * 6000 + " manatee"))
    assert len(again) > len(now)
    with path.open("r+b") as f:
        f.truncate(len(keep))
        f.seek(len(keep))
        f.write(again[len(keep) :])
    assert _search(home, "dugong") == [] and _search(home, "manatee") == [SID]
    assert indexed(home) == fresh(home)
    # 4. The same size written in place with its mtime set back: the ctime cannot be.
    before = path.stat()
    with path.open("r+b") as f:
        f.write(path.read_bytes().replace(b"manatee", b"sirenia"))
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (path.stat().st_size, path.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    assert _search(home, "manatee") == [] and _search(home, "sirenia") == [SID]
    assert indexed(home) == fresh(home)


def test_a_changed_closed_file_is_seen_when_its_session_changes(tmp_path: Path) -> None:
    """What the warm check cannot see: a rotated file below the latest one is closed
    (R-TRACE-4) and not stat-ed, so one changed while the latest file is not goes unnoticed.
    It is noticed once the latest file changes (every file is compared then), or when the
    index is deleted and rebuilt."""
    home = tmp_path / "home"
    first, second = trace_file(home, 1), trace_file(home, 2)
    first.write_bytes(_big(SID, "walrus"))
    _write(second, [meta(SID), b.user_text("second file octopus"), *turn("ok")])
    assert _search(home, "walrus") == [SID]
    first.write_bytes(first.read_bytes().replace(b"end walrus", b"end seaelk"))
    assert _search(home, "walrus") == [SID] and _search(home, "seaelk") == []
    rebuilt = tmp_path / "rebuilt.sqlite3"
    with Index(DataRoot(home), rebuilt) as index:
        index.refresh()
    assert _search_db(rebuilt, home, "seaelk") == [SID]
    with second.open("ab") as f:
        f.write(encode_line(b.user_text("and one more")))
    assert _search(home, "walrus") == [] and _search(home, "seaelk") == [SID]
    assert indexed(home) == fresh(home)


# --------------------------------------------------------------------------- two writers

_WRITER = """
import sys
from eventstore import DataRoot
from penguin._index import Index
home, rounds = sys.argv[1], int(sys.argv[2])
for _ in range(rounds):
    with Index(DataRoot(home)) as index:
        index.refresh()
"""


def test_a_cli_and_a_server_process_write_at_once(tmp_path: Path) -> None:
    """A ``penguin sessions`` process and a server-like process (the same ``Index``) catch up
    one index while the traces grow: no duplicate rows, no ``database is locked``, and the
    result equals a fresh build."""
    home = tmp_path / "home"
    sids = [sid_of(n) for n in range(6)]
    for sid in sids:
        _write(trace_file(home, sid=sid), [meta(sid), b.user_text("start")])
    penguin = Path(sys.executable).with_name("penguin")
    server = subprocess.Popen([sys.executable, "-c", _WRITER, str(home), "25"])
    cli = [
        subprocess.Popen([penguin, "--home", home, "sessions", "--json"], stdout=subprocess.DEVNULL)
    ]
    for k in range(30):
        sid = sids[k % len(sids)]
        with trace_file(home, sid=sid).open("ab") as f:
            f.write(b"".join(encode_line(r) for r in turn(f"reply {k} albatross")))
        if k % 6 == 5:
            cli.append(
                subprocess.Popen(
                    [penguin, "--home", home, "sessions", "--json"], stdout=subprocess.DEVNULL
                )
            )
    assert server.wait(timeout=300) == 0
    assert all(p.wait(timeout=300) == 0 for p in cli)
    rows = indexed(home)
    assert rows == fresh(home)
    assert len(rows["usage"]) == 30  # each appended turn's token_usage once


def test_a_cli_and_a_real_penguin_serve_write_at_once(tmp_path: Path) -> None:
    """The same with a real ``penguin serve`` process (its watcher and its requests catch the
    index up) and ``penguin sessions`` / ``penguin search`` processes, while the traces grow."""
    import anyio
    import httpx
    from serverkit import AUTH, spawn_server

    home = tmp_path / "home"
    sids = [sid_of(n) for n in range(4)]
    for sid in sids:
        _write(trace_file(home, sid=sid), [meta(sid), b.user_text("start")])
    script = tmp_path / "script.json"
    script.write_text('{"responses": [[{"text": "hi"}]]}')
    ws = tmp_path / "ws"
    ws.mkdir()
    penguin = str(Path(sys.executable).with_name("penguin"))

    async def main() -> list[dict[str, Any]]:
        child = await spawn_server(home, script, ws)
        try:
            async with httpx.AsyncClient(base_url=child.base, headers=AUTH, timeout=60) as client:
                for k in range(8):
                    sid = sids[k % len(sids)]
                    with trace_file(home, sid=sid).open("ab") as f:
                        f.write(b"".join(encode_line(r) for r in turn(f"reply {k} albatross")))
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(_run, [penguin, "--home", str(home), "sessions", "--json"])
                        tg.start_soon(_run, [penguin, "--home", str(home), "search", "albatross"])
                        tg.start_soon(client.get, "/api/sessions")
                # The server's rows once every append is folded (its GET catches up first).
                rows: list[dict[str, Any]] = (await client.get("/api/sessions")).json()["sessions"]
                return rows
        finally:
            child.process.terminate()
            await child.process.wait()

    async def _run(args: list[str]) -> None:
        result = await anyio.run_process(args, check=False)
        assert result.returncode == 0, result.stderr

    rows = anyio.run(main)
    assert [r["records"] for r in rows] == [2 + 4 * 2] * len(sids)  # two turns each
    final = indexed(home)
    assert final == fresh(home)
    assert len(final["usage"]) == 8
