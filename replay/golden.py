"""Golden traces: re-run a recorded session and compare the new trace with the recorded one.

Owns: ``replay_trace`` / ``areplay_trace`` (SPEC R-CLI-6: re-run the session in a temporary data
root with ``ReplayLLM`` + ``ReplayEnvironment`` + the recorded approvals, one run per recorded
Prompt), the normalization both record sequences go through, the first-divergence report
(``ReplayResult``, ``Divergence``), the pytest helper ``assert_replays`` and the syrupy
extension ``GoldenTraceExtension``.  Does not: modify the recorded trace, decide CLI exit codes,
or replay what depends on timing (see "What is compared").

Usage in a project that embeds the engine::

    from replay.golden import GoldenTraceExtension, assert_replays, replay_trace

    def test_checkout_flow_still_replays():
        # raises AssertionError "<file>:<line>: expected … / actual … (<reason>)"
        assert_replays("tests/traces/checkout")      # a file, a session's files or their dir

    def test_checkout_flow_snapshot(snapshot):
        result = replay_trace("tests/traces/checkout")
        assert result.matched, result
        # stored as __snapshots__/<test file>/<test name>.jsonl, one JSON record per line
        assert result.normalized == snapshot(extension_class=GoldenTraceExtension)

    async def test_in_async_code():
        result = await areplay_trace("tests/traces/checkout", max_turns=10)

How a session is re-run:

- Runs.  Each run's Prompt is the group of task-starting user messages
  (``projections.markers.is_task_starting``) recorded outside request and compaction spans
  before the same ``request_begin`` (R-CLI-6).  A ``compaction_begin`` with reason ``manual``
  is replayed as ``session.compact()`` at that point.  A ``tool_list_ready`` that is neither the
  session's first nor a rotated file's head marks a resumed ``Session`` (R-TRACE-7): the replay
  closes its session and continues it with ``resume_session`` there, so that record is written
  again.  A run with an empty Prompt cannot be told from the run before it and is replayed as
  part of it.  A goal run (SPEC §18) is one run: its round-1 input starts it, later rounds and
  its ``goal_finished`` belong to it; it is replayed as ``session.run([objective],
  goal=GoalOptions(budget=…))`` with the budget read from the round-1 block, and the goal file
  is made to say what the recorded outcome shows the model wrote (``complete`` or ``blocked``,
  as the last round starts).  A goal that ended ``aborted`` is not compared (timing).
- Settings.  Explicit options win; otherwise they are read from the trace.  ``max_turns``: the
  ``N`` of a recorded ``[reached max turns (N); stopping]`` notice, else 100.  Compaction: the
  mode of the first ``compaction_begin`` (``summarize`` when none); ``max_context_length`` = the
  smallest ``context`` of a ``context``-reason ``compaction_begin`` (a threshold that triggers at
  exactly the recorded turns: any lower recorded total did not trigger), else 0 (disabled);
  ``max_session_turns`` = the smallest ``turns`` of a ``turns``-reason begin, else disabled;
  the compaction prompt = the first user text recorded after a summarize ``compaction_begin``.
  The context window comes from ``session_meta`` through ``ReplayLLM``.  Retry: ``base_ms`` /
  ``cap_ms`` from the recorded ``retry_in_ms`` values (attempt 1 gives the base, the largest
  value the cap); ``max_reconnects`` from an exhaustion ``abort`` (``… failed after N retries``),
  else at least the highest recorded attempt; the compaction budget from a ``compaction_end``
  that failed after spending it.  The backoff waits are real, so keep them short when recording
  goldens.
- What is compared.  Both record sequences are normalized: ``timestamp`` dropped;
  ``session_meta`` keeps its model identity, system prompt and ``source`` but drops
  ``session_id``, ``agent_state`` and ``workspace``; and in every string of every record the
  session id, scratchpad, ``agent_state`` and workspace paths of either session are replaced by
  ``<session_id>``, ``<scratchpad>``, ``<agent_state>`` and ``<workspace>``.  The comparison
  covers the runs before the first run that contains an ``abort``, steering, or a crash (an
  unclosed span, or a resume closure record): those depend on timing.  ``runs_compared`` says
  how many runs that was.  A ``token_usage`` recorded after its ``request_end`` (older reference
  traces) replays before it, and is reported as a divergence.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import tempfile
from collections.abc import Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import anyio
import msgspec

from engine import (
    DEFAULT_MAX_TURNS,
    CompactionSettings,
    GoalOptions,
    RetryPolicy,
    Session,
    SessionSubagentRunner,
)
from eventstore import (
    AbortPayload,
    CompactionBeginPayload,
    CompactionEndPayload,
    DataRoot,
    GoalFinishedPayload,
    OmniMessage,
    RequestBeginPayload,
    RequestEndPayload,
    SessionMetaPayload,
    TextPayload,
    ToolListReadyPayload,
    encode,
)
from eventstore import builders as b
from projections import DEFAULT_COMPACTION_PROMPT
from projections import markers as mk

from ._diff import diff_traces
from ._replay_llm import Located, ReplayEnvironment, ReplayLLM, TraceSource, load_located
from ._replay_subagents import (
    ChildLink,
    SubagentReplayEnvironment,
    child_links,
    child_placeholders,
    find_child_trace,
    parent_files,
    pointer_ids,
)
from ._resume import resume_session

__all__ = [
    "Divergence",
    "GoldenTraceExtension",
    "ReplayResult",
    "areplay_trace",
    "assert_replays",
    "normalize",
    "replay_trace",
]

_META_DROPPED: Final = ("session_id", "agent_state", "workspace")


# --------------------------------------------------------------------------- results


@dataclass(frozen=True, slots=True)
class Divergence:
    """The first place where the replayed trace differs from the recorded one.

    ``file``/``line`` locate the recorded record (1-based physical line); when the replay
    wrote a record the recording does not have, they locate the recorded record that comes
    next (or one past the last line).  ``expected`` / ``actual`` are the normalized JSON lines
    (``None`` when that side has no record); ``index`` is the 0-based record position.
    """

    file: Path | None
    line: int
    index: int
    expected: str | None
    actual: str | None
    reason: str
    structural: str | None = None  # the first difference by run, turn and call (R-TOOL-2)

    def __str__(self) -> str:
        where = self.file if self.file is not None else "<records>"
        by_structure = f"\n  by structure: {self.structural}" if self.structural else ""
        return (
            f"{where}:{self.line}: expected {self.expected or '(nothing)'} / "
            f"actual {self.actual or '(nothing)'} ({self.reason}){by_structure}"
        )


@dataclass(frozen=True)
class ReplayResult:
    """What ``replay_trace`` found.  ``normalized`` holds the replayed records (normalized,
    one JSON line each): equal to ``expected`` when ``matched``."""

    matched: bool
    runs_compared: int
    runs_total: int
    divergence: Divergence | None
    normalized: list[str]
    expected: list[str] = field(repr=False)
    stopped: str | None = None

    def __str__(self) -> str:
        return "match" if self.matched else str(self.divergence)


# --------------------------------------------------------------------------- normalization


def _substitute(value: Any, pairs: Sequence[tuple[str, str]]) -> Any:
    if isinstance(value, str):
        for old, new in pairs:
            if old in value:
                value = value.replace(old, new)
        return value
    if isinstance(value, list):
        return [_substitute(v, pairs) for v in value]
    if isinstance(value, dict):
        return {k: _substitute(v, pairs) for k, v in value.items()}
    return value


def _placeholders(metas: Sequence[SessionMetaPayload]) -> list[tuple[str, str]]:
    pairs: dict[str, str] = {}
    for meta in metas:
        agent_dir = str(Path(meta.agent_state).parent)
        pairs[f"{agent_dir}/scratchpad/{meta.session_id}"] = "<scratchpad>"
        pairs[meta.agent_state] = "<agent_state>"
        pairs[meta.workspace] = "<workspace>"
        pairs[meta.session_id] = "<session_id>"
    # Longest first, so a path is replaced before the id inside it.
    return sorted(((k, v) for k, v in pairs.items() if k), key=lambda kv: -len(kv[0]))


def _normal_object(record: OmniMessage, pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
    obj: dict[str, Any] = msgspec.json.decode(encode(record))
    obj.pop("timestamp", None)
    if obj.get("type") == "session_meta" and isinstance(obj.get("payload"), dict):
        obj["payload"] = {k: v for k, v in obj["payload"].items() if k not in _META_DROPPED}
    result: dict[str, Any] = _substitute(obj, pairs)
    return result


def _dump(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def normalize(records: Sequence[OmniMessage], *, like: Sequence[OmniMessage] = ()) -> list[str]:
    """The normalized JSON lines of ``records`` (see the module docstring).  ``like`` adds the
    session ids and paths of another session to replace (the other side of a comparison)."""
    metas = [r.payload for r in (*records, *like) if isinstance(r.payload, SessionMetaPayload)]
    children = [*child_placeholders(pointer_ids(records)), *child_placeholders(pointer_ids(like))]
    pairs = sorted([*_placeholders(metas), *children], key=lambda kv: -len(kv[0]))
    return [_dump(_normal_object(r, pairs)) for r in records]


def _first_difference(expected: Any, actual: Any, path: str = "") -> str:
    if isinstance(expected, dict) and isinstance(actual, dict):
        for key in expected:
            where = f"{path}.{key}" if path else key
            if key not in actual:
                return f"{where} missing"
            if expected[key] != actual[key]:
                return _first_difference(expected[key], actual[key], where)
        for key in actual:
            if key not in expected:
                return f"unexpected {path}.{key}" if path else f"unexpected {key}"
        return f"{path or 'record'} key order differs"
    if isinstance(expected, list) and isinstance(actual, list):
        for n, (e, a) in enumerate(zip(expected, actual, strict=False)):
            if e != a:
                return _first_difference(e, a, f"{path}[{n}]")
        return f"{path} has {len(actual)} item(s), expected {len(expected)}"
    return f"{path} differs"


def _reason(expected: dict[str, Any], actual: dict[str, Any]) -> str:
    def kind(obj: dict[str, Any]) -> str:
        payload = obj.get("payload")
        if obj.get("type") == "session_meta":
            return "session_meta"
        if isinstance(payload, dict) and isinstance(payload.get("type"), str):
            return str(payload["type"])
        return str(obj.get("type"))

    ek, ak = kind(expected), kind(actual)
    if ek != ak:
        return f"expected a {ek} record, the replay wrote a {ak}"
    return f"{ek}: {_first_difference(expected, actual)}"


def _compare(
    expected: list[Located], stop: int, actual: list[OmniMessage]
) -> tuple[list[str], list[str], Divergence | None]:
    recorded = [loc.record for loc in expected]
    metas = [r.payload for r in (*recorded, *actual) if isinstance(r.payload, SessionMetaPayload)]
    # Child ids in pointers are named by their order (R-SUB-3), on each side.
    children = [
        *child_placeholders(pointer_ids(recorded)),
        *child_placeholders(pointer_ids(actual)),
    ]
    pairs = sorted([*_placeholders(metas), *children], key=lambda kv: -len(kv[0]))
    exp_obj = [_normal_object(r, pairs) for r in recorded[:stop]]
    act_obj = [_normal_object(r, pairs) for r in actual]
    exp_lines = [_dump(o) for o in exp_obj]
    act_lines = [_dump(o) for o in act_obj]
    for n, (e, a) in enumerate(zip(exp_obj, act_obj, strict=False)):
        if e != a:
            loc = expected[n]
            return (
                exp_lines,
                act_lines,
                Divergence(loc.path, loc.line, n, exp_lines[n], act_lines[n], _reason(e, a)),
            )
    n = min(len(exp_obj), len(act_obj))
    if len(exp_obj) > n:
        loc = expected[n]
        reason = "the replay ended before this record"
        return exp_lines, act_lines, Divergence(loc.path, loc.line, n, exp_lines[n], None, reason)
    if len(act_obj) > n:
        if n < len(expected):
            path, line = expected[n].path, expected[n].line
        elif expected:
            path, line = expected[-1].path, expected[-1].line + 1
        else:
            path, line = None, 1
        reason = "the replay wrote a record the recording does not have here"
        return exp_lines, act_lines, Divergence(path, line, n, None, act_lines[n], reason)
    return exp_lines, act_lines, None


def _with_structure(
    divergence: Divergence, recorded: list[OmniMessage], actual: list[OmniMessage]
) -> Divergence:
    """Name the divergence by run, turn and tool call too (``diff_traces``, R-TOOL-2)."""
    if not recorded or not actual:
        return divergence
    first = diff_traces(recorded, actual).first
    if first is None:
        return divergence
    return dataclasses.replace(divergence, structural=f"{first.where}: {first.what}")


# --------------------------------------------------------------------------- the plan


@dataclass
class _Goal:
    """A recorded goal run: its budget, and how it ended (``None`` while unfinished)."""

    budget: int | None
    rounds: int = 1
    outcome: str | None = None


@dataclass
class _Step:
    kind: Literal["run", "compact"]
    start: int
    prompt: list[OmniMessage] = field(default_factory=list)
    resume_before: bool = False
    unreplayable: str | None = None
    accepting: bool = False
    goal: _Goal | None = None


def _goal_round(record: OmniMessage) -> tuple[int, str, str] | None:
    """A goal round input's round number, body and full text."""
    p = record.payload
    if record.origin is not None or not isinstance(p, TextPayload) or p.role != "user":
        return None
    found = mk.goal_round_of(p.text)
    return None if found is None else (found[0], found[1], p.text)


