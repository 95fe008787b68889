"""A session's subagent host (SPEC §11), the same for every host: ``penguin run``/``resume``/
``chat`` with ``--subagents`` and ``penguin serve`` for a session created with ``subagents``.

Owns: building the ``SessionSubagentRunner`` whose children get the parent's kind of model —
a scripted parent's children a fresh ``ScriptedLLM`` of the script's top-level ``subagent`` key
(else ``CHILD_SCRIPT``), any other parent's children a new model from the host's ``make_llm``
— and the parent's data root, workspace, project, agent, compaction and turn limit; the
children's system prompt; closing the children's models.  Does not: decide whether a session
has subagents (``penguin._setup.resolve``: the flag or body field, else the recorded ``tools``,
R-SET-3), build the environment that offers ``run_subagent`` (hosts pass ``runner`` to it) or
enter the runner (hosts do, around the parent session: the children live in its task group).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import anyio

from engine import LLM, CompactionSettings, SessionSubagentRunner
from engine.llm import ScriptedLLM
from eventstore import DataRoot

__all__ = [
    "CHILD_SCRIPT",
    "SUBAGENT_SYSTEM_PROMPT",
    "Subagents",
    "SubagentsUnavailable",
    "build_subagents",
]

CHILD_SCRIPT: Final = [[{"text": "(scripted subagent) Nothing to do: this run has no model."}]]
"""What a scripted run's children answer when the script has no ``subagent`` key."""

SUBAGENT_SYSTEM_PROMPT: Final = (
    "You are a subagent working in the user's workspace with the tools provided. Complete the "
    "task you are given on your own and end with a concise final answer: it is all the "
    "delegating agent will see."
)


class SubagentsUnavailable(ValueError):
    """This model cannot host subagents: its script's ``subagent`` key is invalid, or the
    script serves its own ``tools`` (``run_subagent`` is one of the built-in tools' set)."""


@dataclass(slots=True)
class Subagents:
    """One session's subagent host: enter ``runner`` around the parent session, then
    ``aclose`` (the children's models)."""

    runner: SessionSubagentRunner
    llms: list[LLM] = field(default_factory=list)

    async def aclose(self) -> None:
        llms, self.llms[:] = list(self.llms), []
        for llm in llms:
            aclose = getattr(llm, "aclose", None)
            if callable(aclose):
                with anyio.CancelScope(shield=True):
                    await aclose()


def build_subagents(
    llm: LLM,
    make_llm: Callable[[], LLM],
    *,
    root: DataRoot,
    workspace: Path,
    project: str,
    agent: str,
    compaction: CompactionSettings | None,
    max_turns: int,
    **session_options: Any,
) -> Subagents:
    """The subagent host of a session whose model is ``llm``.  Children cannot spawn (depth
    1) and are not bound for ``steer`` items.  ``SubagentsUnavailable`` when ``llm`` is a
    script that cannot have children (checked now, not mid-run)."""
    make: Callable[[], LLM]
    if isinstance(llm, ScriptedLLM):
        if llm.script.tools:
            raise SubagentsUnavailable(
                "subagents need the built-in tools, but this script declares its own `tools`"
            )
        child_script: Any = llm.script.extra.get("subagent", CHILD_SCRIPT)
        try:
            ScriptedLLM(child_script)
        except (ValueError, TypeError, OSError) as exc:
            raise SubagentsUnavailable(f"invalid `subagent` script: {exc}") from None

        def make() -> LLM:
            return ScriptedLLM(child_script)
    else:
        make = make_llm

    created: list[LLM] = []

    def factory() -> LLM:
        child = make()
        created.append(child)
        return child

    runner = SessionSubagentRunner(
        factory,
        root=root,
        workspace=workspace,
        system_prompt=SUBAGENT_SYSTEM_PROMPT,
        project=project,
        agent=agent,
        compaction=compaction,
        max_turns=max_turns,
        **session_options,
    )
    return Subagents(runner=runner, llms=created)
