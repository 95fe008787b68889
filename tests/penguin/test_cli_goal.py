"""``penguin run --goal``, ``penguin resume --goal-continue`` and the goal lines of ``inspect``
(SPEC R-GOAL-8), end to end through typer's CliRunner with scripted models and the built-in
tools writing the real goal file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner, Result

from eventstore import DataRoot, GoalFinishedPayload, read_trace
from penguin.cli import app
from penguin.cli.tasks.goal import parse_budget
from replay._validate import validate_session

SHIPPED = Path(__file__).resolve().parents[2] / "fixtures" / "goal_script.json"


def invoke(*args: str | Path) -> Result:
    result = CliRunner().invoke(app, [str(a) for a in args])
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"uncaught {result.exception!r}\n{result.output}")
    assert "Traceback" not in result.output
    return result


def script_file(tmp_path: Path, responses: list[Any]) -> Path:
    path = tmp_path / "script.json"
    path.write_text(json.dumps({"responses": responses}))
    return path


def run_goal(tmp_path: Path, script: Path, *extra: str) -> tuple[Result, Path]:
    home, ws = tmp_path / "home", tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    result = invoke(
        "--home", home, "--init", "run", "--goal", "-m", "make all tests pass", "--script", script,
        "--workspace", ws, *extra,
    )  # fmt: skip
    return result, home


def only_session(home: Path) -> str:
    (info,) = DataRoot(home).sessions()
    return info.session_id


def outcome(home: Path, sid: str) -> GoalFinishedPayload:
    files = DataRoot(home).trace_files(sid)
    assert [f for f in validate_session(files) if f.severity == "error"] == []
    last = read_trace(files).records[-1].payload
    assert isinstance(last, GoalFinishedPayload)
    return last


def set_status(status: str) -> list[Any]:
    args = {"path": "${GOAL_FILE}", "old": "\nstatus: active", "new": f"\nstatus: {status}"}
    return [{"tool_call": {"name": "edit_file", "arguments": args}}]


def test_the_shipped_script_completes_after_more_than_one_round(tmp_path: Path) -> None:
    result, home = run_goal(tmp_path, SHIPPED, "--budget", "50k")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert "[goal] round 1 (tokens used 0)" in lines
    assert any(line.startswith("[goal] round 2 (tokens used ") for line in lines)
    done = outcome(home, only_session(home))
    assert (done.outcome, done.rounds) == ("complete", 2)
    assert f"[goal] complete after 2 rounds, {done.tokens_used} tokens" in lines
    # The protocol block is not printed: one line per round stands for it.
    assert "[goal]\n" not in result.stdout and "Rules:" not in result.stdout
    assert (tmp_path / "ws" / "goal-notes.md").exists()
    scratchpad = DataRoot(home).scratchpad(only_session(home))
    assert "status: complete" in (scratchpad / "GOAL.yaml").read_text()


@pytest.mark.parametrize(
    ("responses", "budget", "expected"),
    [
        pytest.param([set_status("blocked"), [{"text": "stuck"}]], [], "blocked", id="blocked"),
        pytest.param(
            [[{"text": "big"}, {"usage": {"output": 2000}}], [{"text": "wrap-up summary"}]],
            ["--budget", "1k"],
            "budget_limited",
            id="budget-limited",
        ),
        pytest.param(
            [[{"fail": {"status": "auth", "message": "bad key"}}]], [], "aborted", id="aborted"
        ),
    ],
)
def test_any_other_outcome_exits_1(
    tmp_path: Path, responses: list[Any], budget: list[str], expected: str
) -> None:
    result, home = run_goal(tmp_path, script_file(tmp_path, responses), *budget)
    assert result.exit_code == 1, result.output
    done = outcome(home, only_session(home))
    assert done.outcome == expected
    line = f"[goal] {expected} after {done.rounds} rounds, {done.tokens_used} tokens"
    assert line in result.stdout.splitlines()
    assert "the goal did not complete (exit 1)" in result.output
    if expected == "budget_limited":
        assert "[goal] round 2 (wrap-up) (tokens used 2" in result.stdout


def test_json_mode_keeps_stdout_json(tmp_path: Path) -> None:
    result, _home = run_goal(tmp_path, SHIPPED, "--json")
    assert result.exit_code == 0, result.output
    head, *rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert set(head) == {"session_id", "trace", "sandbox"}  # the run's head line (issue 15 item 17)
    assert rows[-1]["payload"]["type"] == "goal_finished"
    # The round inputs are on the stream (and in the trace) for hosts to see.
    rounds = [r for r in rows if r["payload"].get("text", "").startswith("[goal]\nround: ")]
    assert len(rounds) == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(["--budget", "10k"], "--budget needs --goal", id="budget-without-goal"),
        pytest.param(["--goal", "--budget", "lots"], "expected N, Nk or Nm", id="bad-budget"),
        pytest.param(["--goal", "--budget", "0"], "more than 0", id="zero-budget"),
    ],
)
def test_option_errors_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    result = invoke("--home", tmp_path / "home", "run", "-m", "x", *args)
    assert result.exit_code == 2
    assert message in result.output
    assert not (tmp_path / "home").exists() or list(DataRoot(tmp_path / "home").sessions()) == []


def test_a_blank_objective_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "home"
    result = invoke("--home", home, "run", "--goal", "-m", "  ", "--workspace", tmp_path)
    assert result.exit_code == 2
    assert "objective" in result.output
    assert not list(DataRoot(home).sessions()) if home.exists() else True


def test_parse_budget() -> None:
    assert [parse_budget(v) for v in ("500", "500k", "2m", "1.5M", " 7K ")] == [
        500,
        500_000,
        2_000_000,
        1_500_000,
        7_000,
    ]
    assert parse_budget(None) is None
    for bad in ("", "k", "-5", "5g", "1e6"):
        with pytest.raises(typer.BadParameter):
            parse_budget(bad)


def test_resume_goal_continue(tmp_path: Path) -> None:
    first = script_file(tmp_path, [[{"fail": {"status": "auth", "message": "expired"}}]])
    result, home = run_goal(tmp_path, first)
    assert result.exit_code == 1
    sid = only_session(home)
    state = json.loads(invoke("--home", home, "inspect", sid, "--json").stdout)["state"]["goal"]
    assert state == {
        "objective": "make all tests pass",
        "rounds": 1,
        "tokens_used": 0,
        "outcome": "aborted",
        "continuable": True,
    }
    shown = invoke("--home", home, "resume", sid).stdout
    assert "goal: aborted after 1 rounds" in shown and "--goal-continue" in shown

    refused = invoke("--home", home, "resume", sid, "--goal-continue", "-m", "x")
    assert refused.exit_code == 2 and "takes no -m" in refused.output

    (tmp_path / "s2").mkdir()
    second = script_file(tmp_path / "s2", [set_status("complete"), [{"text": "done"}]])
    result = invoke("--home", home, "resume", sid, "--goal-continue", "--script", second)
    assert result.exit_code == 0, result.output
    assert "[goal] round 2 (tokens used 0)" in result.stdout
    done = outcome(home, sid)
    assert (done.outcome, done.rounds) == ("complete", 2)
    assert "goal: complete after 2 rounds" in invoke("--home", home, "inspect", sid).stdout

    again = invoke("--home", home, "resume", sid, "--goal-continue", "--script", second)
    assert again.exit_code == 2 and "its goal ended complete" in again.output
