"""Resume at every crash and fault point (R-RESUME-18, INV-12, INV-14, INV-18, INV-24, INV-25,
INV-27), as a property.

Hypothesis draws small scripted sessions — tool turns (0–3 calls with scripted delays, so
outputs land out of call order; some tools fail), transport failures and retries, auth
failures, steering, max_turns, compactions (summarize or discard, low thresholds, summaries that
succeed, come back empty, call tools or time out) — driven by a list of operations: runs whose
prompt is a plain text or a goal-round text (R-GOAL-3), stopped by a signal abort at their k-th
message, by an abort before their first request (R-RUN-7) or by cancelling the consuming task at
its k-th message (R-CARRY-2); and manual compactions, cancelled at their j-th request
(R-COMPACT-26).  A write fault (ENOSPC, EIO or a record too large) may hit any append of the
live session (R-TRACE-15, R-TRACE-15a, R-TRACE-17).  The live session is run once; then copies
of its trace are resumed and sent the next operation:

- cut after every record, and inside records (a torn tail, R-TRACE-14);
- with one middle line damaged (R-RESUME-17, and so R-RESUME-15 / R-RESUME-15b states).

For each state: the first request is legal (INV-12); where the live session was at rest, the
resumed session's ModelContext, SessionState and compactability() equal the live ones (INV-24,
INV-25, INV-27) and its first request equals the live one byte for byte (R-RESUME-18); the
resumed first attempt fails once and its retry resends it unchanged plus at most one
``[turn_retried]`` text (INV-14); a run's first request carries no goal text of an ended run
undowngraded (R-RUN-5, R-CARRY-12); the validator finds no error in what the engine wrote
(INV-18); the folds of the resumed trace equal the resumed session's projections (INV-24/25).
The live session is held to INV-14 on every retry, INV-24/25 at rest and INV-18 too.

A second test injects each write fault at every append index of one rich session.

Tiers: ``make test`` runs a seeded sample (cuts, torn tails, damaged lines and fault indices
sampled); ``PENGUIN_EXTENDED=1`` (``make test-extended``) runs many more examples with every
cut, torn tail and fault index.  ``PENGUIN_STATES=1`` prints the number of resumed states.
"""

from __future__ import annotations

import os
import random
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
from enginekit import WriteFault, assert_requests_paired
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import (
    AbortSignal,
    CompactionSettings,
    GoalOptions,
    LLMRequest,
    RetryPolicy,
    Session,
    SessionBroken,
    allow_all,
)
from engine.llm import ScriptedEnvironment, ScriptedLLM
from eventstore import (
    DataRoot,
    OmniMessage,
    RequestBeginPayload,
    RequestEndPayload,
    TextPayload,
    TraceError,
    read_trace,
)
from eventstore import builders as b
from projections import ModelContext, SessionState
from projections import markers as mk
from replay import resume_session, validate_session

EXTENDED = bool(os.environ.get("PENGUIN_EXTENDED"))
EXAMPLES = 150 if EXTENDED else 10
CUT_SAMPLE = 1.0 if EXTENDED else 0.3  # boundary cuts resumed (at-rest cuts always are)
TORN_SAMPLE = 1.0 if EXTENDED else 0.1  # cuts inside a record
DAMAGE_SAMPLE = 0.5 if EXTENDED else 0.06  # damaged middle lines
FAULT_SAMPLE = (
    1.0 if EXTENDED or os.environ.get("PENGUIN_ALL_FAULTS") else 0.12
)  # append indices of the every-index fault test

TOOLS = [{"name": "t", "description": "test tool"}]
SUMMARIZE = "SUMMARIZE"
STATES: Counter[str] = Counter()


def goal_text(round_no: int, body: str) -> str:
    return f"[goal]\nround: {round_no}\nprotocol line\n[/goal]\n\n{body}"


class Dispatching:
    """Turn requests go to one script, compaction requests (their last message is the
    compaction prompt) to another, so compactions can happen wherever the engine decides.
    ``on_request`` sees each request first (to cancel an operation at a known await)."""

    provider = "scripted"
    model_id = "property"
    vision = True

    def __init__(self, turns: list[Any], summaries: list[Any]) -> None:
        self.turns = ScriptedLLM({"responses": turns, "tools": TOOLS})
        self.summaries = ScriptedLLM({"responses": summaries, "tools": TOOLS})
        self.requests: list[LLMRequest] = []
        self.on_request: Callable[[bool], None] | None = None

    def bind(self, session: Session) -> None:
        self.turns.bind(session)

    def stream(self, request: LLMRequest) -> Any:
        self.requests.append(request)
        compaction = is_compaction(request)
        if self.on_request is not None:
            self.on_request(compaction)
        return (self.summaries if compaction else self.turns).stream(request)


