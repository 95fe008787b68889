"""The trace-tool commands (SPEC §21, R-TOOL-1…5) through typer's CliRunner: ``inspect --at``,
``diff``, ``repair``, ``export`` and ``import`` — output shapes, exit codes, terminal safety."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner, Result

from penguin.cli._cli import app

ROOT = Path(__file__).resolve().parents[2]
TRACES = ROOT / "fixtures" / "traces"


def invoke(*args: str) -> Result:
    return CliRunner().invoke(app, list(args), catch_exceptions=False)


def fixture(name: str) -> list[Path]:
    return sorted((TRACES / name).rglob("*.jsonl"))


# --------------------------------------------------------------------------- inspect --at


def test_inspect_at_prints_the_request_with_synthesized_messages_marked() -> None:
    (path,) = fixture("abort_stream")
    result = invoke("inspect", str(path), "--at", "1:13")
    assert result.exit_code == 0, result.output
    assert "the request sent here" in result.output
    marked = [line for line in result.output.splitlines() if line.startswith("*")]
    assert len(marked) == 1 and "[turn_aborted]" in marked[0]


def test_inspect_at_json() -> None:
    (path,) = fixture("abort_stream")
    result = invoke("inspect", str(path), "--at", "1:13", "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.output)
    request = data["request"]
    assert request["new_messages"] == 2
    assert [m["synthesized"] for m in request["messages"]] == [False, False, True, False]
    assert request["messages"][-1]["message"]["payload"]["text"] == "Just the short version, please"
    other = json.loads(invoke("inspect", str(path), "--at", "1:11", "--json").output)
    assert "request" not in other and other["context"]["carry_over"] == 1


def test_inspect_at_bad_position_is_exit_2() -> None:
    (path,) = fixture("plain")
    for at in ("x", "9:0", "1:99999"):
        result = invoke("inspect", str(path), "--at", at)
        assert result.exit_code == 2, (at, result.output)
