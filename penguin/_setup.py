"""The one setup path: (recorded settings, explicit overrides, config) → a running ``Session``.

Owns: the order in which a session's settings are decided (SPEC §23, R-SET-3) — an explicit
override (a flag, an HTTP body field, an argument) wins, else the session's last ``settings``
record, else the host's configured default, else the engine's default — and building the session
in one order: model → approval → workspace → environment (sandbox, MCP, subagents through the
host's factory) → ``Session.create`` / ``resume_session``.  ``penguin run``, ``resume``, ``chat``,
goal mode and ``penguin serve`` all come through here, so a restart of any host changes nothing
a session does.  Also the one-line rendering of restored settings.  Does not: parse flags,
speak HTTP, choose how a model is built (hosts pass their builder) or render a run.

How a feature plugs in (sandbox, MCP…): a field on ``Overrides`` and on ``Resolved``, one line in
``resolve`` (override, else recorded, else default), and pass it on in ``open_session`` (the
engine records it through ``Session.options.extra``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from engine import (
    DEFAULT_MAX_TURNS,
    LLM,
    RUN_SUBAGENT,
    CompactionSettings,
    Environment,
    RetryPolicy,
    Session,
    recorded_model,
    recorded_options,
)
from eventstore import DataRoot, FsyncPolicy, SettingsPayload

if TYPE_CHECKING:
    from engine import McpServer

__all__ = [
    "Overrides",
    "Resolved",
    "open_session",
    "resolve",
    "settings_line",
]


@dataclass(frozen=True, slots=True)
class Overrides:
    """What the user said explicitly for this session or run (``None``: not said)."""

    approval: str | None = None
    max_turns: int | None = None
    # Changes to the compaction settings in effect (recorded or default), e.g. a new
    # ``max_context_length``; ``compaction_off`` disables compaction.
    compaction: Mapping[str, Any] | None = None
    compaction_off: bool = False
    retry: RetryPolicy | None = None
    thinking_level: str | None = None
    workspace: Path | None = None
    # MCP servers given for this session (an HTTP body's, with their secrets): on a resumed
    # session each replaces the recorded server of its name.
    mcp: Mapping[str, McpServer] | None = None
    approval_rules: Mapping[str, str] | None = None
    # Offer ``run_subagent`` (SPEC §11): the host builds the session's subagent host
    # (``penguin._subagents``) and the engine records the tool set (R-SET-1 ``tools``).
    subagents: bool | None = None


@dataclass(frozen=True, slots=True)
class Resolved:
    """The settings a session runs with, and where they came from."""

    approval: str
    max_turns: int
    compaction: CompactionSettings | None
    retry: RetryPolicy
    thinking_level: str | None
    # The recorded model endpoint ``(provider, model_id, base_url)`` (resume), if any.
    model: tuple[str, str, str | None] | None
    restored: SettingsPayload | None = None
    overridden: tuple[str, ...] = field(default=())
    # The MCP servers (with their secrets, from the configuration) and the approval rules.
    mcp: Mapping[str, McpServer] | None = None
    approval_rules: Mapping[str, str] | None = None
    subagents: bool = False

    def session_options(self) -> dict[str, Any]:
        """``Session.create`` / ``resume_session`` keyword options."""
        return {
            "max_turns": self.max_turns,
            "compaction": self.compaction,
            "retry": self.retry,
            "thinking_level": self.thinking_level,
            "mcp": dict(self.mcp or {}) or None,
            "approval_rules": dict(self.approval_rules or {}) or None,
        }


def resolve(
    recorded: SettingsPayload | None,
    overrides: Overrides,
    *,
    default_approval: str,
    default_retry: RetryPolicy | None = None,
    default_compaction: CompactionSettings | None = Session.DEFAULT_COMPACTION,
    configured_mcp: Mapping[str, McpServer] | None = None,
    default_approval_rules: Mapping[str, str] | None = None,
    default_subagents: bool = False,
) -> Resolved:
    """R-SET-3: each setting from the override, else the record, else the host's default.

    Subagents: the explicit choice, else whether the recorded ``tools`` hold ``run_subagent``
    (a record without ``tools`` offered the built-ins only), else ``default_subagents``.

    MCP servers (R-MCP-4): a session with a settings record uses the servers it names — each
    the explicit one of that name, else ``configured_mcp``'s (which holds the env and header
    values a record never does), else the recorded command or URL itself; a session without
    one (new, or a reference trace) the configured servers.  Approval rules likewise: the
    explicit ones, else the recorded ones, else ``default_approval_rules``."""
    rec = recorded_options(recorded)
    overridden: list[str] = []

    def pick(name: str, given: Any, default: Any) -> Any:
        if given is not None:
            if name in rec and rec[name] == given:
                return given
            overridden.append(name)
            return given
        return rec.get(name, default)

    approval = overrides.approval
    if approval is None:
        approval = recorded.approval if recorded is not None and recorded.approval else None
        approval = approval or default_approval
    elif recorded is not None and recorded.approval != approval:
        overridden.append("approval")
    compaction: CompactionSettings | None = rec.get("compaction", default_compaction)
    if overrides.compaction_off:
        if compaction is not None:
            overridden.append("compaction")
        compaction = None
    elif overrides.compaction:
        base = compaction if compaction is not None else Session.DEFAULT_COMPACTION
        changed = base.model_copy(update=dict(overrides.compaction))
        if changed != compaction:
            overridden.append("compaction")
        compaction = changed
    servers, rules = _tools(recorded, overrides, configured_mcp, default_approval_rules)
    if (
        overrides.approval_rules is not None
        and recorded is not None
        and dict(overrides.approval_rules) != (recorded.approval_rules or {})
    ):
        overridden.append("approval_rules")
    subagents = _subagents(recorded, overrides.subagents, default_subagents, overridden)
    return Resolved(
        approval=approval,
        max_turns=pick("max_turns", overrides.max_turns, DEFAULT_MAX_TURNS),
        compaction=compaction,
        retry=pick("retry", overrides.retry, default_retry or Session.DEFAULT_RETRY),
        thinking_level=pick("thinking_level", overrides.thinking_level, None),
        model=recorded_model(recorded),
        restored=recorded,
        overridden=tuple(overridden),
        mcp=servers,
        approval_rules=rules,
        subagents=subagents,
    )


def _subagents(
    recorded: SettingsPayload | None, given: bool | None, default: bool, overridden: list[str]
) -> bool:
    """Whether the session offers ``run_subagent`` (``resolve``)."""
    if recorded is None:
        return default if given is None else given
    was = RUN_SUBAGENT in (recorded.tools or ())
    if given is None:
        return was
    if given != was:
        overridden.append("tools")
    return given


def _tools(
    recorded: SettingsPayload | None,
    overrides: Overrides,
    configured: Mapping[str, McpServer] | None,
    default_rules: Mapping[str, str] | None,
) -> tuple[dict[str, McpServer], dict[str, str]]:
    """The MCP servers and approval rules of ``resolve`` (R-SET-3, R-MCP-4)."""
    from penguin._mcp_config import resolve_servers

    if recorded is None:
        servers = dict(overrides.mcp if overrides.mcp is not None else configured or {})
    else:
        servers = resolve_servers(
            recorded.mcp or {}, configured=configured or {}, explicit=overrides.mcp
        )
    if overrides.approval_rules is not None:
        rules = dict(overrides.approval_rules)
    elif recorded is not None:
        rules = dict(recorded.approval_rules or {})
    else:
        rules = dict(default_rules or {})
    return servers, rules


async def open_session(
    root: DataRoot,
    *,
    llm: LLM,
    environment: Callable[[LLM, Path], Environment],
    resolved: Resolved,
    session_id: str | None = None,
    workspace: Path,
    system_prompt: str = "",
    project: str,
    agent: str,
    fsync: FsyncPolicy = "turn",
    source: Literal["subagent", "schedule"] | None = None,
    defaults: Mapping[str, Any] | None = None,
    **engine_options: Any,
) -> Session:
    """A new session (``session_id`` None) or the recorded one resumed, with ``resolved``'s
    settings; the environment is built for ``workspace`` once the model is known.
    ``engine_options``: the engine's own keyword options of features (``sandbox``,
    ``network``…) given explicitly, passed on to ``Session.create`` / ``resume_session``.
    ``defaults``: the host's configured ones (``snapshots``…): a new session takes them, a
    resumed one only those its settings record does not state (R-SET-3: the record wins)."""
    from replay import resume_session

    env = environment(llm, workspace)
    given = dict(defaults or {})
    if session_id is not None:
        recorded = recorded_options(resolved.restored)
        given = {k: v for k, v in given.items() if k not in recorded}
    options = {**given, **resolved.session_options(), **engine_options}
    if session_id is None:
        return await Session.create(
            llm=llm,
            environment=env,
            root=root,
            workspace=workspace,
            system_prompt=system_prompt,
            project=project,
            agent=agent,
            fsync=fsync,
            source=source,
            **options,
        )
    return await resume_session(
        root,
        session_id,
        llm=llm,
        environment=env,
        workspace=workspace,
        project=project,
        agent=agent,
        fsync=fsync,
        **options,
    )


def settings_line(settings: SettingsPayload | None) -> str:
    """The restored settings on one line (``penguin resume``, ``chat SESSION``, R-SET-3)."""
    if settings is None:
        return "settings: none recorded (the defaults apply)"
    parts: list[str] = []
    if settings.approval:
        parts.append(f"approval {settings.approval}")
    if settings.max_turns is not None:
        parts.append(f"max turns {settings.max_turns}")
    c = settings.compaction
    if c is False:
        parts.append("compaction off")
    elif isinstance(c, dict):
        limits = []
        if isinstance(c.get("max_context_length"), int) and c["max_context_length"] > 0:
            limits.append(f"at {c['max_context_length']} tokens")
        if isinstance(c.get("max_session_turns"), int) and c["max_session_turns"] > 0:
            limits.append(f"every {c['max_session_turns']} turns")
        parts.append(" ".join([f"compaction {c.get('mode', 'summarize')}", *limits]))
    if isinstance(settings.retry, dict) and "max_reconnects" in settings.retry:
        parts.append(f"retries {settings.retry['max_reconnects']}")
    if settings.thinking_level:
        parts.append(f"thinking {settings.thinking_level}")
    if isinstance(settings.model, dict):
        model = f"model {settings.model.get('provider', '?')}/{settings.model.get('model_id', '?')}"
        if settings.model.get("base_url"):
            model += f" at {settings.model['base_url']}"
        parts.append(model)
    for key in _EXTRA_KEYS:
        value = getattr(settings, key, None)
        if value is not None:
            parts.append(f"{key} {_short(value)}")
    return "settings: " + "; ".join(parts)


# Keys features add to the record, shown as they are (the sandbox, MCP servers…).
_EXTRA_KEYS: tuple[str, ...] = ("sandbox", "network", "mcp", "approval_rules", "tools", "snapshots")


def _short(value: object) -> str:
    if isinstance(value, dict):
        return ",".join(sorted(str(k) for k in value))
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value).lower() if isinstance(value, bool) else str(value)
