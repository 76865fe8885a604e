"""Facts about the GPU host that SGLang cannot report over HTTP.

``nvidia-smi`` (GPU name, driver, CUDA version, memory), the server Python's
version and the installed SGLang version, and the environment both servers inherit,
keeping only variables that shape inference (``SGLANG_*``, ``CUDA_*``, ``NCCL_*``...)
and dropping any whose name suggests a credential. Every probe tolerates absence:
no ``nvidia-smi`` (a CPU test host) gives ``gpu: None`` and the reason.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Mapping
from typing import Any

_ENV_PREFIXES = (
    "SGLANG_", "CUDA_", "NCCL_", "TORCH_", "PYTORCH_", "NVIDIA_", "NVSHMEM_", "HF_", "TRANSFORMERS_",
    "TOKENIZERS_", "FLASHINFER_", "TRITON_", "OMP_", "MKL_", "PYTHONPATH", "LD_LIBRARY_PATH",
)  # fmt: skip
_SECRET_ENV = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH", re.IGNORECASE)
_QUERY = "index,name,driver_version,memory.total,memory.used,memory.free"
_CUDA = re.compile(r"CUDA Version:\s*([0-9.]+)")
_PY_PROBE = (
    "import importlib.metadata as m, json, sys\n"
    "out = {'python': sys.version.split()[0], 'sglang_version': None}\n"
    "try:\n"
    "    out['sglang_version'] = m.version('sglang')\n"
    "except m.PackageNotFoundError as exc:\n"
    "    out['sglang_error'] = 'sglang is not installed for this python'\n"
    "print(json.dumps(out))\n"
)


def recorded_env(env: Mapping[str, str]) -> dict[str, str]:
    """The inference-relevant, non-secret part of ``env``."""
    return {
        k: v
        for k, v in sorted(env.items())
        if k.startswith(_ENV_PREFIXES) and not _SECRET_ENV.search(k)
    }


async def _run(argv: list[str], timeout_s: float) -> tuple[int, str]:
    """(exit status, stdout) of a short command; (-1, reason) when it cannot run."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL
        )
    except OSError as exc:
        return -1, f"{argv[0]}: {exc.strerror or exc}"
    try:
        async with asyncio.timeout(timeout_s):
            out, _ = await proc.communicate()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return -1, f"{argv[0]}: no answer within {timeout_s:g} s"
    return proc.returncode or 0, out.decode("utf-8", errors="replace")


def parse_gpu_query(csv_text: str, header_text: str) -> dict[str, Any] | None:
    """GPU facts from ``nvidia-smi --query-gpu`` CSV (no header, no units) and the banner."""
    gpus = []
    for line in csv_text.strip().splitlines():
        cells = [c.strip() for c in line.split(",")]
        if len(cells) != 6:
            continue
        index, name, driver, total, used, free = cells
        gpus.append(
            {
                "index": index,
                "name": name,
                "driver": driver,
                "memory_total_mib": _int(total),
                "memory_used_mib": _int(used),
                "memory_free_mib": _int(free),
            }
        )
    if not gpus:
        return None
    cuda = _CUDA.search(header_text)
    first = gpus[0]
    return {
        "name": first["name"],
        "driver": first["driver"],
        "cuda": cuda.group(1) if cuda else None,
        "count": len(gpus),
        "gpus": gpus,
    }


def _int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


async def gpu_facts(timeout_s: float = 20.0) -> tuple[dict[str, Any] | None, str | None]:
    """(facts, None) from nvidia-smi, or (None, why not)."""
    code, csv_text = await _run(
        ["nvidia-smi", f"--query-gpu={_QUERY}", "--format=csv,noheader,nounits"], timeout_s
    )
    if code != 0:
        return None, csv_text.strip() or f"nvidia-smi exited with {code}"
    _, banner = await _run(["nvidia-smi"], timeout_s)
    facts = parse_gpu_query(csv_text, banner)
    return facts, None if facts else "nvidia-smi printed no GPU"


async def python_facts(python: str, timeout_s: float = 60.0) -> dict[str, Any]:
    """The server Python's version and its installed SGLang version (or why it is unknown).

    Reads the installed distribution's metadata instead of importing sglang, which
    takes tens of seconds on a cold host; ``/server_info``'s ``version`` confirms it
    once the server is up.
    """
    code, out = await _run([python, "-c", _PY_PROBE], timeout_s)
    if code != 0:
        return {
            "python": None,
            "sglang_version": None,
            "sglang_error": out.strip() or f"exit {code}",
        }
    try:
        facts: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    except (json.JSONDecodeError, IndexError):
        return {"python": None, "sglang_version": None, "sglang_error": "unreadable probe output"}
    return facts
