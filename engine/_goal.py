"""Goal mode: one ``run`` that keeps driving Tasks until the goal is met (SPEC §18).

Owns: ``GoalOptions``, validating a goal input, the control file ``GOAL.yaml`` (written once at
the start, read after every round), the round inputs (``GOAL_BLOCK`` / ``GOAL_WRAPUP_BLOCK``),
the token budget, the wrap-up round, the 100-round backstop and the ``goal_finished`` record.
Does not: run a round (each round is an ordinary Task of the session, with its own turns,
approvals, reconnects, compactions and steering; unlike a plain run's Prompt, a round's input
is yielded on the stream, as in the reference, so hosts see round boundaries), or keep any state that the trace does not
(rounds and tokens come from ``SessionState.goal``, the ``GoalState`` fold, so a resumed session
continues from exactly what was recorded).  The only figure held here is the usage of subagents,
which the parent trace never records (R-SUB-2) until ``goal_finished`` carries the total.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, Protocol

import anyio
import yaml

from eventstore import ImageUrlPayload, OmniMessage, TextPayload, TokenUsagePayload, record_kind
from eventstore import builders as b
from projections import GoalOutcome, GoalState
from projections import markers as mk

from ._images import fold_images

if TYPE_CHECKING:
    from projections import SessionState

    from ._recorder import RecordListener
    from ._run import Run

__all__ = ["GOAL_FILE_NAME", "GOAL_MAX_ROUNDS", "GoalHost", "GoalOptions", "GoalRun", "goal_yaml"]

GOAL_FILE_NAME: Final = "GOAL.yaml"
GOAL_MAX_ROUNDS: Final = 100
"""R-GOAL-5 backstop: no goal runs more rounds than this (a model that never writes the file
would otherwise loop for ever)."""
_MAX_FILE_BYTES: Final = 1024 * 1024

Status = Literal["active", "complete", "blocked"]


@dataclass(frozen=True, slots=True, kw_only=True)
class GoalOptions:
    """``session.run(input, goal=GoalOptions(...))`` (R-GOAL-1, R-GOAL-7).

    ``budget``: tokens (``total - cache_read`` summed over every request of the goal) after
    which one wrap-up round is sent; ``None`` is unlimited.  ``resume``: continue the session's
    latest goal that ended ``aborted`` or never ended (the input must then be empty).
    """

    budget: int | None = None
    resume: bool = False

    def __post_init__(self) -> None:
        budget = self.budget
        if budget is not None and (not isinstance(budget, int) or isinstance(budget, bool)):
            raise TypeError(f"GoalOptions.budget must be an int or None, not {budget!r}")
        if budget is not None and budget <= 0:
            raise ValueError(f"GoalOptions.budget must be > 0 (or None), not {budget}")


class _GoalDumper(yaml.SafeDumper):
    """``safe_dump`` with multi-line strings as literal block scalars (R-GOAL-2)."""


def _represent_str(dumper: yaml.SafeDumper, data: str) -> yaml.ScalarNode:
    style = "|" if "\n" in data else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)


_GoalDumper.add_representer(str, _represent_str)


def goal_yaml(objective: str) -> str:
    """``GOAL.yaml`` as the engine creates it: ``objective`` then ``status: active``.

    Every line of the objective sits indented under its key (a literal block, or one quoted
    line when PyYAML cannot use a block for it: the width is unbounded, so it never folds)."""
    return yaml.dump(
        {"objective": objective, "status": "active"},
        Dumper=_GoalDumper,
        sort_keys=False,
        allow_unicode=True,
        width=float("inf"),
    )


def read_status(path: Path) -> Status:
    """R-GOAL-2, tolerant: anything but a mapping whose ``status`` is ``active`` or
    ``complete`` reads as ``blocked`` — a broken control channel stops the loop."""
    try:
        with path.open("rb") as f:
            data = f.read(_MAX_FILE_BYTES + 1)
    except OSError:
        return "blocked"
    if len(data) > _MAX_FILE_BYTES:
        return "blocked"
    try:
        doc: Any = yaml.safe_load(data)
    except yaml.YAMLError:
        return "blocked"
    status = doc.get("status") if isinstance(doc, dict) else None
    if status == "active" or status == "complete":
        return status  # type: ignore[no-any-return]
    return "blocked"


class GoalHost(Protocol):
    """What a goal run needs of its session, and all it touches: the session's state and
    scratchpad, a private write, a record listener, and running a task or emitting a record in
    the run (``Session`` hands ``GoalRun`` one of these, never itself)."""

    @property
    def id(self) -> str: ...

    @property
    def state(self) -> SessionState: ...

    @property
    def scratchpad(self) -> Path: ...

    def scratchpad_dir(self) -> Path:
        """The scratchpad, created on demand (0700)."""
        ...

    def write_private(self, path: Path, data: bytes) -> Path: ...

    def add_record_listener(self, listener: RecordListener) -> Callable[[], None]: ...

    async def task(self, run: Run, prompt: list[OmniMessage]) -> None:
        """One ordinary Task of the session in ``run``."""
        ...

    def emit(self, run: Run, msg: OmniMessage) -> None:
        """Record ``msg`` and push it to the run's stream."""
        ...


