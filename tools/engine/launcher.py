"""A ``SettingLauncher`` for llama.cpp's ``llama-server``: the setting sweep on a CPU.

The setting replaces or adds one ``--spec-*``/``--draft-*`` flag of the candidate's
command as given, unchecked, so that the engine itself judges the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from specproxy.backends.base import BackendKind
from specproxy.sweep.launchers import ServerCommand, flag_name, free_port, override_flags
from tools.engine.llamacpp import ServerSpec


@dataclass(frozen=True, slots=True)
class LlamaCppLauncher:
    """A llama.cpp baseline and a drafting candidate; the setting overrides candidate flags."""

    binary: Path
    baseline_spec: ServerSpec
    candidate_spec: ServerSpec
    kind: BackendKind = BackendKind.OPENAI
    health_timeout_s: float = 60.0
    stop_timeout_s: float = 10.0

    def check_key(self, key: str) -> None:
        if not flag_name(key).startswith(("spec-", "draft-")):
            raise ValueError(
                f"--vary {key}: not a llama.cpp speculative flag (--spec-*, --draft-*)"
            )

    def _server(self, argv: list[str]) -> ServerCommand:
        port = argv[argv.index("--port") + 1]
        return ServerCommand(tuple(argv), f"http://127.0.0.1:{port}")

    def baseline(self) -> ServerCommand:
        return self._server(self.baseline_spec.argv(self.binary, free_port()))

    def candidate(self, setting: Mapping[str, str]) -> ServerCommand:
        argv = self.candidate_spec.argv(self.binary, free_port())
        return self._server(override_flags(argv, setting))

    def candidate_args(self, setting: Mapping[str, str]) -> dict[str, str]:
        argv = override_flags(self.candidate_spec.argv(self.binary, 0), setting)
        flags = {}
        for i, item in enumerate(argv[:-1]):
            if item.startswith(("--spec-", "--draft-")):
                flags[item[2:]] = argv[i + 1]
        return flags
