"""The CLI's one setup path (SPEC §23, R-SET-3): ``run``, ``resume`` and ``chat`` decide a
session's settings here, in one order — config → model (a resumed session keeps its recorded
one, at its recorded endpoint) → approval → ``penguin._setup.resolve`` (the recorded settings,
the flags and config.toml: limits, compaction, MCP servers and approval rules) → workspace →
subagents — and open the session through ``penguin._setup.open_session``.

Owns: ``prepare`` (every decision, each failing as an input error before anything is written;
the restored settings printed on one line for a resumed session) and ``Setup.open``.  Does
not: parse flags (the commands), build a model (``tasks.model``), run a task (``tasks.task``)
or a chat (``chat``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from penguin.cli.config import Config, load_config, mcp_servers, snapshot_settings
from penguin.cli.errors import CliError
from penguin.cli.terminal.safe import safe

if TYPE_CHECKING:
    from engine import LLM, Session
    from eventstore import DataRoot, SessionMetaPayload, SettingsPayload
    from penguin._setup import Overrides, Resolved
    from penguin.cli.globalopts import Globals
    from penguin.cli.tasks.live import Subagents
    from penguin.cli.tasks.model import ApproveMode, LlmOptions, ModelChoice

__all__ = ["Recorded", "Setup", "prepare"]


@dataclass(slots=True, frozen=True)
class Recorded:
    """The session being resumed: its id and what its trace records."""

    session_id: str
    meta: SessionMetaPayload
    settings: SettingsPayload | None


@dataclass(slots=True)
class Setup:
    """What ``prepare`` decided; ``open`` creates or resumes the session with it."""

    root: DataRoot
    config: Config
    choice: ModelChoice
    llm: LLM
    mode: ApproveMode
    resolved: Resolved
    workspace: Path
    session_id: str | None
    project: str
    agent: str
    sandbox: dict[str, Any]
    thinking: str | None
    host: Subagents | None = None

    async def open(self, *, system_prompt: str, session_id: str | None = None) -> Session:
        """The session (``session_id``: another one to resume with these settings, as the
        chat does after ``/fork``), its tools in ``workspace``."""
        from penguin._setup import open_session
        from penguin.cli.diagnose import quiet_reader
        from penguin.cli.tasks.live import environment_for

        sid = session_id if session_id is not None else self.session_id
        project, agent = self.project, self.agent
        if sid is not None and sid != self.session_id:
            location = self.root.locate(sid)
            project, agent = location.project, location.agent
        runner = self.host.runner if self.host is not None else None
        with quiet_reader():
            return await open_session(
                self.root,
                llm=self.llm,
                environment=lambda m, w: environment_for(m, w, subagents=runner),
                resolved=self.resolved,
                session_id=sid,
                workspace=self.workspace,
                system_prompt=system_prompt,
                project=project,
                agent=agent,
                **self.sandbox,
                # config.toml's snapshot setting: a resumed session keeps its recorded one.
                defaults=snapshot_settings(load_config(self.root.home)),
            )


def prepare(
    g: Globals,
    llm_options: LlmOptions,
    overrides: Overrides,
    *,
    approve: str | None,
    resumed: Recorded | None = None,
    workspace: Path | None = None,
    sandbox: str | None = None,
    network: bool | None = None,
    subagents: bool | None = None,
    thinking: str | None = None,
) -> Setup:
    """Decide a new session's (``resumed`` None) or a resumed one's setup, in the one order."""
    from rich.text import Text

    from eventstore import DEFAULT_AGENT, DEFAULT_PROJECT
    from penguin._setup import resolve, settings_line
    from penguin.cli.tasks.live import build_subagents
    from penguin.cli.tasks.model import choose_approve, choose_sandbox
    from penguin.cli.tasks.task import checked_workspace, thinking_level
    from penguin.cli.terminal.console import err_console

    config = load_config(g.root().home)
    restored = resumed.settings if resumed is not None else None
    if subagents is not None:
        overrides = dataclasses.replace(overrides, subagents=subagents)
    choice, llm = _model(llm_options, config, resumed)
    mode = choose_approve(
        approve,
        scripted=choice.script is not None,
        config=config,
        recorded=restored.approval if restored is not None else None,
    )
    resolved = resolve(
        restored,
        overrides,
        default_approval=mode,
        configured_mcp=mcp_servers(config),
        default_approval_rules=config.approval_rules,
    )
    if resumed is None:
        ws = checked_workspace(workspace or Path.cwd())
    else:
        given = workspace or Path(resumed.meta.workspace)
        ws = checked_workspace(given, hint=" (pass --workspace DIR to use another)")
    root = g.writable_root()
    if resumed is None:
        project, agent = g.project or DEFAULT_PROJECT, g.agent or DEFAULT_AGENT
    else:
        location = root.locate(resumed.session_id, project=g.project, agent=g.agent)
        project, agent = location.project, location.agent
    host: Subagents | None = None
    if resolved.subagents:  # the flag, else the recorded tools (R-SET-3)
        try:
            host = build_subagents(
                llm,
                choice,
                root=root,
                workspace=ws,
                project=project,
                agent=agent,
                compaction=resolved.compaction,
                max_turns=resolved.max_turns,
            )
        except CliError as exc:
            if subagents is not None:
                raise
            # Not asked for here: say where it comes from, and how to go without.
            hint = "; this session was recorded with subagents (--no-subagents goes without)"
            raise CliError(exc.message + hint) from None
    if resumed is not None:  # R-SET-3: what the session comes back with, on one line
        err_console().print(Text(safe(settings_line(restored)), style="dim"), soft_wrap=True)
    return Setup(
        root=root,
        config=config,
        choice=choice,
        llm=llm,
        mode=mode,
        resolved=resolved,
        workspace=ws,
        session_id=resumed.session_id if resumed is not None else None,
        project=project,
        agent=agent,
        # A new session takes config.toml's sandbox; a resumed one keeps its recorded one
        # unless a flag says otherwise.
        sandbox=choose_sandbox(sandbox, network, config=config if resumed is None else None),
        thinking=thinking_level(thinking, config),
        host=host,
    )


def _model(
    options: LlmOptions, config: Config, resumed: Recorded | None
) -> tuple[ModelChoice, LLM]:
    """The model: the options against the config; for a resumed session the recorded one at
    its recorded endpoint (SPEC §23) unless the options say otherwise — another model only with
    ``--change-model``."""
    from penguin.cli.tasks.model import build_llm, check_same_model, choose_model

    if resumed is None:
        choice = choose_model(options, config=config)
        return choice, build_llm(choice)
    sid = resumed.session_id
    recorded, endpoint = recorded_model(resumed.meta, resumed.settings)
    choice = choose_model(
        options, config=config, recorded=recorded, session_id=sid, endpoint=endpoint
    )
    allow = options.change_model
    if choice.script is None:  # refused before a key is even looked for
        check_same_model(choice, None, recorded=recorded, session_id=sid, allow=allow)
    llm = build_llm(choice)
    check_same_model(choice, llm, recorded=recorded, session_id=sid, allow=allow)
    return choice, llm


def recorded_model(
    meta: SessionMetaPayload, settings: SettingsPayload | None
) -> tuple[tuple[str, str], str | None]:
    """The model a session continues with (SPEC §23): the last settings record's, else its
    ``session_meta``'s; and that model's recorded endpoint."""
    from engine import recorded_model as from_record

    found = from_record(settings)
    if found is None:
        return (meta.provider, meta.model_id), None
    return (found[0], found[1]), found[2]
