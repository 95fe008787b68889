"""Semantic diff (SPEC R-TOOL-2): runs, turns and tool calls aligned; ids, paths, timestamps
ignored; the first divergence named by run, turn and call; a summary; golden failures too."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from eventstore import DataRoot, read_trace
from projections import markers as _markers
from replay import diff_traces
from replay.golden import replay_trace

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "fixtures" / "traces"


def _fixtures_module() -> Any:
    name = "_penguin_make_fixtures"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "fixtures" / "make_fixtures.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def copy(name: str, dest: Path) -> list[Path]:
    shutil.copytree(FIXTURES / name, dest)
    return sorted(dest.rglob("*.jsonl"))


def edit(path: Path, marker: str, change: Any, *, nth: int = 0) -> int:
    """Apply ``change`` to the decoded ``nth`` line holding ``marker``; return its line."""
    lines = path.read_text().splitlines(keepends=True)
    hits = [i for i, line in enumerate(lines) if marker in line]
    n = hits[nth]
    obj = msgspec.json.decode(lines[n])
    change(obj["payload"])
    lines[n] = msgspec.json.encode(obj).decode() + "\n"
    path.write_text("".join(lines))
    return n + 1


@pytest.mark.parametrize(
    "scenario", ["plain", "tools_out_of_order", "retry", "compaction_mid_task"]
)
def test_a_fresh_run_of_the_same_task_is_equal(scenario: str, tmp_path: Path) -> None:
    """Same scripts, another day: new session id, timestamps, workspace and data root."""
    fixtures = _fixtures_module()
    fn = dict((s[0], s[1]) for s in fixtures.SCENARIOS)[scenario]

    async def run() -> list[Path]:
        ctx = await fn(tmp_path)
        return DataRoot(ctx.home).trace_files(ctx.session.id)

    fresh = anyio.run(run)
    result = diff_traces(FIXTURES / scenario, fresh)
    assert result.equal, str(result)
    assert result.summary["differences"] == 0


def test_a_changed_tool_output_is_named_by_run_turn_and_call(tmp_path: Path) -> None:
    paths = copy("tools_out_of_order", tmp_path / "b")
    line = edit(paths[0], '"tool_call_output"', lambda p: p.update(output="something else"))
    result = diff_traces(FIXTURES / "tools_out_of_order", paths)
    assert not result.equal
    first = result.first
    assert first is not None
    # the first output in the file answers the second call (completion order)
    assert first.where == "run 1, turn 1, call 2 (read_file)"
    assert first.what == "output"
    assert first.b == "something else"
    assert first.b_at == f"{paths[0]}:{line}"
    assert result.summary["calls_outputs_differ"] == 1
    assert len(result.differences) == 1


def test_argument_key_order_is_not_a_difference_but_a_value_is(tmp_path: Path) -> None:
    paths = copy("denial", tmp_path / "b")
    calls = [r for r in read_trace(paths).records if getattr(r.payload, "arguments", None)]
    args = msgspec.json.decode(calls[0].payload.arguments)  # type: ignore[union-attr]
    reordered = dict(reversed(list({**args, "z": 1}.items())))

    def same_meaning(p: dict[str, Any]) -> None:
        p["arguments"] = msgspec.json.encode(dict(reversed(list(reordered.items())))).decode()

    edit(paths[0], '"type":"tool_call"', same_meaning)
    base = copy("denial", tmp_path / "a")
    edit(
        base[0],
        '"type":"tool_call"',
        lambda p: p.update(arguments=msgspec.json.encode(reordered).decode()),
    )
    assert diff_traces(base, paths).equal
    edit(paths[0], '"type":"tool_call"', lambda p: p.update(arguments='{"x": 2}'))
    result = diff_traces(base, paths)
    assert result.first is not None and result.first.what == "arguments"
    assert result.summary["calls_arguments_differ"] == 1


def test_status_changes_turns_and_runs_removed(tmp_path: Path) -> None:
    paths = copy("retry", tmp_path / "b")
    edit(paths[0], '"request_end"', lambda p: p.update(status="failed"))
    result = diff_traces(FIXTURES / "retry", paths)
    assert result.first is not None
    assert (result.first.where, result.first.what) == ("run 1, turn 1", "request status")
    assert result.summary["status_changes"] == 1

    records = read_trace(sorted((FIXTURES / "abort_tool").rglob("*.jsonl"))).records
    last_prompt = max(
        i
        for i, r in enumerate(records)
        if getattr(r.payload, "role", None) == "user" and getattr(r.payload, "text", None)
    )
    shorter = diff_traces(records, records[:last_prompt])
    assert shorter.summary["runs_a"] == shorter.summary["runs_b"] + 1
    assert shorter.first is not None and shorter.first.what == "run removed"
    assert shorter.summary["turns_removed"] >= 1


def test_golden_divergence_is_named_by_turn_and_call(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_markers, "DENIED_BY_USER", "Denied.")
    result = replay_trace(FIXTURES / "denial")
    d = result.divergence
    assert d is not None
    assert d.structural is not None
    assert d.structural.startswith("run 1, turn 1, call ") and d.structural.endswith(": output")
    assert "by structure: run 1, turn 1, call " in str(result)


def test_the_max_turns_notice_is_a_run_ending(tmp_path: Path) -> None:
    paths = copy("max_turns", tmp_path / "b")
    edit(
        paths[0], "reached max turns", lambda p: p.update(text="[reached max turns (3); stopping]")
    )
    result = diff_traces(FIXTURES / "max_turns", paths)
    assert result.first is not None
    assert (result.first.where, result.first.what) == ("run 1", "run ending")
    assert result.summary["status_changes"] == 1


def test_compaction_tokens_count_in_the_summary() -> None:
    result = diff_traces(FIXTURES / "compaction_summarize", FIXTURES / "compaction_summarize")
    every_request = sum(
        r.payload.request.total  # type: ignore[union-attr]
        for r in read_trace(sorted((FIXTURES / "compaction_summarize").rglob("*.jsonl"))).records
        if r.payload.__struct_config__.tag == "token_usage"  # type: ignore[union-attr]
    )
    assert result.equal and result.summary["tokens_a"] == every_request
