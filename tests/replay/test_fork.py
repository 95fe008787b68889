"""Session fork (SPEC §14, R-FORK-1…9).

Forks are made from sessions the engine wrote (and, for the rewrite and rejection rules, from
traces written record by record), then resumed through the ordinary path: the fork's first
request must equal the source's own request at that point.
"""

from __future__ import annotations

import base64
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import msgspec
import pytest
from enginekit import Env, check_trace, collect, make_env, make_session

from engine import CompactionSettings, LLMRequest, allow_all
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import (
    CompactionBeginPayload,
    DataRoot,
    ImageUrlPayload,
    OmniMessage,
    RequestEndPayload,
    SessionLocked,
    SessionMetaPayload,
    TextPayload,
    TraceWriter,
    read_trace,
)
from eventstore import builders as b
from replay import _fork, resume_session, validate_session
from replay._fork import fork_session

pytestmark = pytest.mark.anyio

TOOLS = [{"name": "t", "description": "test tool"}]


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return make_env(tmp_path)


# --------------------------------------------------------------------------- helpers


def records_of(path: Path) -> list[OmniMessage]:
    return read_trace(path).records


def ordinal_of(path: Path, text: str) -> int:
    """The position of the assistant text ``text`` in ``path`` (R-FORK-1 coordinate)."""
    for i, r in enumerate(records_of(path)):
        p = r.payload
        if isinstance(p, TextPayload) and p.role == "assistant" and p.text == text:
            return i
    raise AssertionError(f"no assistant text {text!r} in {path}")


def tree_bytes(home: Path) -> dict[str, bytes]:
    out = {}
    for dirpath, _dirs, files in os.walk(home):
        for name in files:
            path = Path(dirpath) / name
            out[str(path.relative_to(home))] = path.read_bytes()
    return out


async def two_task_session(env: Env, *, system_prompt: str = "You are careful.") -> str:
    """Task 1: a tool turn then the reply ``one``; task 2: the reply ``two``."""
    script = {
        "responses": [
            [
                {"text": "looking"},
                {"tool_call": {"name": "t", "arguments": {}, "id": "a", "result": {"output": "x"}}},
            ],
            [{"text": "one"}],
            [{"text": "two"}],
        ],
        "tools": TOOLS,
    }
    session, _ = await make_session(env, script, system_prompt=system_prompt)
    async with session:
        await collect(session.run([b.user_text("first")], approve=allow_all))
        await collect(session.run([b.user_text("second")], approve=allow_all))
        check_trace(session)
    return session.id


async def first_request(
    home: Path, session_id: str, workspace: Path, prompt: OmniMessage
) -> LLMRequest:
    llm = ScriptedLLM({"responses": [[{"text": "fine"}]], "tools": TOOLS})
    resumed = await resume_session(
        DataRoot(home),
        session_id,
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm),
        compaction=None,
    )
    async with resumed:
        await collect(resumed.run([prompt], approve=allow_all))
        check_trace(resumed)
    return llm.requests[0]


def write_trace(path: Path, records: list[OmniMessage]) -> None:
    with TraceWriter(path, fsync="never") as w:
        for r in records:
            w.append(r)


def meta(sid: str, **kw: Any) -> OmniMessage:
    fields: dict[str, Any] = {
        "session_id": sid,
        "provider": "p",
        "model_id": "m",
        "model_context_window": 1000,
        "system_prompt": "sys",
        "agent_state": "/a",
        "workspace": "/w",
    }
    fields.update(kw)
    return b.session_meta(**fields)


SID = "session-2026-01-02-03-04-05-0badc0de"


def manual_path(home: Path, index: int = 1, sid: str = SID) -> Path:
    return DataRoot(home).trace_path(sid, index, date="2026-01-02")


# --------------------------------------------------------------------------- the happy path


