"""``penguin config show|set|unset``: the settings in ``<home>/config.toml``.

Owns: the ``config`` sub-commands.  Does not: read or write the file (``config``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from penguin.cli.config import CONFIG_KEYS, check_setting, load_config, save_config
from penguin.cli.errors import errors_to_exit_codes
from penguin.cli.globalopts import globals_of
from penguin.cli.options import JsonOpt
from penguin.cli.terminal.console import out_console, write_json
from penguin.cli.terminal.safe import safe

if TYPE_CHECKING:
    pass

__all__ = ["config_app"]

config_app = typer.Typer(
    help="Default model, provider, base URL, key variable and approval mode, kept in "
    "<home>/config.toml.  API keys are never stored there: set api_key_env to the name of the "
    "environment variable that holds yours.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
)


@config_app.command("show")
def show(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Print the settings and the file they come from."""
    from rich.text import Text

    with errors_to_exit_codes():
        root = globals_of(ctx).root()
        config = load_config(root.home)
        if as_json:
            write_json({"path": str(config.path), "settings": config.values})
            return
        out = out_console()
        exists = "" if config.path.exists() else " (not created yet)"
        out.print(Text(f"# {safe(str(config.path), keep_newlines=False)}{exists}"), soft_wrap=True)
        for key, what in CONFIG_KEYS.items():
            value = config.get(key)
            shown = safe(value, keep_newlines=False) if value is not None else "(not set)"
            out.print(Text(f"{key:<12} = {shown}"), Text(f"  # {what}", style="dim"), sep="")


@config_app.command("set")
def set_(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(help=f"One of: {', '.join(CONFIG_KEYS)}.")],
    value: Annotated[str, typer.Argument(help="The value.")],
) -> None:
    """Set one setting (the data root must exist, or pass --init)."""
    from rich.text import Text

    with errors_to_exit_codes():
        check_setting(key, value, where="penguin config set")
        root = globals_of(ctx).writable_root()
        config = load_config(root.home)
        config.values[key] = value
        save_config(config)
        out_console().print(Text(f"{key} = {safe(value, keep_newlines=False)}"), soft_wrap=True)


@config_app.command("unset")
def unset(
    ctx: typer.Context,
    key: Annotated[str, typer.Argument(help=f"One of: {', '.join(CONFIG_KEYS)}.")],
) -> None:
    """Remove one setting."""
    with errors_to_exit_codes():
        if key not in CONFIG_KEYS:
            check_setting(key, "", where="penguin config unset")
        root = globals_of(ctx).root()
        config = load_config(root.home)
        if config.values.pop(key, None) is not None:
            save_config(config)
