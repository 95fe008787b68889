"""The user's settings file ``<home>/config.toml``.

Owns: reading it (stdlib ``tomllib``), checking its keys and values, and writing it back as one
flat ``[defaults]`` table of strings followed by the ``[mcp.servers.NAME]`` tables (MCP servers,
checked by ``penguin._mcp_config``).  Does not: hold secrets — an API key is never stored, only
the name of the environment variable that holds it (``api_key_env``).
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from eventstore import write_private

from .errors import CliError
from .terminal.safe import safe

if TYPE_CHECKING:
    from engine import McpServer
    from projections import Price

__all__ = [
    "CONFIG_KEYS",
    "Config",
    "config_path",
    "load_config",
    "mcp_servers",
    "price_table",
    "save_config",
    "snapshot_settings",
]

CONFIG_NAME: Final = "config.toml"
_TABLE: Final = "defaults"
CONFIG_KEYS: Final[dict[str, str]] = {
    "provider": "default model provider: openai or anthropic",
    "model": "default model name (e.g. gpt-4o)",
    "base_url": "API base URL (e.g. a local OpenAI-compatible server)",
    "api_key_env": "name of the environment variable holding the API key",
    "approve": "tool approval when not given on the command line: ask, allow-all or deny-all",
    "thinking": "thinking level when not given on the command line: none, minimal, low, medium "
    "or high",
    "sandbox": "tool sandbox of new sessions: workspace-write, read-only or off",
    "network": "whether tools of new sessions may use TCP: true or false",
    "snapshots": "workspace snapshots before each turn's tools (for penguin rewind): true or false",
}
_CHOICES: Final[dict[str, tuple[str, ...]]] = {
    "provider": ("openai", "anthropic"),
    "approve": ("ask", "allow-all", "deny-all"),
    "thinking": ("none", "minimal", "low", "medium", "high"),
    "sandbox": ("workspace-write", "read-only", "off"),
    "network": ("true", "false"),
    "snapshots": ("true", "false"),
}
# Names that look like a secret: refused with a pointer to api_key_env.
_SECRET_HINTS: Final = ("api_key", "apikey", "key", "token", "secret", "password")


@dataclass(slots=True)
class Config:
    """The ``[defaults]`` table; every value a non-empty string."""

    path: Path
    values: dict[str, str] = field(default_factory=dict)
    # ``[mcp.servers.NAME]`` tables, checked for shape; ``${VAR}`` is expanded when used.
    mcp_servers: dict[str, dict[str, Any]] = field(default_factory=dict)
    # ``[approval_rules]``: tool name or glob -> allow/ask/deny (R-MCP-3).
    approval_rules: dict[str, str] = field(default_factory=dict)
    # ``[prices."MODEL"]``: USD per million tokens (input, output, cached_input), for the
    # estimated cost the Web App and the usage API show; a key may use ``*`` (docs/settings.md).
    prices: dict[str, dict[str, float]] = field(default_factory=dict)

    def get(self, key: str) -> str | None:
        return self.values.get(key)


def config_path(home: Path) -> Path:
    return home / CONFIG_NAME


def load_config(home: Path) -> Config:
    """The settings of ``home``; an absent file is an empty configuration.  A malformed file or
    an unknown key is an input error naming the file (and the line, for TOML syntax)."""
    path = config_path(home)
    shown = safe(str(path), keep_newlines=False)
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        return Config(path)
    except IsADirectoryError:
        raise CliError(f"{shown}: is a directory, not a config file") from None
    except tomllib.TOMLDecodeError as exc:
        raise CliError(f"{shown}: not valid TOML: {exc}") from None
    table = data.get(_TABLE, {})
    if not isinstance(table, dict) or set(data) - {_TABLE, "mcp", "approval_rules", "prices"}:
        raise CliError(
            f"{shown}: expected only a [{_TABLE}] table of settings "
            "(and [approval_rules], [mcp.servers.NAME], [prices.MODEL])"
        )
    prices = _check_prices(data.get("prices", {}), shown)
    from penguin._mcp_config import McpConfigError, check_rules_table

    try:
        rules = check_rules_table(data.get("approval_rules", {}), where=shown)
    except McpConfigError as exc:
        raise CliError(str(exc)) from None
    mcp = data.get("mcp", {})
    if not isinstance(mcp, dict) or set(mcp) - {"servers"}:
        raise CliError(f"{shown}: the [mcp] table holds only [mcp.servers.NAME] tables")
    from penguin._mcp_config import McpConfigError, check_servers

    try:
        servers = check_servers(mcp.get("servers", {}), where=shown)
    except McpConfigError as exc:
        raise CliError(str(exc)) from None
    values: dict[str, str] = {}
    for key, value in table.items():
        if isinstance(value, bool):  # `network = true` is TOML's own spelling (snapshots too)
            value = "true" if value else "false"
        check_setting(key, value, where=shown)
        values[key] = value
    return Config(path, values, servers, dict(rules), prices)


_PRICE_KEYS: Final = ("input", "output", "cached_input")


def _check_prices(table: object, shown: str) -> dict[str, dict[str, float]]:
    """``[prices."MODEL"]`` tables of non-negative numbers (``input`` and ``output`` required)."""
    from projections import Price

    if not isinstance(table, dict):
        raise CliError(f'{shown}: [prices] holds one table per model, e.g. [prices."gpt-4o"]')
    out: dict[str, dict[str, float]] = {}
    for model, row in table.items():
        where = f"{shown}: [prices.{safe(repr(model))}]"
        if not isinstance(row, dict) or set(row) - set(_PRICE_KEYS):
            raise CliError(f"{where}: expected only the keys {', '.join(_PRICE_KEYS)}")
        if not {"input", "output"} <= set(row):
            raise CliError(f"{where}: input and output (USD per million tokens) are required")
        values: dict[str, float] = {}
        for key, value in row.items():
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise CliError(f"{where}: {key} must be a number (USD per million tokens)")
            values[key] = float(value)
        try:
            Price(**values)
        except ValueError as exc:
            raise CliError(f"{where}: {exc}") from None
        out[model] = values
    return out


def price_table(config: Config | None) -> dict[str, Price]:
    """The built-in prices overridden and extended by the config's ``[prices]`` tables."""
    from projections import DEFAULT_PRICES, Price

    table = dict(DEFAULT_PRICES)
    if config is not None:
        table.update({model: Price(**row) for model, row in config.prices.items()})
    return table


