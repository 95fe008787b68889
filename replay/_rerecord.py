"""Re-recording a golden from a live run of its recorded inputs (``--golden-update``, R-GOLD-6).

Owns: running the recorded inputs of a golden (its Prompts, manual compactions and goal runs,
in order) on a live agent, with the recorded user events re-created where the live run reaches
the same place (R-GOLD-1..3): steering at the same request, user aborts at the same point
(mid-stream after partial output, while a tool runs, at an approval, in a backoff wait, in a
compaction), a crash cut at the same record and the session resumed there with
``resume_session``, a plain resume where the recording resumed; each run with the settings
it recorded (SPEC §23) for the keys the agent leaves open; and collecting the new
session's files and those of its subagents.  Does not: replay or compare (``golden``), choose
the agent (the test names it), or replace the golden's files (``replay.pytest_plugin``).

How a place is found again.  The live model writes other records than the recorded one did,
so a recorded position means nothing in the live run.  A place is named by its run and by the
record kind and ordinal within that run: "right after the 2nd ``request_begin`` of run 3".
The live session's records are counted the same way, and the event happens when that record
is written.  A mid-stream abort also names the streamed segment (its index in the response),
and fires once that segment has streamed as much as the recording shows.  An event the live run never
reaches (a backoff wait the live model never caused) is an error naming the recorded line.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import anyio

from engine import (
    LLM,
    AbortSignal,
    GoalOptions,
    LLMOutcome,
    LLMRequest,
    Session,
    recorded_options,
)
from eventstore import DataRoot, OmniMessage, RequestBeginPayload
from eventstore.builders import payload_type, stop_reason_of

from . import golden as g
from ._replay_llm import Located, TraceSource
from ._replay_subagents import parent_files, pointer_ids
from ._resume import _OPTIONS as _RESUME_OPTIONS
from ._resume import resume_session

__all__ = ["GoldenUpdateError", "record_live"]

AgentFactory = Callable[[Path], Mapping[str, Any]]


class GoldenUpdateError(RuntimeError):
    """The live run could not re-create a recorded user event (it never reached its place)."""


@dataclass(frozen=True, slots=True)
class _Mark:
    """Right after the ``ordinal``-th record of ``kind`` that run ``step`` wrote (1-based)."""

    step: int
    kind: str
    ordinal: int


@dataclass
class _Events:
    """The recorded user events, each at its mark, and the recorded line that shows it."""

    steer: dict[_Mark, list[list[OmniMessage]]] = field(default_factory=dict)
    fire: set[_Mark] = field(default_factory=set)
    stream: dict[_Mark, tuple[int, int]] = field(default_factory=dict)  # -> _cut_point
    backoff: set[_Mark] = field(default_factory=set)
    crash: set[_Mark] = field(default_factory=set)
    where: dict[_Mark, str] = field(default_factory=dict)


def _kind(record: OmniMessage) -> str:
    return payload_type(record) or record.type


def _marks(located: list[Located], steps: list[g._Step]) -> list[_Mark]:
    """The mark of every recorded record: its run, kind and ordinal in that run."""
    out: list[_Mark] = []
    step = -1
    counts: dict[str, int] = {}
    starts = [s.start for s in steps]
    for n, loc in enumerate(located):
        while step + 1 < len(starts) and n >= starts[step + 1]:
            step, counts = step + 1, {}
        kind = _kind(loc.record)
        counts[kind] = counts.get(kind, 0) + 1
        out.append(_Mark(max(step, 0), kind, counts[kind]))
    return out


def _body(payload: object) -> str:
    """The streamed content of a segment or of one of its fragments."""
    for name in ("text", "thinking", "arguments"):
        value = getattr(payload, name, None)
        if isinstance(value, str):
            return value
    return ""


def _cut_point(located: list[Located], begin: int) -> tuple[int, int]:
    """Where the abort cut the response begun at ``begin``: the segment (0-based) and how
    much of its content had streamed."""
    k = 0
    for loc in located[begin + 1 :]:
        if loc.record.type == "model_msg" and loc.record.origin is None:
            if stop_reason_of(loc.record) == "aborted":
                return k, len(_body(loc.record.payload))
            k += 1
    return k, 0


def _events(located: list[Located], steps: list[g._Step], cuts: list[int | None]) -> _Events:
    marks = _marks(located, steps)
    timing = g._timing(located)
    ev = _Events()

    def at(position: int, what: str) -> _Mark:
        # An event at ``position`` happens once ``position`` records are written: right after
        # the record before it.
        mark = marks[position - 1]
        loc = located[position - 1]
        ev.where.setdefault(mark, f"{what} after {loc.path}:{loc.line}")
        return mark

    for count, entries in timing.steer.items():
        ev.steer.setdefault(at(count, "steering"), []).extend(entries)
    for count in timing.fire:
        ev.fire.add(at(count, "a user abort"))
    for count in timing.fire_in_backoff:
        ev.backoff.add(at(count, "a user abort in a backoff wait"))
    for begin in timing.stream:
        ev.stream[at(begin + 1, "a user abort mid-stream")] = _cut_point(located, begin)
    for cut in cuts:
        if cut is not None:
            ev.crash.add(at(cut, "a crash"))
    return ev


class _LiveDriver:
    """Counts what the live session writes, by run and kind, and acts at the marks."""

    def __init__(self, events: _Events, root: DataRoot) -> None:
        self.events = events
        self.root = root
        self.step = 0
        self.counts: dict[str, int] = {}
        self.last: _Mark | None = None
        self.reached: set[_Mark] = set()
        self.session: Session | None = None
        self.signal: AbortSignal | None = None
        self.scope: anyio.CancelScope | None = None
        self.snapshot: dict[Path, bytes] | None = None
        self.cut: tuple[_Mark, tuple[int, int]] | None = None  # how the next stream is cut

    def begin_step(self, step: int) -> None:
        self.step, self.counts, self.last = step, {}, None

    def on_record(self, msg: OmniMessage, _path: Path) -> None:
        if self.snapshot is not None or g._uncounted(msg):
            return
        kind = _kind(msg)
        self.counts[kind] = self.counts.get(kind, 0) + 1
        mark = self.last = _Mark(self.step, kind, self.counts[kind])
        ev = self.events
        if mark in ev.crash:
            self.reached.add(mark)
            assert self.session is not None
            self.snapshot = {f: f.read_bytes() for f in self.root.trace_files(self.session.id)}
            if self.scope is not None:
                self.scope.cancel()
            return
        if mark in ev.steer and self.session is not None:
            self.reached.add(mark)
            for entry in ev.steer[mark]:
                self.session.steer(entry)
        if mark in ev.stream and isinstance(msg.payload, RequestBeginPayload):
            self.cut = (mark, ev.stream[mark])
        if mark in ev.fire:
            self.fire(mark)

    def on_backoff(self, _delay_ms: int) -> None:
        if self.snapshot is None and self.last in self.events.backoff:
            assert self.last is not None
            self.fire(self.last)

    def fire(self, mark: _Mark) -> None:
        self.reached.add(mark)
        if self.signal is not None:
            self.signal.abort()

    def restore(self) -> None:
        """Leave the session's files exactly as they stood at the crash."""
        assert self.snapshot is not None
        assert self.session is not None
        g._restore_files(self.root, self.session.id, self.snapshot)
        self.snapshot = None

    def missing(self) -> list[str]:
        ev = self.events
        every = {*ev.steer, *ev.fire, *ev.stream, *ev.backoff, *ev.crash}
        return sorted(ev.where[m] for m in every - self.reached)


