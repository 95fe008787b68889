"""The session index (issue 34): cold build, incremental catch-up, warm ``sessions`` and
``search`` over a generated fleet, against reading the same files with the store's reader.

The fleet: ``BENCH_SEARCH_SESSIONS`` sessions (10,000) of about ``BENCH_SEARCH_KB`` KiB of JSONL
each (100: about 1 GB in all), each a prompt and turns of assistant text, tool calls and tool outputs
of 2-12 KiB (the index keeps the first 4 KiB of each output), written with the store's encoder.
A fleet of 1,000 sessions of the same shape is measured too: warm search must not grow with the
fleet (10k vs 1k within 3x).  The needle appears in 20 sessions of either fleet; the common
word in every session (that query reads every match, so it grows with the fleet).

Figures: cold build MB/s and its ratio to ``eventstore.tail`` reading every file (the reader the
index uses: decoding is the floor), the catch-up after one appended turn, warm
``list_sessions`` (what ``penguin sessions`` does: walk, stat, read the index) and warm
``Index.search`` (refresh + query), best of ``REPEATS``.  ``python -m bench search``.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from eventstore import DataRoot, TokenCounts, encode_line, tail
from eventstore import builders as b

SESSIONS = int(os.environ.get("BENCH_SEARCH_SESSIONS", "10000"))
SESSION_KB = int(os.environ.get("BENCH_SEARCH_KB", "100"))
SMALL = 1000
REPEATS = 5
NEEDLE = "zanzibarite"
COMMON = "the"


def _vocabulary(rng: random.Random) -> tuple[list[str], list[float]]:
    """20,000 made-up words with Zipf frequencies (as words in prose and code are)."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    vocab = ["".join(rng.choices(letters, k=rng.randint(2, 10))) for _ in range(20000)]
    vocab[0] = COMMON
    return vocab, list(itertools.accumulate(1 / (i + 1) for i in range(len(vocab))))


def _pool(rng: random.Random) -> tuple[list[str], list[str]]:
    vocab, cum = _vocabulary(rng)

    def words(n: int) -> str:
        return " ".join(rng.choices(vocab, cum_weights=cum, k=n))

    texts = [words(rng.randint(20, 120)) for _ in range(300)]
    outputs = [words(rng.randint(300, 2000)) for _ in range(300)]
    return texts, outputs


def _session(
    sid: str, rng: random.Random, pool: tuple[list[str], list[str]], needle: bool
) -> bytes:
    texts, outputs = pool
    records = [
        b.session_meta(
            session_id=sid,
            provider="bench",
            model_id="bench-model",
            model_context_window=200_000,
            system_prompt="You are careful.",
            agent_state="/home/u/.penguin/agent_state",
            workspace="/home/u/project",
        ),
        b.user_text(rng.choice(texts) + (f" {NEEDLE}" if needle else "")),
    ]
    size = 0
    k = 0
    while size < SESSION_KB * 1024:
        cid = f"call_{k}"
        out = rng.choice(outputs)
        turn = [
            b.request_begin(),
            b.assistant_text(rng.choice(texts)),
            b.tool_call("exec_command", f'{{"cmd": "grep -rn {rng.choice(texts)[:40]}"}}', cid),
            b.token_usage(TokenCounts(cache_write=100, output=20, total=120)),
            b.request_end("completed"),
            b.tool_call_output(cid, out),
        ]
        size += sum(len(encode_line(r)) for r in turn)
        records += turn
        k += 1
    records += [
        b.request_begin(),
        b.assistant_text("done " + rng.choice(texts)),
        b.token_usage(TokenCounts(cache_write=100, output=20, total=120)),
        b.request_end("completed"),
    ]
    return b"".join(encode_line(r) for r in records)


