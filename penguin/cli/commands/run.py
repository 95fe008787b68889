"""``penguin run``: start a new session and run one task on it (R-CLI-1).

Owns: the ``run`` command.  Does not: choose the model (``tasks.model``), or render (``tasks.task``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Final

import typer

from penguin.cli.errors import errors_to_exit_codes
from penguin.cli.globalopts import Globals, globals_of
from penguin.cli.options import (
    ApproveOpt,
    BaseUrlOpt,
    JsonOpt,
    KeyEnvOpt,
    LlmOpt,
    MaxContextOpt,
    MaxSessionTurnsOpt,
    MaxTurnsOpt,
    ModelOpt,
    ModeOpt,
    NetworkOpt,
    SandboxOpt,
    ScriptOpt,
    SubagentsOpt,
    ThinkingOpt,
)
from penguin.cli.tasks.goal import BudgetOpt, GoalOpt, goal_options

if TYPE_CHECKING:
    from penguin.cli.tasks.task import TaskOptions, TaskResult

__all__ = ["DEFAULT_SYSTEM_PROMPT", "globals_of", "run"]

DEFAULT_SYSTEM_PROMPT: Final = (
    "You are a careful assistant. You work in the user's workspace with the tools provided; "
    "explain briefly what you do."
)


def run(
    ctx: typer.Context,
    message: Annotated[
        str, typer.Option("-m", "--message", help="The task for the agent.", show_default=False)
    ],
    script: ScriptOpt = None,
    llm: LlmOpt = None,
    model: ModelOpt = None,
    base_url: BaseUrlOpt = None,
    api_key_env: KeyEnvOpt = None,
    workspace: Annotated[
        Path | None,
        typer.Option(
            "--workspace",
            help="Directory the tools work in [default: the current directory].",
            show_default=False,
        ),
    ] = None,
    approve: ApproveOpt = None,
    max_turns: MaxTurnsOpt = None,
    max_context_length: MaxContextOpt = None,
    max_session_turns: MaxSessionTurnsOpt = None,
    compaction_mode: ModeOpt = None,
    system_prompt: Annotated[
        str | None,
        typer.Option(
            "--system-prompt", help="System prompt of the new session.", show_default=False
        ),
    ] = None,
    subagents: SubagentsOpt = None,
    sandbox: SandboxOpt = None,
    network: NetworkOpt = None,
    goal: GoalOpt = False,
    budget: BudgetOpt = None,
    thinking: ThinkingOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Start a new session and run one task, streaming what happens.

    The model is --llm/--model, else the default of config.toml (`penguin config`); with
    neither, exit 2.  --script FILE answers from a script instead (a test double; `penguin
    demo` shows one).  Ctrl-C aborts the run cleanly (the trace stays valid and the next task
    sees what was interrupted); a second Ctrl-C quits at once.  Ends with a summary line, the
    session id and the trace path.  Exit 1 when the run ended with an abort or reached
    --max-turns.  With --json, the first line names the session id and trace.

    \b
    Examples:
      penguin run -m "list the files" --llm openai --model gpt-4o
      penguin run -m "fix the tests" --approve allow-all     (the configured model)
      penguin run -m "survey the repo" --subagents
      penguin run --goal --budget 500k -m "make all tests pass"
    """
    from penguin.cli.tasks.model import LlmOptions
    from penguin.cli.tasks.task import task_options

    with errors_to_exit_codes():
        opts = task_options(
            LlmOptions(script, llm.value if llm else None, model, base_url, api_key_env),
            approve=approve,
            workspace=workspace,
            max_turns=max_turns,
            compaction=(max_context_length, max_session_turns, compaction_mode),
            subagents=subagents,
            as_json=as_json,
            goal=goal_options(goal=goal, budget=budget, message=message),
            thinking=thinking,
            sandbox=(sandbox, network),
        )
        _start(globals_of(ctx), message, opts, system_prompt=system_prompt)


def _start(g: Globals, message: str, opts: TaskOptions, *, system_prompt: str | None) -> None:
    import anyio

    from penguin.cli.tasks.setup import prepare
    from penguin.cli.tasks.task import checked_message, finish_task, overrides_of, run_task

    text = checked_message(message)
    setup = prepare(
        g,
        opts.llm,
        overrides_of(opts),
        approve=opts.approve,
        workspace=opts.workspace,
        sandbox=opts.sandbox,
        network=opts.network,
        subagents=opts.subagents,
        thinking=opts.thinking,
    )

    async def go() -> TaskResult:
        session = await setup.open(
            system_prompt=DEFAULT_SYSTEM_PROMPT if system_prompt is None else system_prompt
        )
        return await run_task(
            session,
            setup.llm,
            text,
            approve=setup.mode,
            as_json=opts.as_json,
            max_turns=setup.resolved.max_turns,
            host=setup.host,
            goal=opts.goal,
            thinking=setup.thinking,
        )

    finish_task(anyio.run(go), as_json=opts.as_json)
