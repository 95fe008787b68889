"""Golden traces: re-run a recorded session and compare the new trace with the recorded one.

Owns: ``replay_trace`` / ``areplay_trace`` (SPEC R-CLI-6: re-run the session in a temporary data
root with ``ReplayLLM`` + ``ReplayEnvironment`` + the recorded approvals, one run per recorded
Prompt), the normalization both record sequences go through, the first-divergence report
(``ReplayResult``, ``Divergence``), the pytest helper ``assert_replays`` and the syrupy
extension ``GoldenTraceExtension``, the moments a replay acts at (steering, user aborts, crash
cuts: SPEC §24).  Does not: re-record a golden live (``--golden-update``: ``_rerecord``), modify the
recorded trace, decide CLI exit codes (``penguin.cli``), or hold the pytest plugin
(``replay.pytest_plugin``).

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
  as the last round starts).  A goal round is a block that names its goal file (R-GOAL-3);
  a later goal whose first round is > 1 continues the last one (``GoalOptions(resume=True)``).
- Moments (SPEC §24).  The replay counts the records the replayed session writes; while it
  matches, that count is a recorded position.  Steering is queued once the request before the
  steering record has begun (R-GOLD-1).  A user abort (``aborted by user``, ``… during
  reconnect backoff``, ``… during compaction``, an aborted ``compaction_end``) fires the run's
  signal right before the first record it produced: the model fires it after streaming the
  partial output of its interrupted segment, a tool whose output the abort cut streams what it
  had and waits, an abort in a backoff wait fires when that wait starts; aborts the engine makes
  (auth, exhausted reconnects, a record too large) are left to happen (R-GOLD-2).  A session
  resumed where the recording stopped inside a run (an open span, an unfinished task or goal)
  is stopped at that cut, its files left as they stood, and resumed with ``resume_session``,
  whose closure records are compared (R-GOLD-3).  A disk that failed (``trace write failed``)
  cannot fail again at the same record: that run and those after it are not compared.
- Settings.  Explicit options win; otherwise each run is replayed with the last ``settings``
  record in force before it (SPEC §23: a session object is created or resumed with its first
  run's, and ``max_turns`` and the default thinking level follow each run's), so settings
  changed between runs replay as recorded.  A trace without settings records (older ones, the
  reference's) is read for what it shows instead.  ``max_turns``: the
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
  ``<session_id>``, ``<scratchpad>``, ``<agent_state>`` and ``<workspace>``.  Every run is
  compared; ``runs_compared`` < ``runs_total`` only after a run that cannot be reproduced, and
  the verdict is then not a match unless partial comparisons are allowed (R-GOLD-5).  A
  ``token_usage`` recorded after its ``request_end`` (older reference traces) replays before it,
  and is reported as a divergence.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import shutil
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal

import anyio
import msgspec

from engine import (
    DEFAULT_MAX_TURNS,
    AbortSignal,
    ApproveFn,
    CompactionSettings,
    Environment,
    GoalOptions,
    RetryPolicy,
    Session,
    SessionSubagentRunner,
    recorded_options,
)
from eventstore import (
    HEAD_EVENT_TYPES,
    HOST_EVENT_TYPES,
    AbortPayload,
    ApprovalDecisionPayload,
    CompactionBeginPayload,
    CompactionEndPayload,
    DataRoot,
    GoalFinishedPayload,
    ImageUrlPayload,
    OmniMessage,
    RequestBeginPayload,
    RequestEndPayload,
    SessionMetaPayload,
    SettingsPayload,
    SubagentPayload,
    TextPayload,
    ToolCallOutputPayload,
    ToolCallPayload,
    ToolDefinition,
    ToolListReadyPayload,
    WorkspaceSnapshotPayload,
    encode,
)
from eventstore import builders as b
from eventstore.builders import payload_type, stop_reason_of
from projections import DEFAULT_COMPACTION_PROMPT, SessionState
from projections import markers as mk

from ._diff import diff_traces
from ._replay_llm import Located, ReplayEnvironment, ReplayLLM, TraceSource, load_located
from ._replay_subagents import (
    ChildLink,
    LiveChildren,
    SubagentReplayEnvironment,
    child_links,
    child_placeholders,
    find_child_trace,
    live_environment,
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

    @property
    def complete(self) -> bool:
        """Every run of the session was compared (R-GOLD-5)."""
        return self.runs_compared == self.runs_total

    @property
    def partial_reason(self) -> str | None:
        """``"N of M runs compared: <why>"`` when not every run was compared (R-GOLD-5)."""
        if self.complete:
            return None
        why = self.stopped or "the replay stopped early"
        return f"{self.runs_compared} of {self.runs_total} runs compared: {why}"

    def passed(self, *, allow_partial: bool = False) -> bool:
        """The verdict (R-GOLD-5): no divergence, and every run compared unless
        ``allow_partial``."""
        return self.matched and (allow_partial or self.complete)

    def __str__(self) -> str:
        if not self.matched:
            return str(self.divergence)
        return "match" if self.complete else f"partial match ({self.partial_reason})"


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


def _without_settings(located: list[Located]) -> list[Located]:
    """The records a replay re-creates: settings records (SPEC §23) are its input, not its
    output (it runs with them, under its own model and approvals; a reference trace has none),
    so positions and comparisons leave them out on both sides."""
    return [loc for loc in located if not isinstance(loc.record.payload, SettingsPayload)]


def _compare(
    expected: list[Located], stop: int, actual: list[OmniMessage]
) -> tuple[list[str], list[str], Divergence | None]:
    # Settings records (SPEC §23) are the replay's input, not its output: the replay runs
    # with them, under its own model and approvals, and a reference trace has none.
    expected = [
        loc for loc in expected[:stop] if not isinstance(loc.record.payload, SettingsPayload)
    ]
    stop = len(expected)
    actual = [r for r in actual if not isinstance(r.payload, SettingsPayload)]
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
    continued: bool = False


@dataclass
class _Step:
    kind: Literal["run", "compact"]
    start: int
    prompt: list[OmniMessage] = field(default_factory=list)
    resume_before: bool = False
    unreplayable: str | None = None
    accepting: bool = False
    goal: _Goal | None = None
    settings: _Settings | None = None  # the run's (SPEC §23), given by _configure


def _goal_round(record: OmniMessage) -> tuple[int, str, str] | None:
    """A goal round input's round number, body and full text: a goal block that goal mode
    wrote (it names the goal file, R-GOAL-3), not any text that starts like one."""
    p = record.payload
    if record.origin is not None or not isinstance(p, TextPayload) or p.role != "user":
        return None
    found = mk.goal_round_of(p.text)
    if found is None or "\nGoal file: " not in p.text.split("\n[/goal]", 1)[0]:
        return None
    return found[0], found[1], p.text


def _goal_step(located: list[Located], n: int, steps: list[_Step]) -> _Step | None:
    """The step a goal round input at ``n`` starts (round 1), or ``None`` for a later round
    (it belongs to the goal step in progress)."""
    found = _goal_round(located[n].record)
    assert found is not None
    round_no, body, text = found
    cur = steps[-1] if steps else None
    if round_no > 1 and cur is not None and cur.goal is not None and cur.goal.outcome is None:
        cur.goal.rounds = round_no
        return None
    step = _Step(
        "run",
        _head_start(located, n) if steps else 0,
        [b.user_text(body)],
        goal=_Goal(mk.parse_goal_budget(text), rounds=round_no),
    )
    if round_no > 1:
        step.prompt = []  # R-GOAL-7: continued with GoalOptions(resume=True)
        step.goal.continued = True  # type: ignore[union-attr]
        earlier = [s.goal for s in steps if s.goal is not None]
        if not earlier or earlier[-1].outcome not in (None, "aborted"):
            step.unreplayable = "a goal continued from one this trace does not hold"
    return step


def _steering_image(located: list[Located], n: int) -> bool:
    """An image recorded right after a steering text (and its other images) belongs to that
    steering entry (R-STEER-5), not to a new task."""
    if not isinstance(located[n].record.payload, ImageUrlPayload):
        return False
    j = n - 1
    while j >= 0 and isinstance(located[j].record.payload, ImageUrlPayload):
        j -= 1
    p = located[j].record.payload if j >= 0 else None
    return isinstance(p, TextPayload) and p.role == "user" and mk.is_steering(p.text)


def _head_start(located: list[Located], first: int) -> int:
    """Walk back from a run's first prompt message over what its first record brings along:
    a rotated file's head and the pending ``[context_summary]`` (R-RUN-6, R-TRACE-8)."""
    j = first
    while j > 0 and _brought_along(located[j - 1].record):
        j -= 1
    return j


