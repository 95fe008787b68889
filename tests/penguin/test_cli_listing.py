"""Issue 15 items 6-9, 11, 13, 15: sessions you can find.

A linear listing (one walk of the root, each file read once), newest activity first, the
latest session is the most recently active top-level one, a symlink out of the root hides one
entry, a crashed session is ``interrupted``, ``resume --subagents``, and the onboarding path
``demo`` → ``sessions`` → ``inspect <short id>``."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pytest
from clikit import (
    DATE,
    invoke,
    meta,
    run_script,
    session_ids,
    trace_file,
    turn,
    write_records,
    write_script,
)

from eventstore import DataRoot, encode_line
from eventstore import builders as b


def sid_of(n: int) -> str:
    return f"session-2026-07-18-{n // 3600 % 24:02d}-{n // 60 % 60:02d}-{n % 60:02d}-{n:08x}"


def make_session(
    home: Path, n: int, *, active: float, prompt: str = "task", **meta_fields: str
) -> str:
    sid = sid_of(n)
    path = trace_file(home, sid=sid)
    # Active at ``active``: its records are stamped then (the listing reads the last one's
    # time, issue 30) and so is the file.
    stamp = datetime.fromtimestamp(active, UTC).isoformat(timespec="milliseconds")
    records = [meta(sid, **meta_fields), b.user_text(prompt), *turn(f"answer {n}")]
    stamped = [msgspec.structs.replace(r, timestamp=stamp.replace("+00:00", "Z")) for r in records]
    write_records(path, stamped)
    os.utime(path, (active, active))
    return sid


# --------------------------------------------------------------------------- item 6


def test_listing_2000_sessions_is_linear(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The old listing searched the whole tree once per session (1,000 sessions 9.6 s, 5,000
    six minutes).  Now: one walk (``DataRoot.listing``), each file opened a bounded number of
    times.  The time bound is generous (a quadratic walk at 2,000 sessions takes minutes);
    ``make bench`` measures."""
    home = tmp_path / "home"
    day = home / "default_project" / "agents" / "default_agent" / "traces" / DATE
    day.mkdir(parents=True)
    for n in range(2000):
        sid = sid_of(n)
        records = [meta(sid), b.user_text(f"task {n}"), *turn("ok")]
        (day / f"{sid}_001.jsonl").write_bytes(b"".join(encode_line(r) for r in records))
    walks: list[str] = []
    real_listing, real_walk = DataRoot.listing, DataRoot._walk

    def counting_listing(self: DataRoot, *args: Any, **kwargs: Any) -> Any:
        walks.append("listing")
        return real_listing(self, *args, **kwargs)

    def counting_walk(self: DataRoot, *args: Any, **kwargs: Any) -> Any:
        walks.append("walk")
        return real_walk(self, *args, **kwargs)

    monkeypatch.setattr(DataRoot, "listing", counting_listing)
    monkeypatch.setattr(DataRoot, "_walk", counting_walk)
    opened: dict[str, int] = {}
    real_open = open

    def counting_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        if str(file).endswith(".jsonl"):
            opened[str(file)] = opened.get(str(file), 0) + 1
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", counting_open)
    start = time.monotonic()
    result = invoke("--home", home, "sessions", "--json")
    elapsed = time.monotonic() - start
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert len(rows) == 2000
    assert walks == ["listing"]
    assert len(opened) == 2000 and max(opened.values()) <= 3
    assert elapsed < 60
    # A second listing opens no trace at all: the directory listing and one stat per session
    # say nothing changed (the index).
    opened.clear()
    assert invoke("--home", home, "sessions", "-n", "5").exit_code == 0
    assert opened == {}


