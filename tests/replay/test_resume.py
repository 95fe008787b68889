"""resume_session (SPEC §13): errors that name the problem, the reference implementation's
traces, the crash repairs (R-RESUME-14a, R-RESUME-14), idempotence (INV-26), counters across
files (R-RESUME-11), torn tails and crash residue, and exact resume (R-RESUME-18): the first
request after a resume equals the live session's next request.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from enginekit import (
    Env,
    assert_requests_paired,
    check_trace,
    collect,
    make_env,
    make_session,
)

from engine import AbortSignal, CompactionSettings, LLMRequest, RetryPolicy, Session, allow_all
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import (
    AbortPayload,
    CompactionBeginPayload,
    CompactionEndPayload,
    DataRoot,
    OmniMessage,
    RequestBeginPayload,
    RequestEndPayload,
    SessionLocked,
    TextPayload,
    TokenUsagePayload,
    ToolCallOutputPayload,
    ToolListReadyPayload,
    TraceWriter,
    decode,
    encode,
    read_trace,
)
from eventstore import builders as b
from projections import ModelContext, SessionState
from replay import resume_session, validate_session

pytestmark = pytest.mark.anyio

TOOLS = [{"name": "t", "description": "test tool"}]
FINAL = [{"text": "fine"}]
REFERENCE = Path("/work/shared/reference-traces")
CLOSURE_REQUEST = "process exited before the request ended"
CLOSURE_COMPACTION = "process exited before the compaction ended"


@pytest.fixture
def env(tmp_path: Path) -> Env:
    return make_env(tmp_path)


# --------------------------------------------------------------------------- helpers


def fresh_llm(script: Any = None) -> ScriptedLLM:
    return ScriptedLLM(script or {"responses": [FINAL, FINAL], "tools": TOOLS})


async def resume(home: Path, sid: str, llm: ScriptedLLM | None = None, **kw: Any) -> Session:
    llm = llm or fresh_llm()
    kw.setdefault("compaction", None)
    kw.setdefault("retry", RetryPolicy(base_ms=1, cap_ms=2))
    session = await resume_session(
        DataRoot(home), sid, llm=llm, environment=ScriptedEnvironment.from_llm(llm), **kw
    )
    llm.bind(session)
    return session


async def resumed_request(home: Path, sid: str, prompt: OmniMessage, **kw: Any) -> LLMRequest:
    llm = fresh_llm()
    session = await resume(home, sid, llm, **kw)
    async with session:
        await collect(session.run([prompt], approve=allow_all))
        check_trace(session)
    return llm.requests[0]


def assert_same_request(live: LLMRequest, resumed: LLMRequest) -> None:
    assert resumed.messages == live.messages
    assert resumed.new_messages == live.new_messages
    assert resumed.system_prompt == live.system_prompt
    assert resumed.tools == live.tools


def lines_of(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines(keepends=True)


def records(home: Path, sid: str) -> list[OmniMessage]:
    return read_trace(DataRoot(home).trace_files(sid)).records


def copy_cut(src_home: Path, dst_home: Path, sid: str, keep: int) -> Path:
    """A copy of the data root whose latest file keeps only its first ``keep`` lines."""
    shutil.copytree(src_home, dst_home)
    latest = DataRoot(dst_home).trace_files(sid)[-1]
    latest.write_bytes(b"".join(lines_of(latest)[:keep]))
    return latest


def index_where(path: Path, pred: Callable[[OmniMessage], bool], nth: int = 0) -> int:
    hits = [i for i, line in enumerate(lines_of(path)) if pred(decode(line))]
    return hits[nth]


def is_(kind: type) -> Callable[[OmniMessage], bool]:
    return lambda r: isinstance(r.payload, kind)


def user_says(text: str) -> Callable[[OmniMessage], bool]:
    return lambda r: isinstance(r.payload, TextPayload) and r.payload.text == text


async def live_session(
    env: Env, script: list[Any], prompts: list[str], **kw: Any
) -> tuple[Session, ScriptedLLM]:
    session, llm = await make_session(env, {"responses": script, "tools": TOOLS}, **kw)
    async with session:
        for p in prompts:
            await collect(session.run([b.user_text(p)], approve=allow_all))
        check_trace(session)
    return session, llm


# --------------------------------------------------------------------------- errors


async def test_unknown_session(tmp_path: Path) -> None:
    """R-RESUME-1: FileNotFoundError naming the session."""
    with pytest.raises(FileNotFoundError, match=r"^Session does not exist: session-x\Z"):
        await resume(tmp_path, "session-x")


async def test_invalid_id(tmp_path: Path) -> None:
    """R-ROOT-6: an id that could escape the root is refused."""
    with pytest.raises(ValueError, match="invalid session id"):
        await resume(tmp_path, "../etc")


async def test_workspace_gone_then_override(env: Env) -> None:
    """R-RESUME-2: the recorded workspace must exist (never created); `workspace=` replaces it
    for the check; a failed resume releases the lock."""
    session, _ = await live_session(env, [FINAL], ["go"])
    shutil.rmtree(env.workspace)
    with pytest.raises(FileNotFoundError, match="workspace does not exist"):
        await resume(env.home, session.id)
    assert not env.workspace.exists()
    other = env.home.parent / "elsewhere"
    other.mkdir()
    resumed = await resume(env.home, session.id, workspace=other)
    async with resumed:
        assert resumed.workspace == other.resolve()


async def test_workspace_not_a_directory(env: Env) -> None:
    session, _ = await live_session(env, [FINAL], ["go"])
    shutil.rmtree(env.workspace)
    env.workspace.write_text("a file")
    with pytest.raises(NotADirectoryError, match="workspace is not a directory"):
        await resume(env.home, session.id)


async def test_no_session_meta_anywhere(env: Env) -> None:
    """R-ROOT-10: a session whose only file has no session_meta does not exist."""
    session, _ = await live_session(env, [FINAL], ["go"])
    path = env.root.trace_files(session.id)[0]
    path.write_bytes(b"".join(lines_of(path)[1:]))
    with pytest.raises(FileNotFoundError, match=f"Session does not exist: {session.id}"):
        await resume(env.home, session.id)


async def test_latest_file_without_session_meta(env: Env) -> None:
    """R-RESUME-1: the file resume picks must hold a session_meta; the error names it."""
    session, _ = await live_session(env, [FINAL], ["go"])
    first = env.root.trace_files(session.id)[0]
    first.write_bytes(b"".join(lines_of(first)[1:]))
    first.with_name(first.name.replace("_001", "_002")).write_bytes(b"")  # residue, ignored
    with pytest.raises(ValueError, match="session_meta"):
        await resume(env.home, session.id)
    # The lock was released: a writer can take it.
    TraceWriter(first, fsync="never").close()


async def test_system_prompt_and_unknown_options_refused(env: Env) -> None:
    """API.md: the recorded system prompt is kept; options are Session.create's."""
    session, _ = await live_session(env, [FINAL], ["go"])
    with pytest.raises(TypeError, match="system_prompt"):
        await resume(env.home, session.id, system_prompt="new")
    with pytest.raises(TypeError, match="unexpected"):
        await resume(env.home, session.id, colour="blue")