def mcp_servers(config: Config) -> dict[str, McpServer]:
    """The configured MCP servers (SPEC §26), ``${VAR}`` expanded from the environment; a bad
    table or an unset variable is an input error naming the file."""
    if not config.mcp_servers:
        return {}
    from penguin._mcp_config import McpConfigError, servers_from_tables

    try:
        return servers_from_tables(config.mcp_servers, where=safe(str(config.path)))
    except McpConfigError as exc:
        raise CliError(str(exc)) from None


def snapshot_settings(config: Config | None) -> dict[str, Any]:
    """``Session.create``'s ``snapshots`` option: on unless the config says ``snapshots = false``
    (SPEC §27: the application takes them by default; the library does not)."""
    from engine import SnapshotSettings

    off = config is not None and config.get("snapshots") == "false"
    return {"snapshots": None if off else SnapshotSettings()}


def check_setting(key: str, value: object, *, where: str = "config") -> None:
    if key not in CONFIG_KEYS:
        if any(hint in key.lower() for hint in _SECRET_HINTS):
            raise CliError(
                f"{where}: API keys are never stored in the config file; set api_key_env to the "
                "name of the environment variable that holds the key"
            )
        known = ", ".join(CONFIG_KEYS)
        raise CliError(f"{where}: unknown setting {safe(key)!r} (settings: {known})")
    if not isinstance(value, str) or not value.strip():
        raise CliError(f"{where}: {key} must be a non-empty string")
    choices = _CHOICES.get(key)
    if choices is not None and value not in choices:
        raise CliError(f"{where}: {key} must be one of {', '.join(choices)}, not {safe(value)!r}")


def _quote(value: str) -> str:
    """A TOML basic string (the values are short settings, so escaping is simple)."""
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


def save_config(config: Config) -> None:
    """Write atomically (a temporary file renamed over the old one), mode 0600."""
    lines = [f"[{_TABLE}]"]
    lines += [f"{key} = {_quote(config.values[key])}" for key in sorted(config.values)]
    text = "\n".join(lines) + "\n"
    if config.approval_rules:
        text += "\n[approval_rules]\n" + "".join(
            f"{_quote(k)} = {_quote(v)}\n" for k, v in sorted(config.approval_rules.items())
        )
    if config.mcp_servers:
        from penguin._mcp_config import dump_servers

        text += dump_servers(config.mcp_servers)
    for model in sorted(config.prices):
        row = config.prices[model]
        text += f"\n[prices.{_quote(model)}]\n" + "".join(
            f"{key} = {row[key]!r}\n" for key in _PRICE_KEYS if key in row
        )
    write_private(config.path, text.encode("utf-8"), sync=True)