def _brought_along(record: OmniMessage) -> bool:
    p = record.payload
    if record.type == "session_meta" or isinstance(p, HEAD_EVENT_TYPES):
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
            continue
        starting = (
            not in_request
            and not in_compaction
            and record.type == "model_msg"
            and mk.is_task_starting(record)
            and not _steering_image(located, n)
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
        elif isinstance(p, CompactionBeginPayload):
            in_compaction = True
            if p.reason == "manual" and not in_request:
                cur = _Step("compact", n)
                steps.append(cur)
        elif isinstance(p, CompactionEndPayload):
            in_compaction = False
        elif isinstance(p, AbortPayload):
            reason = p.reason or ""
            # A disk that failed cannot fail again at the same record; a record too large is
            # refused again on its own (R-TRACE-15/15a).
            if (
                reason.startswith(mk.ABORT_TRACE_WRITE_FAILED_PREFIX)
                and "record too large" not in reason
            ):
                spoil("a trace write failure (R-TRACE-15)")
        elif isinstance(p, ToolListReadyPayload):
            prev = located[n - 1] if n else None
            at_head = prev is not None and prev.record.type == "session_meta" and prev.position > 0
            if seen_toolset and not at_head and cur is not None:
                cur.resume_before = True
            seen_toolset = True
    return steps


# --------------------------------------------------------------------------- settings


@dataclass(frozen=True)
class _Settings:
    max_turns: int
    compaction: CompactionSettings | None
    retry: RetryPolicy
    thinking_level: str | None = None

    def options(self) -> dict[str, Any]:
        """The keyword options of ``Session.create`` / ``resume_session`` they give."""
        out: dict[str, Any] = {
            "compaction": self.compaction,
            "max_turns": self.max_turns,
            "retry": self.retry,
            "fsync": "never",
        }
        if self.thinking_level is not None:
            out["thinking_level"] = self.thinking_level
        return out


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


def _evidence(located: Sequence[Located]) -> _Evidence:
    ev = _Evidence()
    for loc in located:
        ev.feed(loc.record.payload)
    return ev


def _infer(
    ev: _Evidence,
    record: SettingsPayload | None,
    *,
    max_turns: int | None,
    max_context_length: int | None,
    max_session_turns: int | None,
    compaction_mode: Literal["summarize", "discard"] | None,
    retry: RetryPolicy | None,
) -> _Settings:
    """The settings to replay a run with: the explicit ones, else what its settings ``record``
    states (the last one in force, SPEC §23), else what the trace ``ev`` shows."""
    compaction: CompactionSettings | None = CompactionSettings(
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
    # SPEC §23: what a settings record states is read, not inferred (explicit options win).
    recorded = recorded_options(record)
    if "compaction" in recorded and (
        max_context_length is None and max_session_turns is None and compaction_mode is None
    ):
        compaction = recorded["compaction"]
    if max_turns is None and "max_turns" in recorded:
        turns = recorded["max_turns"]
    if retry is None and "retry" in recorded:
        retry = recorded["retry"]
    return _Settings(
        max_turns=turns,
        compaction=compaction,
        retry=retry or ev.retry(),
        thinking_level=recorded.get("thinking_level"),
    )


def _settings_in_force(trace: TraceSource) -> list[SettingsPayload | None]:
    """For each record ``_recorded`` keeps, the last settings record written before it."""
    out: list[SettingsPayload | None] = []
    current: SettingsPayload | None = None
    for loc in load_located(trace):
        p = loc.record.payload
        if isinstance(p, SettingsPayload):
            current = p
        elif not isinstance(p, _NOT_REPLAYED):
            out.append(current)
    return out


def _step_records(
    steps: list[_Step], in_force: list[SettingsPayload | None]
) -> list[SettingsPayload | None]:
    """Each step's settings record: the last one in force at its last record (a run's record
    precedes its input, R-SET-2; the next run's comes after)."""
    out: list[SettingsPayload | None] = []
    for i, step in enumerate(steps):
        end = steps[i + 1].start if i + 1 < len(steps) else len(in_force)
        out.append(in_force[max(step.start, end - 1)] if in_force else None)
    return out


def _configure(
    steps: list[_Step],
    in_force: list[SettingsPayload | None],
    ev: _Evidence,
    explicit: Mapping[str, Any],
) -> None:
    """Give each step the settings of its run (its settings record, else what the trace
    shows; explicit options win)."""
    for step, record in zip(steps, _step_records(steps, in_force), strict=True):
        step.settings = _infer(ev, record, **explicit)


# --------------------------------------------------------------------------- replay


async def _drain(
    session: Session,
    step: _Step,
    approve: ApproveFn,
    root: DataRoot,
    signal: AbortSignal,
) -> None:
    if step.kind == "compact":
        await session.compact(signal=signal)
        return
    goal = step.goal
    if goal is None:
        async for _ in session.run(step.prompt, approve=approve, signal=signal):
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
        options = GoalOptions(budget=goal.budget, resume=goal.continued)
        prompt = None if goal.continued else step.prompt
        async for _ in session.run(prompt, approve=approve, goal=options, signal=signal):
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
    live_tools: str | os.PathLike[str] | None = None,
) -> ReplayResult:
    """Re-run a recorded session and compare (see the module docstring).  ``live_tools``: a
    workspace whose scratch copy the tools run in for real (the built-in tools of
    ``LocalEnvironment``), the model still answered from the recording (R-GOLD-7): the
    comparison is then by run, turn and call (``diff_traces``), so that a tool's real timing
    does not count, and a differing tool output is the divergence.  ``trace`` is a trace
    file, a session's files, the directory holding them, or a list of records.  Children of a
    session that used subagents are replayed from their own traces, found beside the parent's
    (R-SUB-3); a divergence in a child names the child's file."""
    trace, near = parent_files(trace)
    located = _recorded(trace)
    children = _load_children(located, near)
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
    explicit = {
        "max_turns": max_turns,
        "max_context_length": max_context_length,
        "max_session_turns": max_session_turns,
        "compaction_mode": compaction_mode,
        "retry": retry,
    }
    steps = _plan(located)
    _configure(steps, _settings_in_force(trace), _evidence(located), explicit)
    replayable, stopped, stop = _replayable(steps, len(located))
    actual, replayed = await _rerun(
        located,
        meta,
        replayable,
        children=children,
        stall_timeout=stall_timeout,
        full=len(replayable) == len(steps),
        live_tools=_live_workspace(live_tools),
    )
    expected_lines, actual_lines, divergence = _compare(located, stop, actual)
    if live_tools is not None:
        divergence = _structural_divergence(located[:stop], actual)
    elif divergence is not None:
        divergence = _with_structure(divergence, [loc.record for loc in located[:stop]], actual)
    if divergence is None:
        divergence = _child_divergence(_flatten(children), replayed, live=live_tools is not None)
    return ReplayResult(
        matched=divergence is None,
        runs_compared=sum(1 for s in replayable if s.kind == "run"),
        runs_total=sum(1 for s in steps if s.kind == "run"),
        divergence=divergence,
        normalized=actual_lines,
        expected=expected_lines,
        stopped=stopped,
    )


def _tools_from(located: list[Located], start: int) -> list[ToolDefinition] | None:
    for loc in located[start:]:
        if isinstance(loc.record.payload, ToolListReadyPayload):
            return list(loc.record.payload.tools)
    return None


def _live_workspace(path: str | os.PathLike[str] | None) -> Path | None:
    if path is None:
        return None
    workspace = Path(path)
    if not workspace.is_dir():
        raise NotADirectoryError(f"--live-tools: not a directory: {workspace}")
    return workspace


def _structural_divergence(recorded: list[Located], actual: list[OmniMessage]) -> Divergence | None:
    """The first difference by run, turn and call (R-GOLD-7: live tools), at its recorded
    file and line."""
    first = diff_traces([loc.record for loc in recorded], actual).first
    if first is None:
        return None
    path: Path | None = None
    line = 0
    index = -1
    number = (first.a_at or "").rpartition(":")[2]
    if number.isdigit() and 0 < int(number) <= len(recorded):
        index = int(number) - 1  # diff_traces numbers records given in memory from 1
        path, line = recorded[index].path, recorded[index].line
    return Divergence(
        path,
        line,
        index,
        first.a,
        first.b,
        f"{first.where}: {first.what}" if first.where else first.what,
    )


def _recorded(trace: TraceSource) -> list[Located]:
    """The records a replay reproduces: workspace snapshots are left out (SPEC §27: a replay
    runs no real tools, so it takes none, and they are not model context), and so are a host's
    marks (``session_archived``: written between runs, by no engine)."""
    return [
        loc
        for loc in load_located(trace)
        if not isinstance(loc.record.payload, (*_NOT_REPLAYED, SettingsPayload))
    ]


def _uncounted(msg: OmniMessage) -> bool:
    """A record ``_recorded`` leaves out (not a recorded position)."""
    return isinstance(msg.payload, (*_NOT_REPLAYED, SettingsPayload))


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
    children: list[tuple[ChildLink, list[Located]]],
    replayed: dict[str, list[OmniMessage]],
    *,
    live: bool = False,
) -> Divergence | None:
    """The first divergence of a replayed child from its recorded trace, named by the child
    (by run, turn and call when its tools ran for real, R-GOLD-7)."""
    for link, recorded in children:
        actual = replayed.get(link.session_id, [])
        if live:
            divergence = _structural_divergence(recorded, actual)
        else:
            _, _, divergence = _compare(recorded, len(recorded), actual)
        if divergence is not None and not live:
            divergence = _with_structure(divergence, [loc.record for loc in recorded], actual)
        if divergence is not None:
            reason = f"in subagent {link.session_id}: {divergence.reason}"
            return dataclasses.replace(divergence, reason=reason)
    return None


