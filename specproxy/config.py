"""Configuration: frozen dataclasses filled from command-line options and a TOML file.

``load_toml_table`` reads one subcommand's table of a TOML file: the ``[table]`` when the
file has one (a key outside it, or a table no subcommand owns, is rejected by name), else
the top level when the file has no subcommand tables at all. ``build`` fills a
dataclass from those values and the options given on the command line (which win),
rejecting an unknown key or a value of the wrong type by name.
"""

from __future__ import annotations

import dataclasses
import enum
import tomllib
import types
import typing
from pathlib import Path
from typing import Any, TypeVar

from specproxy.errors import ConfigError

T = TypeVar("T")

#: Subcommands that may own a table in a shared TOML file.
COMMAND_TABLES = ("sim", "serve", "replay", "check", "report", "demo", "launch", "sweep")


def _read(p: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise ConfigError(f"{p}: config file not found") from exc
    except IsADirectoryError as exc:
        raise ConfigError(f"{p}: is a directory, not a config file") from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{p}: not valid TOML: {exc}") from exc


def load_toml_table(path: str | Path, table: str | None = None) -> dict[str, Any]:
    """The whole file (``table=None``) or the values for subcommand ``table``.

    With a ``[table]`` present, every other top-level entry must be another subcommand's
    table. Without one, a file holding only plain keys gives them; a file holding only
    other subcommands' tables is an error that says which tables it has.
    """
    p = Path(path)
    data = _read(p)
    if table is None:
        return data
    tables = sorted(k for k, v in data.items() if isinstance(v, dict))
    plain = sorted(k for k, v in data.items() if not isinstance(v, dict))
    stray = [t for t in tables if t not in COMMAND_TABLES and t != table]
    if table in data:
        if not isinstance(data[table], dict):
            raise ConfigError(f"{p}: [{table}] must be a table")
        if plain:
            raise ConfigError(f"{p}: key {plain[0]!r} is outside [{table}]; move it into [{table}]")
        if stray:
            raise ConfigError(
                f"{p}: unknown table [{stray[0]}] (tables: {', '.join(COMMAND_TABLES)})"
            )
        return dict(data[table])
    if tables:
        shown = ", ".join(f"[{t}]" for t in tables)
        raise ConfigError(f"{p}: no [{table}] table for `specproxy {table}` (the file has {shown})")
    return data


def _type_name(annotation: Any) -> str:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in args)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return "a string"
    if typing.get_origin(annotation) is tuple:
        return "a list"
    names = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _coerce(value: Any, annotation: Any) -> Any:
    """``value`` as ``annotation`` wants it (TOML list -> tuple, int -> float); TypeError if not."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in typing.get_args(annotation):
            return None
        for arg in typing.get_args(annotation):
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg)
            except TypeError:
                continue
        raise TypeError(annotation)
    if origin is tuple and isinstance(value, list | tuple):
        inner = typing.get_args(annotation)[:1]
        return tuple(_coerce(v, inner[0]) if inner else v for v in value)
    if annotation is bool:
        if isinstance(value, bool):
            return value
        raise TypeError(annotation)
    if annotation is float and isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    if annotation is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if annotation is str and isinstance(value, str):
        return value
    if annotation is Path and isinstance(value, str | Path):
        return Path(value)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        if isinstance(value, annotation):
            return value
        if isinstance(value, str):
            return value  # the dataclass names the values it allows
        raise TypeError(annotation)
    if annotation in (bool, int, float, str, Path) or origin is tuple:
        raise TypeError(annotation)
    return value  # a type this reader does not know: the dataclass checks it


def _checked(cls: type[Any], values: dict[str, Any], source: str) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    out: dict[str, Any] = {}
    for name, value in values.items():
        try:
            out[name] = _coerce(value, hints[name])
        except TypeError:
            want = _type_name(hints[name])
            raise ConfigError(f"{source}: {name}: expected {want}, got {value!r}") from None
    return out


def build(cls: type[T], file_values: dict[str, Any], cli_values: dict[str, Any], source: str) -> T:
    """Instantiate dataclass ``cls`` from file values overridden by non-None CLI values.

    Keys may use ``-`` or ``_``. An unknown key, or a file value of the wrong type, raises
    ConfigError naming the key and source; so does a value ``__post_init__`` rejects.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    known = {f.name for f in dataclasses.fields(cls)}
    from_file: dict[str, Any] = {}
    for key, value in file_values.items():
        name = key.replace("-", "_")
        if name not in known:
            raise ConfigError(f"{source}: unknown key {key!r} (known: {', '.join(sorted(known))})")
        from_file[name] = value
    merged = _checked(cls, from_file, source)
    for key, value in cli_values.items():
        if value is not None:
            merged[key.replace("-", "_")] = value
    try:
        return cls(**merged)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{source}: {exc}") from exc
