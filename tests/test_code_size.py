"""Code-size backstops (issue 14, relaxed by issue 28): no class in ``engine/``, ``replay/`` or
``penguin/`` longer than 600 lines, no function longer than 120.  Counted with ``ast`` from the
first decorator to the last line; there are no exceptions.

These are backstops against runaway growth, not targets: code is split by concept, and a
class or function is as long as its one job needs.  (At 400/80 the limit was being met by
squeezing: ``Session`` at exactly 400 lines, a dozen functions at 70-79.)"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("engine", "replay", "penguin")
MAX_CLASS = 600
MAX_FUNCTION = 120


def _spans(tree: ast.AST, prefix: str = "") -> list[tuple[str, str, int]]:
    """(kind, qualified name, lines) of every class and function, nested ones included."""
    out: list[tuple[str, str, int]] = []
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            assert node.end_lineno is not None
            kind = "class" if isinstance(node, ast.ClassDef) else "function"
            name = f"{prefix}{node.name}"
            out.append((kind, name, node.end_lineno - first + 1))
            out += _spans(node, f"{name}.")
        else:
            out += _spans(node, prefix)
    return out


def measure() -> dict[str, tuple[str, int]]:
    found: dict[str, tuple[str, int]] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            rel = path.relative_to(REPO).as_posix()
            for kind, name, lines in _spans(tree):
                found[f"{rel}:{name}"] = (kind, lines)
    return found


def _over(kind: str, lines: int) -> bool:
    return lines > (MAX_CLASS if kind == "class" else MAX_FUNCTION)


def test_no_class_over_600_lines_and_no_function_over_120() -> None:
    over = [
        f"{where} ({kind}, {lines} lines)"
        for where, (kind, lines) in measure().items()
        if _over(kind, lines)
    ]
    assert over == []


def test_the_checker_sees_an_oversized_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION))
    tree = ast.parse(
        f"class C:\n    @staticmethod\n    def f():\n{body.replace('    ', '        ')}\n"
    )
    spans = {name: (kind, lines) for kind, name, lines in _spans(tree)}
    assert spans["C.f"] == ("function", MAX_FUNCTION + 2)
    assert _over(*spans["C.f"])
