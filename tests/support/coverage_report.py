"""Print line coverage per package from the ``.coverage`` data ``make unit`` collected.

One line per package (statements, missed, percent) and the total; the per-file detail is
``.venv/bin/coverage report -m``.  Run from the repository root."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import coverage

PACKAGES = ("eventstore", "projections", "engine", "replay", "penguin")


def main() -> int:
    cov = coverage.Coverage()
    cov.load()
    rows: list[tuple[str, int, int]] = []
    for package in PACKAGES:
        statements = missed = 0
        for path in cov.get_data().measured_files():
            if Path(os.path.relpath(path)).parts[0] != package:
                continue
            _, lines, _, missing, _ = cov.analysis2(path)
            statements += len(lines)
            missed += len(missing)
        rows.append((package, statements, missed))
    out = io.StringIO()
    out.write(f"{'package':<12} {'stmts':>7} {'miss':>6} {'cover':>7}\n")
    for name, statements, missed in [
        *rows,
        ("total", *map(sum, zip(*[r[1:] for r in rows], strict=True))),
    ]:
        percent = 100.0 * (statements - missed) / statements if statements else 100.0
        out.write(f"{name:<12} {statements:>7} {missed:>6} {percent:>6.1f}%\n")
    sys.stdout.write(out.getvalue())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