class GoalRun:
    """One goal run of a session: built by ``prepare`` before anything is written, then
    ``drive``-n in the run's driver task."""

    def __init__(
        self, session: GoalHost, *, objective: str, budget: int | None, resume: bool
    ) -> None:
        self._session = session
        self._objective = objective
        self._budget = budget
        self._resume = resume
        self._yaml = goal_yaml(objective)
        self._path = session.scratchpad / GOAL_FILE_NAME
        self._rounds = session.state.goal.rounds if resume else 0
        self._subagent_tokens = 0

    @classmethod
    def prepare(
        cls, session: GoalHost, messages: Sequence[OmniMessage] | None, options: GoalOptions
    ) -> GoalRun:
        """Validate the input (R-GOAL-1, R-GOAL-7); raises ``ValueError`` / ``TypeError``."""
        if not isinstance(options, GoalOptions):
            raise TypeError(f"goal= takes GoalOptions, not {type(options).__name__}")
        given = list(messages or ())
        if options.resume:
            if given:
                raise ValueError("continuing a goal takes no input: pass None")
            goal = session.state.goal
            if not goal.continuable or goal.objective is None:
                raise ValueError(
                    f"session {session.id} has no goal to continue (none that ended aborted "
                    "or never ended)"
                )
            return cls(session, objective=goal.objective, budget=options.budget, resume=True)
        for msg in given:
            p = msg.payload
            user_text = isinstance(p, TextPayload) and p.role == "user"
            if msg.origin is not None or not (user_text or isinstance(p, ImageUrlPayload)):
                raise ValueError(
                    f"a goal input holds user text and images only, not {msg.type}/"
                    f"{record_kind(msg)}"
                )
        if not any(isinstance(m.payload, TextPayload) and m.payload.text.strip() for m in given):
            raise ValueError("a goal needs an objective: the input has no text")
        # Folded whatever the model's vision: the objective is re-sent as text every round.
        folded = fold_images(given, session.scratchpad_dir())
        objective = "\n\n".join(
            m.payload.text for m in folded if isinstance(m.payload, TextPayload)
        ).strip()
        return cls(session, objective=objective, budget=options.budget, resume=False)

    # ------------------------------------------------------------------ the loop

    async def drive(self, run: Run) -> None:
        """Rounds until an outcome, then ``goal_finished`` (R-GOAL-3…6)."""
        session = self._session
        run.tap = self._tap
        if not self._resume:
            data = self._yaml.encode("utf-8")
            await anyio.to_thread.run_sync(session.write_private, self._path, data)
        while True:
            if run.signal.aborted:
                # Aborted between rounds: no round is started for it (its input would linger
                # as carry-over), and the round before ended as it did.
                return self._finish(run, "aborted")
            used = self._used()
            wrap_up = self._budget is not None and used >= self._budget
            if not wrap_up and self._rounds >= GOAL_MAX_ROUNDS:
                return self._finish(run, "budget_limited")
            self._rounds += 1
            await self._round(run, b.user_text(self._round_text(used, wrap_up=wrap_up)))
            if session.state.goal.round_cut:
                return self._finish(run, "aborted")
            status = await anyio.to_thread.run_sync(read_status, self._path)
            if wrap_up:
                return self._finish(run, "complete" if status == "complete" else "budget_limited")
            if status != "active":
                return self._finish(run, status)

    async def _round(self, run: Run, prompt: OmniMessage) -> None:
        """One round: an ordinary Task whose input is also yielded, right after it is written
        (as the reference does), so a host sees where each round starts and what it sent."""

        def on_record(msg: OmniMessage, _file: Path) -> None:
            if msg is prompt:
                run.push(msg)

        forget = self._session.add_record_listener(on_record)
        try:
            await self._session.task(run, [prompt])
        finally:
            forget()

    def _round_text(self, used: int, *, wrap_up: bool) -> str:
        block = mk.goal_block(
            self._rounds,
            goal_file=str(self._path),
            goal_yaml=self._yaml,
            used=used,
            budget=self._budget,
            wrap_up=wrap_up,
        )
        return f"{block}\n\n{self._objective}"

    def _used(self) -> int:
        recorded = self._session.state.goal.tokens_used if self._rounds or self._resume else 0
        return recorded + self._subagent_tokens

    def _tap(self, msg: OmniMessage) -> None:
        """Subagents' usage reaches the parent only on the stream (R-GOAL-5)."""
        p = msg.payload
        if msg.origin is not None and isinstance(p, TokenUsagePayload):
            self._subagent_tokens += GoalState.request_tokens(p.request)

    def _finish(self, run: Run, outcome: GoalOutcome) -> None:
        self._session.emit(run, b.goal_finished(outcome, self._rounds, self._used()))