def _cutting(llm: LLM, driver: _LiveDriver) -> Callable[[], None]:
    """Make ``llm`` fire the driver's abort once the segment a recorded mid-stream abort cut
    has streamed as much as the recording shows (R-GOLD-2); returns the undo."""
    inner = llm.stream
    try:
        own = vars(llm).get("stream")
    except TypeError:
        own = None

    def stream(request: LLMRequest) -> AsyncIterator[OmniMessage | LLMOutcome]:
        cut, driver.cut = driver.cut, None
        if cut is None:
            return inner(request)
        return _cut(inner(request), cut, driver)

    try:
        llm.stream = stream  # type: ignore[method-assign]
    except AttributeError as exc:
        raise GoldenUpdateError(
            f"--golden-update: a recorded mid-stream abort needs to watch the stream of "
            f"{type(llm).__name__}, whose stream method cannot be wrapped"
        ) from exc

    def undo() -> None:
        if own is not None:
            llm.stream = own  # type: ignore[method-assign]
        else:
            delattr(llm, "stream")

    return undo


async def _cut(
    items: AsyncIterator[OmniMessage | LLMOutcome],
    cut: tuple[_Mark, tuple[int, int]],
    driver: _LiveDriver,
) -> AsyncIterator[OmniMessage | LLMOutcome]:
    mark, (segment, length) = cut
    starts = streamed = 0
    async for item in items:
        yield item
        payload = getattr(item, "payload", None)
        event = getattr(payload, "event_type", None)
        if event == "start":
            starts += 1
        elif event == "delta" and starts == segment + 1:
            streamed += len(_body(payload))
        else:
            continue
        if starts == segment + 1 and streamed >= length and mark not in driver.reached:
            driver.fire(mark)  # as much of the segment streamed as the recording shows