async def test_locked_while_a_live_session_holds_it(env: Env) -> None:
    """R-RESUME-1, R-TRACE-18: SessionLocked names the session and the holder."""
    session, _ = await make_session(env, {"responses": [FINAL, FINAL], "tools": TOOLS})
    async with session:
        await collect(session.run([b.user_text("go")], approve=allow_all))
        with pytest.raises(SessionLocked) as info:
            await resume(env.home, session.id)
        assert info.value.session_id == session.id
        assert info.value.holder_pid == os.getpid()
        # The failed resume disturbed nothing: the live session keeps writing.
        await collect(session.run([b.user_text("again")], approve=allow_all))
        check_trace(session)
    resumed = await resume(env.home, session.id)
    async with resumed:
        pass


# --------------------------------------------------------------------------- reference traces


def normalized(msg: OmniMessage) -> dict[str, Any]:
    """The reference fixture's normalization: payload only, stop_reason dropped except on
    tool_call_output, tool-call arguments parsed as JSON."""
    payload: dict[str, Any] = msgspec.json.decode(encode(msg))["payload"]
    if payload.get("type") != "tool_call_output":
        payload.pop("stop_reason", None)
    if payload.get("type") == "tool_call":
        payload["arguments"] = json.loads(payload["arguments"])
    return payload


SCENARIOS = sorted(p.name for p in REFERENCE.iterdir() if p.is_dir()) if REFERENCE.is_dir() else []