def _goal_step(located: list[Located], n: int, steps: list[_Step]) -> _Step | None:
    """The step a goal round input at ``n`` starts (round 1), or ``None`` for a later round
    (it belongs to the goal step in progress)."""
    found = _goal_round(located[n].record)
    assert found is not None
    round_no, body, text = found
    cur = steps[-1] if steps else None
    if round_no > 1 and cur is not None and cur.goal is not None:
        cur.goal.rounds = round_no
        return None
    step = _Step(
        "run",
        _head_start(located, n) if steps else 0,
        [b.user_text(body)],
        goal=_Goal(mk.parse_goal_budget(text), rounds=round_no),
    )
    if round_no > 1:
        step.unreplayable = "a goal continued from an earlier session"
    return step


def _head_start(located: list[Located], first: int) -> int:
    """Walk back from a run's first prompt message over what its first record brings along:
    a rotated file's head and the pending ``[context_summary]`` (R-RUN-6, R-TRACE-8)."""
    j = first
    while j > 0 and _brought_along(located[j - 1].record):
        j -= 1
    return j


def _brought_along(record: OmniMessage) -> bool:
    p = record.payload
    if record.type == "session_meta" or isinstance(p, ToolListReadyPayload):
        return True
    return isinstance(p, TextPayload) and p.role == "user" and mk.is_context_summary(p.text)