_MAX_DEPTH: Final = 16


@dataclass(frozen=True)
class _Child:
    """A recorded child session: the call that ran it, its records, and its own children."""

    link: ChildLink
    recorded: list[Located]
    children: list[_Child]
    settings: SettingsPayload | None  # the settings record its run states (SPEC §23)


def _first_prompt(recorded: list[Located]) -> str | None:
    for loc in recorded:
        p = loc.record.payload
        if isinstance(p, TextPayload) and p.role == "user" and loc.record.origin is None:
            return p.text
    return None


def _load_children(located: list[Located], near: Path | None, depth: int = 0) -> list[_Child]:
    """The children of a session, each with its own (nested children too, R-SUB-3).  Children
    that ran at once may have written their pointers in another order than their calls: each
    is paired with the first waiting call whose prompt it received."""
    links = child_links(located)
    files = [find_child_trace(link.session_id, near) for link in links]
    traces = [_recorded(f) for f in files]
    calls = [(link.call_id, link.prompt) for link in links]
    taken: set[str] = set()
    out: list[_Child] = []
    for link, recorded, trace in zip(links, traces, files, strict=True):
        prompt = _first_prompt(recorded)
        call_id, call_prompt = next(
            ((c, pr) for c, pr in calls if c not in taken and pr == prompt),
            (link.call_id, link.prompt),
        )
        taken.add(call_id)
        nested = _load_children(recorded, near, depth + 1) if depth < _MAX_DEPTH else []
        in_force = _settings_in_force(trace)
        out.append(
            _Child(
                ChildLink(call_id, call_prompt, link.session_id),
                recorded,
                nested,
                in_force[-1] if in_force else None,
            )
        )
    return out