def is_compaction(request: LLMRequest) -> bool:
    last = request.messages[-1].payload if request.messages else None
    return isinstance(last, TextPayload) and last.role == "user" and last.text == SUMMARIZE


@dataclass(frozen=True)
class Op:
    kind: str  # "run" | "goal" (a goal run, R-GOAL-1) | "goal_resume" (R-GOAL-7) | "compact"
    goal: bool = False
    # ("abort", k) | ("cancel", k) | ("preabort", 0) for a run; ("cancel", j) for a compaction.
    stop: tuple[str, int] | None = None


@dataclass
class Plan:
    turns: list[Any]
    summaries: list[Any]
    ops: list[Op]
    compaction: CompactionSettings | None
    max_turns: int
    fault: tuple[int, str] | None = None


@st.composite
def turn_script(draw: st.DrawFn) -> list[Any]:
    turns: list[Any] = []
    for r in range(draw(st.integers(3, 10))):
        kind = draw(st.sampled_from(["text", "tools", "tools", "tools", "fail", "steer"]))
        items: list[Any] = []
        if kind in ("text", "steer"):
            if kind == "steer":
                items.append({"steer": f"steer {r}"})
            items.append({"text": f"reply {r}"})
        elif kind == "tools":
            if draw(st.booleans()):
                items.append({"text": f"calling {r}"})
            for j in range(draw(st.integers(0, 3))):
                result = {
                    "output": f"out {r}.{j}",
                    "delay_ms": draw(st.sampled_from([0, 1, 4])),
                    "status": draw(st.sampled_from(["completed", "completed", "failed"])),
                }
                call = {"name": "t", "arguments": {"n": j}, "id": f"c{r}_{j}", "result": result}
                items.append({"tool_call": call})
        else:
            if draw(st.booleans()):
                items.append({"text": f"partial {r}"})
            status = draw(st.sampled_from(["timeout", "failed", "malformed", "auth"]))
            items.append({"fail": {"status": status, "message": f"err {r}"}})
        turns.append(items)
    return turns


def summary_script(kinds: list[str]) -> list[Any]:
    return [
        {
            "ok": [{"text": f"[summary]S{i}[/summary]"}],
            "empty": [{"text": "[summary] [/summary]"}],
            "tools": [{"tool_call": {"name": "t", "arguments": {}, "id": f"k{i}"}}],
            "timeout": [{"fail": {"status": "timeout", "message": "idle"}}],
        }[kind]
        for i, kind in enumerate(kinds)
    ]


@st.composite
def ops(draw: st.DrawFn) -> list[Op]:
    out: list[Op] = []
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.integers(0, 5)) == 0:
            stop = draw(st.none() | st.tuples(st.just("cancel"), st.integers(1, 2)))
            out.append(Op("compact", stop=stop))
            continue
        stop_kind = draw(st.sampled_from([None, None, "abort", "cancel", "preabort"]))
        stop = None
        if stop_kind == "preabort":
            stop = ("preabort", 0)
        elif stop_kind is not None:
            stop = (stop_kind, draw(st.integers(1, 30)))
        kind = draw(st.sampled_from(["run", "run", "run", "run", "goal", "goal_resume"]))
        out.append(Op(kind, goal=kind == "run" and draw(st.integers(0, 2)) == 0, stop=stop))
    return out


def goal_options(op: Op) -> GoalOptions | None:
    """Goal runs get a budget of one token: round one, then the wrap-up round (R-GOAL-5)."""
    if op.kind == "goal":
        return GoalOptions(budget=1)
    if op.kind == "goal_resume":
        return GoalOptions(budget=1, resume=True)
    return None


async def run_op(
    session: Session, op: Op, prompt: OmniMessage, signal: AbortSignal | None = None
) -> Any:
    """``session.run`` for a run or goal operation (a goal continuation takes no input)."""
    messages = [] if op.kind == "goal_resume" else [prompt]
    return session.run(messages, approve=allow_all, signal=signal, goal=goal_options(op))


