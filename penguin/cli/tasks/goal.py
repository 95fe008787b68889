"""Goal mode on the command line (SPEC R-GOAL-8).

Owns: the ``--goal``, ``--budget`` and ``--goal-continue`` options, budget parsing (``N``,
``500k``, ``2m``), the ``[goal] round <N>`` lines and the final outcome line, the exit code of a
goal run, and the goal lines of ``inspect``/``resume``.  Does not: drive rounds (the engine
does, ``session.run(..., goal=GoalOptions(...))``) or render the rounds' own messages.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any

import typer

from penguin.cli.errors import CliError
from penguin.cli.terminal.safe import preview, safe

if TYPE_CHECKING:
    from rich.console import Console

    from engine import GoalOptions
    from eventstore import OmniMessage
    from projections import GoalState

__all__ = [
    "GOAL_NOT_COMPLETE",
    "BudgetOpt",
    "GoalContinueOpt",
    "GoalOpt",
    "GoalView",
    "check_goal_continue",
    "goal_line",
    "goal_options",
    "parse_budget",
]

GOAL_NOT_COMPLETE = "the goal did not complete"

_BUDGET = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kKmM]?)\s*$")


def parse_budget(value: str | None) -> int | None:
    """``500000``, ``500k``, ``2m``, ``1.5m`` → tokens; ``None`` stays unlimited."""
    if value is None:
        return None
    match = _BUDGET.match(value)
    if match is None:
        raise typer.BadParameter(f"expected N, Nk or Nm tokens (e.g. 500k), got {value!r}")
    number, unit = match.groups()
    scale = {"": 1, "k": 1_000, "m": 1_000_000}[unit.lower()]
    tokens = int(float(number) * scale) if "." in number else int(number) * scale
    if tokens <= 0:
        raise typer.BadParameter("the budget must be more than 0 tokens")
    return tokens


GoalOpt = Annotated[
    bool,
    typer.Option(
        "--goal",
        help="Treat -m as an objective: keep running rounds (each an ordinary task) until the "
        "agent marks the goal complete or blocked in its GOAL.yaml, or --budget is spent.  "
        "Exit 0 only when the goal is complete.",
    ),
]
BudgetOpt = Annotated[
    str | None,
    typer.Option(
        "--budget",
        help="Token budget of a goal (N, 500k, 2m): once spent, one wrap-up round is sent "
        "[default: unlimited, at most 100 rounds].",
        show_default=False,
        metavar="TOKENS",
    ),
]
GoalContinueOpt = Annotated[
    bool,
    typer.Option(
        "--goal-continue",
        help="Continue the session's goal that was aborted or cut off by a crash (round "
        "numbers and tokens used carry on).  Takes no -m.",
    ),
]


def goal_options(
    *, goal: bool, budget: str | None, resume: bool = False, message: str | None = None
) -> GoalOptions | None:
    """The ``GoalOptions`` the flags ask for (``None``: an ordinary run); bad flags raise."""
    from engine import GoalOptions

    if goal and message is not None and not message.strip():
        raise CliError("a goal needs an objective: -m is blank")
    tokens = parse_budget(budget)
    if not (goal or resume):
        if tokens is not None:
            raise typer.BadParameter("--budget needs --goal (or --goal-continue)")
        return None
    return GoalOptions(budget=tokens, resume=resume)


def check_goal_continue(
    session_id: str, goal: GoalState, *, message: str | None, goal_opts: GoalOptions | None
) -> None:
    """``resume --goal-continue`` is refused before the session is locked or written."""
    if goal_opts is None or not goal_opts.resume:
        return
    if message is not None:
        raise CliError("--goal-continue continues the recorded objective: it takes no -m")
    if not goal.continuable:
        state = "no goal" if goal.objective is None else f"its goal ended {goal.outcome}"
        raise CliError(
            f"session {safe(session_id)} has no goal to continue ({state}; only an aborted "
            "or interrupted goal continues)"
        )


class GoalView:
    """Prints one line per round and the outcome, in stream order (``GoalRounds`` counts)."""

    def __init__(self, console: Console, *, start_tokens: int = 0) -> None:
        from penguin._goal import GoalRounds

        self._console = console
        self._rounds = GoalRounds(start=start_tokens)

    def take(self, msg: OmniMessage) -> bool:
        """Look at a streamed message; ``True`` when it is a round input (printed here as one
        line instead of the whole protocol block)."""
        from rich.text import Text

        from eventstore import GoalFinishedPayload

        found = self._rounds.round_of(msg)
        if found is not None:
            wrap = " (wrap-up)" if found[1] else ""
            line = f"[goal] round {found[0]}{wrap} (tokens used {self._rounds.tokens})"
            self._console.print(Text(line, style="bold"), soft_wrap=True)
            return True
        p = msg.payload
        if msg.origin is None and isinstance(p, GoalFinishedPayload):
            # R-GOAL-8 spells the line exactly, "rounds" even for one.
            line = f"[goal] {p.outcome} after {p.rounds} rounds, {p.tokens_used} tokens"
            style = "bold green" if p.outcome == "complete" else "bold yellow"
            self._console.print(Text(line, style=style), soft_wrap=True)
        return False

    @property
    def tokens_used(self) -> int:
        """The goal's token count (R-GOAL-5): the outcome's, else as counted so far."""
        done = self._rounds.finished
        return done.tokens_used if done is not None else self._rounds.tokens

    @property
    def complete(self) -> bool:
        done = self._rounds.finished
        return done is not None and done.outcome == "complete"


def goal_line(goal: dict[str, Any]) -> str:
    """One line for ``inspect`` and ``resume`` (untrusted text escaped by ``preview``)."""
    outcome = goal["outcome"] or "unfinished"
    hint = "; continue with --goal-continue" if goal["continuable"] else ""
    return (
        f"  goal: {outcome} after {goal['rounds']} rounds, {goal['tokens_used']} tokens; "
        f"objective: {preview(goal['objective'], 100)}{hint}"
    )
