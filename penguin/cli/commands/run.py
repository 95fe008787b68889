"""``penguin run``: start a new session and run one task on it (R-CLI-1).

Owns: the ``run`` command.  Does not: choose the model (``tasks.model``), or render (``tasks.task``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Final

import typer

from penguin.cli.config import load_config, mcp_servers, snapshot_settings
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
    checked_thinking,
)
from penguin.cli.tasks.goal import BudgetOpt, GoalOpt, goal_options

if TYPE_CHECKING:
    from penguin.cli.tasks.live import Subagents
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
    subagents: SubagentsOpt = False,
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
    from penguin.cli.tasks.live import build_compaction
    from penguin.cli.tasks.model import LlmOptions
    from penguin.cli.tasks.task import TaskOptions

    with errors_to_exit_codes():
        opts = TaskOptions(
            llm=LlmOptions(script, llm.value if llm else None, model, base_url, api_key_env),
            approve=approve.value if approve else None,
            workspace=workspace,
            max_turns=max_turns,
            compaction=build_compaction(
                max_context_length=max_context_length,
                max_session_turns=max_session_turns,
                compaction_mode=compaction_mode.value if compaction_mode else None,
            ),
            subagents=subagents,
            as_json=as_json,
            goal=goal_options(goal=goal, budget=budget, message=message),
            thinking=checked_thinking(thinking),
            sandbox=sandbox.value if sandbox else None,
            network=network,
        )
        _start(globals_of(ctx), message, opts, system_prompt=system_prompt)


def _start(g: Globals, message: str, opts: TaskOptions, *, system_prompt: str | None) -> None:
    import anyio

    from eventstore import DEFAULT_AGENT, DEFAULT_PROJECT
    from penguin._setup import open_session, resolve
    from penguin.cli.tasks.live import build_subagents, environment_for
    from penguin.cli.tasks.model import build_llm, choose_approve, choose_model
    from penguin.cli.tasks.task import (
        checked_message,
        checked_workspace,
        finish_task,
        overrides_of,
        run_task,
        thinking_level,
    )

    text = checked_message(message)
    config = load_config(g.root().home)
    choice = choose_model(opts.llm, config=config)
    mode = choose_approve(opts.approve, scripted=choice.script is not None, config=config)
    resolved = resolve(
        None,
        overrides_of(opts),
        default_approval=mode,
        configured_mcp=mcp_servers(config),
        default_approval_rules=config.approval_rules,
    )
    turns = resolved.max_turns
    model_llm = build_llm(choice)
    ws = checked_workspace(opts.workspace or Path.cwd())
    root = g.writable_root()
    project, agent = g.project or DEFAULT_PROJECT, g.agent or DEFAULT_AGENT
    host: Subagents | None = None
    if opts.subagents:
        host = build_subagents(
            model_llm,
            choice,
            root=root,
            workspace=ws,
            project=project,
            agent=agent,
            compaction=resolved.compaction,
            max_turns=turns,
        )

    async def go() -> TaskResult:
        session = await open_session(
            root,
            llm=model_llm,
            environment=lambda m, w: environment_for(m, w, subagents=host.runner if host else None),
            resolved=resolved,
            workspace=ws,
            system_prompt=DEFAULT_SYSTEM_PROMPT if system_prompt is None else system_prompt,
            project=project,
            agent=agent,
            **opts.sandbox_options(config),
            **snapshot_settings(config),
        )
        return await run_task(
            session,
            model_llm,
            text,
            approve=mode,
            as_json=opts.as_json,
            max_turns=turns,
            host=host,
            goal=opts.goal,
            thinking=thinking_level(opts.thinking, config),
        )

    finish_task(anyio.run(go), as_json=opts.as_json)
