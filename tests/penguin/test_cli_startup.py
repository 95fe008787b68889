"""CLI start-up: a command imports only what it needs (issue 18).

Each case runs the CLI in a fresh interpreter and lists the modules it imported.  Start-up time
itself is a benchmark (``bench/bench_cli.py``), not a test: here only what is imported.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from clikit import SID, meta, trace_file, turn, write_records
from typer.testing import CliRunner

from eventstore import builders as b
from penguin.cli import app
from penguin.cli._app import COMMANDS
from penguin.cli.commands.query import REPORT_NAMES, VIEW_NAMES

# Never needed to print help, list sessions or read a trace: the HTTP client, the snapshot
# library, the model providers, the server, the analytics engine, pydantic (typer >= 0.29 would
# bring it for every parameter: pinned below that; the engine's config models need it).
NEVER = (
    "httpx",
    "syrupy",
    "engine.llm._openai",
    "engine.llm._anthropic",
    "engine.llm._http",
    "penguin.server",
    "starlette",
    "uvicorn",
    "duckdb",
    "pydantic",
    "typer._adapters",
)
# Not needed for `--help` either: the library layers, the trace codec and the terminal toolkit.
NOT_FOR_HELP = (
    *NEVER,
    "engine",
    "replay",
    "projections",
    "msgspec",
    "eventstore._codec",
    "eventstore._layout",
    "rich",
    "anyio",
    "yaml",
    "watchfiles",
)

_PROBE = """
import json, sys
from penguin.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
print("\\n" + json.dumps(sorted(sys.modules)))
"""


def imported(*args: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, check=True
    )
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def loaded(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return sorted(n for n in names if n in modules)


@pytest.mark.parametrize("args", [["--help"], ["sessions", "--help"], ["inspect", "--help"]])
def test_help_imports_neither_the_library_nor_the_providers(args: list[str]) -> None:
    modules = imported(*args)
    assert "penguin.cli._app" in modules  # the probe ran the CLI
    assert loaded(modules, NOT_FOR_HELP) == []


@pytest.mark.parametrize(
    "args",
    [
        ["sessions"],
        ["sessions", "--json"],
        ["validate", "{home}"],
        ["inspect", "session-2026-07-18-11-10-22-3f8a1c2d"],
    ],
)
def test_reading_commands_import_no_provider_client_or_snapshot_library(
    args: list[str], tmp_path: Path
) -> None:
    home = tmp_path / "home"
    home.mkdir()
    modules = imported("--home", str(home), *(a.format(home=home) for a in args))
    assert "penguin.cli._app" in modules
    assert loaded(modules, NEVER) == []


# The modules a command loads of the library, beyond the trace store and the CLI itself: only
# those that do its work.  ``prefix`` selects what is pinned; ``allowed`` is all it may load of it.
_LIBRARY = ("engine", "replay", "projections", "anyio", "asyncio", "httpx", "syrupy")


def _library(modules: set[str]) -> list[str]:
    return sorted(m for m in modules if m.split(".")[0] in _LIBRARY)


def test_a_command_loads_its_own_module_and_no_other_command(tmp_path: Path) -> None:
    """Commands load on first use (``_app.COMMANDS``): `sessions` imports no other command."""
    modules = imported("--home", str(tmp_path), "sessions")
    commands = {f"penguin.cli.{spec.split(':')[0].lstrip('.')}" for spec in COMMANDS.values()}
    assert "penguin.cli.commands.sessions" in modules
    assert sorted(commands & modules) == ["penguin.cli.commands.sessions"]


@pytest.mark.parametrize("name", list(COMMANDS))
def test_every_registered_command_loads_and_shows_its_help(name: str) -> None:
    result = CliRunner().invoke(app, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert f"Usage: penguin {name} " in result.output


def test_the_cycle_collector_is_on_again_once_the_cli_has_loaded() -> None:
    """It is off only while the CLI's modules load (start-up): a long `penguin run` collects."""
    probe = "import gc, penguin.cli; print(gc.isenabled(), gc.get_freeze_count() == 0)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True"]


def test_help_does_not_build_typers_pydantic_adapters() -> None:
    """typer converts a command's parameters through pydantic, but only for a command that runs."""
    modules = imported("--help")
    assert loaded(modules, ("pydantic", "typer._adapters")) == []


def test_sessions_loads_no_library_layer(tmp_path: Path) -> None:
    modules = imported("--home", str(tmp_path), "sessions")
    assert "penguin.cli.listing" in modules
    assert _library(modules) == []


def test_inspect_loads_the_folds_it_shows_and_nothing_of_replay_or_the_engine(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    _one_session(home)
    modules = imported("--home", str(home), "inspect", SID)
    assert "penguin.cli.views.inspect" in modules  # the session view ran
    assert set(_library(modules)) <= {
        "projections",
        "projections._context",
        "projections._goal",
        "projections._state",
        "projections._status",  # the one status (R-SET-5), part of the state fold
        "projections.markers",
    }


def test_validate_loads_the_validator_alone(tmp_path: Path) -> None:
    """Not the engine's session loop, the event loop, the snapshot library or the other trace
    tools: ``replay`` and ``engine`` load a name's module on first use (PEP 562)."""
    (path,) = _one_session(tmp_path / "home")
    modules = imported("validate", str(path))
    assert "replay._validate" in modules  # the validator ran
    checks = {m for m in _library(modules) if m.startswith("replay._checks")}
    assert "replay._checks._pairing" in checks  # its check groups (issue 28), nothing more
    assert set(_library(modules)) - checks <= {
        "replay",
        "replay._validate",
        "engine",
        "engine._retryable",  # RETRYABLE_STATUSES
        "projections",
        "projections.markers",
    }
    assert "rich.progress" not in modules  # a bar only for large inputs


def _one_session(home: Path) -> list[Path]:
    """A small session holding a prompt and one answered turn."""
    path = trace_file(home)
    return [write_records(path, [meta(), b.user_text("hello"), *turn("hi")])]


def test_help_names_every_analytics_view_and_report() -> None:
    """The query help lists the views and reports without importing the analytics layer."""
    from replay.analytics import REPORTS, VIEWS

    assert tuple(VIEWS) == VIEW_NAMES
    assert tuple(REPORTS) == REPORT_NAMES
