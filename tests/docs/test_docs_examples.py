"""Every code example in the docs runs, so the docs cannot drift from the code.

Owns: running the Python examples of ``README.md`` and ``docs/`` (pytest-examples: each block
runs as written and its ``#>`` lines must equal what it prints) and their shell examples (each
``sh`` block runs in bash, page by page in a fresh data root); does not: build the site
(``make docs`` runs ``mkdocs build --strict``).

A shell block that cannot run here (it needs an API key, the network, or it never returns) is
preceded by ``<!-- not run: <reason> -->``; the reason is required and the set stays small.
In shell blocks the word ``SESSION`` stands for the most recent session of the page's data root,
as a reader would paste an id from ``penguin sessions``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from pytest_examples import CodeExample, EvalExample, find_examples

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
SHELL_LANGS = ("sh", "bash", "shell")
RUN_LANGS = (*SHELL_LANGS, "sql")
# Most code blocks that are not run are transcripts (``console``/``text``) or data (``json``).
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<reason>[^>]*?)\s*-->\s*$")
FENCE = re.compile(r"^(?P<indent> *)(?P<fence>```+)(?P<info>[^\n`]*)$")


@dataclass(frozen=True)
class Block:
    page: Path
    lang: str
    line: int
    code: str
    not_run: str | None

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def code_blocks(page: Path) -> list[Block]:
    """The page's shell and SQL blocks, each with its not-run reason if it has one."""
    lines = page.read_text(encoding="utf-8").splitlines()
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        fence, lang = m["fence"], m["info"].strip().split(" ")[0]
        end = i + 1
        while end < len(lines) and lines[end].strip() != fence:
            end += 1
        if lang in RUN_LANGS:
            before = [ln for ln in lines[max(0, i - 3) : i] if ln.strip()]
            marker = NOT_RUN.match(before[-1].strip()) if before else None
            code = "\n".join(ln[len(m["indent"]) :] for ln in lines[i + 1 : end])
            reason = marker["reason"] if marker else None
            blocks.append(Block(page, lang, i + 1, code, reason))
        i = end + 1
    return blocks


ALL_BLOCKS = [b for page in PAGES for b in code_blocks(page)]
ALL_SHELL = [b for b in ALL_BLOCKS if b.lang in SHELL_LANGS]


def shell_blocks(page: Path) -> list[Block]:
    return [b for b in code_blocks(page) if b.lang in SHELL_LANGS]


def python_examples() -> list[CodeExample]:
    return [
        ex
        for ex in find_examples(ROOT / "README.md", ROOT / "docs")
        if "_hooks" not in ex.path.parts
    ]