@pytest.mark.skipif(not SCENARIOS, reason="reference traces not available")
@pytest.mark.parametrize("scenario", SCENARIOS)
async def test_reference_traces_resume(tmp_path: Path, scenario: str) -> None:
    """R-RESUME-2 `workspace=`: a trace the reference wrote on another machine resumes, and
    the first request equals the reference's own next request."""
    home = tmp_path / "home"
    traces = home / "default_project" / "agents" / "default_agent" / "traces"
    for date_dir in (REFERENCE / scenario).iterdir():
        shutil.copytree(date_dir, traces / date_dir.name)
        for f in (traces / date_dir.name).iterdir():
            os.chmod(f, 0o600)
    files = sorted((traces).glob("*/*.jsonl"))
    sid = files[0].name.rsplit("_", 1)[0]
    expected = json.loads((REFERENCE / f"{scenario}.expected-next-request.json").read_text())
    workspace = tmp_path / "ws"
    workspace.mkdir()
    with pytest.raises(FileNotFoundError, match="workspace does not exist: /workspace"):
        await resume(home, sid)
    before = [f.read_bytes() for f in files]
    llm = fresh_llm()
    session = await resume(home, sid, llm, workspace=workspace)
    async with session:
        await collect(session.run([b.user_text(expected["next_prompt"])], approve=allow_all))
    assert [normalized(m) for m in llm.requests[0].messages] == expected["next_request_messages"]
    # R-RESUME-3: appended to the same latest file; nothing rewritten, no new file.
    after = sorted(traces.glob("*/*.jsonl"))
    assert after == files
    for old, path in zip(before, after, strict=True):
        assert path.read_bytes().startswith(old)
    assert len(lines_of(files[-1])) > before[-1].count(b"\n")
    errors = [f for f in validate_session(after) if f.severity == "error"]
    assert errors == []


# --------------------------------------------------------------------------- R-RESUME-14a


async def closures_after_resume(home: Path, sid: str) -> list[OmniMessage]:
    before = len(records(home, sid))
    session = await resume(home, sid)
    async with session:
        pass
    return records(home, sid)[before:]


async def test_dangling_request_cut_after_request_begin(env: Env, tmp_path: Path) -> None:
    """R-RESUME-14a: `request_end{aborted, attempt 1, error_message}` closes the span; the
    dropped turn is carried over as case B, stamped with the span's request_begin."""
    session, _ = await live_session(env, [[{"text": "ok"}]], ["go"])
    path = env.root.trace_files(session.id)[0]
    keep = index_where(path, is_(RequestBeginPayload)) + 1
    copy = tmp_path / "copy"
    cut = copy_cut(env.home, copy, session.id, keep)
    begin = decode(lines_of(cut)[-1])
    (closure,) = await closures_after_resume(copy, session.id)
    p = closure.payload
    assert isinstance(p, RequestEndPayload)
    assert (p.status, p.attempt, p.retry_in_ms, p.error_message) == (
        "aborted",
        1,
        None,
        CLOSURE_REQUEST,
    )
    req = await resumed_request(copy, session.id, b.user_text("continue"))
    first = req.messages[0]
    assert isinstance(first.payload, TextPayload)
    assert first.payload.text == "[turn_aborted]\n  [user_input]go[/user_input]\n[/turn_aborted]"
    assert first.timestamp == begin.timestamp
    assert len(req.messages) == 2


async def test_dangling_request_cut_after_token_usage(env: Env, tmp_path: Path) -> None:
    """R-RESUME-7a/14a: the stream had finished: the turn commits and the closure says
    `completed` (no attempt on a first try, R-RETRY-7)."""
    session, llm = await make_session(env, {"responses": [[{"text": "ok"}], FINAL], "tools": TOOLS})
    async with session:
        await collect(session.run([b.user_text("go")], approve=allow_all))
        prompt = b.user_text("continue")
        await collect(session.run([prompt], approve=allow_all))
    live = llm.requests[1]
    path = env.root.trace_files(session.id)[0]
    keep = index_where(path, is_(TokenUsagePayload)) + 1
    copy = tmp_path / "copy"
    copy_cut(env.home, copy, session.id, keep)
    (closure,) = await closures_after_resume(copy, session.id)
    p = closure.payload
    assert isinstance(p, RequestEndPayload)
    assert (p.status, p.attempt, p.retry_in_ms, p.error_message) == ("completed", None, None, None)
    # The same next request as the live session, which saw the request_end.
    assert_same_request(live, await resumed_request(copy, session.id, prompt))