def _flatten(children: list[_Child]) -> list[tuple[ChildLink, list[Located]]]:
    out: list[tuple[ChildLink, list[Located]]] = []
    for child in children:
        out.append((child.link, child.recorded))
        out.extend(_flatten(child.children))
    return out


def _child_runners(
    children: list[_Child],
    root: DataRoot,
    workspace: Path,
    *,
    stall_timeout: float,
    started: dict[str, str],
    every: list[SessionSubagentRunner],
    live: bool = False,
) -> dict[str, tuple[ChildLink, SessionSubagentRunner, Any]]:
    """One runner per recorded child, replaying it as its own session with its own recorded
    answers, settings and children; ``started`` maps each recorded child id to its replayed
    id, ``every`` collects the runners of all depths (to be opened around the parent).
    ``live``: the children's tools run for real in ``workspace`` (R-GOLD-7)."""
    out: dict[str, tuple[ChildLink, SessionSubagentRunner, Any]] = {}
    for child in children:
        link, recorded = child.link, child.recorded
        child_llm = ReplayLLM([loc.record for loc in recorded], mode="all")
        replay_env = (
            ReplayEnvironment([loc.record for loc in recorded])  # its approvals only
            if live
            else ReplayEnvironment.from_llm(child_llm, stall_timeout=stall_timeout)
        )
        nested = _child_runners(
            child.children,
            root,
            workspace,
            stall_timeout=stall_timeout,
            started=started,
            every=every,
            live=live,
        )
        child_env: Environment
        if live:
            served = LiveChildren([(lk.prompt, r, a) for lk, r, a in nested.values()])
            child_env = live_environment(workspace, _tools_from(recorded, 0), served)
        else:
            child_env = SubagentReplayEnvironment(replay_env, nested) if nested else replay_env
        meta = next(r.record.payload for r in recorded if r.record.type == "session_meta")
        assert isinstance(meta, SessionMetaPayload)
        s = _infer(
            _evidence(recorded),
            child.settings,
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
            thinking_level=s.thinking_level,
            fsync="never",
            max_depth=_MAX_DEPTH,  # the recording's own depth limit let these run
        )
        every.append(runner)
        out[link.call_id] = (link, runner, replay_env.approve)
    return out