def _plan(located: list[Located]) -> list[_Step]:
    steps: list[_Step] = []
    cur: _Step | None = None
    in_request = False
    in_compaction = False
    seen_toolset = False

    def spoil(reason: str) -> None:
        if cur is not None and cur.unreplayable is None:
            cur.unreplayable = reason

    for n, loc in enumerate(located):
        record = loc.record
        p = record.payload
        if not in_request and not in_compaction and _goal_round(record) is not None:
            started = _goal_step(located, n, steps)
            if started is not None:
                cur = started
                steps.append(cur)
            continue
        if isinstance(p, GoalFinishedPayload) and cur is not None and cur.goal is not None:
            cur.goal.outcome = p.outcome
            if p.outcome == "aborted":
                spoil("an aborted goal")
            continue
        starting = (
            not in_request
            and not in_compaction
            and record.type == "model_msg"
            and mk.is_task_starting(record)
        )
        if starting:
            if cur is not None and cur.kind == "run" and cur.accepting:
                cur.prompt.append(record)
            else:
                cur = _Step("run", _head_start(located, n) if steps else 0, [record])
                cur.accepting = True
                steps.append(cur)
            continue
        if cur is not None:
            cur.accepting = False
        if isinstance(p, RequestBeginPayload):
            if in_request:
                spoil("a request that never ended")
            in_request = True
            if not in_compaction and (cur is None or cur.kind != "run"):
                cur = _Step("run", n if steps else 0)
                steps.append(cur)
        elif isinstance(p, RequestEndPayload):
            in_request = False
            if p.error_message == mk.REQUEST_CLOSURE_ERROR:
                spoil("a crash (a request closed by resume)")
        elif isinstance(p, CompactionBeginPayload):
            in_compaction = True
            if p.reason == "manual" and not in_request:
                cur = _Step("compact", n)
                steps.append(cur)
        elif isinstance(p, CompactionEndPayload):
            in_compaction = False
            if p.error_message == mk.COMPACTION_CLOSURE_ERROR:
                spoil("a crash (a compaction closed by resume)")
        elif isinstance(p, AbortPayload):
            spoil("an abort")
        elif isinstance(p, TextPayload) and p.role == "user" and mk.is_steering(p.text):
            spoil("steering")
        elif isinstance(p, ToolListReadyPayload):
            prev = located[n - 1] if n else None
            at_head = prev is not None and prev.record.type == "session_meta" and prev.position > 0
            if seen_toolset and not at_head and cur is not None:
                cur.resume_before = True
            seen_toolset = True
    if in_request or in_compaction:
        spoil("a crash (an unclosed span at the end)")
    return steps


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class _Settings:
    max_turns: int
    compaction: CompactionSettings
    retry: RetryPolicy