@pytest.mark.parametrize(
    ("cut_after", "status", "attempt"),
    [
        ("second request_begin", "aborted", 2),
        ("second token_usage", "completed", 2),
    ],
)
async def test_dangling_retry_attempt_is_stamped(
    env: Env, tmp_path: Path, cut_after: str, status: str, attempt: int
) -> None:
    """R-RESUME-14a: the closure's attempt follows the turn's earlier request_ends."""
    script = [
        [{"text": "half"}, {"fail": {"status": "timeout", "message": "idle"}}],
        [{"text": "ok"}],
    ]
    session, _ = await live_session(env, script, ["go"])
    path = env.root.trace_files(session.id)[0]
    kind = RequestBeginPayload if "request_begin" in cut_after else TokenUsagePayload
    nth = 1 if kind is RequestBeginPayload else 0
    keep = index_where(path, is_(kind), nth) + 1
    copy = tmp_path / "copy"
    cut = copy_cut(env.home, copy, session.id, keep)
    truncated = read_trace(cut).records
    (closure,) = await closures_after_resume(copy, session.id)
    p = closure.payload
    assert isinstance(p, RequestEndPayload)
    assert (p.status, p.attempt, p.retry_in_ms) == (status, attempt, None)
    # R-RESUME-14a: the closure changes no view of the context.
    ctx = ModelContext.from_records(truncated)
    prompt = b.user_text("continue")
    req = await resumed_request(copy, session.id, prompt)
    assert req.messages == [*ctx.history, *ctx.pending, prompt]
    assert_requests_paired([req])


async def test_abort_inside_a_span_does_not_close_it(env: Env, tmp_path: Path) -> None:
    """R-TRACE-15a: a fail-stop `abort` written inside the span leaves it open; the closure
    lands after the abort, and the views do not move.  The block of a span closed by
    R-RESUME-14a takes its request_begin's timestamp (R-PROJ-3a)."""
    session, _ = await live_session(env, [[{"text": "ok"}]], ["go"])
    path = env.root.trace_files(session.id)[0]
    copy = tmp_path / "copy"
    cut = copy_cut(env.home, copy, session.id, index_where(path, is_(RequestBeginPayload)) + 1)
    begin = decode(lines_of(cut)[-1])
    abort = b.abort("trace write failed: disk full")
    with cut.open("ab") as f:
        f.write(encode(abort) + b"\n")
    truncated = read_trace(cut).records
    (closure,) = await closures_after_resume(copy, session.id)
    assert isinstance(closure.payload, RequestEndPayload)
    assert (closure.payload.status, closure.payload.attempt) == ("aborted", 1)
    after = read_trace(cut).records
    assert after[-2] == abort and after[-1] == closure
    ctx = ModelContext.from_records(truncated)
    prompt = b.user_text("continue")
    req = await resumed_request(copy, session.id, prompt)
    assert req.messages == [*ctx.history, *ctx.pending, prompt]
    assert req.messages[0].timestamp == begin.timestamp


# --------------------------------------------------------------------------- R-RESUME-14


COMPACTION_SCRIPT = [[{"text": "r1"}], [{"text": "[summary]S1[/summary]"}], FINAL]
COMPACTION = CompactionSettings(max_context_length=2, prompt="SUMMARIZE")


def in_compaction(kind: type, prompt: bool = False) -> Callable[[Path], int]:
    def find(path: Path) -> int:
        start = index_where(path, is_(CompactionBeginPayload))
        if prompt:
            return index_where(path, user_says("SUMMARIZE"))
        hits = [
            i
            for i, line in enumerate(lines_of(path))
            if i >= start and isinstance(decode(line).payload, kind)
        ]
        return hits[0]

    return find


