"""The official MCP conformance suite (@modelcontextprotocol/conformance) against the engine's
MCP client and ``penguin mcp serve --http`` (R-MCP-1, R-MCP-5).  Extended tier: it installs the
suite and Node 22 (the npm package ``node@22``) into a cache directory on first use, so it runs
only with PENGUIN_EXTENDED=1 (``make test-extended``).

A scenario passes only when the suite ran at least one check and every check passed: the suite
itself calls a scenario with 0 of 0 checks "passed", which proves nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(
    os.environ.get("PENGUIN_EXTENDED") != "1",
    reason="the MCP conformance suite needs PENGUIN_EXTENDED=1 (make test-extended)",
)

SUITE = "@modelcontextprotocol/conformance@0.1.16"
NODE = "node@22"
HERE = Path(__file__).parent
CLIENT = HERE / "conformance_client.py"
CLIENT_SCENARIOS = ("initialize", "tools_call", "sse-retry")
SERVER_SCENARIOS = ("server-initialize", "ping", "tools-list", "dns-rebinding-protection")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TALLY = re.compile(r"Passed: (\d+)/(\d+), (\d+) failed, (\d+) warnings")


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "penguin-engine" / "mcp-conformance"


@pytest.fixture(scope="module")
def suite() -> dict[str, str]:
    """The environment to run the suite in: its cache's ``.bin`` (Node 22 and ``conformance``)
    first on PATH.  Installed there once (never globally)."""
    cache = cache_dir()
    bin_dir = cache / "node_modules" / ".bin"
    if not (bin_dir / "conformance").exists() or not (bin_dir / "node").exists():
        npm = shutil.which("npm")
        if npm is None:
            pytest.fail("npm is needed to install the MCP conformance suite")
        cache.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                npm,
                "install",
                "--prefix",
                str(cache),
                "--no-save",
                "--no-audit",
                "--no-fund",
                SUITE,
                NODE,
            ],
            check=True,
            timeout=900,
        )
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    version = subprocess.run(
        ["node", "--version"], env=env, capture_output=True, text=True, check=True
    ).stdout
    assert int(version.strip().lstrip("v").split(".")[0]) >= 22, version
    return env


def verdict(output: str) -> tuple[int, int, int, int]:
    """(passed, total, failed, warnings) of the suite's own tally."""
    found = _TALLY.findall(_ANSI.sub("", output))
    assert found, f"the suite printed no tally:\n{output[-2000:]}"
    passed, total, failed, warnings = (int(x) for x in found[-1])
    return passed, total, failed, warnings


def assert_passed(output: str) -> None:
    passed, total, failed, warnings = verdict(output)
    assert total >= 1, f"0 checks ran (the suite calls that passed):\n{output[-2000:]}"
    assert (passed, failed, warnings) == (total, 0, 0), output[-3000:]


@pytest.mark.parametrize("scenario", CLIENT_SCENARIOS)
def test_r_mcp_1_the_engine_client_passes_the_client_scenarios(
    suite: dict[str, str], scenario: str, tmp_path: Path
) -> None:
    result = subprocess.run(
        [
            "conformance",
            "client",
            "--command",
            f"{sys.executable} {CLIENT}",
            "--scenario",
            scenario,
            "--timeout",
            "120000",
        ],
        env=suite,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert_passed(result.stdout + result.stderr)


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``penguin mcp serve --http --no-auth`` on a free port of 127.0.0.1."""
    home = tmp_path_factory.mktemp("conformance-home")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "penguin",
            "--home",
            str(home),
            "--init",
            "mcp",
            "serve",
            "--http",
            "--no-auth",
            "--port",
            "0",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()  # "serving <url>": it listens
        found = re.search(r"serving (http://127\.0\.0\.1:\d+/mcp)", line)
        assert found, line
        yield found.group(1)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


@pytest.mark.parametrize("scenario", SERVER_SCENARIOS)
def test_r_mcp_5_penguin_mcp_serve_passes_the_server_scenarios(
    suite: dict[str, str], served: str, scenario: str, tmp_path: Path
) -> None:
    result = subprocess.run(
        ["conformance", "server", "--url", served, "--scenario", scenario],
        env=suite,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert_passed(result.stdout + result.stderr)


def test_a_0_of_0_tally_is_not_a_pass() -> None:
    with pytest.raises(AssertionError, match="0 checks ran"):
        assert_passed("Test Results:\nPassed: 0/0, 0 failed, 0 warnings\n")
    with pytest.raises(AssertionError):
        assert_passed("Passed: 2/3, 1 failed, 0 warnings")
    assert_passed("\x1b[32mPassed: 3/3, 0 failed, 0 warnings\x1b[0m")
