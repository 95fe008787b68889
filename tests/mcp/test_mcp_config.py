"""``[mcp.servers.NAME]`` in config.toml (R-MCP-1, R-MCP-3, R-SET-4): checked at load, kept by
``save_config``, ``${VAR}`` expanded when used, and the servers of a resumed session chosen."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine import McpServer
from penguin._mcp_config import McpConfigError, resolve_servers, servers_from_tables
from penguin.cli.config import load_config, save_config
from penguin.cli.errors import CliError

CONFIG = """\
[defaults]
approve = "ask"

[approval_rules]
exec_command = "ask"
"fs__write*" = "deny"

[mcp.servers.fs]
command = "fs-server"
args = ["--root", "/data"]
approval = "allow"

[mcp.servers.fs.env]
FS_TOKEN = "${FS_TOKEN}"

[mcp.servers.fs.tools]
delete = "deny"

[mcp.servers.web]
url = "https://example.com/mcp"
timeout_ms = 5000

[mcp.servers.web.headers]
Authorization = "Bearer ${WEB_TOKEN}"
"""


def test_r_mcp_1_servers_load_save_and_expand(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(CONFIG)
    config = load_config(tmp_path)
    assert config.values == {"approve": "ask"}
    assert set(config.mcp_servers) == {"fs", "web"}
    # penguin config set rewrites the file: the servers survive, unexpanded.
    config.values["model"] = "m"
    save_config(config)
    again = load_config(tmp_path)
    assert again.mcp_servers == config.mcp_servers
    assert again.approval_rules == {"exec_command": "ask", "fs__write*": "deny"}
    assert "${FS_TOKEN}" in (tmp_path / "config.toml").read_text()

    servers = servers_from_tables(
        again.mcp_servers, where="config.toml", environ={"FS_TOKEN": "f1", "WEB_TOKEN": "w2"}
    )
    fs, web = servers["fs"], servers["web"]
    assert fs.command == ("fs-server", "--root", "/data")
    assert fs.env == {"FS_TOKEN": "f1"}
    assert (fs.approval, fs.tools) == ("allow", {"delete": "deny"})
    assert web.headers == {"Authorization": "Bearer w2"}
    assert web.timeout_ms == 5000
    with pytest.raises(McpConfigError, match="WEB_TOKEN is not set"):
        servers_from_tables(again.mcp_servers, where="config.toml", environ={"FS_TOKEN": "x"})


@pytest.mark.parametrize(
    ("table", "error"),
    [
        ('[mcp.servers.a]\nargs = ["x"]\n', "either command"),
        ('[mcp.servers.a]\ncommand = "x"\nurl = "http://h/"\n', "either command"),
        ('[mcp.servers.a]\ncommand = "x"\ncolour = "red"\n', "unknown key 'colour'"),
        ('[mcp.servers.a]\ncommand = ["x"]\n', "command must be a str"),
        ('[mcp.servers.a]\nurl = "http://h/"\nenv = {A = "1"}\n', "apply to a command"),
        ('[mcp.servers.a]\ncommand = "x"\napproval = "sometimes"\n', "allow, ask or deny"),
        ('[mcp.servers."a b"]\ncommand = "x"\n', "the name must be"),
        ("[mcp.other]\nx = 1\n", "only [mcp.servers.NAME]"),
        ('[approval_rules]\nexec_command = "maybe"\n', "not one of allow, ask, deny"),
        ('[approval_rules]\n"a b" = "allow"\n', "use a tool name"),
    ],
)
def test_a_bad_server_table_names_the_file_and_the_server(
    tmp_path: Path, table: str, error: str
) -> None:
    (tmp_path / "config.toml").write_text(table)
    with pytest.raises(CliError, match=r"config\.toml") as caught:
        load_config(tmp_path)
    assert error in str(caught.value)


def test_r_mcp_4_a_resumed_session_gets_its_recorded_servers() -> None:
    recorded = {
        "fs": {"transport": "stdio", "command": ["fs-server"]},
        "gone": {"transport": "http", "url": "https://example.com/mcp"},
        "local": {"transport": "stdio", "command": ["local-server", "-v"]},
    }
    configured = {"fs": McpServer(command=["fs-server"], env={"FS_TOKEN": "secret"})}
    explicit = {"gone": McpServer(url="https://example.com/mcp", headers={"A": "b"})}
    chosen = resolve_servers(recorded, configured=configured, explicit=explicit)
    assert chosen["fs"] is configured["fs"]  # the configured one has the secrets
    assert chosen["gone"] is explicit["gone"]
    # Only the trace names it: kept (its recorded tools stay listed) but never started.
    assert chosen["local"].command == ("local-server", "-v")
    assert chosen["local"].unavailable is not None
    assert "[mcp.servers.local]" in chosen["local"].unavailable
    assert chosen["fs"].unavailable is None