async def test_fork_cuts_after_the_task_and_resumes_like_the_source(
    env: Env, tmp_path: Path
) -> None:
    """R-FORK-3/6/9: the fork ends with the task's closing records, excludes the next task,
    and its first request equals the one the source sent after that task."""
    script = {
        "responses": [
            [
                {"text": "looking"},
                {"tool_call": {"name": "t", "arguments": {}, "id": "a", "result": {"output": "x"}}},
            ],
            [{"text": "one"}],
            [{"text": "two"}],
        ],
        "tools": TOOLS,
    }
    session, _ = await make_session(env, script)
    async with session:
        await collect(session.run([b.user_text("first")], approve=allow_all))
        after_first = tmp_path / "after-first"
        shutil.copytree(env.home, after_first)
        await collect(session.run([b.user_text("second")], approve=allow_all))
    root = env.root
    source = root.trace_files(session.id)[0]
    before = tree_bytes(env.home)

    new_id = fork_session(root, session.id, at=(1, ordinal_of(source, "one")))

    assert new_id != session.id
    assert tree_bytes(env.home).items() >= before.items()  # the source is untouched
    (fork_file,) = root.trace_files(new_id)
    assert fork_file.parent == source.parent  # R-FORK-6: same date directory, same index
    assert fork_file.name == f"{new_id}_001.jsonl"
    forked = records_of(fork_file)
    src = records_of(source)
    cut = len(forked)
    assert isinstance(forked[-1].payload, RequestEndPayload)
    assert forked[1:] == src[1:cut]  # everything but the session_meta is copied unchanged
    # The raw bytes of every copied record after session_meta are identical.
    assert fork_file.read_bytes().split(b"\n")[1:] == [
        *source.read_bytes().split(b"\n")[1:cut],
        b"",
    ]
    assert isinstance(src[cut].payload, TextPayload) and src[cut].payload.text == "second"
    assert all(f.severity != "error" for f in validate_session([fork_file]))

    prompt = b.user_text("third")
    expected = await first_request(after_first, session.id, env.workspace, prompt)
    got = await first_request(env.home, new_id, env.workspace, prompt)
    assert got.messages == expected.messages
    assert got.new_messages == expected.new_messages
    assert got.system_prompt == expected.system_prompt


async def test_fork_and_source_evolve_independently(env: Env) -> None:
    """R-FORK-9: a task on the fork changes nothing of the source, and vice versa."""
    sid = await two_task_session(env)
    root = env.root
    source = root.trace_files(sid)[0]
    new_id = fork_session(root, sid, at=(1, ordinal_of(source, "one")))
    source_bytes = source.read_bytes()
    await first_request(env.home, new_id, env.workspace, b.user_text("on the fork"))
    assert source.read_bytes() == source_bytes
    fork_bytes = root.trace_files(new_id)[0].read_bytes()
    await first_request(env.home, sid, env.workspace, b.user_text("on the source"))
    assert root.trace_files(new_id)[0].read_bytes() == fork_bytes
    texts = [
        r.payload.text
        for r in records_of(root.trace_files(new_id)[0])
        if isinstance(r.payload, TextPayload) and r.payload.role == "user"
    ]
    assert texts == ["first", "on the fork"]


async def test_fork_at_the_last_task_copies_to_the_end(env: Env) -> None:
    """R-FORK-3: with no later task the cut is the end of the file."""
    sid = await two_task_session(env)
    source = env.root.trace_files(sid)[0]
    new_id = fork_session(env.root, sid, at=(1, ordinal_of(source, "two")))
    fork_file = env.root.trace_files(new_id)[0]
    assert fork_file.read_bytes().count(b"\n") == source.read_bytes().count(b"\n")


async def test_fork_files_are_private(env: Env) -> None:
    """R-ROOT-9: 0600 trace files; no temporary file is left behind."""
    sid = await two_task_session(env)
    source = env.root.trace_files(sid)[0]
    new_id = fork_session(env.root, sid, at=(1, ordinal_of(source, "one")))
    fork_file = env.root.trace_files(new_id)[0]
    assert stat.S_IMODE(fork_file.stat().st_mode) == 0o600
    assert not [p for p in fork_file.parent.iterdir() if p.name.endswith(".fork-tmp")]


# --------------------------------------------------------------------------- multi-file


async def compacted_session(env: Env) -> str:
    """File 1: task ``a`` (reply ``r1``) then a task-boundary compaction; file 2: task ``b``."""
    script = {
        "responses": [
            [{"text": "r1"}],
            [{"text": "[summary]S1[/summary]"}],
            [{"text": "r2"}],
        ],
        "tools": TOOLS,
    }
    settings = CompactionSettings(max_context_length=2)
    session, _ = await make_session(env, script, compaction=settings)
    async with session:
        await collect(session.run([b.user_text("a")], approve=allow_all))
        await collect(session.run([b.user_text("b")], approve=allow_all))
        check_trace(session)
    return session.id


