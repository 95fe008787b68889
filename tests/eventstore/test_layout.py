"""The data-root layout: SPEC §4.1 (R-ROOT-1..10) and API.md ``DataRoot``."""

from __future__ import annotations

import hashlib
import os
import re
import stat
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from eventstore import (
    DataRoot,
    FileStat,
    OmniMessage,
    SessionInfo,
    edge_digest,
    encode,
    encode_line,
    file_stat,
    validate_id,
)
from eventstore import builders as b

TS = "2026-07-18T03:10:22.531Z"
SID = "session-2026-07-18-11-10-22-3f8a1c2d"
DATE = "2026-07-18"


def meta(session_id: str) -> OmniMessage:
    return b.session_meta(
        session_id=session_id,
        provider="scripted",
        model_id="demo",
        model_context_window=1000,
        system_prompt="p",
        agent_state="/s",
        workspace="/w",
        timestamp=TS,
    )


def put(
    root: DataRoot,
    session_id: str,
    index: int,
    *records: OmniMessage | bytes,
    project: str = "default_project",
    agent: str = "default_agent",
    date: str = DATE,
) -> Path:
    path = root.trace_path(session_id, index, project=project, agent=agent, date=date)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(
        b"".join(r if isinstance(r, bytes) else bytes(encode_line(r)) for r in records)
    )
    return path


def session(root: DataRoot, session_id: str = SID, **where: str) -> Path:
    """A session with one ordinary file."""
    return put(root, session_id, 1, meta(session_id), b.user_text("hi", timestamp=TS), **where)


@pytest.fixture
def root(tmp_path: Path) -> DataRoot:
    return DataRoot(tmp_path / "home")


# --------------------------------------------------------------------------- R-ROOT-6


@pytest.mark.parametrize("value", ["a", "A-z_0", "x" * 128, SID, "2026-07-18"])
def test_r_root_6_valid_ids(value: str) -> None:
    assert validate_id(value) == value


@pytest.mark.parametrize(
    "value", ["", "x" * 129, ".", "..", "../x", "a/b", "a\\b", "a b", "é", "a\n", "a.b", "/abs"]
)
def test_r_root_6_invalid_ids_raise_value_error_naming_what_and_value(value: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"invalid project: {value!r}")):
        validate_id(value, what="project")


def test_r_root_6_non_string_id_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="invalid id: 3"):
        validate_id(3)  # type: ignore[arg-type]


def test_r_root_6_every_path_component_is_validated(root: DataRoot) -> None:
    with pytest.raises(ValueError, match="project"):
        root.agent_dir("..", "a")
    with pytest.raises(ValueError, match="agent"):
        root.traces_dir("p", "../../etc")
    with pytest.raises(ValueError, match="session id"):
        root.trace_path("../x", 1, date=DATE)
    with pytest.raises(ValueError, match="date"):
        root.trace_path(SID, 1, date="2026/07/18")
    with pytest.raises(ValueError, match="session id"):
        root.scratchpad("a/b")
    with pytest.raises(ValueError, match="session id"):
        root.trace_files("..")
    with pytest.raises(ValueError, match="session id"):
        root.lock_path("x/../y", date=DATE)


# --------------------------------------------------------------------------- R-ROOT-1/2/4/5