@pytest.mark.parametrize("example", python_examples(), ids=str)
def test_python_example_runs_as_written(
    example: CodeExample, eval_example: EvalExample, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Examples use paths relative to the repository root (fixtures/...), as a reader runs them.
    monkeypatch.chdir(ROOT)
    eval_example.set_config(line_length=100, target_version="py311")
    if eval_example.update_examples:  # pytest --update-examples rewrites the #> lines
        eval_example.format_ruff(example)
        eval_example.run_print_update(example)
        return
    eval_example.lint_ruff(example)
    try:
        eval_example.run_print_check(example)
    except (Exception, pytest.fail.Exception) as exc:
        # The example's code objects carry the page's line numbers, which Python 3.11's
        # traceback formatting cannot map back: report the failure without them.
        raise AssertionError(f"{example}: {_describe(exc)}") from None


def _describe(exc: BaseException) -> str:
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


def test_every_skipped_block_says_why() -> None:
    skipped = [b for b in ALL_BLOCKS if b.not_run is not None]
    assert all(b.not_run for b in skipped), [str(b) for b in skipped if not b.not_run]
    # Not running is the exception: most examples (Python, shell, SQL) run.
    examples = len(ALL_BLOCKS) + len(python_examples())
    assert len(skipped) < examples / 4, [f"{b}: {b.not_run}" for b in skipped]


SQL_BLOCKS = [b for b in ALL_BLOCKS if b.lang == "sql" and b.not_run is None]


@pytest.mark.parametrize("block", SQL_BLOCKS, ids=str)
def test_sql_examples_run_on_the_recorded_sessions(block: Block) -> None:
    """The analytics queries run on the fixture corpus and return rows."""
    pytest.importorskip("duckdb")
    from replay.analytics import open_fleet

    with open_fleet(traces=str(ROOT / "fixtures/traces/*/*/*.jsonl")) as fleet:
        result = fleet.sql(block.code.strip().rstrip(";"))
    assert result.columns and result.rows, f"{block}: no rows"


PRELUDE = """\
set -euo pipefail
latest_session() {
    penguin sessions --json | python -c 'import json,sys; print(json.load(sys.stdin)[0]["session_id"])'
}
"""


def _pages_with_runnable_shell() -> list[Path]:
    return sorted({b.page for b in ALL_SHELL if b.not_run is None})


@pytest.mark.parametrize(
    "page", _pages_with_runnable_shell(), ids=lambda p: str(p.relative_to(ROOT))
)
def test_shell_examples_run(page: Path, tmp_path: Path) -> None:
    """Each page's shell blocks run in order in one fresh data root, as a reader would."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "fixtures").symlink_to(ROOT / "fixtures")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PENGUIN_", "OPENAI_", "ANTHROPIC_"))
    }
    env |= {
        "PENGUIN_HOME": str(tmp_path / "home"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        "NO_COLOR": "1",
        "COLUMNS": "100",
    }
    (tmp_path / "home").mkdir()
    assert shutil.which("penguin", path=env["PATH"]), "the penguin command is not installed"
    for block in [b for b in shell_blocks(page) if b.not_run is None]:
        code = re.sub(r"\bSESSION\b", '"$(latest_session)"', block.code)
        proc = subprocess.run(
            ["bash", "-c", PRELUDE + code],
            cwd=work,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert proc.returncode == 0, (
            f"{block}: exit {proc.returncode}\n{block.code}\n--- stdout\n{proc.stdout}"
            f"\n--- stderr\n{proc.stderr}"
        )


README_LINK = re.compile(r"\]\((?P<target>[^)#\s]+)(?:#[^)]*)?\)")


def test_readme_is_a_short_entry_point_whose_links_resolve() -> None:
    """The README stays an entry point (the manual is the site), and every relative link in it
    points at a file that exists: mkdocs --strict checks the pages' links, not the README's."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    targets = [m["target"] for m in README_LINK.finditer(text)]
    local = [t for t in targets if "://" not in t and not t.startswith("mailto:")]
    assert local, "the README links into the docs"
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, missing


def test_web_app_pictures_are_the_browser_suites_screenshots() -> None:
    """docs/web-*.png are copies of what tests/penguin/web saves under build/screenshots/; a
    picture the suite no longer takes would show a page that may no longer exist."""
    pictures = sorted((ROOT / "docs").glob("web-*.png"))
    suite = "".join(
        p.read_text(encoding="utf-8") for p in (ROOT / "tests/penguin/web").glob("*.py")
    )
    assert pictures
    stale = [p.name for p in pictures if p.stem not in suite]
    assert not stale, f"no browser test saves {stale}"


def test_the_trace_format_page_names_every_payload_type() -> None:
    """A new record type is documented where readers of the trace look for it."""
    import eventstore

    page = (ROOT / "docs/trace-format.md").read_text(encoding="utf-8")
    tags = [*eventstore.MODEL_PAYLOAD_TAGS, *eventstore.EVENT_PAYLOAD_TAGS]
    missing = [tag for tag in tags if f"`{tag}`" not in page]
    assert not missing, f"docs/trace-format.md does not name {missing}"