@dataclass
class _Evidence:
    """What a recorded trace says about the settings it ran with, folded record by record."""

    notice_turns: int | None = None
    mode: Literal["summarize", "discard"] | None = None
    context_min: int | None = None
    turns_min: int | None = None
    prompt: str | None = None
    awaiting_prompt: bool = False
    base: int | None = None
    later: list[tuple[int, int]] = field(default_factory=list)
    cap: int = 0
    max_attempt: int = 0
    exhausted: int | None = None
    compaction_max_attempt: int = 0
    compaction_exhausted: int | None = None
    in_compaction: bool = False
    last_in_span: RequestEndPayload | None = None

    def feed(self, p: object) -> None:
        if isinstance(p, TextPayload):
            if self.awaiting_prompt and p.role == "user":
                self.prompt = p.text
                self.awaiting_prompt = False
            stated = mk.parse_max_turns_notice(p.text) if p.role == "assistant" else None
            if stated is not None and self.notice_turns is None:
                self.notice_turns = stated
        elif isinstance(p, CompactionBeginPayload):
            self._compaction_begin(p)
        elif isinstance(p, CompactionEndPayload):
            self._compaction_end(p)
        elif isinstance(p, AbortPayload):
            found = mk.parse_retries_exhausted(p.reason or "")
            if found is not None and self.exhausted is None:
                self.exhausted = found  # R-RETRY-10: the budget, spelled out
        elif isinstance(p, RequestEndPayload):
            self._request_end(p)

    def _compaction_begin(self, p: CompactionBeginPayload) -> None:
        self.in_compaction = True
        self.mode = self.mode or p.mode
        if p.reason == "context":
            self.context_min = (
                p.context if self.context_min is None else min(self.context_min, p.context)
            )
        elif p.reason == "turns":
            self.turns_min = p.turns if self.turns_min is None else min(self.turns_min, p.turns)
        if p.mode == "summarize" and self.prompt is None:
            self.awaiting_prompt = True

    def _compaction_end(self, p: CompactionEndPayload) -> None:
        self.in_compaction = False
        self.awaiting_prompt = False
        # R-COMPACT-19: a failure after an unusable or transport-failed attempt spent the
        # budget (an auth or permanent failure does not tell it).
        last = self.last_in_span
        if (
            p.status == "failed"
            and p.attempt
            and last is not None
            and (
                last.status in ("completed", "timeout", "malformed")
                or (last.status == "failed" and p.attempt > 1)
            )
        ):
            self.compaction_exhausted = p.attempt - 1
        self.last_in_span = None

    def _request_end(self, p: RequestEndPayload) -> None:
        attempt = p.attempt or 1
        if p.retry_in_ms is not None:
            self.cap = max(self.cap, p.retry_in_ms)
            if attempt == 1:
                self.base = p.retry_in_ms if self.base is None else self.base
            else:
                self.later.append((attempt, p.retry_in_ms))
        if self.in_compaction:
            self.compaction_max_attempt = max(self.compaction_max_attempt, attempt)
            self.last_in_span = p
        else:
            self.max_attempt = max(self.max_attempt, attempt)

    def retry(self) -> RetryPolicy:
        """The reconnect ladder and budgets the trace shows (R-RETRY-3/8/10, R-COMPACT-19)."""
        base = self.base
        if base is None and self.later:
            attempt, value = min(self.later)
            base = max(1, value >> (attempt - 1))
        default = RetryPolicy()
        turn_budget = (
            self.exhausted
            if self.exhausted is not None
            else max(default.max_reconnects, self.max_attempt)
        )
        compaction_budget = (
            self.compaction_exhausted
            if self.compaction_exhausted is not None
            else max(turn_budget, self.compaction_max_attempt)
        )
        return RetryPolicy(
            max_reconnects=turn_budget,
            base_ms=base if base is not None else default.base_ms,
            cap_ms=self.cap if self.cap else default.cap_ms,
            compaction_max_reconnects=(
                compaction_budget if compaction_budget != turn_budget else None
            ),
        )