# --------------------------------------------------------------------------- timing


# Records a replay never writes: snapshots (no real tools run) and a host's marks (SPEC §27;
# ``session_archived``); positions and comparisons leave them out.
_NOT_REPLAYED: Final[tuple[type, ...]] = (WorkspaceSnapshotPayload, *HOST_EVENT_TYPES)

# Records a recording may lack although the replayed engine writes them (a trace written before
# they existed, SPEC §23, §27): positions are counted without them.
_OPTIONAL_RECORDS: Final = frozenset({"settings", "workspace_snapshot"})

_USER_ABORTS: Final = frozenset(
    {mk.ABORT_BY_USER, mk.ABORT_DURING_BACKOFF, mk.ABORT_DURING_COMPACTION}
)


@dataclass
class _Timing:
    """Where a replay acts on the engine, keyed by the number of records the replayed
    session has written (equal to a recorded position while the replay matches).

    ``steer``: the steering entries to queue once the turn that delivers them has begun
    (R-GOLD-1).  ``fire``: fire the run's signal once this many records are written: right
    before the first record a user abort produced (R-GOLD-2).  ``fire_in_backoff``: fire it
    when a backoff wait starts with this many records written.  ``held``: the calls whose
    recorded output the abort produced (they wait for the signal).  ``stream``: the spans (by
    ``request_begin`` position) whose model fires it once the partial output of its
    interrupted segment has streamed.
    """

    steer: dict[int, list[list[OmniMessage]]] = field(default_factory=dict)
    fire: set[int] = field(default_factory=set)
    stream: set[int] = field(default_factory=set)
    fire_in_backoff: set[int] = field(default_factory=set)
    held: set[str] = field(default_factory=set)


def _is_boundary(record: OmniMessage) -> bool:
    """A record no abort effect of a later run reaches back over."""
    p = record.payload
    if isinstance(p, RequestBeginPayload | CompactionBeginPayload | ToolListReadyPayload):
        return True
    return isinstance(p, TextPayload | ImageUrlPayload) and p.role == "user"


def _steering_entry(located: list[Located], n: int) -> list[OmniMessage]:
    """The messages to ``steer()`` that deliver the steering text at ``n`` again (R-STEER-5)."""
    p = located[n].record.payload
    assert isinstance(p, TextPayload)
    body = p.text.split("\n", 1)[1].rsplit("\n[/user_steering]", 1)[0]
    entry: list[OmniMessage] = [b.user_text(body)] if body.strip() else []
    j = n + 1
    while j < len(located) and isinstance(located[j].record.payload, ImageUrlPayload):
        entry.append(located[j].record)
        j += 1
    return entry


