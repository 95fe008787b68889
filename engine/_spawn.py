"""A tool's child process, started under the session's sandbox (SPEC §25).

Owns: starting a command in its own process group from a freshly confined thread
(``_sandbox.run_confined``), so the Landlock rules are in force in the child before it execs,
and the async side of that child: reading its merged output without blocking the event loop,
polling and awaiting its exit (a pidfd where the kernel has one).  Does not: decide the rules,
kill process groups or time anything out (``_tools`` does that for ``exec_command``).

anyio's ``open_process`` cannot be used: it starts the child from the event loop's thread, which
must never be confined.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Final

import anyio

from ._sandbox import Confinement, run_confined

__all__ = ["ToolProcess", "open_tool_process"]

# How often exit is polled where there is no pidfd.
_EXIT_POLL_S: Final = 0.02


class ToolProcess:
    """A started child: ``pid`` (also its process group), ``returncode`` (``None`` while it
    runs; polling reaps it), ``receive``, ``wait``, ``aclose``."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        assert popen.stdout is not None
        self._out = popen.stdout
        os.set_blocking(self._out.fileno(), False)
        self._pidfd: int | None = None
        pidfd_open = getattr(os, "pidfd_open", None)
        if pidfd_open is not None:
            try:
                self._pidfd = pidfd_open(popen.pid)
            except OSError:
                self._pidfd = None

    @property
    def pid(self) -> int:
        return self._popen.pid

    @property
    def returncode(self) -> int | None:
        return self._popen.poll()

    async def receive(self, max_bytes: int) -> bytes:
        """The next chunk of output; ``anyio.EndOfStream`` once every writer has closed it."""
        fd = self._out.fileno()
        while True:
            try:
                data = os.read(fd, max_bytes)
            except BlockingIOError:
                await anyio.wait_readable(fd)
                continue
            if not data:
                raise anyio.EndOfStream
            return data

    async def wait(self) -> int:
        while (code := self._popen.poll()) is None:
            if self._pidfd is not None:
                await anyio.wait_readable(self._pidfd)
            else:
                await anyio.sleep(_EXIT_POLL_S)
        return code

    async def aclose(self) -> None:
        """Close our ends (the child itself is the caller's to end and reap)."""
        if self._pidfd is not None:
            os.close(self._pidfd)
            self._pidfd = None
        self._out.close()


async def open_tool_process(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str] | None,
    confinement: Confinement | None,
) -> ToolProcess:
    """Start ``argv`` with stdin from ``/dev/null`` and stdout+stderr on one pipe, in a new
    session (process group), confined by ``confinement``.  Raises what starting it raised."""

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            list(argv),
            cwd=cwd,
            env=None if env is None else dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            # Its own process group, so an abort or timeout can kill every descendant at once.
            start_new_session=True,
            close_fds=True,  # no descriptor of the engine (a trace file) reaches the child
        )

    # Shielded: a cancellation arriving mid-start would otherwise drop a running child.
    with anyio.CancelScope(shield=True):
        popen = await anyio.to_thread.run_sync(run_confined, confinement, start)
    return ToolProcess(popen)
