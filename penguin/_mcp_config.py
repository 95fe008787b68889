"""MCP servers as the user configures them: ``[mcp.servers.NAME]`` in ``config.toml`` and the
``mcp`` object of ``penguin serve``'s session body (SPEC §26).

Owns: checking a server table (``command``/``args``/``env``/``cwd`` or ``url``/``headers``, plus
``timeout_ms``, ``connect_timeout_ms``, ``approval`` and per-tool ``tools`` rules), expanding
``${VAR}`` in ``env``/``headers`` values from the environment when a session starts (so a token
need not be written into the file), writing the tables back, and choosing the servers of a resumed
session: an explicit one, else the configured one of that name, else the recorded one (no
secrets).  Does not: connect to servers (``engine.McpEnvironment``) or record anything.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from engine import McpServer

__all__ = [
    "McpConfigError",
    "check_rules_table",
    "servers_from_body",
    "check_servers",
    "dump_servers",
    "resolve_servers",
    "servers_from_tables",
]

_KEYS: Final[dict[str, type]] = {
    "command": str,
    "args": list,
    "env": dict,
    "cwd": str,
    "url": str,
    "headers": dict,
    "timeout_ms": int,
    "connect_timeout_ms": int,
    "approval": str,
    "tools": dict,
}
_NAME: Final = re.compile(r"^[A-Za-z0-9_-]{1,48}$")
_VAR: Final = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_RULES: Final = ("allow", "ask", "deny")


class McpConfigError(ValueError):
    """A server table that cannot be used; the message names the server and the key."""


def check_servers(tables: object, *, where: str) -> dict[str, dict[str, Any]]:
    """The ``servers`` tables checked for shape (no environment is read yet)."""
    if not isinstance(tables, Mapping):
        raise McpConfigError(f"{where}: mcp.servers must be a table of servers")
    out: dict[str, dict[str, Any]] = {}
    for name, table in tables.items():
        at = f"{where}: mcp server {name!r}"
        if not isinstance(name, str) or not _NAME.match(name):
            raise McpConfigError(f"{at}: the name must be 1-48 of [A-Za-z0-9_-]")
        if not isinstance(table, Mapping):
            raise McpConfigError(f"{at}: expected a table")
        unknown = set(table) - set(_KEYS)
        if unknown:
            known = ", ".join(_KEYS)
            raise McpConfigError(f"{at}: unknown key {sorted(unknown)[0]!r} (keys: {known})")
        for key, raw in table.items():
            value: Any = raw
            kind: type = _KEYS[key]
            if not _is(value, kind):
                raise McpConfigError(f"{at}: {key} must be a {kind.__name__}")
            if key in ("env", "headers", "tools") and not all(
                isinstance(k, str) and isinstance(v, str) for k, v in value.items()
            ):
                raise McpConfigError(f"{at}: {key} must map names to strings")
            if key == "args" and not all(isinstance(a, str) for a in value):
                raise McpConfigError(f"{at}: args must be a list of strings")
        if ("command" in table) == ("url" in table):
            raise McpConfigError(f"{at}: give either command (stdio) or url (HTTP)")
        if "url" in table and ({"args", "env", "cwd"} & set(table)):
            raise McpConfigError(f"{at}: args, env and cwd apply to a command server only")
        if "command" in table and "headers" in table:
            raise McpConfigError(f"{at}: headers apply to a url server only")
        for rule in [table.get("approval"), *dict(table.get("tools") or {}).values()]:
            if rule is not None and rule not in _RULES:
                raise McpConfigError(f"{at}: approval rules are allow, ask or deny, not {rule!r}")
        out[name] = dict(table)
    return out


_PATTERN: Final = re.compile(r"^[A-Za-z0-9_*-]{1,64}$")


def check_rules_table(table: object, *, where: str) -> dict[str, str]:
    """The ``[approval_rules]`` table: tool names or globs (``fs__*``) to allow/ask/deny."""
    if not isinstance(table, Mapping):
        raise McpConfigError(f"{where}: [approval_rules] must be a table of rules")
    for key, rule in table.items():
        if not isinstance(key, str) or not _PATTERN.match(key):
            raise McpConfigError(
                f"{where}: approval rule {key!r}: use a tool name or a glob such as 'fs__*'"
            )
        if rule not in _RULES:
            raise McpConfigError(
                f"{where}: approval rule {key!r}: {rule!r} is not one of allow, ask, deny"
            )
    return dict(table)


def _is(value: object, kind: type) -> bool:
    return isinstance(value, kind) and not (kind is int and isinstance(value, bool))


def _expand(value: str, *, at: str, environ: Mapping[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        found = environ.get(match.group(1))
        if found is None:
            raise McpConfigError(f"{at}: the environment variable {match.group(1)} is not set")
        return found

    return _VAR.sub(one, value)


def servers_from_tables(
    tables: Mapping[str, Mapping[str, Any]],
    *,
    where: str,
    environ: Mapping[str, str] | None = None,
) -> dict[str, McpServer]:
    """``McpServer``s from checked tables, ``${VAR}`` expanded in env and header values."""
    from engine import McpServer

    env_vars = os.environ if environ is None else environ
    servers: dict[str, McpServer] = {}
    for name, table in check_servers(tables, where=where).items():
        at = f"{where}: mcp server {name!r}"
        env = {
            k: _expand(v, at=f"{at} env {k}", environ=env_vars)
            for k, v in dict(table.get("env") or {}).items()
        }
        headers = {
            k: _expand(v, at=f"{at} header {k}", environ=env_vars)
            for k, v in dict(table.get("headers") or {}).items()
        }
        command = table.get("command")
        try:
            servers[name] = McpServer(
                command=None if command is None else [command, *table.get("args", [])],
                url=table.get("url"),
                env=env or None,
                headers=headers or None,
                cwd=table.get("cwd"),
                timeout_ms=table.get("timeout_ms"),
                connect_timeout_ms=table.get("connect_timeout_ms"),
                approval=table.get("approval"),
                tools=table.get("tools"),
            )
        except (TypeError, ValueError) as exc:
            raise McpConfigError(f"{at}: {exc}") from None
    return servers


def resolve_servers(
    recorded: Mapping[str, Mapping[str, Any]],
    *,
    configured: Mapping[str, McpServer],
    explicit: Mapping[str, McpServer] | None = None,
) -> dict[str, McpServer]:
    """The servers of a resumed session (R-MCP-4): each recorded one by name — the explicit
    definition, else the configured one (it has the secrets) — plus any explicit server that is
    new.  A recorded server that neither names is gone: it is kept, never started, and its
    recorded tools fail (a host never runs a command or reaches a URL only a trace names — a
    trace may come from elsewhere, ``penguin import``)."""
    from engine import McpServer

    chosen: dict[str, McpServer] = {}
    for name, record in recorded.items():
        if explicit and name in explicit:
            chosen[name] = explicit[name]
        elif name in configured:
            chosen[name] = configured[name]
        elif isinstance(record, Mapping):
            try:
                chosen[name] = McpServer.from_record(
                    record,
                    unavailable=f"not configured here (add [mcp.servers.{name}] to config.toml)",
                )
            except (TypeError, ValueError):
                continue  # a record this version cannot use
    for name, server in (explicit or {}).items():
        chosen.setdefault(name, server)
    return chosen


def _toml_string(value: str) -> str:
    out = ['"']
    for ch in value:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml_string(key)


def _toml_value(value: Any) -> str:
    if isinstance(value, str):
        return _toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_string(str(v)) for v in value) + "]"
    return str(int(value))


def dump_servers(tables: Mapping[str, Mapping[str, Any]]) -> str:
    """The ``[mcp.servers.NAME]`` tables as TOML text (for writing config.toml back)."""
    lines: list[str] = []
    for name in sorted(tables):
        table = tables[name]
        lines.append(f"\n[mcp.servers.{_toml_key(name)}]")
        for key in _KEYS:
            if key in table and not isinstance(table[key], dict):
                lines.append(f"{key} = {_toml_value(table[key])}")
        for key in ("env", "headers", "tools"):
            if table.get(key):
                lines.append(f"\n[mcp.servers.{_toml_key(name)}.{key}]")
                for k in sorted(table[key]):
                    lines.append(f"{_toml_key(k)} = {_toml_string(table[key][k])}")
    return "\n".join(lines) + ("\n" if lines else "")


def servers_from_body(
    tables: Mapping[str, Mapping[str, Any]], *, configured: Mapping[str, McpServer]
) -> dict[str, McpServer]:
    """The ``mcp`` object of ``penguin serve``'s session body: each name maps to ``{}`` (the
    configured server of that name; ``approval``/``tools`` may be given to change its rules) or
    to an HTTP server (``url``, ``headers``, timeouts, rules).  A request never names a command
    to run: stdio servers come from config.toml only.  Raises ``McpConfigError``."""
    from dataclasses import replace

    from engine import McpServer

    servers: dict[str, McpServer] = {}
    for name, table in tables.items():
        given = {k: v for k, v in table.items() if v is not None}
        if not _NAME.match(name):
            raise McpConfigError(f"mcp server {name!r}: the name must be 1-48 of [A-Za-z0-9_-]")
        try:
            if "url" in given:
                servers[name] = McpServer(**given)
                continue
            if name not in configured:
                known = ", ".join(sorted(configured)) or "none"
                raise McpConfigError(
                    f"mcp server {name!r} is not configured (configured: {known}); give a url, "
                    "or add it to the server's config.toml"
                )
            servers[name] = replace(configured[name], **given)
        except (TypeError, ValueError) as exc:
            raise McpConfigError(f"mcp server {name!r}: {exc}") from None
    return servers