def _timing(located: list[Located]) -> _Timing:
    t = _Timing()
    approvals: dict[str, str] = {}
    last_begin = -1
    window = 0  # where the current run's abort effects may start
    in_span = False
    in_compaction = False
    handled_compaction_end = -1
    for n, loc in enumerate(located):
        record, p = loc.record, loc.record.payload
        if record.origin is not None:
            continue
        if isinstance(p, ApprovalDecisionPayload):
            approvals.setdefault(p.tool_call_id, p.decision)
        elif isinstance(p, RequestBeginPayload):
            last_begin, in_span = n, True
        elif isinstance(p, RequestEndPayload):
            in_span = False
        elif isinstance(p, CompactionBeginPayload):
            in_compaction = True
        elif (
            isinstance(p, TextPayload)
            and p.role == "user"
            and not in_span
            and not in_compaction
            and mk.is_steering(p.text)
            and last_begin >= 0
        ):
            t.steer.setdefault(last_begin + 1, []).append(_steering_entry(located, n))
        if _is_boundary(record) and not (in_compaction and isinstance(p, TextPayload)):
            window = n
        anchor = False
        if isinstance(p, CompactionEndPayload):
            in_compaction = False
            if p.status == "aborted":
                anchor, handled_compaction_end = True, n
        elif isinstance(p, AbortPayload) and (p.reason or "") in _USER_ABORTS:
            after_compaction = handled_compaction_end == n - 1
            anchor = not (after_compaction and p.reason == mk.ABORT_DURING_COMPACTION)
        if anchor:
            _place_abort(located, window, n, approvals, t)
    return t


def _place_abort(
    located: list[Located], start: int, anchor: int, approvals: dict[str, str], t: _Timing
) -> None:
    """The first record a user abort produced, between ``start`` and ``anchor`` (its
    ``abort`` or aborted ``compaction_end``), and how to fire it (R-GOLD-2)."""
    first = anchor
    first_is_segment = False
    begin = -1
    last_span: RequestEndPayload | None = None
    for n in range(start, anchor + 1):
        record, p = located[n].record, located[n].record.payload
        effect: int | None = None
        if isinstance(p, RequestBeginPayload) and first == anchor:
            begin = n
        if isinstance(p, RequestEndPayload):
            last_span = p
            if p.status == "aborted":
                effect = n
        elif isinstance(p, ToolCallOutputPayload):
            if (
                approvals.get(p.tool_call_id) == "allow"
                and stop_reason_of(record) == "aborted"
                and p.output.endswith(mk.PLACEHOLDER_ABORTED)
            ):
                t.held.add(p.tool_call_id)
                effect = n
        elif record.type == "model_msg" and stop_reason_of(record) == "aborted":
            effect = n  # an interrupted segment (outputs are handled above)
        if (
            isinstance(p, ToolCallPayload)
            and stop_reason_of(record) == "completed"
            and p.tool_call_id not in approvals
        ):
            effect = n + 1  # the signal fired before (or while) it was approved
        if effect is not None and effect < first:
            first = effect
            first_is_segment = (
                record.type == "model_msg"
                and effect == n
                and not isinstance(p, ToolCallOutputPayload)
            )
    if first_is_segment and begin >= 0:
        t.stream.add(begin)  # mid-stream: the model fires it after the partial output
        return
    p = located[anchor].record.payload
    in_backoff = isinstance(p, AbortPayload) and p.reason == mk.ABORT_DURING_BACKOFF
    if isinstance(p, CompactionEndPayload) and first == anchor and last_span is not None:
        in_backoff = last_span.status != "aborted"  # the wait after an attempt
    (t.fire_in_backoff if in_backoff else t.fire).add(first)


def _crashed(records: Sequence[OmniMessage], last: _Step | None) -> bool:
    """Whether the recording stopped inside a run here (an open span, a task or goal that never
    ended): a crash the replay reproduces by stopping at this record (R-GOLD-3)."""
    state = SessionState.from_records(records)
    if state.open_request or state.open_compaction is not None or state.task_running:
        return True
    return last is not None and last.goal is not None and last.goal.outcome is None


def _cut_before(located: list[Located], start: int) -> int:
    """Where a resumed session's records begin: before the closure records it wrote
    (R-RESUME-14a, R-RESUME-14)."""
    c = start
    while c > 0:
        p = located[c - 1].record.payload
        closure = (
            isinstance(p, RequestEndPayload) and p.error_message == mk.REQUEST_CLOSURE_ERROR
        ) or (
            isinstance(p, CompactionEndPayload) and p.error_message == mk.COMPACTION_CLOSURE_ERROR
        )
        if not closure:
            break
        c -= 1
    return c


def _positions(root: DataRoot, session_id: str, uncounted: frozenset[str]) -> int:
    """The recorded positions a resumed session's files hold (its closure records included)."""
    records = load_located(root.trace_files(session_id))
    return sum(
        1
        for loc in records
        if payload_type(loc.record) not in uncounted
        and not isinstance(loc.record.payload, SettingsPayload)
    )