async def test_fork_before_a_compaction_excludes_it(env: Env) -> None:
    """R-FORK-3: the scan stops at `compaction_begin`; the fork resumes the old context."""
    sid = await compacted_session(env)
    first, _second = env.root.trace_files(sid)
    new_id = fork_session(env.root, sid, at=(1, ordinal_of(first, "r1")))
    files = env.root.trace_files(new_id)
    assert [f.name for f in files] == [f"{new_id}_001.jsonl"]
    assert not any(isinstance(r.payload, CompactionBeginPayload) for r in records_of(files[0]))
    req = await first_request(env.home, new_id, env.workspace, b.user_text("c"))
    assert [m.payload.text for m in req.messages] == ["a", "r1", "c"]  # type: ignore[union-attr]


async def test_fork_in_a_later_file_copies_earlier_files_whole(env: Env) -> None:
    """R-FORK-6/7: every earlier file whole, each `session_meta` rewritten; the fork resumes
    from the selected file's context (the summary and task b)."""
    sid = await compacted_session(env)
    first, second = env.root.trace_files(sid)
    new_id = fork_session(env.root, sid, at=(2, ordinal_of(second, "r2")))
    f1, f2 = env.root.trace_files(new_id)
    assert (f1.name, f2.name) == (f"{new_id}_001.jsonl", f"{new_id}_002.jsonl")
    assert f1.read_bytes().split(b"\n")[1:] == first.read_bytes().split(b"\n")[1:]
    for path in (f1, f2):
        head = records_of(path)[0].payload
        assert isinstance(head, SessionMetaPayload) and head.session_id == new_id
    req = await first_request(env.home, new_id, env.workspace, b.user_text("c"))
    assert [m.payload.text for m in req.messages] == [  # type: ignore[union-attr]
        "[context_summary]\nS1\n[/context_summary]",
        "b",
        "r2",
        "c",
    ]
    state_src = validate_session(env.root.trace_files(new_id))
    assert all(f.severity != "error" for f in state_src)


# --------------------------------------------------------------------------- rewriting


def test_rewrite_session_meta_and_attachment_lines(tmp_path: Path) -> None:
    """R-FORK-7: new id and scratchpad in `session_meta` (source dropped); attachment lines
    under the source scratchpad point at the fork's; URLs, other paths and data URLs are
    untouched, byte for byte."""
    home = tmp_path / "home"
    root = DataRoot(home)
    scratch = root.scratchpad(SID)
    resolved = Path(os.path.realpath(scratch.parent)) / SID
    data_url = "data:image/png;base64," + base64.b64encode(b"\x89PNG-bytes").decode()
    attach = "\n".join(
        [
            "look at these",
            f"[attached image: {resolved.as_posix()}/upload-1a2b3c4d.png]",
            f"[attached file: {scratch.as_posix()}/docs/notes.txt]",
            "[attached image: https://example.com/x.png]",
            "[attached file: /elsewhere/notes.txt]",
            f"inline mention {scratch.as_posix()}/y.txt stays",
            f"[attached file: {scratch.as_posix()}-other/z.txt]",
        ]
    )
    records = [
        meta(
            SID, system_prompt=f"You are {SID}; files in {scratch.as_posix()}.", source="subagent"
        ),
        b.user_text(attach),
        b.image_url(data_url),
        b.request_begin(),
        b.assistant_text("done"),
        b.request_end("completed"),
    ]
    path = manual_path(home)
    write_trace(path, records)
    new_id = fork_session(root, SID, at=(1, 4))
    new_scratch = scratch.parent / new_id
    new_resolved = resolved.parent / new_id
    (fork_file,) = root.trace_files(new_id)
    forked = records_of(fork_file)
    head = forked[0].payload
    assert isinstance(head, SessionMetaPayload)
    assert head.session_id == new_id
    assert head.source is None
    assert head.system_prompt == f"You are {new_id}; files in {new_scratch.as_posix()}."
    assert head.extra is None
    text = forked[1].payload
    assert isinstance(text, TextPayload)
    assert text.text.split("\n") == [
        "look at these",
        f"[attached image: {new_resolved.as_posix()}/upload-1a2b3c4d.png]",
        f"[attached file: {new_scratch.as_posix()}/docs/notes.txt]",
        "[attached image: https://example.com/x.png]",
        "[attached file: /elsewhere/notes.txt]",
        f"inline mention {scratch.as_posix()}/y.txt stays",
        f"[attached file: {scratch.as_posix()}-other/z.txt]",
    ]
    src_lines = path.read_bytes().split(b"\n")
    fork_lines = fork_file.read_bytes().split(b"\n")
    assert fork_lines[2:] == src_lines[2:]  # image (data URL) and events byte-identical
    image = forked[2].payload
    assert isinstance(image, ImageUrlPayload) and image.image_url == data_url


