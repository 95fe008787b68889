"""A fork server for the server crash suite: imports ``penguin.server`` once, then forks one
``serve`` child per ``spawn`` line read on stdin and prints ``<pid> <login url>`` for it.

Each kill of the crash suite then costs a fork and a uvicorn start-up instead of an interpreter
start and every import (the suite's CPU budget on a shared machine).  The zygote itself never
starts an event loop or a thread, so forking it is safe.
"""

from __future__ import annotations

import os
import sys

from engine.llm import ScriptedLLM
from penguin.server import serve


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main() -> None:
    root, script, workspace, token = sys.argv[1:5]
    for line in sys.stdin:
        _reap()
        if line.strip() != "spawn":
            continue
        pid = os.fork()
        if pid == 0:
            sys.stdin.close()

            def announce(url: str) -> None:
                print(f"{os.getpid()} {url}", flush=True)

            serve(
                root,
                port=0,
                token=token,
                llm_factory=lambda model: ScriptedLLM(script),
                workspace=workspace,
                approval="allow-all",
                announce=announce,
            )
            os._exit(0)


if __name__ == "__main__":
    main()