@pytest.mark.parametrize(
    ("where", "request_closure", "attempt", "untouched"),
    [
        (in_compaction(CompactionBeginPayload), None, None, True),
        (in_compaction(TextPayload, prompt=True), None, None, True),
        (in_compaction(RequestBeginPayload), ("aborted", 1, CLOSURE_REQUEST), 1, True),
        (in_compaction(TokenUsagePayload), ("completed", None, None), 1, False),
        (in_compaction(RequestEndPayload), None, 1, False),
    ],
    ids=["begin", "prompt", "request_begin", "token_usage", "request_end"],
)
async def test_dangling_compaction_closed(
    env: Env,
    tmp_path: Path,
    where: Callable[[Path], int],
    request_closure: tuple[str, int | None, str | None] | None,
    attempt: int | None,
    untouched: bool,
) -> None:
    """R-RESUME-14 (after R-RESUME-14a when a request is open too): `compaction_end{reason,
    mode, failed}` with `attempt` = request spans in the span (absent when none) and the
    closure's error_message; the half-written summary is discarded and the views do not move."""
    session, _ = await live_session(env, COMPACTION_SCRIPT, ["a"], compaction=COMPACTION)
    path = env.root.trace_files(session.id)[0]
    copy = tmp_path / "copy"
    cut = copy_cut(env.home, copy, session.id, where(path) + 1)
    truncated = read_trace(cut).records
    closures = await closures_after_resume(copy, session.id)
    expected_kinds = ([RequestEndPayload] if request_closure else []) + [CompactionEndPayload]
    assert [type(c.payload) for c in closures] == expected_kinds
    if request_closure is not None:
        p = closures[0].payload
        assert isinstance(p, RequestEndPayload)
        assert (p.status, p.attempt, p.error_message) == request_closure
    end = closures[-1].payload
    assert isinstance(end, CompactionEndPayload)
    assert (end.reason, end.mode, end.status, end.attempt, end.error_message) == (
        "context",
        "summarize",
        "failed",
        attempt,
        CLOSURE_COMPACTION,
    )
    ctx = ModelContext.from_records(truncated)
    prompt = b.user_text("continue")
    req = await resumed_request(copy, session.id, prompt)
    assert req.messages == [*ctx.history, *ctx.pending, prompt]
    assert_requests_paired([req])
    if untouched:  # nothing of the compaction committed: the original context comes back
        assert [m.payload.text for m in req.messages] == ["a", "r1", "continue"]  # type: ignore[union-attr]
    assert not any(
        isinstance(m.payload, TextPayload) and m.payload.text.startswith("[context_summary]")
        for m in req.messages
    )


# --------------------------------------------------------------------------- INV-26


async def test_second_resume_appends_nothing(env: Env, tmp_path: Path) -> None:
    """INV-26: a resume adds only the closures, once; a clean trace gets nothing at all."""
    session, _ = await live_session(env, COMPACTION_SCRIPT, ["a"], compaction=COMPACTION)
    path = env.root.trace_files(session.id)[0]
    clean = path.read_bytes()
    for _ in range(2):
        r = await resume(env.home, session.id)
        async with r:
            pass
        assert path.read_bytes() == clean
    copy = tmp_path / "copy"
    cut = copy_cut(env.home, copy, session.id, in_compaction(RequestBeginPayload)(path) + 1)
    assert len(await closures_after_resume(copy, session.id)) == 2
    once = cut.read_bytes()
    assert await closures_after_resume(copy, session.id) == []
    assert cut.read_bytes() == once


# --------------------------------------------------------------------------- R-RESUME-11


async def test_counters_across_files(env: Env) -> None:
    """R-RESUME-11: session tokens and total turns come from every file; the latest file has
    no token_usage, so its last request total is 0 while the session total carries on."""
    script = [[{"text": "r1"}], [{"text": "[summary]S1[/summary]"}], [{"text": "r2"}]]
    session, _ = await make_session(
        env, {"responses": script, "tools": TOOLS}, compaction=COMPACTION
    )
    dead = AbortSignal()
    dead.abort()
    async with session:
        await collect(session.run([b.user_text("a")], approve=allow_all))
        await collect(session.run([b.user_text("b")], signal=dead))
        live_state = session.state
        check_trace(session)
    files = env.root.trace_files(session.id)
    assert len(files) == 2
    assert not any(isinstance(r.payload, TokenUsagePayload) for r in read_trace(files[1]).records)
    first_usages = [
        r.payload for r in read_trace(files[0]).records if isinstance(r.payload, TokenUsagePayload)
    ]
    resumed = await resume(env.home, session.id, fresh_llm())
    async with resumed:
        state = resumed.state
        assert state == live_state == SessionState.from_records(read_trace(files).records)
        assert state.session_tokens == first_usages[-1].session
        assert state.turns_total == 1
        assert (state.turns_in_context, state.last_request_total) == (0, 0)
        stream = await collect(resumed.run([b.user_text("c")], approve=allow_all))
    usage = next(m.payload for m in stream if isinstance(m.payload, TokenUsagePayload))
    assert usage.session == first_usages[-1].session + usage.request


# --------------------------------------------------------------------------- torn tail, residue