def _infer(
    located: list[Located],
    *,
    max_turns: int | None,
    max_context_length: int | None,
    max_session_turns: int | None,
    compaction_mode: Literal["summarize", "discard"] | None,
    retry: RetryPolicy | None,
) -> _Settings:
    """The settings to replay with: the explicit ones, else what the trace shows."""
    ev = _Evidence()
    for loc in located:
        ev.feed(loc.record.payload)
    compaction = CompactionSettings(
        max_context_length=(
            max_context_length if max_context_length is not None else (ev.context_min or 0)
        ),
        max_session_turns=(
            max_session_turns if max_session_turns is not None else (ev.turns_min or -1)
        ),
        mode=compaction_mode or ev.mode or "summarize",
        prompt=ev.prompt if ev.prompt is not None else DEFAULT_COMPACTION_PROMPT,
    )
    turns = max_turns if max_turns is not None else (ev.notice_turns or DEFAULT_MAX_TURNS)
    return _Settings(max_turns=turns, compaction=compaction, retry=retry or ev.retry())


# --------------------------------------------------------------------------- replay


async def _drain(
    session: Session,
    step: _Step,
    env: ReplayEnvironment | SubagentReplayEnvironment,
    root: DataRoot,
) -> None:
    if step.kind == "compact":
        await session.compact()
        return
    goal = step.goal
    if goal is None:
        async for _ in session.run(step.prompt, approve=env.approve):
            pass
        return
    # The replayed tools do not touch the goal file: it is made to say, as the last round
    # starts, the status the recorded outcome shows the model wrote.
    status = goal.outcome if goal.outcome in ("complete", "blocked") else None

    def on_record(msg: OmniMessage, _file: Path) -> None:
        found = _goal_round(msg)
        if status is not None and found is not None and found[0] == goal.rounds:
            root.write_private(session.scratchpad / "GOAL.yaml", f"status: {status}\n".encode())

    forget = session.add_record_listener(on_record)
    try:
        options = GoalOptions(budget=goal.budget)
        async for _ in session.run(step.prompt, approve=env.approve, goal=options):
            pass
    finally:
        forget()


