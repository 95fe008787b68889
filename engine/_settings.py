"""Session settings as records (SPEC §23): what the engine states, and what it takes back.

Owns: the one conversion between the engine's options (approval, ``max_turns``,
``CompactionSettings``, ``RetryPolicy``, the default thinking level, the model endpoint) and the
``settings`` record's payload (R-SET-1), both ways; naming an approve function's mode; the
endpoint without secrets (R-SET-4).  Does not: decide when a record is written (the session,
R-SET-2) or build a model (hosts do, from ``recorded_model``).

How a feature adds a key (the sandbox, MCP servers…): an optional field on
``eventstore.SettingsPayload``, one line in ``settings_payload`` that fills it (``None`` when it
does not apply, so it is omitted on the wire), and one line in ``recorded_options`` that hands
it back to ``Session.create``/``resume_session`` as the keyword option of the same name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from eventstore import SettingsPayload

from ._config import CompactionSettings, RetryPolicy
from ._mcp import McpServer, SessionTools
from ._protocols import ApproveFn, allow_all, deny_all, llm_identity
from ._sandbox import SandboxPolicy
from ._snapshots import SnapshotSettings
from ._tools import builtin_tools

__all__ = [
    "APPROVAL_MODES",
    "SessionOptions",
    "approval_mode_of",
    "approve_for",
    "public_url",
    "recorded_approval",
    "recorded_model",
    "recorded_options",
    "recorded_servers",
    "settings_payload",
    "with_approval_mode",
]

APPROVAL_MODES: Final = ("ask", "allow-all", "deny-all", "callback")
"""R-SET-1: how tool calls are approved.  ``callback``: a library host's own function."""

# Query parameters that carry credentials in some providers' URLs (``?key=…``): never recorded.
_SECRET_PARAMS: Final = frozenset(
    {"key", "api_key", "apikey", "api-key", "token", "access_token", "sig", "signature", "secret"}
)


def with_approval_mode(approve: ApproveFn, mode: str) -> ApproveFn:
    """Tag a host's approve function with the mode it implements (``ask`` for one that asks a
    person), so that the settings record names it instead of ``callback``."""
    if mode not in APPROVAL_MODES:
        raise ValueError(f"unknown approval mode {mode!r}: one of {', '.join(APPROVAL_MODES)}")
    try:
        approve.approval_mode = mode  # type: ignore[attr-defined]
        return approve
    except AttributeError:  # a bound method or a builtin: wrap it

        def tagged(call: Any) -> Any:
            return approve(call)

        tagged.approval_mode = mode  # type: ignore[attr-defined]
        return tagged


def approval_mode_of(approve: ApproveFn | None) -> str:
    """The mode an approve function implements: ``allow_all`` / ``deny_all`` (and none given,
    which denies) by identity, a host's tagged function by its tag, else ``callback``."""
    if approve is None or approve is deny_all:
        return "deny-all"
    if approve is allow_all:
        return "allow-all"
    mode = getattr(approve, "approval_mode", None)
    return mode if isinstance(mode, str) and mode in APPROVAL_MODES else "callback"


def approve_for(mode: str | None) -> ApproveFn:
    """What a run that passes no approve function uses, given the recorded mode: ``allow-all``
    allows; everything else denies (the engine alone cannot ask a person or call a callback
    it does not have, and a session with no record denies, as before)."""
    return allow_all if mode == "allow-all" else deny_all