def generate(home: Path, count: int, seed: int = 34) -> list[Path]:
    rng = random.Random(seed)
    pool = _pool(rng)
    needles = set(rng.sample(range(count), 20))
    paths: list[Path] = []
    for n in range(count):
        day = f"2026-07-{1 + n % 28:02d}"
        d = home / "default_project" / "agents" / "default_agent" / "traces" / day
        d.mkdir(parents=True, exist_ok=True)
        sid = f"session-{day}-{n // 3600 % 24:02d}-{n // 60 % 60:02d}-{n % 60:02d}-{n:08x}"
        path = d / f"{sid}_001.jsonl"
        path.write_bytes(_session(sid, rng, pool, n in needles))
        paths.append(path)
    return paths


def _best(fn: Callable[[], object], repeats: int = REPEATS) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def _drop_index(home: Path) -> None:
    for p in home.glob("index.sqlite3*"):
        p.unlink()


def measure(tmp: Path, count: int) -> dict[str, float]:
    from penguin._index import Index
    from penguin.cli.listing import list_sessions

    home = tmp / f"fleet{count}"
    start = time.perf_counter()
    files = generate(home, count)
    t_gen = time.perf_counter() - start
    size = sum(p.stat().st_size for p in files)
    root = DataRoot(home)

    def read_all() -> None:
        for f in files:
            tail(f)

    t_read = _best(read_all, 1)
    start = time.perf_counter()
    with Index(root) as index:
        index.refresh()
    t_cold = time.perf_counter() - start
    db = sum(p.stat().st_size for p in home.glob("index.sqlite3*"))

    # One appended turn in one session: the catch-up reads that turn only.
    last = files[len(files) // 2]
    with last.open("ab") as f:
        f.write(
            b"".join(
                encode_line(r)
                for r in [
                    b.user_text("one more question"),
                    b.request_begin(),
                    b.assistant_text("one more answer"),
                    b.token_usage(TokenCounts(cache_write=1, output=1, total=2)),
                    b.request_end("completed"),
                ]
            )
        )
    with Index(root) as index:
        start = time.perf_counter()
        changed = index.refresh()
        t_incr = time.perf_counter() - start
        assert len(changed) == 1, changed

        def needle() -> object:
            index.refresh()
            hits = index.search(NEEDLE, limit=20)
            assert len(hits) == 20, len(hits)
            return hits

        def common() -> object:
            index.refresh()
            return index.search(COMMON, limit=20)

        t_needle = _best(needle)
        t_common = _best(common, 3)
        # The query alone, the index caught up (a server's watcher keeps it so).
        t_query = _best(lambda: index.search(NEEDLE, limit=20))
    t_sessions = _best(lambda: list_sessions(root), 3)
    print(
        f"search fleet {count}: {count} sessions, {size / 1e6:.0f} MB JSONL "
        f"(generated in {t_gen:.0f} s), index {db / 1e6:.0f} MB",
        flush=True,
    )
    print(f"  read with eventstore.tail  {t_read:8.2f} s  {size / 1e6 / t_read:6.1f} MB/s")
    print(
        f"  cold build                 {t_cold:8.2f} s  {size / 1e6 / t_cold:6.1f} MB/s "
        f"({t_cold / t_read:.1f}x the read)"
    )
    print(f"  catch-up, one turn         {t_incr * 1000:8.1f} ms")
    print(f"  warm sessions (listing)    {t_sessions * 1000:8.1f} ms")
    print(f"  warm search, needle (20)   {t_needle * 1000:8.1f} ms (catch-up check + query)")
    print(f"  search query alone, needle {t_query * 1000:8.1f} ms")
    print(f"  warm search, common word   {t_common * 1000:8.1f} ms", flush=True)
    shutil.rmtree(home)
    return {"needle": t_needle, "common": t_common, "sessions": t_sessions, "query": t_query}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        small = measure(Path(tmp), SMALL)
        big = measure(Path(tmp), SESSIONS)
    ratio = big["query"] / small["query"]
    print(
        f"search: {SESSIONS} vs {SMALL} sessions, warm needle query {ratio:.2f}x "
        f"(target <= 3x: {'met' if ratio <= 3 else 'MISSED'}); with the catch-up check "
        f"{big['needle'] / small['needle']:.2f}x; common word {big['common'] / small['common']:.2f}x; "
        f"sessions listing {big['sessions'] / small['sessions']:.2f}x"
    )


if __name__ == "__main__":
    main()