def test_rewrite_keeps_unknown_meta_keys(tmp_path: Path) -> None:
    """R-FORK-7: only the named keys change; an unknown `source` and legacy keys survive as
    written except `source`, which is removed."""
    home = tmp_path / "home"
    path = manual_path(home)
    path.parent.mkdir(parents=True)
    line = msgspec.json.encode(
        {
            "timestamp": "2026-01-02T03:04:05.000Z",
            "type": "session_meta",
            "payload": {
                "session_id": SID,
                "provider": "p",
                "model_id": "m",
                "model_context_window": "unknown",
                "system_prompt": "s",
                "agent_state": "/a",
                "workspace": "/w",
                "source": "webhook",
                "thinking_level": "high",
            },
        }
    )
    rest = [
        b.user_text("hi"),
        b.request_begin(),
        b.assistant_text("yo"),
        b.request_end("completed"),
    ]
    path.write_bytes(line + b"\n" + b"".join(msgspec.json.encode(r) + b"\n" for r in rest))
    new_id = fork_session(DataRoot(home), SID, at=(1, 3))
    first = DataRoot(home).trace_files(new_id)[0].read_bytes().split(b"\n")[0]
    obj = msgspec.json.decode(first)
    assert obj["payload"] == {
        "session_id": new_id,
        "provider": "p",
        "model_id": "m",
        "model_context_window": "unknown",
        "system_prompt": "s",
        "agent_state": "/a",
        "workspace": "/w",
        "thinking_level": "high",
    }


async def test_folded_image_follows_the_fork(env: Env) -> None:
    """R-FORK-7/8 end to end: a model without vision saves the image into the scratchpad; the
    fork's trace points at the fork's copy, which holds the same bytes."""
    png = b"\x89PNG\r\n\x1a\nfake"
    url = "data:image/png;base64," + base64.b64encode(png).decode()
    script = {"responses": [[{"text": "seen"}]], "tools": TOOLS, "vision": False}
    session, _ = await make_session(env, script)
    async with session:
        await collect(session.run([b.user_text("see"), b.image_url(url)], approve=allow_all))
    source = env.root.trace_files(session.id)[0]
    new_id = fork_session(env.root, session.id, at=(1, ordinal_of(source, "seen")))
    user = next(
        r.payload
        for r in records_of(env.root.trace_files(new_id)[0])
        if isinstance(r.payload, TextPayload) and r.payload.role == "user"
    )
    line = user.text.split("\n")[-1]
    assert line.startswith("[attached image: ") and new_id in line and session.id not in line
    copied = Path(line.removeprefix("[attached image: ").removesuffix("]"))
    assert copied.read_bytes() == png
    assert copied.parent == Path(os.path.realpath(env.root.scratchpad(new_id)))


# --------------------------------------------------------------------------- scratchpad


async def test_scratchpad_copied_recursively_and_private(env: Env) -> None:
    """R-FORK-8: the whole tree, 0700 directories, 0600 files (owner x bit kept)."""
    sid = await two_task_session(env)
    scratch = env.root.scratchpad(sid)
    (scratch / "sub").mkdir(parents=True)
    (scratch / "a.txt").write_text("A")
    (scratch / "sub" / "b.sh").write_text("B")
    os.chmod(scratch / "sub" / "b.sh", 0o755)
    os.chmod(scratch / "a.txt", 0o644)
    source = env.root.trace_files(sid)[0]
    new_id = fork_session(env.root, sid, at=(1, ordinal_of(source, "one")))
    copy = env.root.scratchpad(new_id)
    assert (copy / "a.txt").read_text() == "A"
    assert (copy / "sub" / "b.sh").read_text() == "B"
    assert stat.S_IMODE((copy / "a.txt").stat().st_mode) == 0o600
    assert stat.S_IMODE((copy / "sub" / "b.sh").stat().st_mode) == 0o700
    assert stat.S_IMODE(copy.stat().st_mode) == 0o700
    assert stat.S_IMODE((copy / "sub").stat().st_mode) == 0o700
    assert (scratch / "a.txt").read_text() == "A"  # source untouched


