"""Permissions and secrets (R-ROOT-9, R-TRACE-18, R-IMG-1/3, R-TOOL-2).

A child process runs a whole session under ``umask 0`` — a non-vision model given an image (the
fold writes it to the scratchpad), ``LocalEnvironment`` with an output over its limit (the full
text is archived in the scratchpad) and a file write — with an LLM object that holds an API key
which appears nowhere in the prompt.  Afterwards every directory of the data root must be 0700,
every file (traces, lock, scratchpad files) 0600, and the key must not occur in any file under
the data root.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CHILD = Path(__file__).with_name("_child_session.py")
SECRET = "sk-SECRET-0123456789abcdefDEADBEEF"


def run_umask_child(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    home = tmp_path / "home"  # does not exist yet: the store creates every level
    workspace = tmp_path / "ws"
    workspace.mkdir()
    env = {
        **os.environ,
        "FAKE_API_KEY": SECRET,
        "OPENAI_API_KEY": SECRET,
        "ANTHROPIC_API_KEY": SECRET,
    }
    proc = subprocess.run(
        [sys.executable, str(CHILD), "umask", "--home", str(home), "--workspace", str(workspace)],
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr.decode()[-3000:]
    return home, json.loads(proc.stdout)


@pytest.fixture(scope="module")
def umask_session(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    return run_umask_child(tmp_path_factory.mktemp("umask"))


def modes(home: Path) -> dict[str, list[tuple[str, str]]]:
    """Every entry under ``home`` (itself included) whose mode is not the one R-ROOT-9 wants."""
    wrong: dict[str, list[tuple[str, str]]] = {"dirs": [], "files": []}
    for dirpath, _dirnames, filenames in os.walk(home):
        here = Path(dirpath)
        mode = stat.S_IMODE(here.stat().st_mode)
        if mode != 0o700:
            wrong["dirs"].append((str(here.relative_to(home.parent)), oct(mode)))
        for name in filenames:
            mode = stat.S_IMODE((here / name).lstat().st_mode)
            if mode != 0o600:
                wrong["files"].append((str((here / name).relative_to(home.parent)), oct(mode)))
    return wrong


def test_the_session_wrote_traces_lock_and_scratchpad(
    umask_session: tuple[Path, dict[str, Any]],
) -> None:
    home, info = umask_session
    files = [p for p in home.rglob("*") if p.is_file()]
    names = {p.suffix for p in files}
    assert {".jsonl", ".lock"} <= names, files
    scratch = Path(info["scratchpad"])
    assert any(p.name.startswith("upload-") for p in scratch.rglob("*")), "no folded image"
    assert len([p for p in scratch.rglob("*") if p.is_file()]) >= 2, "no archived output"


def test_files_0600_and_dirs_0700_under_umask_0_r_root_9(
    umask_session: tuple[Path, dict[str, Any]], figures: Any
) -> None:
    """R-ROOT-9: whatever the umask, directories 0700 and files 0600 — traces, the lock and
    the scratchpad's archived output and the folded image's directories."""
    home, _ = umask_session
    wrong = modes(home)
    assert wrong["files"] == []
    assert wrong["dirs"] == []
    entries = sum(len(d) + len(f) + 1 for _, d, f in os.walk(home))
    figures("permissions", {"entries_checked": entries, "wrong_modes": wrong, "umask": "0o000"})


def test_api_keys_are_never_written(umask_session: tuple[Path, dict[str, Any]]) -> None:
    """An LLM object (and the environment) holding an API key: the key appears in no file
    under the data root."""
    home, _ = umask_session
    needle = SECRET.encode()
    checked = 0
    for path in home.rglob("*"):
        if path.is_file():
            assert needle not in path.read_bytes(), f"API key written to {path}"
            checked += 1
    assert checked >= 3


def test_directories_made_by_the_image_fold_are_0700_r_root_9(
    umask_session: tuple[Path, dict[str, Any]],
) -> None:
    home, _ = umask_session
    assert modes(home)["dirs"] == []
