"""Web App on a long session (R-WEB-2 performance): open a 5,000-message session in headless
Chromium against a real ``penguin serve``, against a 50-message one measured in the same run.

Figures: time from navigation to the newest message on screen (best of ``REPEATS``), the longest
main-thread task while opening (the page "freezes" for that long at most), the time to build one
more page of earlier messages when scrolled to the top, and the number of blocks in the DOM.
Target: the 5,000-message open within 3x the 50-message one, no task over 200 ms.
Needs ``/usr/bin/chromium`` (skipped without it).
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from webkit import CHROMIUM, penguin_serve

REPEATS = 3
LONGTASKS = """() => new Promise((resolve) => {
  const seen = [];
  new PerformanceObserver((list) => seen.push(...list.getEntries().map((e) => e.duration)))
    .observe({ type: "longtask", buffered: true });
  setTimeout(() => resolve(Math.max(0, ...seen)), 300);
})"""


def _trace(sid: str, turns: int) -> str:
    def rec(t: int, kind: str, payload: dict[str, Any]) -> str:
        ts = f"2026-11-29T10:{t // 60000 % 60:02d}:{t // 1000 % 60:02d}.{t % 1000:03d}Z"
        return json.dumps({"timestamp": ts, "type": kind, "payload": payload})

    meta = {
        "session_id": sid,
        "provider": "scripted",
        "model_id": "script",
        "model_context_window": 200000,
        "system_prompt": "",
        "agent_state": "/agent/state",
        "workspace": "/workspace",
    }
    lines = [rec(0, "session_meta", meta)]
    answer = "Here is **some** Markdown with `code` and a [link](https://example.com).\n\n- a\n- b"
    for i in range(turns):
        t = i * 10
        user = {"type": "text", "role": "user", "text": f"question {i}"}
        lines.append(rec(t + 1, "model_msg", user))
        lines.append(rec(t + 2, "event_msg", {"type": "request_begin"}))
        text = {"type": "text", "role": "assistant", "text": f"answer {i}. {answer}"}
        lines.append(rec(t + 3, "model_msg", {**text, "stop_reason": "completed"}))
        lines.append(rec(t + 4, "event_msg", {"type": "request_end", "status": "completed"}))
    return "\n".join(lines) + "\n"


def _open(page: Any, base: str, sid: str, turns: int) -> tuple[float, float, int]:
    page.goto(f"{base}/#/")
    page.wait_for_selector("table.sessions")
    start = time.perf_counter()
    page.goto(f"{base}/#/s/{sid}")
    page.wait_for_selector(f".b-assistant >> text=answer {turns - 1}.")
    opened = time.perf_counter() - start
    longest: float = page.evaluate(LONGTASKS)
    blocks: int = page.locator(".transcript .block").count()
    return opened, longest, blocks


def main() -> None:
    if not (Path(CHROMIUM).exists() or shutil.which(CHROMIUM)):
        print(f"  skipped: no Chromium at {CHROMIUM}")
        return
    from playwright.sync_api import sync_playwright

    sizes = {"small": 25, "long": 2500}  # user + assistant per turn: 50 and 5,000 messages
    with tempfile.TemporaryDirectory() as tmp, penguin_serve(Path(tmp), {"responses": []}) as s:
        sids = {}
        for name, turns in sizes.items():
            sid = f"session-2026-11-29-10-00-0{len(sids)}-bench{len(sids):03d}"
            s.api("POST", "/api/traces/import", {"jsonl": _trace(sid, turns)})
            sids[name] = sid
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_context(viewport={"width": 1200, "height": 900}).new_page()
            page.set_default_timeout(60_000)
            page.goto(s.login_url)
            page.wait_for_selector("table.sessions")
            results = {}
            for name, turns in sizes.items():
                runs = [_open(page, s.base, sids[name], turns) for _ in range(REPEATS)]
                results[name] = (min(r[0] for r in runs), max(r[1] for r in runs), runs[0][2])
            built = page.locator(".transcript .block").count()
            start = time.perf_counter()
            page.evaluate("() => window.scrollTo(0, 0)")
            page.wait_for_function(
                "(n) => document.querySelectorAll('.transcript .block').length > n", arg=built
            )
            more = time.perf_counter() - start
            browser.close()
    small, long = results["small"], results["long"]
    for name, (opened, longest, blocks) in results.items():
        msgs = sizes[name] * 2
        print(
            f"  open {msgs:>5} messages: {opened * 1000:7.1f} ms, longest task "
            f"{longest:5.0f} ms, {blocks} blocks built"
        )
    print(f"  ratio 5,000 / 50 messages: {long[0] / small[0]:.2f}x (target <= 3x)")
    print(f"  one more page of earlier messages on scroll: {more * 1000:.1f} ms")


if __name__ == "__main__":
    main()