async def test_missing_scratchpad_is_an_empty_snapshot(env: Env) -> None:
    """R-FORK-8: no source scratchpad, no fork scratchpad, no error."""
    sid = await two_task_session(env)
    source = env.root.trace_files(sid)[0]
    new_id = fork_session(env.root, sid, at=(1, ordinal_of(source, "one")))
    assert not env.root.scratchpad(new_id).exists()


# --------------------------------------------------------------------------- failures


async def test_failure_removes_everything_created(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-FORK-8: a copy failure in the second file removes the first file, the temporary
    file and the copied scratchpad; the source is unchanged."""
    sid = await compacted_session(env)
    (env.root.scratchpad(sid) / "deep").mkdir(parents=True)
    (env.root.scratchpad(sid) / "deep" / "f").write_text("x")
    before = tree_bytes(env.home)
    real = _fork._copy_trace
    calls = 0

    def failing(*args: Any) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise OSError(28, "No space left on device")
        real(*args)

    monkeypatch.setattr(_fork, "_copy_trace", failing)
    _, second = env.root.trace_files(sid)
    with pytest.raises(OSError, match="No space left"):
        fork_session(env.root, sid, at=(2, ordinal_of(second, "r2")))
    assert tree_bytes(env.home) == before
    assert [s.session_id for s in env.root.sessions()] == [sid]


async def test_failure_while_writing_a_file_removes_its_temporary(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-FORK-8: a write that fails half-way leaves nothing, not even the temporary file."""
    sid = await two_task_session(env)
    before = tree_bytes(env.home)

    def broken_fsync(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(_fork.os, "fsync", broken_fsync)
    source = env.root.trace_files(sid)[0]
    with pytest.raises(OSError, match="Input/output"):
        fork_session(env.root, sid, at=(1, ordinal_of(source, "one")))
    monkeypatch.undo()
    assert tree_bytes(env.home) == before


async def test_never_overwrites_an_existing_trace(
    env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-FORK-6: files are created exclusively; a name collision fails and leaves the
    existing file as it was."""
    sid = await two_task_session(env)
    other = await two_task_session(env)
    other_file = env.root.trace_files(other)[0]
    other_bytes = other_file.read_bytes()
    monkeypatch.setattr(_fork, "_new_id", lambda root, parent: other)
    source = env.root.trace_files(sid)[0]
    with pytest.raises(FileExistsError):
        fork_session(env.root, sid, at=(1, ordinal_of(source, "one")))
    assert other_file.read_bytes() == other_bytes
    assert not [p for p in other_file.parent.iterdir() if p.name.endswith(".fork-tmp")]


# --------------------------------------------------------------------------- R-FORK-5


async def test_locked_by_a_session_of_this_process(env: Env) -> None:
    """R-FORK-5: a Session that has written holds the lock (running or not): SessionLocked,
    naming this process; once it is closed the fork works."""
    script = {"responses": [[{"text": "one"}], [{"text": "two"}]], "tools": TOOLS}
    session, _ = await make_session(env, script)
    async with session:
        await collect(session.run([b.user_text("first")], approve=allow_all))
        source = env.root.trace_files(session.id)[0]
        at = (1, ordinal_of(source, "one"))
        with pytest.raises(SessionLocked) as info:
            fork_session(env.root, session.id, at=at)
        assert info.value.holder_pid == os.getpid()
        assert info.value.session_id == session.id
        # The probe released the lock at once: the session still writes.
        await collect(session.run([b.user_text("second")], approve=allow_all))
    assert fork_session(env.root, session.id, at=at)


async def test_locked_by_another_process(env: Env) -> None:
    """R-FORK-5: another process's lock (R-TRACE-18) refuses the fork."""
    sid = await two_task_session(env)
    lock = env.root.lock_path(sid)
    code = (
        "import fcntl, os, sys\n"
        f"fd = os.open({str(lock)!r}, os.O_RDWR)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "os.pwrite(fd, f'{os.getpid()}\\n'.encode(), 0)\n"
        "print('ready', flush=True)\n"
        "sys.stdin.read()\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        source = env.root.trace_files(sid)[0]
        with pytest.raises(SessionLocked) as info:
            fork_session(env.root, sid, at=(1, ordinal_of(source, "one")))
        assert info.value.holder_pid == holder.pid
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=10)
        if holder.stdout is not None:
            holder.stdout.close()


@pytest.mark.parametrize("inside", [False, True])
async def test_symlinked_lock_file_refused(env: Env, tmp_path: Path, inside: bool) -> None:
    """R-ROOT-9: the probe never follows a lock-file symlink, out of the root (the layout
    refuses it) or within it (opened with O_NOFOLLOW)."""
    sid = await two_task_session(env)
    lock = env.root.lock_path(sid)
    target = (env.home / "planted") if inside else (tmp_path / "outside")
    target.write_text("keep")
    lock.unlink()
    lock.symlink_to(target)
    source = env.root.trace_files(sid)[0]
    expected = "symlinked session lock" if inside else "outside the data root"
    with pytest.raises(ValueError, match=expected):
        fork_session(env.root, sid, at=(1, ordinal_of(source, "one")))
    assert target.read_text() == "keep"


# --------------------------------------------------------------------------- rejections


def reject(home: Path, records: list[OmniMessage], at: tuple[int, int], match: str) -> None:
    write_trace(manual_path(home), records)
    before = tree_bytes(home)
    with pytest.raises(ValueError, match=match):
        fork_session(DataRoot(home), SID, at=at)
    assert tree_bytes(home) == before


def task(prompt: str, reply: str) -> list[OmniMessage]:
    return [
        b.user_text(prompt),
        b.request_begin(),
        b.assistant_text(reply),
        b.request_end("completed"),
    ]


@pytest.mark.parametrize(
    "at", [(0, 3), (1, -1), (True, 3), ("1", 3), (1.0, 3), (1,), (1, 2, 3), "13", None]
)
def test_malformed_positions(tmp_path: Path, at: Any) -> None:
    """R-FORK-1: a coordinate is two ints, file index from 1, ordinal from 0."""
    reject(tmp_path / "home", [meta(SID), *task("a", "A")], at, "invalid fork point")


def test_position_as_a_list(tmp_path: Path) -> None:
    """A coordinate decoded from JSON arrives as a list; it names the same record."""
    home = tmp_path / "home"
    write_trace(manual_path(home), [meta(SID), *task("a", "A")])
    assert fork_session(DataRoot(home), SID, at=[1, 3])  # type: ignore[arg-type]


def test_unknown_session(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="Session does not exist: session-nope"):
        fork_session(DataRoot(tmp_path), "session-nope", at=(1, 0))


def test_missing_file_and_ordinal_out_of_range(tmp_path: Path) -> None:
    home = tmp_path / "home"
    reject(home, [meta(SID), *task("a", "A")], (2, 1), "no trace file with index 2")
    with pytest.raises(ValueError, match="no record 9"):
        fork_session(DataRoot(home), SID, at=(1, 9))


@pytest.mark.parametrize(
    ("ordinal", "what"),
    [(0, "session_meta"), (1, "user prompt"), (2, "request_begin"), (4, "request_end")],
)
def test_named_record_must_be_an_assistant_text(tmp_path: Path, ordinal: int, what: str) -> None:
    """R-FORK-2: only a complete assistant text can be named."""
    reject(
        tmp_path / "home",
        [meta(SID), *task("a", "A")],
        (1, ordinal),
        "not a complete assistant text",
    )


def test_blank_or_incomplete_reply_rejected(tmp_path: Path) -> None:
    """R-FORK-2: blank text and partial messages are not replies."""
    records = [
        meta(SID),
        b.user_text("a"),
        b.request_begin(),
        b.assistant_text("  \n "),
        b.request_end("completed"),
    ]
    reject(tmp_path / "h1", records, (1, 3), "non-blank")
    records = [
        meta(SID),
        b.user_text("a"),
        b.request_begin(),
        b.thinking("hmm"),
        b.request_end("completed"),
    ]
    reject(tmp_path / "h2", records, (1, 3), "not a complete assistant text")


def test_reply_inside_a_compaction_span_rejected(tmp_path: Path) -> None:
    """R-FORK-2: the summary a compaction request wrote is not a task's reply."""
    records = [
        meta(SID),
        *task("a", "A"),
        b.compaction_begin("manual", "summarize", context=10, turns=1),
        b.user_text("SUMMARIZE"),
        b.request_begin(),
        b.assistant_text("[summary]s[/summary]"),
        b.request_end("completed"),
        b.compaction_end("manual", "summarize", "completed", attempt=1),
    ]
    reject(tmp_path / "home", records, (1, 8), "inside a compaction span")


def test_reply_that_is_not_the_last_of_its_task_rejected(tmp_path: Path) -> None:
    """R-FORK-3: text before tool calls, with another reply later in the same task."""
    records = [
        meta(SID),
        b.user_text("a"),
        b.request_begin(),
        b.assistant_text("let me look"),
        b.tool_call("t", {}, "c1"),
        b.request_end("completed"),
        b.tool_call_output("c1", "x"),
        b.request_begin(),
        b.assistant_text("found it"),
        b.request_end("completed"),
    ]
    reject(tmp_path / "home", records, (1, 3), "not the final reply")


def test_task_that_did_not_complete_rejected(tmp_path: Path) -> None:
    """R-FORK-3: a failed request after the reply (the task went on and broke) splits it."""
    records = [
        meta(SID),
        b.user_text("a"),
        b.request_begin(),
        b.assistant_text("partial"),
        b.request_end("aborted"),
        b.abort("aborted by user"),
    ]
    reject(tmp_path / "home", records, (1, 3), "did not complete")


def test_reply_without_a_completed_request_end_rejected(tmp_path: Path) -> None:
    """R-FORK-3: the span is still open (a crash before request_end): nothing completed."""
    records = [meta(SID), b.user_text("a"), b.request_begin(), b.assistant_text("A")]
    reject(tmp_path / "home", records, (1, 3), "no completed request_end")


def test_cut_with_carry_over_rejected(tmp_path: Path) -> None:
    """R-FORK-4: a committed call with no output would leave a placeholder carry-over."""
    records = [
        meta(SID),
        b.user_text("a"),
        b.request_begin(),
        b.assistant_text("calling"),
        b.tool_call("t", {}, "c1"),
        b.request_end("completed"),
    ]
    reject(tmp_path / "home", records, (1, 3), "interrupted context")


def test_steering_does_not_end_the_scan(tmp_path: Path) -> None:
    """R-FORK-3: a steering message is not a task start; the reply after it is the final one,
    so the earlier one is rejected, the later one accepted."""
    records = [
        meta(SID),
        b.user_text("a"),
        b.request_begin(),
        b.assistant_text("first"),
        b.request_end("completed"),
        b.user_text("[user_steering]\nmore\n[/user_steering]"),
        b.request_begin(),
        b.assistant_text("second"),
        b.request_end("completed"),
        b.user_text("next task"),
    ]
    reject(tmp_path / "home", records, (1, 3), "not the final reply")
    new_id = fork_session(DataRoot(tmp_path / "home"), SID, at=(1, 7))
    forked = records_of(DataRoot(tmp_path / "home").trace_files(new_id)[0])
    assert len(forked) == 9


def test_copied_file_must_start_with_session_meta(tmp_path: Path) -> None:
    """R-FORK-5: an earlier file without its head is refused."""
    home = tmp_path / "home"
    write_trace(manual_path(home, 1), [b.user_text("stray"), meta(SID), *task("a", "A")])
    write_trace(manual_path(home, 2), [meta(SID), *task("b", "B")])
    with pytest.raises(ValueError, match="does not start with session_meta"):
        fork_session(DataRoot(home), SID, at=(2, 3))


def test_torn_tail_and_malformed_lines(tmp_path: Path) -> None:
    """The coordinate counts records as `read_trace` lists them; a malformed middle line is
    copied as it is; a torn tail is not copied."""
    home = tmp_path / "home"
    path = manual_path(home)
    write_trace(path, [meta(SID), b.user_text("a")])
    with path.open("ab") as f:
        f.write(b"{not json}\n")
    with TraceWriter(path, fsync="never") as w:
        for r in [b.request_begin(), b.assistant_text("A"), b.request_end("completed")]:
            w.append(r)
    with path.open("ab") as f:
        f.write(b'{"timestamp": "torn')
    new_id = fork_session(DataRoot(home), SID, at=(1, 3))
    data = DataRoot(home).trace_files(new_id)[0].read_bytes()
    assert b"{not json}\n" in data
    assert data.endswith(b"\n") and b"torn" not in data
    assert len(read_trace(DataRoot(home).trace_files(new_id)[0], report=False).records) == 5
