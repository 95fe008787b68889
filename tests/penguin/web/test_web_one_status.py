"""The Web App shows the one status (R-SET-5): a CLI run on the server's data root reads
``running`` in the sessions list while its process holds the lock, and ``interrupted`` once the
process is SIGKILLed — as ``penguin sessions``, ``show``, ``query`` and the server's rows say
(tests/penguin/server/test_one_status.py)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from webkit import Server, penguin_serve


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with penguin_serve(tmp_path_factory.mktemp("web-status"), [[{"text": "x"}]]) as s:
        yield s


def test_a_sigkilled_cli_run_reads_interrupted_in_the_web_app(page: Any, server: Server) -> None:
    script = server.home.parent / "hang.json"
    # The model starts answering, then hangs: the run is inside its request span.
    script.write_text(json.dumps({"responses": [[{"text": "working"}, {"sleep_ms": 600_000}]]}))
    exe = os.path.join(os.path.dirname(sys.executable), "penguin")
    args = [exe, "--home", str(server.home), "run", "-m", "go", "--script", str(script)]
    args += ["--workspace", str(server.home.parent / "workspace")]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        give_up = time.monotonic() + 60
        # Polling the disk for the record (another process writes it), not ordering events.
        while not any(b'"request_begin"' in p.read_bytes() for p in server.home.rglob("*.jsonl")):
            assert time.monotonic() < give_up, "the CLI run did not start"
            time.sleep(0.05)
        # The server's index may be up to 0.5 s behind the disk (it bounds a reader's
        # staleness): the list holds the CLI's session once the index has caught up.
        while not (listed := [s["id"] for s in server.api("GET", "/api/sessions")["sessions"]]):
            assert time.monotonic() < give_up, "the CLI run's session was never listed"
            time.sleep(0.05)
        (sid,) = listed
        cell = page.locator(f"table.sessions tr[data-id='{sid}'] .state")
        page.reload()
        cell.wait_for()
        assert cell.inner_text() == "running"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    page.reload()
    cell.wait_for()
    page.wait_for_function(
        "sel => document.querySelector(sel)?.textContent === 'interrupted'",
        arg=f"table.sessions tr[data-id='{sid}'] .state",
    )
