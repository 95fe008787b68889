"""Archiving to object storage: ``eventstore.archive`` against moto's S3 server on loopback.

Three figures, each against a baseline measured in the same run, on the same files:

- archive: ``archive_session`` over every session (upload, read back and hash, fsync the record,
  remove) vs a bare ``put_file`` of the same files through the same fsspec filesystem;
- fetch back: listing the archived root (``DataRoot.sessions()`` fetches every file back) vs a
  bare ``open().read()`` of every object;
- listing once fetched: ``sessions()`` over the fetched root vs over the root before archiving
  (the records cost one small read per session directory).

Loopback has no network latency: the ratios say what the archive adds to the transfers, not
how long a real bucket takes.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import time
from pathlib import Path

from eventstore import DataRoot, TokenCounts, encode_line
from eventstore import builders as b

SESSIONS = 200
TURNS = 20


def _session(home: Path, n: int, rng: random.Random) -> None:
    sid = f"session-2026-07-{1 + n % 5:02d}-10-00-{n % 60:02d}-{n:08x}"
    folder = home / "default_project/agents/default_agent/traces" / f"2026-07-{1 + n % 5:02d}"
    folder.mkdir(parents=True, exist_ok=True)
    meta = b.session_meta(
        session_id=sid,
        provider="scripted",
        model_id="m",
        model_context_window=200_000,
        system_prompt="",
        agent_state="/a",
        workspace="/w",
    )
    lines = [encode_line(meta)]
    for t in range(TURNS):
        lines.append(encode_line(b.user_text(f"task {t} " + "x" * rng.randint(50, 400))))
        lines.append(encode_line(b.assistant_text("reply " + "y" * rng.randint(100, 2000))))
        lines.append(encode_line(b.token_usage(TokenCounts(cache_write=100, output=50, total=150))))
    (folder / f"{sid}_001.jsonl").write_bytes(b"".join(lines))


def main() -> None:
    import fsspec  # type: ignore[import-untyped]
    from moto.server import ThreadedMotoServer

    from eventstore.archive import archive_session

    env = {"AWS_ACCESS_KEY_ID": "bench", "AWS_SECRET_ACCESS_KEY": "bench"}
    os.environ.update({**env, "AWS_DEFAULT_REGION": "us-east-1"})
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        fs = fsspec.filesystem("s3", endpoint_url=endpoint)
        fs.mkdir("bench")
        with tempfile.TemporaryDirectory() as tmp:
            home = Path(tmp) / "home"
            rng = random.Random(7)
            for n in range(SESSIONS):
                _session(home, n, rng)
            files = sorted(home.rglob("*.jsonl"))
            size = sum(f.stat().st_size for f in files)
            pristine = Path(tmp) / "pristine"
            shutil.copytree(home, pristine)
            root = DataRoot(home)

            t = time.perf_counter()
            listed_local = DataRoot(pristine).sessions()
            t_list_local = time.perf_counter() - t

            t = time.perf_counter()
            for i, f in enumerate(files):
                fs.put_file(str(f), f"bench/raw/{i}.jsonl")
            t_put = time.perf_counter() - t

            t = time.perf_counter()
            for info in root.sessions():
                archive_session(root, info.session_id, to="s3://bench/a", endpoint_url=endpoint)
            t_archive = time.perf_counter() - t
            assert not list(home.rglob("*.jsonl"))

            t = time.perf_counter()
            for i in range(len(files)):
                with fs.open(f"bench/raw/{i}.jsonl", "rb") as f:
                    f.read()
            t_get = time.perf_counter() - t

            t = time.perf_counter()
            listed = root.sessions()
            t_fetch = time.perf_counter() - t
            assert len(listed) == len(listed_local) == SESSIONS

            t = time.perf_counter()
            root.sessions()
            t_list_fetched = time.perf_counter() - t
    finally:
        server.stop()
    mb = size / 2**20
    print(f"{SESSIONS} sessions, {len(files)} files, {mb:.1f} MiB, moto on loopback")
    print(
        f"archive: {t_archive:.2f} s ({SESSIONS / t_archive:.0f} sessions/s, "
        f"{mb / t_archive:.1f} MiB/s) vs bare put {t_put:.2f} s: {t_archive / t_put:.2f}x"
    )
    print(
        f"fetch back (sessions()): {t_fetch:.2f} s vs bare get {t_get:.2f} s: "
        f"{t_fetch / t_get:.2f}x"
    )
    print(
        f"sessions() once fetched: {t_list_fetched * 1000:.0f} ms vs never archived "
        f"{t_list_local * 1000:.0f} ms: {t_list_fetched / t_list_local:.2f}x"
    )


if __name__ == "__main__":
    main()