async def areplay_trace(
    trace: TraceSource,
    *,
    max_turns: int | None = None,
    max_context_length: int | None = None,
    max_session_turns: int | None = None,
    compaction_mode: Literal["summarize", "discard"] | None = None,
    retry: RetryPolicy | None = None,
    stall_timeout: float = 2.0,
) -> ReplayResult:
    """Re-run a recorded session and compare (see the module docstring).  ``trace`` is a trace
    file, a session's files, the directory holding them, or a list of records.  Children of a
    session that used subagents are replayed from their own traces, found beside the parent's
    (R-SUB-3); a divergence in a child names the child's file."""
    trace, near = parent_files(trace)
    located = load_located(trace)
    children = [
        (link, load_located(find_child_trace(link.session_id, near)))
        for link in child_links(located)
    ]
    meta = next(
        (
            loc.record.payload
            for loc in located
            if isinstance(loc.record.payload, SessionMetaPayload)
        ),
        None,
    )
    if meta is None:
        raise ValueError("the trace holds no session_meta record: nothing to replay")
    settings = _infer(
        located,
        max_turns=max_turns,
        max_context_length=max_context_length,
        max_session_turns=max_session_turns,
        compaction_mode=compaction_mode,
        retry=retry,
    )
    steps = _plan(located)
    replayable, stopped, stop = _replayable(steps, len(located))
    actual, replayed = await _rerun(
        located, meta, replayable, settings, children=children, stall_timeout=stall_timeout
    )
    expected_lines, actual_lines, divergence = _compare(located, stop, actual)
    if divergence is not None:
        divergence = _with_structure(divergence, [loc.record for loc in located[:stop]], actual)
    else:
        divergence = _child_divergence(children, replayed)
    return ReplayResult(
        matched=divergence is None,
        runs_compared=sum(1 for s in replayable if s.kind == "run"),
        runs_total=sum(1 for s in steps if s.kind == "run"),
        divergence=divergence,
        normalized=actual_lines,
        expected=expected_lines,
        stopped=stopped,
    )


