"""The options that supply a server's full launch command when the server does not report
it (SGLang 0.5.16): ``--baseline-launch``, ``--candidate-launch``, ``--launch-from-process``
(``core.launch.command``, ``recording.local_process``). Shared by ``replay``, ``serve`` and
``sweep`` (which passes them to each level's replay)."""

from __future__ import annotations

import click

LAUNCH_OPTIONS = (
    click.option(
        "--baseline-launch",
        metavar="COMMAND",
        help="The baseline server's full launch command, quoted, for a server that does not"
        ' report it (e.g. "python -m sglang.launch_server --model-path ..."); recorded as'
        " declared and checked against what the server reports.",
    ),
    click.option(
        "--candidate-launch",
        metavar="COMMAND",
        help="The candidate server's full launch command (as --baseline-launch).",
    ),
    click.option(
        "--launch-from-process/--no-launch-from-process",
        default=None,
        help="Read a server's launch command from its own process on this host (loopback"
        " URLs only, when this user may read it) [default: off].",
    ),
)