def public_url(url: str) -> str:
    """``url`` without what must never be recorded (R-SET-4): user info, and query parameters
    named like credentials."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<invalid URL>"
    netloc = parts.netloc.rpartition("@")[2]
    query = parts.query
    if query:
        kept = [
            (k, v)
            for k, v in parse_qsl(query, keep_blank_values=True)
            if k.lower() not in _SECRET_PARAMS
        ]
        query = urlencode(kept)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def _model_of(llm: object) -> dict[str, Any]:
    provider, model_id, _window = llm_identity(llm)
    model: dict[str, Any] = {"provider": provider, "model_id": model_id}
    base_url = getattr(llm, "base_url", None)
    if isinstance(base_url, str) and base_url:
        model["base_url"] = public_url(base_url)
    return model


def _compaction_of(compaction: CompactionSettings | None) -> dict[str, Any] | bool:
    if compaction is None:
        return False  # disabled (R-COMPACT-1)
    out = compaction.model_dump(exclude={"prompt"})
    if compaction.prompt != CompactionSettings.model_fields["prompt"].default:
        out["prompt"] = compaction.prompt
    return out


def _retry_of(retry: RetryPolicy) -> dict[str, Any]:
    return retry.model_dump(exclude_none=True)


def settings_payload(
    *,
    approval: str,
    max_turns: int,
    compaction: CompactionSettings | None,
    retry: RetryPolicy,
    thinking_level: str | None,
    llm: object,
    extra: Mapping[str, Any] | None = None,
) -> SettingsPayload:
    """The settings in effect (R-SET-1), complete.  ``extra``: keys of features layered on the
    engine (each an optional ``SettingsPayload`` field), ``None`` values omitted."""
    fields: dict[str, Any] = {k: v for k, v in (extra or {}).items() if v is not None}
    return SettingsPayload(
        approval=approval,
        max_turns=max_turns,
        compaction=_compaction_of(compaction),
        retry=_retry_of(retry),
        thinking_level=thinking_level,
        model=_model_of(llm),
        **fields,
    )


def _known(model: type[Any], values: Mapping[str, Any]) -> dict[str, Any]:
    # Keys a newer writer added are ignored here (the record keeps them).
    return {k: v for k, v in values.items() if k in model.model_fields}


def recorded_options(settings: SettingsPayload | None) -> dict[str, Any]:
    """The keyword options of ``Session.create`` / ``resume_session`` that a recorded settings
    record gives (R-SET-3): only the keys it holds, so the defaults stay for the rest."""
    if settings is None:
        return {}
    options: dict[str, Any] = {}
    if settings.max_turns is not None:
        options["max_turns"] = settings.max_turns
    if settings.compaction is False:
        options["compaction"] = None
    elif isinstance(settings.compaction, dict):
        options["compaction"] = CompactionSettings(
            **_known(CompactionSettings, settings.compaction)
        )
    if settings.retry is not None:
        options["retry"] = RetryPolicy(**_known(RetryPolicy, settings.retry))
    if settings.thinking_level is not None:
        options["thinking_level"] = settings.thinking_level
    if settings.sandbox is not None:
        options["sandbox"] = settings.sandbox
    if settings.network is not None:
        options["network"] = settings.network
    if settings.snapshots is False:
        options["snapshots"] = None
    elif isinstance(settings.snapshots, dict):
        options["snapshots"] = SnapshotSettings(**_known_fields(settings.snapshots))
    if settings.mcp:
        options["mcp"] = recorded_servers(settings.mcp)
    if settings.approval_rules:
        options["approval_rules"] = dict(settings.approval_rules)
    return options


def recorded_servers(recorded: Mapping[str, Any]) -> dict[str, McpServer]:
    """The MCP servers a settings record names, rebuilt from what it keeps (the command or the
    URL; no env or header values, R-SET-4 — a host adds them from its configuration).  An entry
    this version cannot use is left out."""
    servers: dict[str, McpServer] = {}
    for name, record in recorded.items():
        if not isinstance(record, Mapping):
            continue
        try:
            servers[name] = McpServer.from_record(record)
        except (TypeError, ValueError):
            continue
    return servers


# The built-in tools' names, sorted: a session offering exactly these records no ``tools``.
_BUILTIN_NAMES: Final = sorted(tool.name for tool in builtin_tools())


def _known_fields(values: Mapping[str, Any]) -> dict[str, Any]:
    names = {"max_file_bytes", "max_snapshot_bytes"}
    return {k: v for k, v in values.items() if k in names and isinstance(v, int)}


def feature_settings(
    sandbox: SandboxPolicy | None,
    snapshots: SnapshotSettings | None,
    tools: SessionTools | None = None,
    local_tools: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The settings record's keys of the sandbox, the snapshots, the MCP servers and the
    approval rules in force (R-SET-1); a server's env and header values are never among them
    (R-SET-4).  ``local_tools``: the names of the environment's own tools; recorded as
    ``tools`` only when they are not the four built-ins (e.g. ``run_subagent`` added), so a
    host that resumes the session offers the same set (R-SET-3)."""
    out: dict[str, Any] = {}
    if local_tools is not None and sorted(local_tools) != _BUILTIN_NAMES:
        out["tools"] = list(local_tools)
    if tools is not None:
        out["mcp"] = {name: server.record() for name, server in tools.servers.items()} or None
        out["approval_rules"] = dict(tools.rules) or None
    if sandbox is not None:
        out["sandbox"], out["network"] = sandbox.mode, sandbox.network
    if snapshots is None or not snapshots.enabled:
        out["snapshots"] = False
    else:
        out["snapshots"] = {
            "max_file_bytes": snapshots.max_file_bytes,
            "max_snapshot_bytes": snapshots.max_snapshot_bytes,
        }
    return out


def recorded_model(settings: SettingsPayload | None) -> tuple[str, str, str | None] | None:
    """``(provider, model_id, base_url)`` of the recorded endpoint, or ``None``."""
    if settings is None or not isinstance(settings.model, dict):
        return None
    provider, model_id = settings.model.get("provider"), settings.model.get("model_id")
    if not isinstance(provider, str) or not isinstance(model_id, str):
        return None
    base_url = settings.model.get("base_url")
    return provider, model_id, base_url if isinstance(base_url, str) else None


def recorded_approval(settings: SettingsPayload | None) -> str:
    """The recorded approval mode, ``deny-all`` when none is recorded (what an omitted
    ``approve`` always meant)."""
    if settings is not None and settings.approval is not None:
        return settings.approval
    return "deny-all"


@dataclass(slots=True)
class SessionOptions:
    """The options a ``Session`` runs with, which its settings records state (R-SET-1).

    ``extra`` holds the keys of features layered on the engine (each an optional
    ``SettingsPayload`` field; ``None`` when it does not apply)."""

    max_turns: int
    compaction: CompactionSettings | None
    retry: RetryPolicy
    thinking_level: str | None
    llm: object
    extra: dict[str, Any] = field(default_factory=dict)

    def for_run(
        self, recorded: SettingsPayload | None, approve: ApproveFn | None, thinking: str | None
    ) -> tuple[SettingsPayload, ApproveFn, str | None]:
        """A run's settings record, approve function and thinking level (R-SET-3): what the
        run does not pass, the recorded settings (approval) and these options give."""
        approval = recorded_approval(recorded) if approve is None else approval_mode_of(approve)
        fn = approve if approve is not None else approve_for(approval)
        return self.payload(approval), fn, thinking if thinking is not None else self.thinking_level

    def payload(self, approval: str) -> SettingsPayload:
        return settings_payload(
            approval=approval,
            max_turns=self.max_turns,
            compaction=self.compaction,
            retry=self.retry,
            thinking_level=self.thinking_level,
            llm=self.llm,
            extra=self.extra,
        )