def test_limit_and_newest_activity_first(tmp_path: Path) -> None:
    home = tmp_path / "home"
    now = time.time()
    # Ids in one order, activity in another: activity wins.
    old = make_session(home, 3, active=now - 3600, prompt="old")
    new = make_session(home, 1, active=now - 60, prompt="new")
    mid = make_session(home, 2, active=now - 600, prompt="mid")
    rows = json.loads(invoke("--home", home, "sessions", "--json").stdout)
    assert [r["session_id"] for r in rows] == [new, mid, old]
    rows = json.loads(invoke("--home", home, "sessions", "-n", "2", "--json").stdout)
    assert [r["session_id"] for r in rows] == [new, mid]
    assert invoke("--home", home, "sessions", "-n", "0").exit_code == 2
    text = invoke("--home", home, "sessions").stdout
    assert "1 min ago" in text and "10 min ago" in text and "1 h ago" in text


def test_archive_hides_a_session_and_archived_lists_it(tmp_path: Path) -> None:
    """Issue 35 item 6 on the command line: ``--archive`` writes the session's
    ``session_archived`` record (by short id), the listing leaves it out, ``--archived`` lists
    it, ``--unarchive`` brings it back; a session a writer holds is refused (exit 1)."""
    from eventstore import TraceWriter

    home = tmp_path / "home"
    now = time.time()
    kept = make_session(home, 1, active=now - 60, prompt="kept")
    gone = make_session(home, 2, active=now - 600, prompt="gone")
    done = invoke("--home", home, "sessions", "--archive", gone[-8:])
    assert done.exit_code == 0, done.output
    assert f"archived {gone}" in done.stdout and "--archived" in done.stdout
    rows = json.loads(invoke("--home", home, "sessions", "--json").stdout)
    assert [(r["session_id"], r["archived"]) for r in rows] == [(kept, False)]
    rows = json.loads(invoke("--home", home, "sessions", "--archived", "--json").stdout)
    assert [(r["session_id"], r["archived"], r["status"]) for r in rows] == [
        (gone, True, "completed")
    ]
    assert "gone" in invoke("--home", home, "sessions", "--archived").stdout
    assert "gone" not in invoke("--home", home, "sessions").stdout
    assert b'"type":"session_archived","archived":true' in trace_file(home, sid=gone).read_bytes()

    assert invoke("--home", home, "sessions", "--unarchive", gone).exit_code == 0
    rows = json.loads(invoke("--home", home, "sessions", "--json").stdout)
    assert [r["session_id"] for r in rows] == [kept, gone]  # its place by activity kept
    assert "no archived sessions" in invoke("--home", home, "sessions", "--archived").stdout

    with TraceWriter(trace_file(home, sid=kept), fsync="never"):
        held = invoke("--home", home, "sessions", "--archive", kept)
    assert held.exit_code == 1 and "another process" in held.stderr
    missing = invoke("--home", home, "sessions", "--archive", sid_of(9))
    assert missing.exit_code == 2
    both = invoke("--home", home, "sessions", "--archive", kept, "--unarchive", gone)
    assert both.exit_code == 2


# --------------------------------------------------------------------------- item 7


