"""No package imports another package's private module (issue 14): what crosses a package
boundary is exported from the package's ``__init__``.  (``engine.llm`` is part of ``engine``.)"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("eventstore", "projections", "engine", "replay", "penguin")


def _private_imports() -> list[str]:
    found: list[str] = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if not isinstance(node, ast.ImportFrom) or node.level or not node.module:
                    continue
                top, *rest = node.module.split(".")
                if top == package or top not in PACKAGES:
                    continue
                if any(part.startswith("_") for part in rest):
                    found.append(f"{path.relative_to(REPO)}:{node.lineno}: {node.module}")
    return found


def test_no_package_imports_a_private_module_of_another() -> None:
    assert _private_imports() == []