async def _drain_live(session: Session, step: g._Step, approve: Any, signal: AbortSignal) -> None:
    if step.kind == "compact":
        await session.compact(signal=signal)
        return
    goal = None
    prompt: list[OmniMessage] | None = step.prompt
    if step.goal is not None:
        goal = GoalOptions(budget=step.goal.budget, resume=step.goal.continued)
        prompt = None if step.goal.continued else step.prompt
    async for _ in session.run(prompt, approve=approve, goal=goal, signal=signal):
        pass


async def record_live(trace: TraceSource, agent: AgentFactory, tmp: Path) -> list[Path]:
    """Run the recorded inputs of ``trace`` live on a session built from ``agent(workspace)``
    (``Session.create`` keyword arguments, plus optional ``approve`` and ``subagents``: a
    ``SessionSubagentRunner`` opened around the session), re-creating the recorded user
    events (see the module docstring).  Returns the new session's trace files, then its
    subagents'.  Raises ``GoldenUpdateError`` when an event found no place in the live run."""
    trace, _near = parent_files(trace)
    located = g._recorded(trace)
    steps = g._plan(located)
    segments, cuts = g._segments(located, steps, full=True)
    events = _events(located, steps, cuts)
    workspace = tmp / "workspace"
    workspace.mkdir()
    options = dict(agent(workspace))
    approve = options.pop("approve", None)
    runner = options.pop("subagents", None)
    options.setdefault("workspace", workspace)
    per_step = _run_settings(trace, steps, options)
    root = DataRoot(tmp / "home")
    driver = _LiveDriver(events, root)
    resume = {k: v for k, v in options.items() if k in _RESUME_OPTIONS}
    llm: LLM = options["llm"]
    undo = _cutting(llm, driver) if events.stream else None
    session_id: str | None = None
    index = 0
    try:
        async with AsyncExitStack() as stack:
            if runner is not None:
                await stack.enter_async_context(runner)
            for segment, cut in zip(segments, cuts, strict=True):
                recorded = per_step[index]
                if session_id is None:
                    session = await Session.create(root=root, **recorded, **options)
                else:
                    session = await resume_session(
                        root,
                        session_id,
                        llm=llm,
                        environment=options["environment"],
                        workspace=options["workspace"],
                        **recorded,
                        **resume,
                    )
                driver.session = session
                session.add_record_listener(driver.on_record)
                session.add_backoff_listener(driver.on_backoff)
                async with session:
                    session_id = session.id
                    for step in segment:
                        _settle(session, per_step[index])
                        driver.begin_step(index)
                        index += 1
                        driver.signal = AbortSignal()
                        with anyio.CancelScope() as scope:
                            driver.scope = scope
                            await _drain_live(session, step, approve, driver.signal)
                        if driver.snapshot is not None:
                            break
                if driver.snapshot is not None:
                    driver.restore()
                elif cut is not None:
                    break  # the crash was never reached: reported below
    finally:
        if undo is not None:
            undo()
    missing = driver.missing()
    if missing:
        raise GoldenUpdateError(
            "--golden-update: the live run never reached the place of "
            + "; ".join(missing)
            + " (the new agent behaves differently there: re-record that golden by hand)"
        )
    assert session_id is not None
    return [*root.trace_files(session_id), *_children_files(root, session_id)]


# The settings a run records that a re-recording takes from the golden when the agent leaves
# them open (SPEC §23).
_RUN_SETTINGS: Final = ("max_turns", "compaction", "retry", "thinking_level")


def _run_settings(
    trace: TraceSource, steps: list[g._Step], agent: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Per run, the settings its recorded settings record states, for the keys the agent does
    not set: a session resumed with other settings is re-recorded so (a golden without
    settings records gives none: the agent's and the engine's defaults apply)."""
    records = g._step_records(steps, g._settings_in_force(trace))
    out: list[dict[str, Any]] = []
    for record in records:
        stated = recorded_options(record)
        out.append({k: stated[k] for k in _RUN_SETTINGS if k in stated and k not in agent})
    return out


def _settle(session: Session, recorded: Mapping[str, Any]) -> None:
    """A run's own recorded turn limit and default thinking level (read per run)."""
    if "max_turns" in recorded:
        session.options.max_turns = recorded["max_turns"]
    if "thinking_level" in recorded:
        session.options.thinking_level = recorded["thinking_level"]


def _children_files(root: DataRoot, session_id: str) -> list[Path]:
    """The trace files of the subagents the session's pointers name, nested ones included."""
    from eventstore import read_trace

    out: list[Path] = []
    for child in pointer_ids(read_trace(root.trace_files(session_id)).records):
        out.extend(root.trace_files(child))
        out.extend(_children_files(root, child))
    return out
