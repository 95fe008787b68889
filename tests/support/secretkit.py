"""R-SET-4: the keys and tokens the suite hands to providers and servers, and the grep that
finds one in a trace (the suite's session fixture runs it over every trace the run wrote)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

SUITE_SECRETS: tuple[str, ...] = (
    "sk-ant-api03-Zq8RfT2uVw",  # tests/engine/test_provider_anthropic.py
    "sk-e2e-Kx93LmQ0vR",  # tests/engine/test_provider_engine.py
    "sk-test-7Hq2Zp9Lw4Xy",  # tests/engine/test_provider_openai.py
    "sk-restart-Qm83Zt5Lp0",  # tests/penguin/server/test_settings_restart.py
    "sk-settings-Zx81Qw",  # tests/replay/test_settings_records.py
    "mcp-env-Zr71QxV4",  # tests/mcp/test_mcp_resume.py
    "test-token-0123456789",  # tests/support/serverkit.py
    "web-test-token-0123456789",  # tests/support/webkit.py
    "s3cr3t-penguin-archive-test-key-0001",  # tests/support/s3kit.py
)


def traces_holding(base: Path, secrets: Iterable[str]) -> list[tuple[Path, str]]:
    """Every ``*.jsonl`` under ``base`` that holds one of ``secrets``, with the secret."""
    wanted = [s.encode() for s in secrets]
    found: list[tuple[Path, str]] = []
    for path in base.rglob("*.jsonl"):
        try:
            data = path.read_bytes()
        except OSError:
            continue
        found += [(path, s.decode()) for s in wanted if s in data]
    return found
