"""Configuration: frozen dataclasses filled from command-line options and a TOML file.

``load_toml_table`` reads one table of a TOML file and rejects unknown keys, naming the
key and the file; each subcommand owns its own dataclass and calls ``build`` with the
options the user gave on the command line (which win over the file).
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path
from typing import Any, TypeVar

from specproxy.errors import ConfigError

T = TypeVar("T")


def load_toml_table(path: str | Path, table: str | None = None) -> dict[str, Any]:
    """The top level (or ``[table]``) of the TOML file at ``path``; ConfigError if unreadable."""
    p = Path(path)
    try:
        data = tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"{p}: config file not found") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: not valid TOML: {exc}") from exc
    if table is None:
        return data
    section = data.get(table, {})
    if not isinstance(section, dict):
        raise ConfigError(f"{p}: [{table}] must be a table")
    return section


def build(cls: type[T], file_values: dict[str, Any], cli_values: dict[str, Any], source: str) -> T:
    """Instantiate dataclass ``cls`` from file values overridden by non-None CLI values.

    Keys may use ``-`` or ``_``. Unknown keys raise ConfigError naming the key and source;
    a value the dataclass rejects in ``__post_init__`` raises ConfigError too.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    known = {f.name for f in dataclasses.fields(cls)}
    merged: dict[str, Any] = {}
    for key, value in file_values.items():
        name = key.replace("-", "_")
        if name not in known:
            raise ConfigError(f"{source}: unknown key {key!r} (known: {', '.join(sorted(known))})")
        merged[name] = value
    for key, value in cli_values.items():
        if value is not None:
            merged[key.replace("-", "_")] = value
    try:
        return cls(**merged)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: {exc}") from exc