async def test_torn_tail_repaired_on_resume(env: Env, tmp_path: Path) -> None:
    """R-TRACE-14, R-RESUME-1: the fragment is cut before anything is appended, and the
    next request is the live one."""
    session, llm = await make_session(env, {"responses": [[{"text": "ok"}], FINAL], "tools": TOOLS})
    prompt = b.user_text("continue")
    async with session:
        await collect(session.run([b.user_text("go")], approve=allow_all))
        copy = tmp_path / "copy"
        shutil.copytree(env.home, copy)
        await collect(session.run([prompt], approve=allow_all))
    path = DataRoot(copy).trace_files(session.id)[0]
    clean = path.read_bytes()
    with path.open("ab") as f:
        f.write(b'{"timestamp":"2026-01-01T00:00:00.000Z","type":"model_')
    resumed_req = await resumed_request(copy, session.id, prompt)
    assert_same_request(llm.requests[1], resumed_req)
    data = path.read_bytes()
    assert data.startswith(clean) and b'"type":"model_\n' not in data and b"model_{" not in data
    assert all(f.severity != "error" for f in validate_session([path]))


def head_of(path: Path) -> bytes:
    lines = lines_of(path)
    return b"".join(
        line
        for line in lines
        if decode(line).type == "session_meta"
        or isinstance(decode(line).payload, ToolListReadyPayload)
    )


@pytest.mark.parametrize("residue", ["empty", "torn", "head only"])
async def test_crash_residue_file_ignored_and_reused(
    env: Env, tmp_path: Path, residue: str
) -> None:
    """R-ROOT-10: a highest-index file without a complete record beyond its head is ignored;
    the session resumes from the compacted file (the summary is rebuilt) and the next record
    rotates into the same index, emptied, with one fresh head."""
    session, llm = await make_session(
        env, {"responses": COMPACTION_SCRIPT, "tools": TOOLS}, compaction=COMPACTION
    )
    prompt = b.user_text("continue")
    async with session:
        await collect(session.run([b.user_text("a")], approve=allow_all))
        copy = tmp_path / "copy"
        shutil.copytree(env.home, copy)
        at = len(llm.requests)
        await collect(session.run([prompt], approve=allow_all))
    live = llm.requests[at]
    (first,) = DataRoot(copy).trace_files(session.id)
    second = first.with_name(first.name.replace("_001", "_002"))
    content = {"empty": b"", "torn": lines_of(first)[0][:40], "head only": head_of(first)}[residue]
    second.write_bytes(content)
    os.chmod(second, 0o600)
    req = await resumed_request(copy, session.id, prompt)
    assert_same_request(live, req)
    first_text = req.messages[0].payload
    assert isinstance(first_text, TextPayload) and first_text.text.startswith("[context_summary]")
    kinds_2 = [
        r.type if r.type == "session_meta" else type(r.payload).__name__
        for r in read_trace(second).records
    ]
    # R-SET-2c: the head carries the settings after tool_list_ready.
    assert kinds_2[:4] == ["session_meta", "ToolListReadyPayload", "SettingsPayload", "TextPayload"]
    assert kinds_2.count("session_meta") == 1 and kinds_2.count("ToolListReadyPayload") == 1
    assert all(f.severity != "error" for f in validate_session([first, second]))


# --------------------------------------------------------------------------- R-RESUME-18


async def exact(
    env: Env,
    tmp_path: Path,
    script: list[Any],
    *,
    trigger: Callable[[OmniMessage, AbortSignal], None] | None = None,
    **kw: Any,
) -> tuple[LLMRequest, list[OmniMessage]]:
    """Run ``go`` (firing ``trigger`` on each message), copy the data root, then send the same
    next prompt live and on the resumed copy; the two requests must be equal."""
    session, llm = await make_session(
        env, {"responses": [*script, FINAL, FINAL], "tools": TOOLS}, **kw
    )
    prompt = b.user_text("continue")
    signal = AbortSignal()
    async with session:
        stream: list[OmniMessage] = []
        async for msg in session.run([b.user_text("go")], approve=allow_all, signal=signal):
            stream.append(msg)
            if trigger is not None:
                trigger(msg, signal)
        check_trace(session, stream)
        copy = tmp_path / "copy"
        shutil.copytree(env.home, copy)
        first = len(llm.requests)
        await collect(session.run([prompt], approve=allow_all))
        check_trace(session)
    live = llm.requests[first]
    resumed = await resumed_request(copy, session.id, prompt)
    assert_same_request(live, resumed)
    assert_requests_paired([*llm.requests, resumed])
    return live, stream