def _replayable(steps: list[_Step], records: int) -> tuple[list[_Step], str | None, int]:
    """The steps up to the first one that cannot be replayed, why it stopped there, and the
    number of recorded records the comparison covers."""
    replayable: list[_Step] = []
    for step in steps:
        if step.unreplayable is not None:
            stopped = f"{step.kind} {len(replayable) + 1} contains {step.unreplayable}"
            return replayable, stopped, step.start if replayable else 0
        replayable.append(step)
    return replayable, None, records if replayable else 0


def _child_divergence(
    children: list[tuple[ChildLink, list[Located]]], replayed: dict[str, list[OmniMessage]]
) -> Divergence | None:
    """The first divergence of a replayed child from its recorded trace, named by the child."""
    for link, recorded in children:
        actual = replayed.get(link.session_id, [])
        _, _, divergence = _compare(recorded, len(recorded), actual)
        if divergence is not None:
            divergence = _with_structure(divergence, [loc.record for loc in recorded], actual)
            reason = f"in subagent {link.session_id}: {divergence.reason}"
            return dataclasses.replace(divergence, reason=reason)
    return None


def _child_runners(
    children: list[tuple[ChildLink, list[Located]]],
    root: DataRoot,
    workspace: Path,
    *,
    stall_timeout: float,
    started: dict[str, str],
) -> dict[str, tuple[ChildLink, SessionSubagentRunner, Any]]:
    """One runner per recorded child, replaying it as its own session with its own recorded
    answers and settings; ``started`` maps each recorded child id to its replayed id."""
    out: dict[str, tuple[ChildLink, SessionSubagentRunner, Any]] = {}
    for link, recorded in children:
        child_llm = ReplayLLM([loc.record for loc in recorded], mode="all")
        child_env = ReplayEnvironment.from_llm(child_llm, stall_timeout=stall_timeout)
        meta = next(r.record.payload for r in recorded if r.record.type == "session_meta")
        assert isinstance(meta, SessionMetaPayload)
        s = _infer(
            recorded,
            max_turns=None,
            max_context_length=None,
            max_session_turns=None,
            compaction_mode=None,
            retry=None,
        )

        def on_child(child: Session, recorded_id: str = link.session_id) -> None:
            started[recorded_id] = child.id

        runner = SessionSubagentRunner(
            functools.partial(lambda llm: llm, child_llm),
            root=root,
            workspace=workspace,
            environment_factory=functools.partial(lambda env, _r: env, child_env),
            on_child=on_child,
            system_prompt=meta.system_prompt,
            compaction=s.compaction,
            max_turns=s.max_turns,
            retry=s.retry,
            fsync="never",
        )
        out[link.call_id] = (link, runner, child_env.approve)
    return out


async def _rerun(
    located: list[Located],
    meta: SessionMetaPayload,
    replayable: list[_Step],
    settings: _Settings,
    *,
    children: list[tuple[ChildLink, list[Located]]],
    stall_timeout: float,
) -> tuple[list[OmniMessage], dict[str, list[OmniMessage]]]:
    """Re-run ``replayable`` in a scratch data root with the recorded answers; the records the
    re-run wrote, and those of each child (by recorded child id)."""
    llm = ReplayLLM([loc.record for loc in located], mode="all")
    replay_env = ReplayEnvironment.from_llm(llm, stall_timeout=stall_timeout)
    options: dict[str, Any] = {
        "compaction": settings.compaction,
        "max_turns": settings.max_turns,
        "retry": settings.retry,
        "fsync": "never",
    }
    with tempfile.TemporaryDirectory(prefix="penguin-replay-") as tmp:
        root = DataRoot(Path(tmp) / "home")
        workspace = Path(tmp) / "workspace"
        workspace.mkdir()
        started: dict[str, str] = {}
        runners = _child_runners(
            children, root, workspace, stall_timeout=stall_timeout, started=started
        )
        env = SubagentReplayEnvironment(replay_env, runners) if runners else replay_env
        session_id: str | None = None
        segments: list[list[_Step]] = []
        for step in replayable:
            if step.resume_before or not segments:
                segments.append([])
            segments[-1].append(step)
        async with AsyncExitStack() as stack:
            # The children run in their runners' task groups, open around the parent.
            for _, runner, _ in runners.values():
                await stack.enter_async_context(runner)
            for segment in segments:
                if session_id is None:
                    session = await Session.create(
                        llm=llm,
                        environment=env,
                        root=root,
                        workspace=workspace,
                        system_prompt=meta.system_prompt,
                        source=meta.source,
                        **options,
                    )
                else:
                    session = await resume_session(
                        root, session_id, llm=llm, environment=env, workspace=workspace, **options
                    )
                async with session:
                    session_id = session.id
                    for step in segment:
                        await _drain(session, step, env, root)
        actual = _written(root, session_id)
        replayed = {recorded: _written(root, sid) for recorded, sid in started.items()}
    return actual, replayed


