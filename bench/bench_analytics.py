"""Fleet analytics (issue 21): 20,000 generated sessions -- the ``tools`` report through DuckDB
(``replay.analytics``: reading every trace, building the views, running the report) against
``penguin stats --all`` in process (a Python fold per session), as a ratio measured in the same
run (target >= 10x); the Parquet export's throughput in MB/s of JSONL read; and the same report
on that export (the fleet workflow: export once, query many times).

``python -m bench analytics``; ``BENCH_FLEET=N`` changes the number of sessions.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from typer.testing import CliRunner

from penguin.cli import app

sys.path.insert(0, str(Path(__file__).parents[1] / "tests" / "support"))
from fleetkit import generate_fleet

SESSIONS = int(os.environ.get("BENCH_FLEET", "20000"))
# Best of two: on a shared 2-core machine a single run is noisy, three take minutes at 20k.
REPEATS = 2


# CPU seconds of the process (every DuckDB thread included) beside the wall clock: on a
# shared, loaded machine the wall clock measures the neighbours as much as the code.
_CPU: dict[Callable[[], object], float] = {}


def _best(fn: Callable[[], object], repeats: int = REPEATS) -> float:
    best = cpu = float("inf")
    for _ in range(repeats):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        best = min(best, time.perf_counter() - start)
        cpu = min(cpu, time.process_time() - start_cpu)
    _CPU[fn] = cpu
    return best


def main() -> None:
    try:
        from replay.analytics import REPORTS, open_fleet
    except ImportError:  # pragma: no cover - the extra is part of `make bench`'s venv
        print("analytics: DuckDB not installed (pip install 'penguin-engine[analytics]')")
        return
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        start = time.perf_counter()
        files = generate_fleet(home, SESSIONS, seed=20)
        t_gen = time.perf_counter() - start
        size = sum(p.stat().st_size for p in files)

        def tools_report() -> object:
            with open_fleet(home=home) as fleet:
                return fleet.report("tools").rows

        def stats_all() -> object:
            result = CliRunner().invoke(app, ["--home", str(home), "stats", "--all", "--json"])
            if result.exit_code != 0:
                raise RuntimeError(f"stats --all exited {result.exit_code}")
            return result

        def export() -> object:
            with open_fleet(home=home) as fleet:
                return fleet.export_parquet(Path(tmp) / "parquet")

        t_tools = _best(tools_report)
        t_stats = _best(stats_all)
        t_export = _best(export, repeats=1)

        def tools_on_parquet() -> object:
            import duckdb

            con = duckdb.connect()
            for view in ("sessions", "tool_calls"):
                con.execute(
                    f"CREATE VIEW {view} AS SELECT * FROM read_parquet("
                    f"'{Path(tmp) / 'parquet' / view}/**/*.parquet', hive_partitioning = true)"
                )
            rows = con.execute(REPORTS["tools"]).fetchall()
            con.close()
            return rows

        t_parquet = _best(tools_on_parquet)

        # The floor: DuckDB only reading the files (no parsing), and Python only reading them.
        paths = [str(p) for p in files]

        def duckdb_read_only() -> object:
            import duckdb

            con = duckdb.connect()
            rows = con.execute("SELECT sum(strlen(content)) FROM read_text(?)", [paths]).fetchall()
            con.close()
            return rows

        def python_read_only() -> object:
            return sum(len(Path(p).read_bytes()) for p in paths)

        t_read = _best(duckdb_read_only)
        t_pyread = _best(python_read_only)

        def build() -> object:
            open_fleet(home=home).close()
            return None

        t_build = _best(build)
        with open_fleet(home=home) as fleet:
            t0 = time.perf_counter()
            fleet.report("tools")
            t_report_only = time.perf_counter() - t0
            requests = fleet.sql("SELECT count(*) FROM requests").rows[0][0]

    mb = size / 1e6
    print(
        f"analytics: {SESSIONS} sessions, {len(files)} files, {size / 2**20:.1f} MiB JSONL, "
        f"{requests} request spans, generated in {t_gen:.1f} s"
    )
    c_stats, c_tools = _CPU[stats_all], _CPU[tools_report]
    print(
        f"  stats --all (in process)            {t_stats * 1000:9.0f} ms   (baseline; "
        f"CPU {c_stats * 1000:.0f} ms)"
    )
    print(
        f"  query --report tools (DuckDB)       {t_tools * 1000:9.0f} ms   "
        f"x{t_stats / t_tools:5.1f} faster than stats --all (target >= 10); "
        f"CPU {c_tools * 1000:.0f} ms: x{c_stats / c_tools:.1f}"
    )
    print(f"    of which the report on built views {t_report_only * 1000:8.0f} ms")
    print(
        f"  profile: building the views         {t_build * 1000:9.0f} ms   {mb / t_build:6.1f} MB/s"
        f"  (CPU {_CPU[build] * 1000:.0f} ms)"
    )
    print(
        f"           DuckDB read_text, no parse {t_read * 1000:9.0f} ms   {mb / t_read:6.1f} MB/s"
        f"  (CPU {_CPU[duckdb_read_only] * 1000:.0f} ms: stats --all CPU / this = "
        f"x{c_stats / _CPU[duckdb_read_only]:.1f})"
    )
    print(
        f"           Python read_bytes, no parse{t_pyread * 1000:9.0f} ms   {mb / t_pyread:6.1f} MB/s"
    )
    print(
        f"  export-parquet (all six views)      {t_export * 1000:9.0f} ms   "
        f"{mb / t_export:6.1f} MB/s of JSONL read"
    )
    print(
        f"  --report tools on the Parquet export {t_parquet * 1000:8.0f} ms   "
        f"x{t_stats / t_parquet:5.1f} faster than stats --all"
    )


if __name__ == "__main__":
    main()