def test_latest_session_is_the_most_recently_active_top_level_one(tmp_path: Path) -> None:
    home = tmp_path / "home"
    now = time.time()
    lexically_last = make_session(home, 9, active=now - 3600, prompt="old but greatest id")
    active = make_session(home, 2, active=now - 120, prompt="the one")
    make_session(home, 5, active=now - 5, prompt="a child", source="subagent")
    result = invoke("--home", home, "resume", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["session_id"] == active != lexically_last


# --------------------------------------------------------------------------- item 8


def test_a_symlink_out_of_the_root_hides_one_entry(tmp_path: Path) -> None:
    home = tmp_path / "home"
    kept = make_session(home, 1, active=time.time())
    outside = tmp_path / "outside"
    (outside / "agents" / "a" / "traces" / DATE).mkdir(parents=True)
    write_records(
        outside / "agents" / "a" / "traces" / DATE / f"{sid_of(2)}_001.jsonl",
        [meta(sid_of(2)), b.user_text("secret")],
    )
    (home / "evil").symlink_to(outside, target_is_directory=True)
    result = invoke("--home", home, "sessions", "--json")
    assert result.exit_code == 0, result.output
    assert [r["session_id"] for r in json.loads(result.stdout)] == [kept]
    assert result.stderr.count("outside the data root") == 1
    # validate does not follow it either: a directory argument skips the link.
    link = trace_file(home, sid=sid_of(3))
    link.symlink_to(outside / "agents" / "a" / "traces" / DATE / f"{sid_of(2)}_001.jsonl")
    result = invoke("validate", home / "default_project")
    assert result.exit_code == 0, result.output
    assert "skipped" in result.stderr and "1 file(s)" in result.stderr


# --------------------------------------------------------------------------- item 9


def test_a_crashed_session_is_interrupted_not_completed(tmp_path: Path) -> None:
    home = tmp_path / "home"
    sid = sid_of(1)
    write_records(
        trace_file(home, sid=sid),
        [meta(sid), b.user_text("go"), *turn("first"), b.user_text("more"), b.request_begin()],
    )
    (row,) = json.loads(invoke("--home", home, "sessions", "--json").stdout)
    assert row["status"] == "interrupted" and row["last_status"] == "completed"
    assert "interrupted" in invoke("--home", home, "sessions").stdout


def test_an_open_session_reads_running_only_while_its_writer_holds_the_lock(
    tmp_path: Path,
) -> None:
    """Issue 28 (R-TRACE-18): the status asks the lock, not whether the pid in it lives.  A
    writer that closed leaves its pid in the lock file, and this very process (that pid) goes
    on: the session is ``interrupted``, not ``running``."""
    from eventstore import TraceWriter

    home = tmp_path / "home"
    sid = sid_of(1)
    path = trace_file(home, sid=sid)
    writer = TraceWriter(path, fsync="never")
    for record in [meta(sid), b.user_text("go"), b.request_begin()]:
        writer.append(record)
    (row,) = json.loads(invoke("--home", home, "sessions", "--json").stdout)
    assert row["status"] == "running"
    writer.close()
    (row,) = json.loads(invoke("--home", home, "sessions", "--json").stdout)
    assert row["status"] == "interrupted"


def test_show_and_query_give_the_same_one_status_r_set_5(tmp_path: Path) -> None:
    """R-SET-5: ``penguin show`` and the analytics ``sessions`` view (``penguin query``) say
    what ``penguin sessions`` says: running while the writer holds the lock, then interrupted."""
    from eventstore import TraceWriter

    home = tmp_path / "home"
    sid = sid_of(1)
    writer = TraceWriter(trace_file(home, sid=sid), fsync="never")
    for record in [meta(sid), b.user_text("go"), *turn("first"), b.user_text("more")]:
        writer.append(record)
    writer.append(b.request_begin())

    def statuses() -> tuple[str, str, str]:
        shown = json.loads(invoke("--home", home, "show", sid, "--json").stdout)["status"]
        text = invoke("--home", home, "show", sid).stdout.splitlines()[0]
        query = invoke("--home", home, "query", "SELECT status FROM sessions", "--format", "json")
        assert query.exit_code == 0, query.output
        (row,) = json.loads(query.stdout)
        return shown, text, row["status"]

    assert statuses() == ("running", "status: running", "running")
    writer.close()
    assert statuses() == ("interrupted", "status: interrupted", "interrupted")


# --------------------------------------------------------------------------- item 11


def test_resume_takes_subagents(tmp_path: Path) -> None:
    home = tmp_path / "home"
    first = {"responses": [[{"text": "hello"}]]}
    assert run_script(tmp_path, home, first).exit_code == 0
    (sid,) = session_ids(home)
    spawn = {"tool_call": {"name": "run_subagent", "arguments": {"prompt": "look"}, "id": "p9"}}
    more = {
        "responses": [[spawn], [{"text": "delegated"}]],
        "subagent": [[{"text": "child says hi"}]],
    }
    script = write_script(tmp_path, more, "more.json")
    result = invoke("--home", home, "resume", sid, "-m", "delegate", "--script", script)
    assert result.exit_code == 0, result.output
    result = invoke(
        "--home", home, "resume", sid, "-m", "delegate", "--script", script, "--subagents"
    )
    assert result.exit_code == 0, result.output
    assert "child says hi" in result.stdout
    rows = json.loads(invoke("--home", home, "sessions", "--json").stdout)
    (parent,) = [r for r in rows if r["session_id"] == sid]
    assert len(parent["children"]) == 1
    (child,) = [r for r in rows if r["session_id"] == parent["children"][0]]
    assert child["parent"] == sid


# --------------------------------------------------------------------------- item 13


def test_demo_then_sessions_then_inspect(tmp_path: Path) -> None:
    home = tmp_path / "home"
    result = invoke("--home", home, "--init", "demo")
    assert result.exit_code == 0, result.output
    (sid,) = session_ids(home)
    short = sid[-8:]
    assert f"penguin show {short}" in result.stdout
    listed = invoke("--home", home, "sessions")
    assert short in listed.stdout and "Show me what you can do" in listed.stdout
    inspected = invoke("--home", home, "inspect", short)
    assert inspected.exit_code == 0 and f"Session {sid}" in inspected.stdout
    assert invoke("--home", home, "inspect", sid[:-3]).exit_code == 0  # a unique prefix


# --------------------------------------------------------------------------- item 15


def test_listing_fits_80_columns_and_nests_children(tmp_path: Path) -> None:
    home = tmp_path / "home"
    now = time.time()
    parent = sid_of(1)
    child = sid_of(2)
    write_records(
        trace_file(home, sid=parent),
        [meta(parent), b.user_text("x" * 300), *turn("a"), b.subagent(child)],
    )
    write_records(
        trace_file(home, sid=child), [meta(child, source="subagent"), b.user_text("sub task")]
    )
    os.utime(trace_file(home, sid=child), (now, now))
    make_session(home, 3, active=now - 30, prompt="elsewhere", workspace=str(tmp_path))
    text = invoke("--home", home, "sessions").stdout
    lines = text.splitlines()
    assert all(len(line) <= 80 for line in lines), lines
    at_parent = next(i for i, line in enumerate(lines) if parent[-8:] in line)
    assert child[-8:] in lines[at_parent + 1] and "└" in lines[at_parent + 1]
    os.chdir(tmp_path)
    only_here = json.loads(invoke("--home", home, "sessions", "--cwd", "--json").stdout)
    assert [r["session_id"] for r in only_here] == [sid_of(3)]
    assert json.loads(invoke("--home", home, "resume", "00000003", "--json").stdout)[
        "session_id"
    ] == sid_of(3)


def test_a_screenful_reads_only_the_rows_it_shows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``sessions -n N`` (and the default 20) reads the N latest top-level sessions and their
    descendants from the index, not a row per session, and shows what the full listing shows
    first: children under their parent, an orphaned child at top level, the count left out."""
    import penguin._index._index as index_module

    home = tmp_path / "home"
    now = time.time()
    parent, child, grandchild, orphan = sid_of(1), sid_of(2), sid_of(3), sid_of(4)
    write_records(
        trace_file(home, sid=parent), [meta(parent), b.user_text("lead"), b.subagent(child)]
    )
    write_records(
        trace_file(home, sid=child),
        [meta(child, source="subagent"), b.user_text("sub"), b.subagent(grandchild)],
    )
    write_records(
        trace_file(home, sid=grandchild), [meta(grandchild, source="subagent"), b.user_text("g")]
    )
    write_records(
        trace_file(home, sid=orphan), [meta(orphan, source="subagent"), b.user_text("lost")]
    )
    for n in range(6):
        make_session(home, 10 + n, active=now - 50 - 100 * n)
    full = json.loads(invoke("--home", home, "sessions", "--json").stdout)
    assert len(full) == 10
    built: list[int] = []
    real = index_module._listed

    def counting(*args: Any) -> Any:
        built.append(1)
        return real(*args)

    monkeypatch.setattr(index_module, "_listed", counting)
    for n in range(1, 9):
        built.clear()
        cut = json.loads(invoke("--home", home, "sessions", "-n", str(n), "--json").stdout)
        assert cut == full[: len(cut)]
        assert len(built) == len(cut)  # the rows shown, nothing else
        assert sum(r["parent"] is None for r in cut) == n
    text = invoke("--home", home, "sessions", "-n", "2").stdout
    assert text.rstrip().endswith("6 more (use -n)")  # 8 top-level sessions, parent's family one
    # Archived and not: the child of an archived parent is a top-level row of the listing.
    assert invoke("--home", home, "sessions", "--archive", parent[-8:]).exit_code == 0
    for flags in ([], ["--archived"]):
        full = json.loads(invoke("--home", home, "sessions", *flags, "--json").stdout)
        for n in range(1, 10):
            cut = json.loads(
                invoke("--home", home, "sessions", *flags, "-n", str(n), "--json").stdout
            )
            assert cut == full[: len(cut)]
    assert [r["session_id"] for r in full] == [parent]


def test_an_ambiguous_prefix_is_an_input_error(tmp_path: Path) -> None:
    home = tmp_path / "home"
    make_session(home, 1, active=time.time())
    make_session(home, 2, active=time.time())
    result = invoke("--home", home, "inspect", "session-2026")
    assert result.exit_code == 2 and "ambiguous" in result.stderr


def test_a_short_id_opens_only_the_trace_it_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Finding a session by a prefix or short id reads names, then asks only the candidates
    whether they are sessions (a session_meta): crash residue with the same short id is no
    candidate, and no other trace is opened."""
    home = tmp_path / "home"
    now = time.time()
    sids = [make_session(home, n, active=now - n) for n in range(1, 6)]
    residue = "session-2026-07-18-00-00-00-00000001"  # the short id of sids[0], no meta
    (trace_file(home, sid=residue)).write_bytes(b'{"torn')
    opened: list[str] = []
    real_open = open

    def counting_open(file: Any, *args: Any, **kwargs: Any) -> Any:
        if str(file).endswith(".jsonl"):
            opened.append(Path(str(file)).name)
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr("builtins.open", counting_open)
    result = invoke("--home", home, "show", sids[2][-8:], "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["session_id"] == sids[2]
    assert {name.rsplit("_", 1)[0] for name in opened} == {sids[2]}
    result = invoke("--home", home, "show", "00000001", "--json")
    assert json.loads(result.stdout)["session_id"] == sids[0]


def test_the_latest_session_is_never_an_archived_one(tmp_path: Path) -> None:
    """Without SESSION, commands take the session at the top of ``penguin sessions``: an
    archived session is hidden there, so it is not the latest either; named, it is reached."""
    home = tmp_path / "home"
    now = time.time()
    older = make_session(home, 1, active=now - 600, prompt="older")
    newest = make_session(home, 2, active=now - 60, prompt="newest")
    assert newest in invoke("--home", home, "resume").stdout
    assert invoke("--home", home, "sessions", "--archive", newest).exit_code == 0
    shown = invoke("--home", home, "resume")
    assert shown.exit_code == 0 and older in shown.stdout and newest not in shown.stdout
    assert invoke("--home", home, "sessions", "--archive", older).exit_code == 0
    none = invoke("--home", home, "resume")
    assert none.exit_code == 2
    assert "every session of default_project/default_agent is archived" in none.stderr
    assert "--archived" in none.stderr
    assert newest in invoke("--home", home, "resume", newest[-8:]).stdout
