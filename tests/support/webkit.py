"""Test kit for the Web App (R-WEB-6): a real ``penguin serve`` subprocess on 127.0.0.1 with a
scripted model, a real headless Chromium driven by Playwright, and screenshots under
``build/screenshots/``.

The browser is the OS package's (``/usr/bin/chromium``; ``.ci/run`` installs it); the tests are
skipped when it is missing outside CI and fail in CI.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "build" / "screenshots"
CHROMIUM = os.environ.get("PENGUIN_CHROMIUM", "/usr/bin/chromium")
TOKEN = "web-test-token-0123456789"


def require_chromium() -> None:
    if Path(CHROMIUM).exists() or shutil.which(CHROMIUM):
        return
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"Chromium not found at {CHROMIUM} (.ci/run installs it)")
    pytest.skip(f"Chromium not found at {CHROMIUM}")


@dataclass
class Server:
    base: str
    login_url: str
    home: Path
    process: subprocess.Popen[str]
    log: list[str] = field(default_factory=list)

    def client(self) -> httpx.Client:
        return httpx.Client(
            base_url=self.base, headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30
        )

    def api(self, method: str, path: str, body: Any = None) -> Any:
        with self.client() as c:
            r = c.request(method, path, json=body)
            assert r.status_code < 400, f"{method} {path}: {r.status_code} {r.text}"
            return r.json() if r.content else None


@contextmanager
def penguin_serve(
    tmp: Path,
    script: Any,
    *,
    approve: str = "ask",
    port: int = 0,
    args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    config: str | None = None,
) -> Iterator[Server]:
    """``penguin serve --script`` on a free loopback port (or ``port``: a restart of an earlier
    server on ``tmp`` keeps its home, so its logins and sessions); yields once it printed its
    login URL (printed after binding). ``script=None``: no script (``args`` name a model).
    ``config``: the text of the home's config.toml."""
    home = tmp / "home"
    if config is not None:
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(config, encoding="utf-8")
    workspace = tmp / "workspace"
    workspace.mkdir(parents=True, exist_ok=True)
    environ = {**os.environ, "PENGUIN_SERVER_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1", **(env or {})}
    cmd = [sys.executable, "-m", "penguin", "--home", str(home), "serve", "--port", str(port)]
    if script is not None:
        script_path = tmp / "script.json"
        script_path.write_text(json.dumps(script), encoding="utf-8")
        cmd += ["--script", str(script_path)]
    cmd += ["--approve", approve, "--workspace", str(workspace), *args]
    process = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=environ
    )
    assert process.stdout is not None
    log: list[str] = []
    login = None
    for line in process.stdout:  # blocks until the server announces itself (or exits)
        log.append(line)
        m = re.search(r"open (http://\S+)", line)
        if m:
            login = m.group(1)
            break
    if login is None:
        process.wait(timeout=10)
        raise AssertionError("penguin serve did not start:\n" + "".join(log))
    # Keep draining the output so a chatty server never blocks on a full pipe.
    drain = threading.Thread(target=lambda: log.extend(process.stdout or ()), daemon=True)
    drain.start()
    try:
        # Announced once bound (``--port 0``: a free port, named in the URL).
        base = login.split("/#", 1)[0]
        yield Server(base, login, home, process, log)
    finally:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        drain.join(timeout=5)
        process.stdout.close()


@dataclass
class Watched:
    """Console errors and uncaught page errors of one page (a CSP violation is one)."""

    errors: list[str] = field(default_factory=list)

    def check(self) -> None:
        assert not self.errors, "browser errors:\n" + "\n".join(self.errors)


def watch(page: Any) -> Watched:
    w = Watched()
    page.on(
        "console",
        lambda msg: w.errors.append(f"console: {msg.text}") if msg.type == "error" else None,
    )
    page.on("pageerror", lambda exc: w.errors.append(f"pageerror: {exc}"))
    return w


def shot(page: Any, name: str, *, full_page: bool = True) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=full_page)
    return path
