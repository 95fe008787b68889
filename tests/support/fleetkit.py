"""Random sessions for fleet analytics (importable as ``fleetkit``; ``bench/`` puts
tests/support on sys.path too): seeded record sequences written as a data root.

A session is built from the builders, turn by turn, the way the engine records one -- prompts,
tool turns with approvals and outputs, timeouts with attempts and retry waits, compactions that
rotate into a new file, aborts -- and, with ``damage``, with the things only a crash, an old
writer or a newer version leaves behind: stray or overlapping spans, token_usage outside a span,
unknown payload types, known types with fields of the wrong type, origin-tagged and partial
records, malformed lines and torn tails.  The analytics differential tests fold the same files
with the ``Usage`` projection and compare.
"""

from __future__ import annotations

import random
from pathlib import Path

from eventstore import OmniMessage, TokenCounts, ToolDefinition, encode_line
from eventstore import builders as b

__all__ = ["generate_fleet", "session_lines"]

_TOOLS = [
    ToolDefinition(name="exec_command", description="Run a shell command."),
    ToolDefinition(name="read_file", description="Read a file."),
    ToolDefinition(name="apply_patch", description="Edit files."),
]
_MODELS = [("openai", "gpt-x"), ("anthropic", "claude-y"), ("scripted", "demo")]


class _Clock:
    def __init__(self, day: int, start: int) -> None:
        self.day = day
        self.ms = start

    def __call__(self, rng: random.Random) -> str:
        self.ms += rng.randint(1, 4000)
        s, ms = divmod(self.ms, 1000)
        return (
            f"2026-07-{self.day:02d}T{(s // 3600) % 24:02d}:{(s // 60) % 60:02d}:"
            f"{s % 60:02d}.{ms:03d}Z"
        )


def _counts(rng: random.Random) -> TokenCounts:
    cr, cw, out = rng.randint(0, 3000), rng.randint(1, 800), rng.randint(1, 300)
    return TokenCounts(cache_read=cr, cache_write=cw, output=out, total=cr + cw + out)