@st.composite
def plans(draw: st.DrawFn) -> Plan:
    turns = draw(turn_script())
    kinds = [draw(st.sampled_from(["ok", "ok", "ok", "empty", "tools", "timeout"])) for _ in "1234"]
    mode = draw(st.sampled_from([None, "summarize", "summarize", "summarize", "discard"]))
    compaction = (
        None
        if mode is None
        else CompactionSettings(
            max_context_length=draw(st.integers(3, 12)), mode=mode, prompt=SUMMARIZE
        )
    )
    fault = None
    if draw(st.integers(0, 2)) == 0:
        fault = (draw(st.integers(0, 60)), draw(st.sampled_from(["enospc", "eio", "too_large"])))
    return Plan(
        turns,
        summary_script(kinds),
        draw(ops()),
        compaction,
        draw(st.sampled_from([2, 100])),
        fault,
    )


# --------------------------------------------------------------------------- the live session


@dataclass
class Rest:
    """The live session at rest before an operation, and the first request that operation
    sent (None when it sent none)."""

    op: Op
    prompt: OmniMessage
    context: ModelContext
    state: SessionState
    compactability: str
    request: LLMRequest | None = None


@dataclass
class Live:
    sid: str
    files: list[list[bytes]]
    rests: dict[int, Rest]
    requests: list[LLMRequest]
    records: list[OmniMessage] = field(default_factory=list)


def prompt_for(op: Op, i: int) -> OmniMessage:
    return b.user_text(goal_text(i + 1, f"objective {i}") if op.goal else f"task {i}")


async def do_op(session: Session, llm: Dispatching, op: Op, prompt: OmniMessage) -> None:
    """One operation, stopped where the plan says (an abort, a pre-request abort, or the
    consuming task cancelled)."""
    with anyio.CancelScope() as scope:
        if op.kind == "compact":
            seen = 0

            def hook(compaction: bool) -> None:
                nonlocal seen
                seen += compaction
                if op.stop is not None and seen == op.stop[1]:
                    scope.cancel()

            llm.on_request = hook
            try:
                await session.compact()
            except TraceError:
                pass  # R-TRACE-15 in compact(): the store's error reaches the caller
            finally:
                llm.on_request = None
            return
        signal = AbortSignal()
        if op.stop == ("preabort", 0):
            signal.abort()
        count = 0
        try:
            async for _msg in await run_op(session, op, prompt, signal):
                count += 1
                if op.stop is not None and count == op.stop[1]:
                    if op.stop[0] == "abort":
                        signal.abort()
                    else:
                        scope.cancel()
        except ValueError:
            assert op.kind == "goal_resume"  # no goal to continue (R-GOAL-7)


def line_count(root: DataRoot, sid: str) -> int:
    try:
        files = root.trace_files(sid)
    except FileNotFoundError:
        return 0
    return sum(len(f.read_bytes().splitlines()) for f in files)


def records_of(root: DataRoot, sid: str) -> list[OmniMessage]:
    try:
        files = root.trace_files(sid)
    except FileNotFoundError:
        return []
    return read_trace(files, report=False).records


async def run_live(plan: Plan, home: Path, workspace: Path) -> Live:
    llm = Dispatching(plan.turns, plan.summaries)
    session = await Session.create(
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm.turns),
        root=DataRoot(home),
        workspace=workspace,
        system_prompt="prop",
        compaction=plan.compaction,
        retry=RetryPolicy(max_reconnects=1, base_ms=1, cap_ms=1),
        max_turns=plan.max_turns,
        fsync="never",
    )
    llm.bind(session)
    if plan.fault is not None:
        WriteFault(*plan.fault).install(session)
    root = DataRoot(home)
    rests: dict[int, Rest] = {}
    op_list = [*plan.ops, Op("run")]
    async with session:
        for i, op in enumerate(op_list):
            if session.broken:
                break
            records = records_of(root, session.id)
            # INV-24 / INV-25 at rest: the folds of the trace equal the live projections.
            assert SessionState.from_records(records) == session.state
            assert ModelContext.from_records(records) == session.context
            prompt = prompt_for(op, i)
            rest = Rest(op, prompt, session.context.copy(), session.state, session.compactability())
            rest.state = SessionState.from_records(records)
            before = len(llm.requests)
            try:
                await do_op(session, llm, op, prompt)
            except SessionBroken:
                break
            if len(llm.requests) > before:
                rest.request = llm.requests[before]
                check_first_request(rest.request, op.kind != "compact")
            if records:
                rests[len(records)] = rest
        files = [f.read_bytes().splitlines(keepends=True) for f in trace_files(root, session.id)]
        records = records_of(root, session.id)
    errors = [f for f in validate_session(trace_files(root, session.id)) if f.severity == "error"]
    assert errors == [], "\n".join(str(f) for f in errors)  # INV-18
    assert_no_orphan_abort(root)
    check_retries(records, llm.requests)
    return Live(session.id, files, rests, llm.requests, records)


