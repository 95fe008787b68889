"""The sandbox on the command line (SPEC §25): ``--sandbox``, ``--network``, config.toml's
``sandbox`` and ``network``, what ``run`` shows, and a kernel without Landlock (R-BOX-1..4)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from engine import landlock_abi
from eventstore import DataRoot, ToolCallOutputPayload, read_trace
from penguin.cli import app

needs_landlock = pytest.mark.skipif(landlock_abi() < 4, reason="no Landlock with TCP rules")

ESCAPE: dict[str, Any] = {
    "responses": [
        [{"tool_call": {"name": "exec_command", "arguments": {"cmd": "echo x > ../escaped.txt"}}}],
        [{"text": "done"}],
    ]
}


def invoke(*args: str | Path) -> Result:
    result = CliRunner().invoke(app, [str(a) for a in args])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


def run(tmp_path: Path, *extra: str, script: dict[str, Any] = ESCAPE) -> Result:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    home = tmp_path / "home"
    return invoke(
        "--home", home, "--init", "run", "-m", "go", "--script", path, "--workspace", ws, *extra
    )


def head(result: Result) -> dict[str, Any]:
    line = result.stdout.splitlines()[0]
    value: dict[str, Any] = json.loads(line)
    return value


def tool_outputs(home: Path) -> list[ToolCallOutputPayload]:
    (info,) = DataRoot(home).sessions()
    return [
        r.payload
        for r in read_trace(info.files).records
        if isinstance(r.payload, ToolCallOutputPayload)
    ]


@needs_landlock
def test_run_confines_the_tools_by_default(tmp_path: Path) -> None:
    """R-BOX-3: workspace-write with the network off; the escape is a failed tool output."""
    result = run(tmp_path, "--json")
    assert result.exit_code == 0, result.output
    assert head(result)["sandbox"] == {"mode": "workspace-write", "network": False}
    (out,) = tool_outputs(tmp_path / "home")
    assert out.stop_reason == "failed" and "Permission denied" in out.output
    assert not (tmp_path / "escaped.txt").exists()


def test_run_with_the_sandbox_off_says_so(tmp_path: Path) -> None:
    """R-BOX-3: off is chosen explicitly and shown."""
    result = run(tmp_path, "--sandbox", "off")
    assert result.exit_code == 0, result.output
    assert "sandbox OFF: tools run unconfined" in result.stderr
    assert (tmp_path / "escaped.txt").read_text() == "x\n"


@needs_landlock
def test_config_sets_the_sandbox_of_new_sessions_and_a_flag_wins(tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert invoke("--home", home, "--init", "config", "set", "sandbox", "read-only").exit_code == 0
    assert invoke("--home", home, "config", "set", "network", "true").exit_code == 0
    bad = invoke("--home", home, "config", "set", "network", "sometimes")
    assert bad.exit_code == 2 and "network must be one of true, false" in bad.stderr
    result = run(tmp_path, "--json")
    assert head(result)["sandbox"] == {"mode": "read-only", "network": True}
    result = run(tmp_path, "--json", "--sandbox", "workspace-write", "--no-network")
    assert head(result)["sandbox"] == {"mode": "workspace-write", "network": False}
    # TOML's own boolean is read too.
    (home / "config.toml").write_text('[defaults]\nsandbox = "off"\nnetwork = false\n')
    result = run(tmp_path, "--json")
    assert head(result)["sandbox"] == {"mode": "off", "network": False}


def test_an_unknown_mode_is_a_usage_error(tmp_path: Path) -> None:
    result = run(tmp_path, "--sandbox", "none")
    assert result.exit_code == 2
    assert "--sandbox" in result.output


def test_a_kernel_without_landlock_refuses_to_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R-BOX-2: exit 2 with the reason, nothing run; --sandbox off still runs."""
    monkeypatch.setattr("engine._sandbox.landlock_abi", lambda: 0)
    result = run(tmp_path)
    assert result.exit_code == 2
    assert "penguin: sandbox 'workspace-write' needs Linux Landlock ABI 3 or later" in result.stderr
    assert DataRoot(tmp_path / "home").sessions() == []
    assert not (tmp_path / "escaped.txt").exists()
    assert run(tmp_path, "--sandbox", "off").exit_code == 0