def session_lines(sid: str, rng: random.Random, *, day: int, damage: bool) -> list[list[bytes]]:
    """The files of one session, each a list of encoded lines (with their newlines)."""
    clock = _Clock(day, rng.randint(0, 20 * 3600 * 1000))
    provider, model = rng.choice(_MODELS)
    meta = b.session_meta(
        session_id=sid,
        provider=provider,
        model_id=model,
        model_context_window=200_000,
        system_prompt="You are careful.",
        agent_state="/h/p/agents/a/agent_state",
        workspace="/w",
        timestamp=clock(rng),
    )
    files: list[list[bytes]] = [[]]
    session_total = TokenCounts()

    def put(msg: OmniMessage) -> None:
        files[-1].append(bytes(encode_line(msg)))

    def usage() -> None:
        nonlocal session_total
        request = _counts(rng)
        session_total = session_total + request
        put(b.token_usage(request, session_total, timestamp=clock(rng)))

    def junk() -> None:
        ts = clock(rng)
        choice = rng.randrange(9)
        if choice == 0:
            put(b.request_end(rng.choice(["completed", "timeout"]), timestamp=ts))
        elif choice == 1:
            put(b.request_begin(timestamp=ts))
        elif choice == 2:
            usage()
        elif choice == 3:
            files[-1].append(
                b'{"timestamp":"%s","type":"event_msg","payload":{"type":"x"}}\n' % ts.encode()
            )
        elif choice == 4:  # a known type with a field of the wrong type: an unknown payload
            files[-1].append(
                b'{"timestamp":"%s","type":"event_msg","payload":{"type":"request_end",'
                b'"status":"completed","attempt":"2"}}\n' % ts.encode()
            )
        elif choice == 5:
            files[-1].append(b'{"timestamp":"%s","type":"event_msg","payl\n' % ts.encode())
        elif choice == 6:
            msg = b.request_end("failed", timestamp=ts)
            files[-1].append(bytes(encode_line(OmniMessage(ts, msg.type, msg.payload, ["child"]))))
        elif choice == 7:
            put(b.partial_text("delta", "x", timestamp=ts))
        else:
            files[-1].append(b"   \n")

    put(meta)
    tools = b.tool_list_ready(_TOOLS, timestamp=clock(rng))
    for task in range(rng.randint(1, 4)):
        put(b.user_text(f"task {task}", timestamp=clock(rng)))
        if task == 0:
            put(tools)
        for turn in range(rng.randint(1, 4)):
            attempt = 0
            while True:
                put(b.request_begin(timestamp=clock(rng)))
                if damage and rng.random() < 0.15:
                    junk()
                if rng.random() < 0.2:
                    attempt += 1
                    if rng.random() < 0.5:
                        usage()
                    put(
                        b.request_end(
                            rng.choice(["timeout", "malformed", "failed"]),
                            error_message="idle timeout",
                            attempt=attempt,
                            retry_in_ms=250 * attempt,
                            timestamp=clock(rng),
                        )
                    )
                    continue
                break
            calls = [f"c{task}_{turn}_{i}" for i in range(rng.choice([0, 0, 1, 2]))]
            put(b.assistant_text("working", timestamp=clock(rng)))
            for cid in calls:
                put(
                    b.tool_call(
                        rng.choice(_TOOLS).name,
                        {"n": rng.randint(0, 99)},
                        cid,
                        timestamp=clock(rng),
                    )
                )
                put(
                    b.approval_decision(
                        rng.choice(["allow", "allow", "deny"]), cid, timestamp=clock(rng)
                    )
                )
            after = rng.random() < 0.3
            if not after:
                usage()
            put(b.request_end("completed", attempt=attempt or None, timestamp=clock(rng)))
            if after:
                usage()
            for cid in calls:
                put(
                    b.tool_call_output(
                        cid,
                        "ok" * rng.randint(1, 50),
                        timestamp=clock(rng),
                        stop_reason=rng.choice(["completed", "completed", "failed"]),
                    )
                )
            if damage and rng.random() < 0.1:
                junk()
        if rng.random() < 0.15:
            put(b.abort("interrupted by user", timestamp=clock(rng)))
        if rng.random() < 0.3:
            reason = rng.choice(["context", "turns", "manual"])
            mode = rng.choice(["summarize", "discard"])
            put(
                b.compaction_begin(
                    reason, mode, context=rng.randint(0, 9000), turns=task + 1, timestamp=clock(rng)
                )
            )
            status = "completed"
            if mode == "summarize":
                put(b.request_begin(timestamp=clock(rng)))
                usage()
                status = rng.choice(["completed", "completed", "failed"])
                put(b.request_end(status, timestamp=clock(rng)))
            put(b.compaction_end(reason, mode, status, timestamp=clock(rng)))
            if status == "completed":
                files.append([])
                put(meta)
                put(tools)
    if damage and rng.random() < 0.3:
        files[-1].append(files[-1][-1][: rng.randint(1, 20)])  # a torn tail
    return files


def generate_fleet(home: Path, count: int, *, seed: int = 7, damage: bool = False) -> list[Path]:
    """``count`` sessions under ``home`` (data-root layout, three projects/agents, several
    days); returns every file written."""
    rng = random.Random(seed)
    written: list[Path] = []
    for n in range(count):
        day = 1 + n % 5
        project, agent = ("default_project", "default_agent") if n % 3 else ("evals", "coder")
        sid = f"session-2026-07-{day:02d}-10-00-{n % 60:02d}-{n:08x}"
        folder = home / project / "agents" / agent / "traces" / f"2026-07-{day:02d}"
        folder.mkdir(parents=True, exist_ok=True)
        for index, lines in enumerate(session_lines(sid, rng, day=day, damage=damage), start=1):
            path = folder / f"{sid}_{index:03d}.jsonl"
            path.write_bytes(b"".join(lines))
            written.append(path)
    return written