def trace_files(root: DataRoot, sid: str) -> list[Path]:
    try:
        return root.trace_files(sid)
    except FileNotFoundError:
        return []


def assert_no_orphan_abort(root: DataRoot) -> None:
    """R-TRACE-5: no file holds records without its session_meta first."""
    for path in root.home.rglob("*.jsonl"):
        data = path.read_bytes()
        if data:
            assert data.startswith(b'{"timestamp"') and b'"session_meta"' in data.split(b"\n")[0]


# --------------------------------------------------------------------------- request checks


def check_first_request(request: LLMRequest, run: bool, group: int = 0) -> None:
    """R-RUN-5, R-COMPACT-28, R-CARRY-12: the new input of a run's first request (its own
    prompt, last, excepted) and of a manual compaction carries no goal text of an ended run.
    ``group``: user texts the trace ends with (a crash before their run's request); a run's
    prompt joins them in one Prompt group (R-CLI-6), sent as written (``../shared/cases``)."""
    assert_requests_paired([request])
    new = request.messages[len(request.messages) - request.new_messages :]
    if run:
        new = new[: -1 - group]
    for msg in new:
        p = msg.payload
        if isinstance(p, TextPayload) and p.role == "user":
            assert not mk.is_goal_text(p.text), f"goal text sent raw: {p.text!r}"


def _trailing_user_texts(records: list[OmniMessage]) -> int:
    n = 0
    for record in reversed(records):
        p = record.payload
        if not (isinstance(p, TextPayload) and p.role == "user") or record.origin is not None:
            break
        n += 1
    return n


def check_retry(first: LLMRequest, retry: LLMRequest) -> None:
    """INV-14: a retry resends the first attempt's messages unchanged plus at most one trailing
    ``[turn_retried]`` text."""
    n = len(first.messages)
    assert retry.messages[:n] == first.messages, "INV-14: the retry changed the first attempt"
    extra = retry.messages[n:]
    assert len(extra) <= 1
    for msg in extra:
        p = msg.payload
        assert isinstance(p, TextPayload) and p.text.startswith("[turn_retried]\n")


def check_retries(records: list[OmniMessage], requests: list[LLMRequest]) -> None:
    """INV-14 on every in-run retry of the live session: request spans pair with requests in
    order; a non-completed turn attempt whose next span begins with nothing between is retried."""
    spans: list[tuple[int, bool]] = []  # (request index, in compaction)
    in_compaction = False
    first_of_turn: dict[int, int] = {}
    pending_retry: int | None = None
    for record in records:
        p = record.payload
        tag = getattr(getattr(p, "__struct_config__", None), "tag", None)
        if tag == "compaction_begin":
            in_compaction = True
        elif tag == "compaction_end":
            in_compaction = False
        if isinstance(p, RequestBeginPayload):
            index = len(spans)
            spans.append((index, in_compaction))
            if pending_retry is not None and not in_compaction and index < len(requests):
                first = first_of_turn.get(pending_retry, pending_retry)
                first_of_turn[index] = first
                check_retry(requests[first], requests[index])
            pending_retry = None
        elif isinstance(p, RequestEndPayload):
            if spans and not spans[-1][1] and p.status != "completed" and p.retry_in_ms:
                pending_retry = spans[-1][0]
        elif tag in ("abort", "tool_list_ready") or (
            isinstance(p, TextPayload) and p.role == "user"
        ):
            pending_retry = None


# --------------------------------------------------------------------------- resumed states


def write_files(home: Path, sid: str, date: str, files: list[list[bytes]]) -> None:
    """The session's files as given, replacing whatever the last resume left (one data root is
    reused: creating directories dominates the cost of a state)."""
    root = DataRoot(home)
    directory = root.ensure_dir(root.traces_dir() / date)
    # Every file of the session but its lock: the trace files and the summaries sidecar
    # (R-TRACE-19), whose fingerprint (size, last 4 KiB) cannot tell one state's damaged middle
    # line from another's of the same length.
    for old in directory.glob(f"{sid}*"):
        if old.suffix != ".lock":
            old.unlink()
    for index, lines in enumerate(files, start=1):
        if not lines:
            break
        path = root.trace_path(sid, index, date=date)
        path.write_bytes(b"".join(lines))
        path.chmod(0o600)


