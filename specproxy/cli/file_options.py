"""``--config`` for subcommands whose options go straight to a function, not a dataclass.

``config_option(table)`` is an eager ``--config`` option: it reads the subcommand's
table (``config.load_toml_table``: keys outside it are rejected), matches each key to
one of the command's options (by its long name, ``-`` or ``_``), converts the value
with that option's click type and hands the result to click as the command's defaults,
so a required option may come from the file and the command line still wins. A wrong
key or type is one line naming the key and the file.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from specproxy.config import load_toml_table
from specproxy.errors import ConfigError


def _by_key(command: click.Command) -> dict[str, click.Option]:
    keys: dict[str, click.Option] = {}
    for param in command.params:
        if not isinstance(param, click.Option) or param.name == "config_path":
            continue
        for opt in param.opts:
            if opt.startswith("--"):
                keys[opt[2:].replace("-", "_")] = param
    return keys


def _defaults(ctx: click.Context, path: str, table: str) -> dict[str, Any]:
    options = _by_key(ctx.command)
    defaults: dict[str, Any] = {}
    for key, raw in load_toml_table(path, table).items():
        param = options.get(key.replace("-", "_"))
        if param is None or param.name is None:
            known = ", ".join(sorted(options))
            raise ConfigError(f"{path}: unknown key {key!r} in [{table}] (known: {known})")
        if isinstance(raw, dict) or (isinstance(raw, list) and not param.multiple):
            raise ConfigError(f"{path}: {key}: expected a single value, got {raw!r}")
        if param.is_flag and not isinstance(raw, bool):
            raise ConfigError(f"{path}: {key}: expected true or false, got {raw!r}")
        try:
            defaults[param.name] = param.type_cast_value(ctx, raw)
        except click.BadParameter as exc:
            raise ConfigError(f"{path}: {key}: {exc.message}") from None
    return defaults


def config_option(table: str) -> Callable[[Any], Any]:
    """The ``--config FILE`` option reading ``[table]`` into the command's defaults."""

    def load(ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
        if value is not None:
            ctx.default_map = {**(ctx.default_map or {}), **_defaults(ctx, value, table)}
        return value

    return click.option(
        "--config",
        "config_path",
        type=click.Path(dir_okay=False),
        is_eager=True,
        expose_value=False,
        callback=load,
        help=f"TOML file whose [{table}] table holds any of these options.",
    )
