"""The validator is one checker composing check groups, one concept each (issue 28): a group runs
alone and reports exactly what it reports inside the whole checker; together they report what
the single pass did (SPEC §16.1: same rules, same findings, same order — ``test_validate.py``
pins those); an unknown group is a clear error."""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest

from eventstore import TraceDecodeError, decode
from replay._checks import GROUP_NAMES, GROUPS, FileChecker, Finding

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "traces"


def _check(path: Path, groups: tuple[str, ...] | None) -> list[Finding]:
    checker = FileChecker(path, index=1, name_id=None, is_highest=True, strict=True, groups=groups)
    for number, line in enumerate(path.read_bytes().splitlines(), 1):
        try:
            checker.feed(number, decode(line))
        except TraceDecodeError:
            continue
    checker.finish()
    return checker.findings


def _corpus(tmp_path: Path) -> list[Path]:
    """The recorded fixtures, and the same traces with lines dropped, repeated and moved: every
    group has something to report."""
    rng = random.Random(28)
    sources = sorted(FIXTURES.rglob("*.jsonl"))
    out = list(sources)
    for n, source in enumerate(sources * 3):
        lines = source.read_bytes().splitlines(keepends=True)
        for _ in range(3):
            i, j = rng.randrange(len(lines)), rng.randrange(len(lines) + 1)
            op = rng.choice(("drop", "repeat", "move"))
            if op == "drop" and len(lines) > 1:
                lines.pop(i)
            elif op == "repeat":
                lines.insert(j, lines[i])
            else:
                lines.insert(min(j, len(lines) - 1), lines.pop(i))
        mutated = tmp_path / f"{n:03d}_{source.name}"
        mutated.write_bytes(b"".join(lines))
        out.append(mutated)
    return out


def test_each_group_alone_reports_what_it_reports_in_the_whole(tmp_path: Path) -> None:
    """R-CLI-5's findings, split by group: a group run alone reports a subsequence of the whole
    checker's findings, and the groups run one by one report exactly the whole (as a multiset)."""
    reported: Counter[str] = Counter()
    for path in _corpus(tmp_path):
        whole = _check(path, None)
        alone = {name: _check(path, (name,)) for name in GROUP_NAMES}
        for name, findings in alone.items():
            remaining = iter(whole)
            assert all(f in remaining for f in findings), (path.name, name)
            reported[name] += len(findings)
        assert Counter(f for fs in alone.values() for f in fs) == Counter(whole), path.name
    assert sorted(n for n, count in reported.items() if count) == sorted(GROUP_NAMES)


def test_groups_are_one_module_each_and_run_in_a_fixed_order() -> None:
    assert len(set(GROUP_NAMES)) == len(GROUP_NAMES) == 8
    assert len({group.__module__ for group in GROUPS}) == len(GROUPS)
    checker = FileChecker(
        Path("x.jsonl"), index=None, name_id=None, is_highest=True, strict=False,
        groups=tuple(reversed(GROUP_NAMES)),
    )  # fmt: skip
    assert [group.name for group in checker.groups] == list(GROUP_NAMES)


def test_an_unknown_group_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match=r"unknown check group\(s\) nope; the groups are time, "):
        FileChecker(
            Path("x.jsonl"), index=None, name_id=None, is_highest=True, strict=False,
            groups=("pairing", "nope"),
        )  # fmt: skip
