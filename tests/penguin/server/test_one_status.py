"""One status (SPEC R-SET-5): a CLI run is ``running`` in the CLI (``sessions``, ``show``), the
server and analytics (``query``) while its process holds the lock, and ``interrupted`` in all of
them once it is SIGKILLed.

Before, the three surfaces disagreed: the server read a crashed session as ``completed`` (its
last request) or ``null``, ``penguin sessions`` as ``interrupted``, and the server's rows had no
notion of a crash at all.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from clikit import invoke
from serverkit import scripted, served

pytestmark = pytest.mark.anyio


def _statuses_cli(home: Path) -> dict[str, str]:
    result = invoke("--home", home, "sessions", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    rows = rows["sessions"] if isinstance(rows, dict) else rows
    return {r["session_id"]: r["status"] for r in rows}


async def _statuses_server(home: Path) -> dict[str, str]:
    async with served(home, llm_factory=scripted([{"text": "x"}])) as s:
        r = await s.client.get("/api/sessions")
        assert r.status_code == 200, r.text
        return {row["id"]: row["status"] for row in r.json()["sessions"]}


def _status_show_and_query(home: Path, sid: str) -> tuple[str, str]:
    """``penguin show --json``'s status and the analytics ``sessions`` view's (``penguin query``)."""
    shown = invoke("--home", home, "show", sid, "--json")
    assert shown.exit_code == 0, shown.output
    query = invoke("--home", home, "query", "SELECT status FROM sessions", "--format", "json")
    assert query.exit_code == 0, query.output
    (row,) = json.loads(query.stdout)
    return json.loads(shown.stdout)["status"], row["status"]


async def test_a_sigkilled_cli_run_is_interrupted_everywhere(tmp_path: Path) -> None:
    home, ws = tmp_path / "home", tmp_path / "ws"
    ws.mkdir()
    script = tmp_path / "script.json"
    # The model starts answering, then hangs: the run is inside its request span.
    script.write_text(json.dumps({"responses": [[{"text": "working"}, {"sleep_ms": 600_000}]]}))
    exe = os.path.join(os.path.dirname(sys.executable), "penguin")
    args = [exe, "--home", str(home), "--init", "run", "-m", "go", "--script", str(script)]
    args += ["--workspace", str(ws)]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        with anyio.fail_after(60):
            while not any(b'"request_begin"' in p.read_bytes() for p in home.rglob("*.jsonl")):
                await anyio.sleep(0.05)  # polling the disk for the record, not ordering events
        (sid,) = _statuses_cli(home)
        assert _statuses_cli(home)[sid] == "running"  # the lock is held
        assert (await _statuses_server(home))[sid] == "running"
        assert _status_show_and_query(home, sid) == ("running", "running")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert _statuses_cli(home)[sid] == "interrupted"
    assert (await _statuses_server(home))[sid] == "interrupted"
    assert _status_show_and_query(home, sid) == ("interrupted", "interrupted")
