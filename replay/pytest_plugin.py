"""The pytest plugin for golden traces (SPEC R-GOLD-6), registered through the ``pytest11``
entry point ``penguin-golden``.

Owns: the ``golden`` marker and fixture, the ``--golden-update`` option, failing a test with the
first divergence at its recorded ``file:line``, and re-recording a golden from a live run of the
same inputs.  Does not: replay or compare (``replay.golden``), or choose a model (the test names
its agent).  Importing it costs nothing: the replay machinery loads when a golden is checked.

Usage::

    import pytest

    @pytest.mark.golden("goldens/checkout")      # a trace file, or a session's directory
    def test_checkout_still_replays():
        pass                                      # checked after the test body

    def test_with_the_fixture(golden):
        result = golden.check("goldens/checkout", max_turns=10)
        assert result.runs_total == 3

Relative paths are resolved against the test file's directory.  ``pytest --golden-update``
re-records every golden a test checks from a live run of the same inputs, with the agent the
test names (``@pytest.mark.golden(path, agent=make_agent)`` or ``golden.check(path,
agent=make_agent)``): ``make_agent(workspace)`` returns the keyword arguments of
``Session.create`` (``llm=``, ``environment=``, ``system_prompt=`` …, optionally ``approve=``,
and ``subagents=``: the ``SessionSubagentRunner`` its environment uses, opened around the
session).  The recorded user events are re-created where the live run reaches the same place:
steering, aborts (mid-stream, mid-tool, at an approval, in a backoff wait, in a compaction), a
crash cut and its resume (``replay._rerecord``); one the live run never reaches fails the test
with its recorded line.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from .golden import ReplayResult

__all__ = ["Golden", "AgentFactory"]

AgentFactory = Callable[[Path], Mapping[str, Any]]

_MARKER_HELP = (
    "golden(path, *, agent=None, allow_partial=False, **options): replay the recorded session "
    "at path after the test and fail with its first divergence (R-GOLD-6)"
)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("golden", "golden traces (penguin-engine)")
    group.addoption(
        "--golden-update",
        action="store_true",
        default=False,
        help="Re-record the golden traces the tests check from a live run of the same inputs.",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", _MARKER_HELP)


class Golden:
    """The ``golden`` fixture: ``check()`` replays a golden trace (R-GOLD-6)."""

    def __init__(self, request: pytest.FixtureRequest) -> None:
        self._request = request
        self._base = Path(str(request.node.path)).parent
        self.update: bool = bool(request.config.getoption("--golden-update", default=False))
        self.checked: list[Path] = []

    def path(self, path: str | Path) -> Path:
        """``path`` resolved against the test file's directory."""
        p = Path(path)
        return p if p.is_absolute() else self._base / p

    def check(
        self,
        path: str | Path | None = None,
        *,
        agent: AgentFactory | None = None,
        allow_partial: bool = False,
        **options: Any,
    ) -> ReplayResult:
        """Replay the golden at ``path`` (the marker's when omitted) with ``replay_trace``'s
        ``options``; fail the test with ``<file>:<line>: expected … / actual … (reason)`` at
        the first divergence, or with ``N of M runs compared: <why>`` unless
        ``allow_partial``.  Under ``--golden-update`` the golden is first re-recorded live with
        ``agent``."""
        from .golden import replay_trace

        marker = self._request.node.get_closest_marker("golden")
        if path is None:
            if marker is None or not marker.args:
                raise pytest.UsageError(
                    "golden.check() needs a path (or @pytest.mark.golden(path) on the test)"
                )
            path = marker.args[0]
        if marker is not None and agent is None:
            agent = marker.kwargs.get("agent")
        target = self.path(path)
        self.checked.append(target)
        if self.update:
            if agent is None:
                pytest.fail(
                    f"--golden-update: {target} names no agent to record it with "
                    "(agent= on the marker or on golden.check)",
                    pytrace=False,
                )
            from ._rerecord import GoldenUpdateError

            try:
                rerecord(target, agent)
            except GoldenUpdateError as exc:
                pytest.fail(f"{target}: {exc}", pytrace=False)
        result = replay_trace(target, **options)
        if not result.matched:
            pytest.fail(f"golden replay diverged: {result.divergence}", pytrace=False)
        if not result.passed(allow_partial=allow_partial):
            pytest.fail(f"golden replay incomplete: {result.partial_reason}", pytrace=False)
        return result


@pytest.fixture
def golden(request: pytest.FixtureRequest) -> Golden:
    """Replay golden traces in a test (R-GOLD-6); see ``Golden.check``."""
    return Golden(request)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Any:
    outcome = yield
    marker = item.get_closest_marker("golden")
    if marker is None or outcome.excinfo is not None:
        return
    fixture = getattr(item, "funcargs", {}).get("golden")
    if isinstance(fixture, Golden) and fixture.checked:
        return  # the test checked its goldens itself
    if isinstance(fixture, Golden):
        checker = fixture
    else:
        request = getattr(item, "_request", None)
        if not isinstance(request, pytest.FixtureRequest):
            return  # not a function test item: nothing to check
        checker = Golden(request)
    options = {k: v for k, v in marker.kwargs.items() if k != "agent"}
    checker.check(**options)


# --------------------------------------------------------------------------- re-recording


def rerecord(target: Path, agent: AgentFactory) -> list[Path]:
    """Run the recorded inputs of the golden at ``target`` live with ``agent`` and replace the
    golden's trace files with the new session's and its subagents' (``--golden-update``)."""
    import anyio

    from ._rerecord import record_live

    with tempfile.TemporaryDirectory(prefix="penguin-golden-") as tmp:
        files = anyio.run(record_live, target, agent, Path(tmp))
        base = target if target.is_dir() else target.parent.parent
        old = sorted(base.rglob("*.jsonl")) if target.is_dir() else _with_children(target)
        for f in old:
            f.unlink()
        written: list[Path] = []
        for f in files:
            dest = base / f.parent.name / f.name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f, dest)
            written.append(dest)
    return written


def _with_children(trace: Path) -> list[Path]:
    """A golden given as one trace file, and the trace files of the subagents it names."""
    from eventstore import read_trace

    from ._replay_subagents import find_child_trace, pointer_ids

    out = [trace]
    for child in pointer_ids(read_trace([trace]).records):
        try:
            out.extend(find_child_trace(child, trace.parent.parent))
        except FileNotFoundError:
            continue  # nothing to replace
    return out