class _Driver:
    """Counts what the replayed session writes and acts at the recorded points: steering,
    aborts, and the stop at a recorded crash (a copy of the files as they stood then)."""

    def __init__(
        self, timing: _Timing, root: DataRoot, *, uncounted: frozenset[str] = frozenset()
    ) -> None:
        self.timing = timing
        self.root = root
        # Record types the recording does not hold (or the comparison leaves out): a replayed
        # one is not a recorded position.
        self.uncounted = uncounted
        self.count = 0
        self.session: Session | None = None
        self.signal: AbortSignal | None = None
        self.crash_at: int | None = None
        self.scope: anyio.CancelScope | None = None
        self.snapshot: dict[Path, bytes] | None = None
        self._moved: anyio.Event | None = None

    def on_record(self, msg: OmniMessage, _path: Path) -> None:
        if self.snapshot is not None:
            return  # stopped at the crash: what the session writes now is thrown away
        if self.uncounted and payload_type(msg) in self.uncounted:
            return
        if isinstance(msg.payload, SettingsPayload):
            return  # not counted: recorded positions leave settings records out
        self.count += 1
        n = self.count
        if self._moved is not None:
            self._moved.set()
            self._moved = None
        if self.crash_at is not None and n == self.crash_at:
            assert self.session is not None
            self.snapshot = {f: f.read_bytes() for f in self.root.trace_files(self.session.id)}
            if self.scope is not None:
                self.scope.cancel()
            return
        if self.session is not None:
            for entry in self.timing.steer.get(n, ()):
                self.session.steer(entry)
        if n in self.timing.fire and self.signal is not None:
            self.signal.abort()

    async def reached(self, count: int) -> None:
        """Wait until ``count`` records are written (or the session stopped at its crash)."""
        while self.count < count and self.snapshot is None:
            if self._moved is None:
                self._moved = anyio.Event()
            await self._moved.wait()

    def on_cut(self, begin: int) -> None:
        if self.snapshot is None and begin in self.timing.stream and self.signal is not None:
            self.signal.abort()

    def on_backoff(self, _delay_ms: int) -> None:
        fire = self.snapshot is None and self.count in self.timing.fire_in_backoff
        if fire and self.signal is not None:
            self.signal.abort()

    def restore(self) -> None:
        """Leave the session's files exactly as they stood at the crash."""
        assert self.snapshot is not None
        assert self.session is not None
        _restore_files(self.root, self.session.id, self.snapshot)
        self.snapshot = None


def _restore_files(root: DataRoot, session_id: str, snapshot: Mapping[Path, bytes]) -> None:
    """Put a session's trace files back to ``snapshot`` (path -> bytes, taken at a recorded
    crash): files written since are removed, the others rewritten as they were."""
    for f in root.trace_files(session_id):
        if f not in snapshot:
            f.unlink()
    for f, data in snapshot.items():
        f.write_bytes(data)


def _pointer_gate(
    located: list[Located], children: list[_Child], driver: _Driver, timeout: float
) -> Callable[[str, Literal["start", "output"]], Awaitable[None]]:
    """Hold a child's start, and its call's output, until the replay has written what the
    recording wrote before the child's pointer, and before that output: children that ran at
    once keep their recorded order against each other and the other calls (R-SUB-3)."""
    pointers = [
        n
        for n, loc in enumerate(located)
        if loc.record.origin is None and isinstance(loc.record.payload, SubagentPayload)
    ]
    starts = {child.link.call_id: n for child, n in zip(children, pointers, strict=False)}
    outputs: dict[str, int] = {}
    for n, loc in enumerate(located):
        p = loc.record.payload
        if loc.record.origin is None and isinstance(p, ToolCallOutputPayload):
            outputs.setdefault(p.tool_call_id, n)

    async def gate(call_id: str, stage: Literal["start", "output"]) -> None:
        at = (starts if stage == "start" else outputs).get(call_id)
        if at is not None:
            with anyio.move_on_after(timeout):  # a replay that diverged gives up waiting
                await driver.reached(at)

    return gate


def _segments(
    located: list[Located], steps: list[_Step], *, full: bool
) -> tuple[list[list[_Step]], list[int | None]]:
    """The steps grouped by session object (a new one where the recording resumed), and where
    each ends in a crash: the recorded position of its cut, when the recording stopped inside
    a run there (R-GOLD-3).  ``full``: ``steps`` are all the recording holds (a crash at its
    end is then reproduced too)."""
    records = [loc.record for loc in located]
    segments: list[list[_Step]] = []
    for step in steps:
        if step.resume_before or not segments:
            segments.append([])
        segments[-1].append(step)
    cuts: list[int | None] = []
    for i, segment in enumerate(segments):
        end = _cut_before(located, segments[i + 1][0].start) if i + 1 < len(segments) else None
        if end is None and full:
            end = len(located)
        crash = end is not None and _crashed(records[:end], segment[-1])
        cuts.append(end if crash else None)
    return segments, cuts