def cut(files: list[list[bytes]], keep: int, torn: int = 0) -> list[list[bytes]]:
    """``files`` cut after ``keep`` lines, plus the first ``torn`` bytes of the next line."""
    out: list[list[bytes]] = []
    for lines in files:
        if keep <= 0 and not torn:
            break
        if keep >= len(lines):
            out.append(list(lines))
            keep -= len(lines)
            continue
        part = list(lines[:keep])
        if torn:
            part.append(lines[keep][:torn])
        out.append(part)
        break
    return out


def damage(files: list[list[bytes]], at: int) -> list[list[bytes]]:
    out = [list(lines) for lines in files]
    for lines in out:
        if at < len(lines):
            lines[at] = b'{"timestamp": "damaged\n'
            break
        at -= len(lines)
    return out


async def resume_state(*args: Any, state: str = "", **kw: Any) -> None:
    """``_resume_state``, naming the state in a failure."""
    try:
        await _resume_state(*args, **kw)
    except BaseException as exc:
        exc.add_note(f"resumed state: {state}")
        raise


async def _resume_state(
    plan: Plan,
    home: Path,
    sid: str,
    workspace: Path,
    rest: Rest | None,
    *,
    damaged: bool = False,
) -> None:
    """Resume one state, send the next operation (its first attempt fails once), check it."""
    group = _trailing_user_texts(read_trace(DataRoot(home).trace_files(sid), report=False).records)
    turns = [[{"text": "half"}, {"fail": {"status": "timeout", "message": "t"}}]]
    turns += [[{"text": "fine"}]] * 6
    llm = Dispatching(turns, summary_script(["ok"] * 4))
    session = await resume_session(
        DataRoot(home),
        sid,
        llm=llm,
        environment=ScriptedEnvironment.from_llm(llm.turns),
        compaction=plan.compaction,
        retry=RetryPolicy(max_reconnects=1, base_ms=1, cap_ms=1),
        max_turns=plan.max_turns,
        fsync="never",
    )
    llm.bind(session)
    op = rest.op if rest is not None else Op("run")
    prompt = rest.prompt if rest is not None else b.user_text("next")
    async with session:
        if rest is not None:
            # INV-24, INV-25, INV-27: the resumed session starts where the live one rested.
            assert session.context == rest.context
            assert session.state == rest.state
            assert session.compactability() == rest.compactability
        if op.kind == "compact":
            try:
                await session.compact()
            except TraceError:
                pass
        else:
            try:
                async for _ in await run_op(session, op, prompt):
                    pass
            except ValueError:
                assert op.kind == "goal_resume"
        files = DataRoot(home).trace_files(sid)
        records = read_trace(files, report=False).records
        assert ModelContext.from_records(records) == session.context
        folded = SessionState.from_records(records)
        assert folded == session.state, f"{folded} != {session.state}"
    requests = llm.requests
    assert_requests_paired(requests)
    if requests:
        check_first_request(requests[0], op.kind != "compact", group)
        if op.kind != "compact" and len(requests) > 1 and not is_compaction(requests[1]):
            check_retry(requests[0], requests[1])
    if rest is not None and rest.request is not None:
        assert requests, "the live session sent a request, the resumed one none"
        live, resumed = rest.request, requests[0]
        if op.kind == "compact":
            # The compaction prompt is written when the compaction starts: same text, its own
            # timestamp (R-COMPACT-6); everything before it is byte for byte the same.
            assert resumed.messages[:-1] == live.messages[:-1]
            assert resumed.messages[-1].payload == live.messages[-1].payload
        elif op.kind != "run":
            # A goal round's prompt is made when the round starts and names the goal file of
            # this data root (R-GOAL-3); everything before it is the same.
            assert resumed.messages[:-1] == live.messages[:-1]
        else:
            assert resumed.messages == live.messages
        assert resumed.new_messages == live.new_messages
        assert resumed.system_prompt == live.system_prompt
        assert resumed.tools == live.tools
        STATES["equal to live"] += 1
    if not damaged:
        errors = [f for f in validate_session(files) if f.severity == "error"]
        assert errors == [], "\n".join(str(f) for f in errors)  # INV-18


