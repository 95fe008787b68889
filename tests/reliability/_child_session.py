"""Child-process driver for the reliability suites (run as ``python _child_session.py MODE ...``).

Owns: the processes the reliability tests kill, lock against or run under a hostile umask —

- ``crash``: create or resume one session and run scripted tasks forever (concurrent slow tools,
  steering, boundary and mid-task compactions), acknowledging every returned append;
- ``hold``: resume a session and hold its lock until killed;
- ``rotate``: a bare ``TraceWriter`` appending numbered records and rotating, for readers that
  tail the files while they change;
- ``umask``: a session with ``LocalEnvironment`` run under ``umask 0`` that writes a trace, a
  lock and scratchpad files (truncated tool output, a folded image);
- ``memory``: read one hostile file through the reader, the validator and ``load_session`` and
  report the peak-RSS growth.

Does not: check anything — the parent test does.  Everything is printed as lines on stdout (or
the ``--acks`` file), so a parent can read what a SIGKILLed child managed to say.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import sys
import zlib
from pathlib import Path
from typing import Any

#: The compaction threshold the crash script is built around: usage below it never compacts,
#: usage above it always does (R-COMPACT-3).
THRESHOLD = 1000
SMALL = {"cache_write": 10, "output": 2}
BIG = {"cache_write": 5000, "output": 2}


def crash_script(gen: int, *, tasks: int, seed: int, delays: bool = True) -> dict[str, Any]:
    """A script whose requests follow the engine's request order task after task.

    Tasks cycle through three shapes (k = task number):
      A  tools + steering, final answer under the threshold          (2 requests)
      B  tools, final answer over the threshold: boundary compaction (3 requests)
      C  tools + steering over the threshold: mid-task compaction,
         then the final answer on the new context                    (3 requests)
    Tool-call ids carry the generation so that restarts never reuse one.  Without ``delays``
    the tools and the model answer at once (still concurrently).
    """
    rng = random.Random(seed)
    responses: list[Any] = []
    for k in range(tasks):
        p = f"g{gen}t{k}"
        shape = k % 3
        calls = []
        for name, delay in (
            (("a", 30), ("b", 4), ("c", 15)) if delays else (("a", 0), ("b", 0), ("c", 0))
        ):
            size = rng.choice((20, 200, 2000)) if name != "b" or k % 4 else 300_000
            calls.append(
                {
                    "tool_call": {
                        "name": "slow",
                        "id": f"{p}{name}",
                        "arguments": {"k": k, "name": name},
                        "result": {"output": f"{p}{name}:" + "o" * size, "delay_ms": delay},
                    }
                }
            )
        # The pauses keep request and compaction spans open for a while, so that kills land
        # inside them too (R-RESUME-14a/14 closures).
        lead = [
            {"thinking": f"plan {p}", "chunks": 2},
            {"sleep_ms": 6 if delays else 0},
            {"text": f"working on {p}", "chunks": 3},
        ]
        nap = {"sleep_ms": 6 if delays else 0}
        if shape == 0:
            responses.append([*lead, {"steer": f"steer {p}"}, *calls, {"usage": SMALL}])
            responses.append([nap, {"text": f"done {p}"}, {"usage": SMALL}])
        elif shape == 1:
            responses.append([*lead, *calls, {"usage": SMALL}])
            responses.append([{"text": f"done {p}", "chunks": 2}, {"usage": BIG}])
            responses.append([nap, {"text": f"[summary]boundary {p}[/summary]"}, {"usage": SMALL}])
        else:
            responses.append([*lead, {"steer": f"steer {p}"}, *calls, {"usage": BIG}])
            responses.append(
                [
                    {"text": f"[summary]mid-task {p}", "chunks": 2},
                    nap,
                    {"text": "[/summary]"},
                    {"usage": SMALL},
                ]
            )
            responses.append([{"text": f"done {p}"}, nap, {"usage": SMALL}])
    return {
        "model_id": "crash",
        "tools": [{"name": "slow", "description": "a slow scripted tool"}],
        "responses": responses,
    }


def _ack_appends(ack_fd: int) -> None:
    """Acknowledge every append *after* it returned: ``A <file> <end offset> <crc32> <kind>``."""
    from eventstore import TraceWriter, encode_line
    from eventstore._schema import ToolListReadyPayload

    real = TraceWriter.append

    def append(self: TraceWriter, msg: Any) -> None:
        real(self, msg)
        head = msg.type == "session_meta" or isinstance(msg.payload, ToolListReadyPayload)
        crc = zlib.crc32(encode_line(msg))
        os.write(
            ack_fd, f"A {self.path.name} {self.offset} {crc} {'h' if head else 'r'}\n".encode()
        )

    TraceWriter.append = append  # type: ignore[method-assign]


async def _crash(args: argparse.Namespace) -> None:
    from engine import CompactionSettings, RetryPolicy, Session, allow_all
    from engine.llm import ScriptedEnvironment, ScriptedLLM
    from eventstore import DataRoot
    from eventstore import builders as b
    from replay import resume_session

    ack_fd = os.open(args.acks, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    _ack_appends(ack_fd)
    llm = ScriptedLLM(crash_script(args.gen, tasks=args.tasks, seed=args.gen))
    env = ScriptedEnvironment.from_llm(llm)
    options: dict[str, Any] = {
        "compaction": CompactionSettings(max_context_length=THRESHOLD),
        "retry": RetryPolicy(base_ms=1, cap_ms=2),
        "fsync": args.fsync,
    }
    root = DataRoot(args.home)
    sys.stdout.write("ready\n")
    sys.stdout.flush()
    if args.session == "-":
        session = await Session.create(
            llm=llm,
            environment=env,
            root=root,
            workspace=args.workspace,
            system_prompt="You are under test.",
            **options,
        )
    else:
        session = await resume_session(root, args.session, llm=llm, environment=env, **options)
    os.write(ack_fd, f"S {session.id}\n".encode())
    llm.bind(session)
    async with session:
        for k in range(10**6):
            async for _msg in session.run([b.user_text(f"task {args.gen}.{k}")], approve=allow_all):
                pass


async def _hold(args: argparse.Namespace) -> None:
    import anyio

    from engine.llm import ScriptedEnvironment, ScriptedLLM
    from eventstore import DataRoot
    from replay import resume_session

    llm = ScriptedLLM([])
    session = await resume_session(
        DataRoot(args.home), args.session, llm=llm, environment=ScriptedEnvironment.from_llm(llm)
    )
    async with session:
        sys.stdout.write(f"locked {os.getpid()}\n")
        sys.stdout.flush()
        await anyio.sleep_forever()


def _rotate(args: argparse.Namespace) -> None:
    """Numbered records ``<seq>:<filler>`` of sizes up to 1 MB; a rotation every ``--every``."""
    from eventstore import TraceWriter
    from eventstore import builders as b

    rng = random.Random(args.seed)
    head = b.session_meta(
        session_id="tail",
        provider="p",
        model_id="m",
        model_context_window="unknown",
        system_prompt="",
        agent_state="/x",
        workspace="/x",
        timestamp="2026-01-01T00:00:00.000Z",
    )
    sizes = (10, 1000, 100_000, 1_000_000)
    with TraceWriter(Path(args.dir) / "tail_001.jsonl", fsync="never") as w:
        w.append(head)
        for seq in range(args.count):
            if seq and seq % args.every == 0:
                w.rotate()
                w.append(head)  # each file starts with its head, as the engine writes it
            w.append(
                b.user_text(
                    f"{seq}:" + "x" * rng.choices(sizes, weights=(60, 30, 9, 1))[0],
                    timestamp="2026-01-01T00:00:00.000Z",
                )
            )
    sys.stdout.write("done\n")


async def _umask(args: argparse.Namespace) -> None:
    import base64

    from engine import LocalEnvironment, Session, allow_all, builtin_tools
    from engine.llm import ScriptedLLM
    from eventstore import DataRoot
    from eventstore import builders as b

    os.umask(0)

    class KeyedLLM(ScriptedLLM):
        """A provider-like LLM that holds an API key; nothing may ever write it."""

        def __init__(self, script: Any, api_key: str) -> None:
            super().__init__(script)
            self.api_key = api_key
            self.provider = "openai"
            self.model_id = "gpt-test"

    script = {
        "vision": False,
        "responses": [
            [
                {
                    "tool_call": {
                        "name": "exec_command",
                        "arguments": {"cmd": "yes line | head -c 200000", "timeout_ms": 10000},
                    }
                },
                {
                    "tool_call": {
                        "name": "write_file",
                        "arguments": {"path": "made.txt", "content": "x"},
                    }
                },
            ],
            [{"text": "done"}],
        ],
    }
    llm = KeyedLLM(script, os.environ["FAKE_API_KEY"])
    root = DataRoot(args.home)
    env = LocalEnvironment(args.workspace, tools=builtin_tools(), max_output_length=1000)
    session = await Session.create(
        llm=llm,
        environment=env,
        root=root,
        workspace=args.workspace,
        system_prompt="Be brief.",
        compaction=None,
    )
    png = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 32).decode()
    async with session:
        async for _msg in session.run(
            [b.user_text("look"), b.image_url(f"data:image/png;base64,{png}")], approve=allow_all
        ):
            pass
    sys.stdout.write(json.dumps({"session": session.id, "scratchpad": str(session.scratchpad)}))


def _memory(args: argparse.Namespace) -> None:
    """One stage per process, so that each peak is its own (ru_maxrss never goes down)."""
    from eventstore import DataRoot, read_trace
    from replay import load_session, validate_paths

    def peak() -> int:
        # VmHWM belongs to this process image.  ru_maxrss does not: Linux carries the parent's
        # high-water mark across fork and exec, so a child of a big test process would see no
        # growth at all.  (getrusage is the fallback where /proc is missing.)
        try:
            with open("/proc/self/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        return int(line.split()[1]) * 1024
        except OSError:
            pass
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux

    base = peak()
    out: dict[str, Any] = {"base": base}
    if args.stage == "reader":
        read = read_trace(args.file, report=False)
        out["detail"] = [len(read.records), [d.kind for d in read.diagnostics]]
    elif args.stage == "validate":
        out["detail"] = sorted({f.rule for f in validate_paths([args.file])})
    else:
        try:
            load_session(DataRoot(args.home), args.session)
            out["detail"] = "ok"
        except (ValueError, FileNotFoundError) as exc:
            out["detail"] = type(exc).__name__
    out["growth"] = peak() - base
    sys.stdout.write(json.dumps(out))


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="mode", required=True)
    crash = sub.add_parser("crash")
    crash.add_argument("--home", required=True)
    crash.add_argument("--workspace", required=True)
    crash.add_argument("--session", default="-")
    crash.add_argument("--gen", type=int, required=True)
    crash.add_argument("--acks", required=True)
    crash.add_argument("--fsync", default="turn")
    crash.add_argument("--tasks", type=int, default=12)
    hold = sub.add_parser("hold")
    hold.add_argument("--home", required=True)
    hold.add_argument("--session", required=True)
    rotate = sub.add_parser("rotate")
    rotate.add_argument("--dir", required=True)
    rotate.add_argument("--count", type=int, required=True)
    rotate.add_argument("--every", type=int, required=True)
    rotate.add_argument("--seed", type=int, default=0)
    umask = sub.add_parser("umask")
    umask.add_argument("--home", required=True)
    umask.add_argument("--workspace", required=True)
    memory = sub.add_parser("memory")
    memory.add_argument("--file", required=True)
    memory.add_argument("--home", required=True)
    memory.add_argument("--session", required=True)
    memory.add_argument("--stage", choices=("reader", "validate", "load"), required=True)
    args = parser.parse_args()

    import anyio

    if args.mode == "crash":
        anyio.run(_crash, args)
    elif args.mode == "hold":
        anyio.run(_hold, args)
    elif args.mode == "rotate":
        _rotate(args)
    elif args.mode == "umask":
        anyio.run(_umask, args)
    else:
        _memory(args)


if __name__ == "__main__":
    main()
