"""What a setting sweep starts: the baseline once, the candidate once per setting value.

A ``SettingLauncher`` turns a setting (``{"speculative-num-draft-tokens": "8"}``) into the
candidate's full command; the sweep starts it with ``launch.process.ServerProcess`` (its
own process group, its output in a log, the server's own error kept when it exits
before it is healthy).

``SglangLauncher`` reads a ``deploy/sglang/*.toml`` description (``launch.description``);
the setting replaces or adds one key of its ``[candidate]`` table, which must be a
speculative key (``core.launch.config.is_speculative_key``); everything else is the
description's, so the candidate stays matched to the baseline. The engine tests bring
their own ``SettingLauncher`` for llama.cpp (``tools/engine/launcher.py``).
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol

from specproxy.backends.base import BackendKind
from specproxy.core.launch.config import is_speculative_key
from specproxy.core.records.model import Role
from specproxy.launch.description import ArgValue, LaunchDescription


@dataclass(frozen=True, slots=True)
class ServerCommand:
    """One server to start: argv, where it will listen, its environment and secrets."""

    argv: tuple[str, ...]
    url: str
    env: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    secrets: tuple[str, ...] = ()


class SettingLauncher(Protocol):
    """Builds the commands of a setting sweep; see the module docstring."""

    @property
    def kind(self) -> BackendKind: ...

    @property
    def health_timeout_s(self) -> float: ...

    @property
    def stop_timeout_s(self) -> float: ...

    def baseline(self) -> ServerCommand: ...

    def candidate(self, setting: Mapping[str, str]) -> ServerCommand: ...

    def candidate_args(self, setting: Mapping[str, str]) -> dict[str, str]: ...

    def check_key(self, key: str) -> None: ...


ADAPTIVE = "adaptive"
"""``--vary speculative-num-steps=1,3,adaptive``: the value ``adaptive`` launches the candidate
with ``--speculative-adaptive`` and ``--speculative-eagle-topk 1`` (SGLang's adaptive mode
needs topk 1; the description's own steps are its starting steps)."""


def setting_flags(setting: Mapping[str, str]) -> dict[str, str | bool]:
    """A setting as launch flags: ``{KEY: VALUE}``, the ``adaptive`` value expanded (``True``
    is a bare flag)."""
    out: dict[str, str | bool] = {}
    for key, value in setting.items():
        if value == ADAPTIVE:
            out["speculative-adaptive"] = True
            out["speculative-eagle-topk"] = "1"
        else:
            out[flag_name(key)] = value
    return out


def flag_name(key: str) -> str:
    """A setting key as a command-line flag name: no leading dashes, ``_`` as ``-``."""
    return key.strip().lstrip("-").replace("_", "-")


@dataclass(frozen=True, slots=True)
class SglangLauncher:
    """An SGLang pair from a launch description; only the candidate's args vary."""

    desc: LaunchDescription
    kind: BackendKind = BackendKind.SGLANG

    @property
    def health_timeout_s(self) -> float:
        return self.desc.health_timeout_s

    @property
    def stop_timeout_s(self) -> float:
        return self.desc.stop_timeout_s

    def check_key(self, key: str) -> None:
        if not is_speculative_key(flag_name(key).replace("-", "_")):
            raise ValueError(
                f"--vary {key}: not a speculative setting of SGLang; a setting sweep varies"
                " only the candidate's speculative keys (the baseline stays as it is)"
            )

    def _args(self, setting: Mapping[str, str]) -> dict[str, ArgValue]:
        args: dict[str, ArgValue] = {}
        for key, value in self.desc.candidate_args.items():
            args[flag_name(key)] = value
        args.update(setting_flags(setting))
        return args

    def candidate_args(self, setting: Mapping[str, str]) -> dict[str, str]:
        return {k: str(v) for k, v in self._args(setting).items()}

    def _command(self, role: Role, desc: LaunchDescription) -> ServerCommand:
        key = desc.api_key()
        argv = desc.command(role, api_key=key)
        env = {**os.environ, **desc.env}
        return ServerCommand(tuple(argv), desc.url(role), env, (key,) if key else ())

    def baseline(self) -> ServerCommand:
        return self._command(Role.BASELINE, self.desc)

    def candidate(self, setting: Mapping[str, str]) -> ServerCommand:
        desc = dataclasses.replace(self.desc, candidate_args=self._args(setting))
        return self._command(Role.CANDIDATE, desc)


def free_port() -> int:
    """A free loopback port (the server binds it right after; a race only costs a retry)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def override_flags(argv: list[str], flags: Mapping[str, str | bool]) -> list[str]:
    """``argv`` with each ``--flag value`` replaced (or appended when absent); a ``True``
    value is a bare flag (appended once)."""
    out = list(argv)
    for key, value in flags.items():
        flag = "--" + flag_name(key)
        if value is True:
            out += [] if flag in out else [flag]
        elif value is False:
            continue
        elif flag in out:
            out[out.index(flag) + 1] = value
        else:
            out += [flag, value]
    return out