async def _rerun(
    located: list[Located],
    meta: SessionMetaPayload,
    replayable: list[_Step],
    *,
    children: list[_Child],
    stall_timeout: float,
    full: bool,
    live_tools: Path | None = None,
) -> tuple[list[OmniMessage], dict[str, list[OmniMessage]]]:
    """Re-run ``replayable`` in a scratch data root with the recorded answers; the records the
    re-run wrote, and those of each child (by recorded child id).  ``full``: every recorded
    step is replayed (a crash at the end of the recording is then reproduced too)."""
    llm = ReplayLLM([loc.record for loc in located], mode="all")
    timing = _timing(located)
    if live_tools is None:
        replay_env = ReplayEnvironment.from_llm(llm, stall_timeout=stall_timeout)
        replay_env.strict = replay_env._pacer.strict = True
        replay_env.held = frozenset(timing.held)
    else:
        # R-GOLD-7: the model is not paced against tools that run for real.
        replay_env = ReplayEnvironment([loc.record for loc in located])
    llm.strict = True
    records = [loc.record for loc in located]
    with tempfile.TemporaryDirectory(prefix="penguin-replay-") as tmp:
        root = DataRoot(Path(tmp) / "home")
        workspace = Path(tmp) / "workspace"
        started: dict[str, str] = {}
        every: list[SessionSubagentRunner] = []
        env: Environment
        if live_tools is None:
            workspace.mkdir()
        else:
            shutil.copytree(live_tools, workspace, symlinks=True)
        recorded_types = {payload_type(r) for r in records}
        uncounted = frozenset(t for t in _OPTIONAL_RECORDS if t not in recorded_types)
        driver = _Driver(timing, root, uncounted=uncounted)
        runners = _child_runners(
            children,
            root,
            workspace,
            stall_timeout=stall_timeout,
            started=started,
            every=every,
            live=live_tools is not None,
        )
        if live_tools is None:
            gate = _pointer_gate(located, children, driver, stall_timeout)
            env = (
                SubagentReplayEnvironment(replay_env, runners, gate=gate) if runners else replay_env
            )
        else:
            served = LiveChildren([(lk.prompt, r, a) for lk, r, a in runners.values()])
            env = live_environment(workspace, _tools_from(located, 0), served)
        approve = replay_env.approve
        session_id: str | None = None
        segments, cuts = _segments(located, replayable, full=full)
        llm.on_cut = driver.on_cut
        async with AsyncExitStack() as stack:
            # The children run in their runners' task groups, open around the parent.
            for runner in every:
                await stack.enter_async_context(runner)
            for segment, cut in zip(segments, cuts, strict=True):
                if live_tools is None:
                    # Each session object lists the tools it recorded (a resumed one may differ).
                    listed = _tools_from(located, segment[0].start)
                    if listed is not None:
                        replay_env.tools = listed
                # Each session object runs with the settings its first run recorded (SPEC §23).
                assert segment[0].settings is not None
                options = segment[0].settings.options()
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
                    driver.count = 0
                else:
                    session = await resume_session(
                        root, session_id, llm=llm, environment=env, workspace=workspace, **options
                    )
                    driver.count = _positions(root, session_id, uncounted)
                driver.session, driver.crash_at = session, cut
                session.add_record_listener(driver.on_record)
                session.add_backoff_listener(driver.on_backoff)
                async with session:
                    session_id = session.id
                    for step in segment:
                        _settle(session, step)
                        driver.signal = AbortSignal()
                        with anyio.CancelScope() as scope:
                            driver.scope = scope
                            await _drain(session, step, approve, root, driver.signal)
                        if driver.snapshot is not None:
                            break
                if driver.snapshot is not None:
                    driver.restore()
                    assert cut is not None
                    llm.rewind(cut)
        actual = _written(root, session_id)
        replayed = {recorded: _written(root, sid) for recorded, sid in started.items()}
    return actual, replayed


def _settle(session: Session, step: _Step) -> None:
    """A run's own settings within one session object: what a host can change between the
    runs of a session (read per run: ``max_turns``, the default thinking level, SPEC §23)."""
    if step.settings is not None and step.kind == "run":
        session.options.max_turns = step.settings.max_turns
        session.options.thinking_level = step.settings.thinking_level


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
    live_tools: str | os.PathLike[str] | None = None,
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
            live_tools=live_tools,
        )
    )


def assert_replays(
    trace: TraceSource, *, allow_partial: bool = False, **options: Any
) -> ReplayResult:
    """Replay ``trace`` (``replay_trace``'s options) and raise ``AssertionError`` with the
    divergence (``file:line: expected … / actual … (reason)``) unless it matches, or with
    ``N of M runs compared: <why>`` when not every run could be compared (R-GOLD-5) unless
    ``allow_partial``."""
    result = replay_trace(trace, **options)
    if not result.matched:
        raise AssertionError(f"replay diverged: {result.divergence}")
    if not result.passed(allow_partial=allow_partial):
        raise AssertionError(f"replay incomplete: {result.partial_reason}")
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
