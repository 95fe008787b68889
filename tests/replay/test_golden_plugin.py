"""The pytest plugin (SPEC R-GOLD-6): entry point ``pytest11``, the ``golden`` marker and
fixture, failures at the recorded line, ``--golden-update`` re-recording from a live run."""

from __future__ import annotations

import json
import shutil
import textwrap
from importlib.metadata import entry_points
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

FIXTURES = Path(__file__).parents[2] / "fixtures" / "traces"
ARGS = ("-p", "no:cacheprovider", "-p", "no:hypothesispytest", "--strict-markers")


def test_the_plugin_is_registered_as_a_pytest11_entry_point() -> None:
    (ep,) = [e for e in entry_points(group="pytest11") if e.name == "penguin-golden"]
    assert ep.value == "replay.pytest_plugin"


def test_the_plugin_is_loaded_in_this_run(request: pytest.FixtureRequest) -> None:
    """Loaded by this repository's own run (``--strict-markers``, warnings as errors)."""
    assert request.config.pluginmanager.has_plugin("penguin-golden")
    assert request.config.getoption("--golden-update") is False


def copy(pytester: pytest.Pytester, scenario: str) -> Path:
    dest = pytester.path / "goldens" / scenario
    shutil.copytree(FIXTURES / scenario, dest)
    return dest


def test_marker_and_fixture_replay_and_fail_at_the_recorded_line(
    pytester: pytest.Pytester,
) -> None:
    """A marked test is checked after its body; ``golden.check`` checks explicitly; a changed
    golden fails with ``<file>:<line>: expected … / actual …``."""
    copy(pytester, "steering")
    copy(pytester, "abort_tool")
    pytester.makepyfile(
        test_agent=textwrap.dedent(
            """
            import pytest

            @pytest.mark.golden("goldens/steering")
            def test_marked():
                pass

            def test_fixture(golden):
                result = golden.check("goldens/abort_tool")
                assert result.runs_total == 3
            """
        )
    )
    pytester.runpytest_inprocess(*ARGS).assert_outcomes(passed=2)
    (path,) = (pytester.path / "goldens" / "steering").rglob("*.jsonl")
    # The model's answers come from the golden itself: change what the engine computes (the
    # session token counts of the last token_usage, R-RUN-10).
    lines = path.read_text().splitlines(keepends=True)
    n = max(i for i, line in enumerate(lines) if '"token_usage"' in line)
    obj = json.loads(lines[n])
    obj["payload"]["session"]["output"] += 1
    lines[n] = json.dumps(obj, separators=(",", ":")) + "\n"
    path.write_text("".join(lines))
    result = pytester.runpytest_inprocess(*ARGS)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([f"*golden replay diverged: {path}:{n + 1}: expected *"])


def test_a_partial_comparison_fails_unless_allowed(pytester: pytest.Pytester) -> None:
    """R-GOLD-5 through the plugin: ``N of M runs compared`` fails; ``allow_partial`` passes."""
    from eventstore import builders as b
    from eventstore import encode_line, read_trace
    from projections import markers as mk

    (src,) = (FIXTURES / "plain").rglob("*.jsonl")
    records = read_trace([src]).records
    n = max(i for i, r in enumerate(records) if type(r.payload).__name__ == "RequestBeginPayload")
    cut = [*records[:n], b.abort(mk.abort_trace_write_failed("disk full"))]
    dest = pytester.path / "goldens" / "cut" / src.parent.name / src.name
    dest.parent.mkdir(parents=True)
    dest.write_bytes(b"".join(encode_line(r) for r in cut))
    pytester.makepyfile(
        test_cut=textwrap.dedent(
            """
            import pytest

            @pytest.mark.golden("goldens/cut")
            def test_strict():
                pass

            @pytest.mark.golden("goldens/cut", allow_partial=True)
            def test_allowed():
                pass
            """
        )
    )
    result = pytester.runpytest_inprocess(*ARGS)
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*golden replay incomplete: 1 of 2 runs compared: run 2*"])


def test_golden_update_rerecords_from_a_live_run(pytester: pytest.Pytester) -> None:
    """``--golden-update`` runs the recorded Prompts live with the test's agent and replaces
    the golden; without it the golden is only replayed (the agent is never called)."""
    copy(pytester, "plain")
    pytester.makepyfile(
        test_update=textwrap.dedent(
            """
            import pytest
            from engine.llm import ScriptedEnvironment, ScriptedLLM

            CALLS = []

            def agent(workspace):
                CALLS.append(workspace)
                llm = ScriptedLLM({"responses": [[{"text": "Four."}], [{"text": "Six."}]]})
                return {"llm": llm, "environment": ScriptedEnvironment.from_llm(llm)}

            @pytest.mark.golden("goldens/plain", agent=agent)
            def test_plain():
                pass

            def test_agent_use():
                assert len(CALLS) == (1 if pytest.golden_update else 0)
            """
        )
    )
    pytester.makeconftest(
        "import pytest\n"
        "def pytest_configure(config):\n"
        "    pytest.golden_update = config.getoption('--golden-update')\n"
    )
    pytester.runpytest_inprocess(*ARGS).assert_outcomes(passed=2)
    before = {p.name for p in (pytester.path / "goldens" / "plain").rglob("*.jsonl")}
    pytester.runpytest_inprocess(*ARGS, "--golden-update").assert_outcomes(passed=2)
    (after,) = (pytester.path / "goldens" / "plain").rglob("*.jsonl")
    assert after.name not in before
    text = after.read_text()
    assert '"text":"Four."' in text and '"text":"Six."' in text
    assert "What is 2 + 2?" in text and "And 3 + 3?" in text  # the same inputs
    pytester.runpytest_inprocess(*ARGS).assert_outcomes(passed=2)  # the new golden replays


def test_golden_update_without_an_agent_is_a_clear_failure(pytester: pytest.Pytester) -> None:
    copy(pytester, "plain")
    pytester.makepyfile(
        test_noagent="import pytest\n\n"
        "@pytest.mark.golden('goldens/plain')\n"
        "def test_plain():\n    pass\n"
    )
    result = pytester.runpytest_inprocess(*ARGS, "--golden-update")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*names no agent to record it with*"])