async def check(plan: Plan, rng: random.Random) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        workspace = base / "ws"
        workspace.mkdir()
        with anyio.fail_after(60):
            live = await run_live(plan, base / "live", workspace)
        if not any(live.files):
            return  # the very first write failed: nothing was recorded (R-TRACE-5)
        date = DataRoot(base / "live").locate(live.sid).date
        total = sum(len(lines) for lines in live.files)
        home = base / "cut"
        for keep in range(1, total + 1):
            rest = live.rests.get(keep)
            if rest is not None or keep == total or rng.random() < CUT_SAMPLE:
                write_files(home, live.sid, date, cut(live.files, keep))
                await resume_state(
                    plan, home, live.sid, workspace, rest, state=f"cut after line {keep}"
                )
                STATES["cut after a record"] += 1
            if keep < total and rng.random() < TORN_SAMPLE:
                write_files(home, live.sid, date, cut(live.files, keep, torn=7))
                await resume_state(
                    plan, home, live.sid, workspace, rest, state=f"torn after line {keep}"
                )
                STATES["cut inside a record"] += 1
        starts = {0}
        at = 0
        for lines in live.files:
            starts.add(at)
            at += len(lines)
        for line in range(1, total - 1):
            if line not in starts and rng.random() < DAMAGE_SAMPLE:
                write_files(home, live.sid, date, damage(live.files, line))
                await resume_state(
                    plan, home, live.sid, workspace, None, damaged=True, state=f"damaged {line}"
                )
                STATES["damaged middle line"] += 1


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(plan=plans())
def test_resume_at_every_crash_and_fault_point(plan: Plan) -> None:
    """R-RESUME-18 / INV-25 at rest, INV-12, INV-14, INV-18, INV-24, INV-27 everywhere."""
    STATES["sessions"] += 1
    anyio.run(check, plan, random.Random(repr(plan)))


# --------------------------------------------------------------------------- every append index

RICH = Plan(
    turns=[
        [
            {"text": "a"},
            *[
                {
                    "tool_call": {
                        "name": "t",
                        "arguments": {},
                        "id": f"r{i}",
                        "result": {"output": f"o{i}", "delay_ms": 4 - 3 * i},
                    }
                }
                for i in range(2)
            ],
        ],
        [{"text": "half"}, {"fail": {"status": "timeout", "message": "x"}}],
        [{"steer": "also"}, {"text": "b"}],
        [{"text": "c"}],
        [{"tool_call": {"name": "t", "arguments": {}, "id": "r9", "result": {"output": "o"}}}],
        [{"text": "d"}],
        [{"text": "e"}],
        [{"text": "f"}],
    ],
    summaries=summary_script(["tools", "ok", "ok", "ok"]),
    ops=[
        Op("run"),
        Op("run", goal=True, stop=("preabort", 0)),
        Op("compact"),
        Op("run", goal=True),
        Op("run", stop=("abort", 3)),
    ],
    compaction=CompactionSettings(max_context_length=40, prompt=SUMMARIZE),
    max_turns=100,
)


def test_write_fault_at_every_append_index() -> None:
    """R-TRACE-15, R-TRACE-15a, R-TRACE-17, R-TRACE-5: ENOSPC, EIO and a record too large at
    every append of one rich session (tool turn, retry, steering, goal carry-over, manual and
    automatic compaction, abort); each live session validates, and its states resume exactly."""
    rng = random.Random(13)

    async def main() -> None:
        with tempfile.TemporaryDirectory() as tmp:
            base = Path(tmp)
            workspace = base / "ws"
            workspace.mkdir()
            clean = await run_live(RICH, base / "clean", workspace)
            appends = sum(len(lines) for lines in clean.files)
            for kind in ("enospc", "eio", "too_large"):
                for at in range(appends + 1):
                    if not (at in (0, appends) or rng.random() < FAULT_SAMPLE):
                        continue
                    plan = Plan(**{**RICH.__dict__, "fault": (at, kind)})
                    home = base / f"{kind}{at}"
                    live = await run_live(plan, home, workspace)
                    STATES["fault runs"] += 1
                    if not any(live.files):
                        continue
                    date = DataRoot(home).locate(live.sid).date
                    total = sum(len(lines) for lines in live.files)
                    cut_home = base / f"{kind}{at}cut"
                    for keep in sorted({*live.rests, total}):
                        if keep < 1 or keep > total:
                            continue
                        write_files(cut_home, live.sid, date, cut(live.files, keep))
                        await resume_state(
                            plan, cut_home, live.sid, workspace, live.rests.get(keep)
                        )
                        STATES["fault states"] += 1

    anyio.run(main)


def teardown_module() -> None:
    if os.environ.get("PENGUIN_STATES"):
        print("\nresumed states:", dict(STATES))