def _written(root: DataRoot, session_id: str | None) -> list[OmniMessage]:
    """The records the replay wrote for ``session_id`` (none when it wrote nothing)."""
    if session_id is None:
        return []
    try:
        files = root.trace_files(session_id)
    except FileNotFoundError:
        return []
    return [loc.record for loc in load_located(files)] if files else []


def replay_trace(
    trace: TraceSource,
    *,
    max_turns: int | None = None,
    max_context_length: int | None = None,
    max_session_turns: int | None = None,
    compaction_mode: Literal["summarize", "discard"] | None = None,
    retry: RetryPolicy | None = None,
    stall_timeout: float = 2.0,
) -> ReplayResult:
    """``areplay_trace`` for synchronous callers (it starts its own event loop: inside async
    code, await ``areplay_trace`` instead)."""
    return anyio.run(
        functools.partial(
            areplay_trace,
            trace,
            max_turns=max_turns,
            max_context_length=max_context_length,
            max_session_turns=max_session_turns,
            compaction_mode=compaction_mode,
            retry=retry,
            stall_timeout=stall_timeout,
        )
    )


def assert_replays(trace: TraceSource, **options: Any) -> ReplayResult:
    """Replay ``trace`` (``replay_trace``'s options) and raise ``AssertionError`` with the
    divergence (``file:line: expected … / actual … (reason)``) unless it matches."""
    result = replay_trace(trace, **options)
    if not result.matched:
        raise AssertionError(f"replay diverged: {result.divergence}")
    return result


# --------------------------------------------------------------------------- syrupy


def _snapshot_lines(data: Any) -> list[str]:
    if isinstance(data, ReplayResult):
        return list(data.normalized)
    if isinstance(data, str):
        return data.splitlines()
    if isinstance(data, Sequence) and all(isinstance(x, OmniMessage) for x in data):
        return normalize(data)
    if isinstance(data, Sequence) and all(isinstance(x, str) for x in data):
        return list(data)
    raise TypeError(
        "GoldenTraceExtension serializes a ReplayResult, normalized lines or records, "
        f"not {type(data).__name__}"
    )


if TYPE_CHECKING:
    from syrupy.extensions.single_file import SingleFileSnapshotExtension

    GoldenTraceExtension: type[SingleFileSnapshotExtension]


def _make_extension() -> type[Any]:
    # Built on first use, so that importing ``replay`` does not import syrupy (a dev tool).
    try:
        from syrupy.extensions.single_file import SingleFileSnapshotExtension, WriteMode
    except ImportError as exc:  # pragma: no cover - syrupy is a dev dependency
        raise ImportError("GoldenTraceExtension needs syrupy (pip install syrupy)") from exc

    class GoldenTraceExtension(SingleFileSnapshotExtension):
        """A syrupy extension storing a replay's normalized records, one JSON line each, in
        ``__snapshots__/<test file>/<test name>.jsonl``."""

        file_extension = "jsonl"
        _write_mode = WriteMode.TEXT

        def serialize(self, data: Any, **_: Any) -> str:
            return "".join(f"{line}\n" for line in _snapshot_lines(data))

    GoldenTraceExtension.__module__ = __name__
    GoldenTraceExtension.__qualname__ = "GoldenTraceExtension"
    return GoldenTraceExtension


def __getattr__(name: str) -> Any:
    if name == "GoldenTraceExtension":
        cls = _make_extension()
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
