"""The price table in config.toml (``[prices."MODEL"]``, USD per million tokens): checked with
the file named, kept by a rewrite, and laid over the built-in table."""

from __future__ import annotations

from pathlib import Path

import pytest

from penguin.cli.config import load_config, price_table, save_config
from penguin.cli.errors import CliError
from projections import DEFAULT_PRICES, Price, price_for


def test_prices_override_and_extend_the_built_in_table(tmp_path: Path) -> None:
    (tmp_path / "config.toml").write_text(
        '[defaults]\nmodel = "my-model"\n\n'
        '[prices."my-model"]\ninput = 1\noutput = 2.5\n\n'
        '[prices."gpt-4o"]\ninput = 9\noutput = 9\ncached_input = 0\n'
    )
    config = load_config(tmp_path)
    table = price_table(config)
    assert table["my-model"] == Price(input=1.0, output=2.5)
    assert table["gpt-4o"] == Price(input=9.0, output=9.0, cached_input=0.0)
    assert price_for("claude-sonnet-4-20250514", table) == price_for(
        "claude-sonnet-4-20250514", DEFAULT_PRICES
    )
    assert price_for("unknown", table) is None
    # A rewrite (penguin config set) keeps the tables.
    config.values["model"] = "other"
    save_config(config)
    again = load_config(tmp_path)
    assert again.prices == config.prices and again.get("model") == "other"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('[prices]\n"m" = 3\n', "expected only the keys input, output, cached_input"),
        ('[prices."m"]\ninput = 1\n', "input and output (USD per million tokens) are required"),
        ('[prices."m"]\ninput = "1"\noutput = 1\n', "input must be a number"),
        ('[prices."m"]\ninput = -1\noutput = 1\n', "input must be a finite price >= 0"),
        ('[prices."m"]\ninput = 1\noutput = 1\ncolour = 1\n', "expected only the keys"),
    ],
)
def test_a_bad_price_names_the_file_and_the_model(tmp_path: Path, text: str, why: str) -> None:
    (tmp_path / "config.toml").write_text(text)
    with pytest.raises(CliError) as info:
        load_config(tmp_path)
    assert "config.toml: [prices." in str(info.value) and why in str(info.value)