async def test_exact_after_a_completed_retry(env: Env, tmp_path: Path) -> None:
    """R-RESUME-10: the retry's committed input keeps its [turn_retried] block."""
    script = [
        [{"text": "half"}, {"fail": {"status": "timeout", "message": "idle"}}],
        [{"text": "done"}],
    ]
    live, _ = await exact(env, tmp_path, script)
    texts = [m.payload.text for m in live.messages]  # type: ignore[union-attr]
    assert texts == [
        "go",
        "[turn_retried]\n  [text]half[/text]\n[/turn_retried]",
        "done",
        "continue",
    ]


async def test_exact_after_a_failed_attempt(env: Env, tmp_path: Path) -> None:
    """R-RESUME-7b retry shape: retries exhausted, the input and the block carried over."""
    script = [
        [{"text": "one"}, {"fail": {"status": "failed", "message": "boom"}}],
        [{"fail": {"status": "malformed"}}],
    ]
    live, stream = await exact(
        env, tmp_path, script, retry=RetryPolicy(max_reconnects=1, base_ms=1, cap_ms=1)
    )
    assert isinstance(stream[-1].payload, AbortPayload)
    texts = [m.payload.text for m in live.messages]  # type: ignore[union-attr]
    assert texts == ["go", "[turn_retried]\n  [text]one[/text]\n[/turn_retried]", "continue"]


async def test_exact_after_case_a_abort(env: Env, tmp_path: Path) -> None:
    """R-CARRY-3: a finished output and an aborted one, in call order."""
    script = [
        [
            {
                "tool_call": {
                    "name": "t",
                    "arguments": {},
                    "id": "slow",
                    "result": {"output": "S", "delay_ms": 60000},
                }
            },
            {"tool_call": {"name": "t", "arguments": {}, "id": "quick", "result": {"output": "Q"}}},
        ]
    ]

    def trigger(msg: OmniMessage, signal: AbortSignal) -> None:
        p = msg.payload
        if (
            isinstance(p, ToolCallOutputPayload)
            and not msg.is_partial
            and p.tool_call_id == "quick"
        ):
            signal.abort()

    live, stream = await exact(env, tmp_path, script, trigger=trigger)
    assert isinstance(stream[-1].payload, AbortPayload)
    outputs = [m.payload for m in live.messages if isinstance(m.payload, ToolCallOutputPayload)]
    assert [(o.tool_call_id, o.stop_reason) for o in outputs] == [
        ("slow", "aborted"),
        ("quick", "completed"),
    ]


async def test_exact_after_case_b_abort(env: Env, tmp_path: Path) -> None:
    """R-CARRY-4: the stream was cut: one [turn_aborted] block."""
    script = [[{"text": "thinking about it"}, {"sleep_ms": 60000}, {"text": "never"}]]

    def trigger(msg: OmniMessage, signal: AbortSignal) -> None:
        if isinstance(msg.payload, TextPayload) and not msg.is_partial:
            signal.abort()

    live, _ = await exact(env, tmp_path, script, trigger=trigger)
    assert live.messages[0].payload.text.startswith("[turn_aborted]")  # type: ignore[union-attr]


async def test_exact_after_max_turns(env: Env, tmp_path: Path) -> None:
    """R-MAXT-2: the notice is not history; the last turn's tool output is carried over."""
    script = [
        [{"tool_call": {"name": "t", "arguments": {}, "id": "c1", "result": {"output": "x"}}}]
    ]
    live, stream = await exact(env, tmp_path, script, max_turns=1)
    last = stream[-1].payload
    assert isinstance(last, TextPayload) and last.text == "[reached max turns (1); stopping]"
    assert [type(m.payload).__name__ for m in live.messages] == [
        "TextPayload",
        "ToolCallPayload",
        "ToolCallOutputPayload",
        "TextPayload",
    ]


async def test_exact_after_a_completed_compaction(env: Env, tmp_path: Path) -> None:
    """R-RESUME-15: the context is closed; the rebuilt summary is the first message."""
    live, _ = await exact(env, tmp_path, COMPACTION_SCRIPT[:2], compaction=COMPACTION)
    texts = [m.payload.text for m in live.messages]  # type: ignore[union-attr]
    assert texts == ["[context_summary]\nS1\n[/context_summary]", "continue"]