def test_r_root_1_home_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PENGUIN_HOME", str(tmp_path / "ph"))
    assert DataRoot().home == tmp_path / "ph"
    monkeypatch.delenv("PENGUIN_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert DataRoot().home == tmp_path / "user" / ".penguin" / "data"
    assert DataRoot(tmp_path / "explicit").home == tmp_path / "explicit"
    assert DataRoot(str(tmp_path / "s")).home == tmp_path / "s"


def test_r_root_2_paths(root: DataRoot) -> None:
    h = root.home
    assert root.agent_dir() == h / "default_project" / "agents" / "default_agent"
    assert root.agent_dir("p", "a") == h / "p" / "agents" / "a"
    assert root.traces_dir("p", "a") == h / "p" / "agents" / "a" / "traces"
    assert root.agent_state("p", "a") == h / "p" / "agents" / "a" / "agent_state"
    assert root.workspaces_dir("p", "a") == h / "p" / "agents" / "a" / "workspaces"
    assert root.scratchpad(SID) == root.agent_dir() / "scratchpad" / SID
    assert not h.exists()  # computing paths creates nothing


def test_r_root_4_trace_path_pads_to_at_least_three_digits(root: DataRoot) -> None:
    t = root.traces_dir("p", "a")
    assert root.trace_path(SID, 1, project="p", agent="a", date=DATE) == (
        t / DATE / f"{SID}_001.jsonl"
    )
    assert root.trace_path(SID, 42, project="p", agent="a", date=DATE).name == f"{SID}_042.jsonl"
    assert root.trace_path(SID, 1000, project="p", agent="a", date=DATE).name == (
        f"{SID}_1000.jsonl"
    )
    for bad in (0, -1, True, 1.0):
        with pytest.raises(ValueError, match="index"):
            root.trace_path(SID, bad, date=DATE)  # type: ignore[arg-type]


def test_r_root_5_new_session_id_format(root: DataRoot) -> None:
    now = datetime(2026, 7, 8, 9, 5, 3)
    sid = root.new_session_id(now)
    assert re.fullmatch(r"session-2026-07-08-09-05-03-[0-9a-f]{8}", sid)
    assert root.new_session_id(now) != sid  # random suffix
    assert re.fullmatch(r"session-\d{4}(-\d{2}){5}-[0-9a-f]{8}", root.new_session_id())
    validate_id(sid)


def test_r_root_5_ids_sort_in_creation_order(root: DataRoot) -> None:
    start = datetime(2026, 1, 9, 23, 59, 58)
    ids = [root.new_session_id(start + timedelta(seconds=s)) for s in (0, 1, 2, 3600, 86400 * 40)]
    assert sorted(ids) == ids


def test_r_root_5_aware_time_is_converted_to_local(root: DataRoot) -> None:
    aware = datetime(2026, 7, 8, 9, 5, 3, tzinfo=UTC)
    local = aware.astimezone().replace(tzinfo=None)
    assert root.new_session_id(aware).startswith(f"session-{local:%Y-%m-%d-%H-%M-%S}-")
    other = datetime(2026, 7, 8, 9, 5, 3, tzinfo=timezone(timedelta(hours=5)))
    local = other.astimezone().replace(tzinfo=None)
    assert root.new_session_id(other).startswith(f"session-{local:%Y-%m-%d-%H-%M-%S}-")


# --------------------------------------------------------------------------- search, R-ROOT-7


def test_trace_files_sorted_by_numeric_index_ignoring_locks_and_strays(root: DataRoot) -> None:
    paths = {i: put(root, SID, i, meta(SID)) for i in (1000, 2, 10, 1)}
    d = paths[1].parent
    (d / f"{SID}.lock").write_text("123")
    (d / f"{SID}_01.jsonl").write_text("")  # two digits: not a trace file
    (d / f"{SID}_003.jsonl.tmp").write_text("")
    (d / f"{SID}-other_004.jsonl").write_text("")  # another session id
    (d / f"{SID}_005.jsonl").mkdir()  # a directory is not a file
    assert root.trace_files(SID) == [paths[i] for i in (1, 2, 10, 1000)]


def test_r_root_7_search_finds_any_project_and_agent(root: DataRoot) -> None:
    p = session(root, project="proj", agent="worker")
    assert root.trace_files(SID) == [p]
    assert root.locate(SID) == ("proj", "worker", DATE)
    assert root.locate(SID).date == DATE
    assert root.trace_files(SID, project="proj") == [p]
    assert root.trace_files(SID, agent="worker") == [p]
    with pytest.raises(FileNotFoundError, match=f"^Session does not exist: {SID}$"):
        root.trace_files(SID, project="other")


def test_r_root_7_unknown_session(root: DataRoot) -> None:
    with pytest.raises(FileNotFoundError, match=f"^Session does not exist: {SID}$"):
        root.trace_files(SID)
    session(root, "session-2026-07-18-11-10-22-00000000")
    with pytest.raises(FileNotFoundError, match="Session does not exist"):
        root.latest_trace(SID)
    with pytest.raises(FileNotFoundError, match="Session does not exist"):
        root.locate(SID)


def test_r_root_7_same_id_under_two_agents_raises_lookup_error(root: DataRoot) -> None:
    a = session(root, agent="a1")
    c = session(root, project="p2", agent="a2")
    with pytest.raises(LookupError, match="default_project/a1, p2/a2"):
        root.trace_files(SID)
    with pytest.raises(LookupError):
        root.latest_trace(SID)
    with pytest.raises(LookupError):
        root.scratchpad(SID)
    assert root.trace_files(SID, agent="a1") == [a]
    assert root.trace_files(SID, project="p2") == [c]


def test_r_root_3_files_in_another_date_dir_are_found(root: DataRoot) -> None:
    one = put(root, SID, 1, meta(SID), date="2026-07-18")
    two = put(root, SID, 2, meta(SID), b.user_text("x", timestamp=TS), date="2026-07-19")
    assert root.trace_files(SID) == [one, two]
    assert root.locate(SID).date == "2026-07-19"  # where the highest file is


def test_scratchpad_follows_an_existing_session(root: DataRoot) -> None:
    session(root, project="proj", agent="worker")
    assert root.scratchpad(SID) == root.agent_dir("proj", "worker") / "scratchpad" / SID
    other = "session-2026-07-18-11-10-22-aaaaaaaa"
    assert root.scratchpad(other, project="p", agent="a") == (
        root.agent_dir("p", "a") / "scratchpad" / other
    )
    assert root.scratchpad(other) == root.agent_dir() / "scratchpad" / other


def test_lock_path(root: DataRoot) -> None:
    session(root, project="proj", agent="worker")
    want = root.traces_dir("proj", "worker") / DATE / f"{SID}.lock"
    assert root.lock_path(SID) == want
    assert root.lock_path(SID, project="proj", agent="worker", date=DATE) == want
    fresh = "session-2026-07-19-00-00-00-00000001"
    assert root.lock_path(fresh, date="2026-07-19") == (
        root.traces_dir() / "2026-07-19" / f"{fresh}.lock"
    )
    with pytest.raises(FileNotFoundError):
        root.lock_path(fresh)


# --------------------------------------------------------------------------- R-ROOT-10


def test_r_root_10_latest_trace_skips_a_file_without_session_meta(root: DataRoot) -> None:
    one = session(root)
    put(root, SID, 2, encode(meta(SID)))  # torn: no newline, so no decodable session_meta
    assert root.latest_trace(SID) == one
    put(root, SID, 2, b"")
    assert root.latest_trace(SID) == one


def test_r_root_10_latest_trace_skips_a_rotation_head_only_file(root: DataRoot) -> None:
    one = session(root)
    tools = b.tool_list_ready([], timestamp=TS)
    two = put(root, SID, 2, meta(SID), tools)
    assert root.latest_trace(SID) == one
    put(root, SID, 2, meta(SID))
    assert root.latest_trace(SID) == one
    put(root, SID, 2, meta(SID), tools, b.user_text("next", timestamp=TS))
    assert root.latest_trace(SID) == two


def test_session_files_is_trace_files_and_latest_trace_in_one_search(root: DataRoot) -> None:
    """Resume's one search of the root (R-TRACE-19: its cost must not grow with history)."""
    one = session(root)
    tools = b.tool_list_ready([], timestamp=TS)
    two = put(root, SID, 2, meta(SID), tools)  # residue: the latest is still file 1
    assert root.session_files(SID) == ([one, two], one)
    put(root, SID, 2, meta(SID), tools, b.user_text("next", timestamp=TS))
    assert root.session_files(SID) == ([one, two], two)
    assert root.session_files(SID) == (root.trace_files(SID), root.latest_trace(SID))


def test_r_root_10_first_file_with_meta_only_is_the_latest(root: DataRoot) -> None:
    one = put(root, SID, 1, meta(SID))
    assert root.latest_trace(SID) == one


def test_r_root_10_session_without_any_session_meta_does_not_exist(root: DataRoot) -> None:
    put(root, SID, 1, b"")
    assert root.trace_files(SID)  # the file is there ...
    with pytest.raises(FileNotFoundError, match=f"Session does not exist: {SID}"):
        root.latest_trace(SID)  # ... but the session has no records
    assert root.sessions() == []


# --------------------------------------------------------------------------- sessions, R-ROOT-8


def test_sessions_lists_newest_first_with_files(root: DataRoot) -> None:
    old = "session-2026-07-01-08-00-00-00000001"
    new = "session-2026-07-18-08-00-00-00000002"
    a = session(root, old, project="p1", agent="a1")
    b1 = put(root, new, 1, meta(new), project="p2", agent="a2")
    b2 = put(root, new, 2, meta(new), b.user_text("x", timestamp=TS), project="p2", agent="a2")
    (b1.parent / f"{new}.lock").write_text("1")
    infos = root.sessions()
    assert infos == [
        SessionInfo(new, "p2", "a2", datetime(2026, 7, 18, 8, 0, 0), [b1, b2]),
        SessionInfo(old, "p1", "a1", datetime(2026, 7, 1, 8, 0, 0), [a]),
    ]
    assert [s.session_id for s in root.sessions(project="p1")] == [old]
    assert [s.session_id for s in root.sessions(agent="a2")] == [new]
    assert root.sessions(project="nobody") == []


def test_listing_names_every_session_and_stats_its_latest_file(root: DataRoot) -> None:
    """``listing()`` opens no trace file: it lists residue too (``session_info`` tells), and
    ``session_info`` of each gives what ``sessions()`` lists."""
    old = "session-2026-07-01-08-00-00-00000001"
    new = "session-2026-07-18-08-00-00-00000002"
    torn = "session-2026-07-19-00-00-00-00000009"
    a = session(root, old, project="p1", agent="a1")
    b1 = put(root, new, 1, meta(new), project="p2", agent="a2")
    b2 = put(root, new, 2, meta(new), b.user_text("x", timestamp=TS), project="p2", agent="a2")
    b10 = put(root, new, 10, meta(new), project="p2", agent="a2")  # sorted by index, not name
    (b1.parent / f"{new}.lock").write_text("1")
    put(root, torn, 1, b'{"torn')
    foreign = session(root, "imported_1")
    listed = sorted(root.listing(), key=lambda s: s.session_id)
    assert [(s.project, s.agent, s.session_id, s.files) for s in listed] == [
        ("default_project", "default_agent", "imported_1", (str(foreign),)),
        ("p1", "a1", old, (str(a),)),
        ("p2", "a2", new, (str(b1), str(b2), str(b10))),
        ("default_project", "default_agent", torn, (str(root.trace_files(torn)[0]),)),
    ]
    st = b10.stat()
    assert listed[2].latest == FileStat(st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
    infos = [root.session_info(s) for s in listed]
    assert infos[3] is None  # no session_meta in any file (R-ROOT-10)
    assert sorted(infos[:3], key=lambda i: i.session_id) == sorted(  # type: ignore[union-attr]
        root.sessions(), key=lambda i: i.session_id
    )
    assert [s.session_id for s in root.listing(project="p2", agent="a2")] == [new]


def test_edge_digest_covers_the_start_and_the_bytes_before_upto(tmp_path: Path) -> None:
    """What the session index compares besides the stat: a file rewritten at its start or just
    before where its reading stopped digests differently; elsewhere, or past ``upto``, not."""
    path = tmp_path / "f"
    data = bytes(range(256)) * 64  # 16 KiB
    path.write_bytes(data)
    assert edge_digest(path, 100) == hashlib.sha256(data[:100]).digest()
    upto = 12_000
    assert (
        edge_digest(path, upto) == hashlib.sha256(data[:4096] + data[upto - 4096 : upto]).digest()
    )
    for at, changed in ((10, True), (6000, False), (upto - 10, True), (upto + 10, False)):
        path.write_bytes(data[:at] + b"x" + data[at + 1 :])
        assert (
            edge_digest(path, upto)
            != hashlib.sha256(data[:4096] + data[upto - 4096 : upto]).digest()
        ) is changed
    assert edge_digest(tmp_path / "missing", 10) == b"" and file_stat(tmp_path / "missing") is None
    st = path.stat()
    assert file_stat(path) == FileStat(st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


def test_sessions_skips_sessions_without_session_meta(root: DataRoot) -> None:
    good = session(root)
    put(root, "session-2026-07-19-00-00-00-00000009", 1, b'{"torn')
    assert [s.files for s in root.sessions()] == [[good]]


def test_sessions_of_an_empty_or_missing_root(root: DataRoot) -> None:
    assert root.sessions() == []
    root.home.mkdir()
    (root.home / "stray.txt").write_text("x")
    (root.home / "proj" / "agents").mkdir(parents=True)
    assert root.sessions() == []


def test_sessions_with_a_foreign_id_use_the_file_time(root: DataRoot) -> None:
    p = session(root, "imported_1")
    os.utime(p, (1_700_000_000, 1_700_000_000))
    (info,) = root.sessions()
    assert info.created == datetime.fromtimestamp(1_700_000_000)


def test_r_root_8_latest_session_needs_a_record_beyond_session_meta(root: DataRoot) -> None:
    assert root.latest_session() is None
    older = "session-2026-07-01-00-00-00-00000001"
    newer = "session-2026-07-02-00-00-00-00000002"
    newest = "session-2026-07-03-00-00-00-00000003"
    session(root, older)
    session(root, newer)
    put(root, newest, 1, meta(newest))  # nothing but its session_meta
    assert root.latest_session() == newer
    session(root, "session-2026-07-09-00-00-00-00000009", agent="elsewhere")
    assert root.latest_session() == newer  # other agents do not count
    assert root.latest_session("default_project", "elsewhere") == (
        "session-2026-07-09-00-00-00-00000009"
    )


# --------------------------------------------------------------------------- R-ROOT-9


@pytest.mark.parametrize("umask", [0o000, 0o022, 0o077, 0o777])
def test_r_root_9_ensure_dir_creates_0700_whatever_the_umask(root: DataRoot, umask: int) -> None:
    target = root.traces_dir() / DATE
    old = os.umask(umask)
    try:
        assert root.ensure_dir(target) == target
        assert root.ensure_dir(target) == target  # idempotent
    finally:
        os.umask(old)
    level = target
    while level != root.home.parent:
        assert stat.S_IMODE(level.stat().st_mode) == 0o700, level
        level = level.parent


def test_r_root_9_ensure_dir_leaves_existing_levels_alone(root: DataRoot) -> None:
    root.home.mkdir(mode=0o755)
    os.chmod(root.home, 0o755)
    made = root.ensure_dir(root.agent_dir())
    assert stat.S_IMODE(root.home.stat().st_mode) == 0o755
    assert stat.S_IMODE(made.stat().st_mode) == 0o700


def test_r_root_9_ensure_dir_refuses_paths_outside_the_root(root: DataRoot, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="outside the data root"):
        root.ensure_dir(tmp_path / "elsewhere")
    with pytest.raises(ValueError, match="outside the data root"):
        root.ensure_dir(root.home / ".." / "escape")
    assert not (tmp_path / "elsewhere").exists()
    assert not (tmp_path / "escape").exists()


def test_r_root_9_ensure_dir_on_a_file_raises(root: DataRoot) -> None:
    root.home.mkdir()
    (root.home / "f").write_text("")
    with pytest.raises(NotADirectoryError):
        root.ensure_dir(root.home / "f")


def test_r_root_9_symlinked_directory_leading_outside_is_refused(
    root: DataRoot, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    (outside / "agents" / "a" / "traces" / DATE).mkdir(parents=True)
    (outside / "agents" / "a" / "traces" / DATE / f"{SID}_001.jsonl").write_bytes(
        bytes(encode_line(meta(SID)))
    )
    root.home.mkdir()
    (root.home / "proj").symlink_to(outside, target_is_directory=True)
    with pytest.raises(ValueError, match="outside the data root"):
        root.agent_dir("proj", "a")
    with pytest.raises(ValueError, match="outside the data root"):
        root.trace_files(SID)
    # A listing leaves the entry out and says so (issue 15 item 8): one bad link hides one entry.
    with pytest.warns(UserWarning, match="outside the data root"):
        assert root.sessions() == []


def test_r_root_9_symlinked_trace_file_leading_outside_is_refused(
    root: DataRoot, tmp_path: Path
) -> None:
    outside = tmp_path / "secret.jsonl"
    outside.write_bytes(bytes(encode_line(meta(SID))))
    d = root.traces_dir() / DATE
    d.mkdir(parents=True)
    (d / f"{SID}_001.jsonl").symlink_to(outside)
    with pytest.raises(ValueError, match="outside the data root"):
        root.trace_files(SID)


def test_r_root_9_symlink_that_stays_inside_the_root_is_fine(root: DataRoot) -> None:
    p = session(root, project="real")
    (root.home / "alias").symlink_to(root.home / "real", target_is_directory=True)
    with pytest.raises(LookupError):  # the same session seen twice: real/ and alias/
        root.trace_files(SID)
    assert root.trace_files(SID, project="real") == [p]
    assert root.agent_dir("alias", "default_agent").resolve() == (
        root.agent_dir("real", "default_agent").resolve()
    )


def test_r_root_9_root_itself_may_be_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real_home"
    real.mkdir()
    (tmp_path / "link_home").symlink_to(real, target_is_directory=True)
    root = DataRoot(tmp_path / "link_home")
    p = session(root)
    assert root.trace_files(SID) == [p]
    assert root.ensure_dir(root.scratchpad(SID)).is_dir()
