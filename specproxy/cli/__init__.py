"""The `specproxy` command: parse options -> build a config -> call one library function.

Each subcommand lives in its own module of this package and registers itself on
``main``. This package is the only place that calls ``sys.exit``. Exit statuses
(docs/contract.md): 0 success, 1 the run finished but a check failed, 2 usage or config
error, 3 a backend could not be reached.
"""

from __future__ import annotations

import importlib
import sys

import click

from specproxy import __version__
from specproxy.errors import SpecproxyError

EXIT_OK = 0
EXIT_USAGE = 2  # click's own usage errors; ours carry their exit_code (errors.py)

_SUBCOMMANDS: tuple[str, ...] = (
    "sim",
    "serve",
    "replay",
    "sweep",
    "check",
    "report",
    "demo",
    "launch",
)
_SUBCOMMANDS += ("score",)  # the output-distribution check for serve runs


class _Commands(click.Group):
    """The subcommands, each module imported when its command is asked for (so ``report``
    does not load the proxy, the replayer and aiohttp)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(_SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in _SUBCOMMANDS and cmd_name not in self.commands:
            module = importlib.import_module(f"specproxy.cli.{cmd_name}")
            self.add_command(module.command, name=cmd_name)
        return self.commands.get(cmd_name)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="specproxy")
def group() -> None:
    """Tell, with raw evidence, whether a speculative-decoding configuration makes your traffic faster."""


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the group and turn errors into the documented exit statuses."""
    try:
        code = group.main(args=argv, prog_name="specproxy", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        sys.exit(130)
    except click.ClickException as exc:
        exc.show()
        sys.exit(EXIT_USAGE)
    except SpecproxyError as exc:
        click.echo(f"specproxy: {exc}", err=True)
        sys.exit(exc.exit_code)
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError) as exc:
        click.echo(f"specproxy: {exc.strerror}: {exc.filename}", err=True)  # a path we were given
        sys.exit(EXIT_USAGE)
    sys.exit(code if isinstance(code, int) else EXIT_OK)
