"""Building llama.cpp's ``llama-server`` from the pinned ``llama-cpp-python`` sdist, cached.

Owns the engine cache: ``$SPECPROXY_ENGINE_CACHE`` (default ``~/.cache/specproxy/llamacpp``)
holds one folder per build key, ``<sdist version>-<machine>-<hash>``, where the hash covers
the CPU flags (the build uses ``-march=native``, so a binary is only safe on the same kind
of CPU) and the CMake flags. Inside it: ``dl/`` (the sdist), ``src/`` (extracted; gguf-py
and the llama.cpp sources), ``build/`` (the CMake tree), ``bin/llama-server`` (the product,
renamed into place only once complete) and ``build.log``. Nothing is ever written into the
repository. A lock file serialises builders of the same key (two ``make test`` runs at once).

The sdist vendors llama.cpp; its SHA-256 is pinned so a changed upload is refused.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from specproxy.errors import SpecproxyError

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
LLAMA_CPP_COMMIT = "0c1e57098"
SDIST_NAME = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"
SDIST_SHA256 = "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"
CACHE_ENV = "SPECPROXY_ENGINE_CACHE"

# Only llama-server; no web UI (the default would download prebuilt UI assets at build time),
# no TLS, no tests/examples. A static binary linking only libc/libstdc++/libgomp.
CMAKE_FLAGS: tuple[str, ...] = (
    "-G",
    "Ninja",
    "-DCMAKE_BUILD_TYPE=Release",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_TOOLS=ON",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DGGML_CCACHE=OFF",
    f"-DLLAMA_BUILD_COMMIT={LLAMA_CPP_COMMIT}",
)

Progress = Callable[[str], None]


class EngineError(SpecproxyError):
    """The llama.cpp engine could not be built, prepared or started; the message says which step."""

    exit_code = 3


def cache_root() -> Path:
    """The engine cache root: ``$SPECPROXY_ENGINE_CACHE`` or ``~/.cache/specproxy/llamacpp``."""
    configured = os.environ.get(CACHE_ENV, "").strip()
    if configured:
        return Path(configured).expanduser().resolve()
    return Path.home() / ".cache" / "specproxy" / "llamacpp"


def _cpu_flags() -> str:
    """The first ``flags``/``Features`` line of /proc/cpuinfo ('' where there is none)."""
    with contextlib.suppress(OSError):
        for line in (
            Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines()
        ):
            if line.startswith(("flags", "Features")):
                return " ".join(line.split(":", 1)[-1].split())
    return ""


def build_key() -> str:
    """``<version>-<machine>-<12 hex>``: what a cached binary must match to be reused."""
    digest = hashlib.sha256("\n".join([_cpu_flags(), *CMAKE_FLAGS]).encode()).hexdigest()[:12]
    return f"{LLAMA_CPP_PYTHON_VERSION}-{platform.machine() or 'unknown'}-{digest}"


def engine_dir(root: Path | None = None) -> Path:
    """The cache folder of this version on this CPU (not created here)."""
    return (root or cache_root()) / build_key()


def source_dir(folder: Path) -> Path:
    """The vendored llama.cpp tree inside an engine folder (its real path, never a symlink)."""
    return folder / "src" / f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}" / "vendor" / "llama.cpp"


def server_binary(folder: Path) -> Path:
    return folder / "bin" / "llama-server"


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``folder/.lock`` (blocks while another builder holds it)."""
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _run_logged(argv: list[str], log_path: Path, step: str, *, nice: int = 0) -> None:
    """Run ``argv`` with output appended to ``log_path``; raise EngineError naming ``step``."""
    with log_path.open("ab") as log:
        log.write(f"\n$ {' '.join(argv)}\n".encode())
        log.flush()
        result = subprocess.run(  # noqa: S603 - argv is built here from constants and paths
            argv,
            stdout=log,
            stderr=subprocess.STDOUT,
            check=False,
            preexec_fn=(lambda: os.nice(nice)) if nice else None,
        )
    if result.returncode != 0:
        raise EngineError(f"{step} failed (exit {result.returncode}); see {log_path}")


def fetch_sdist(folder: Path, progress: Progress) -> Path:
    """Download the pinned sdist with pip (once) and check its SHA-256."""
    sdist = folder / "dl" / SDIST_NAME
    if not sdist.exists():
        progress(f"downloading llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION} sdist with pip")
        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        argv += ["-d", str(folder / "dl"), f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}"]
        _run_logged(argv, folder / "build.log", "pip download")
    actual = _sha256(sdist)
    if actual != SDIST_SHA256:
        sdist.unlink()
        raise EngineError(f"{sdist.name}: sha256 {actual} is not the pinned {SDIST_SHA256}")
    return sdist


def extract_source(folder: Path, progress: Progress) -> Path:
    """Extract the sdist under ``folder/src`` (once); return the vendored llama.cpp tree."""
    src = source_dir(folder)
    if (src / "CMakeLists.txt").exists():
        return src
    sdist = fetch_sdist(folder, progress)
    progress(f"extracting {sdist.name}")
    staging = folder / "src.partial"
    shutil.rmtree(staging, ignore_errors=True)
    with tarfile.open(sdist) as archive:
        archive.extractall(staging, filter="data")
    shutil.rmtree(folder / "src", ignore_errors=True)
    staging.rename(folder / "src")
    return src


def build_server(folder: Path, *, jobs: int, progress: Progress) -> Path:
    """Configure and build ``llama-server`` (~5 min on 2 cores); return the installed binary."""
    src = extract_source(folder, progress)
    log = folder / "build.log"
    build = folder / "build"
    progress(f"configuring llama.cpp {LLAMA_CPP_COMMIT} (log: {log})")
    _run_logged(["cmake", "-S", str(src.resolve()), "-B", str(build), *CMAKE_FLAGS], log, "cmake")
    progress(f"building llama-server with -j{jobs} (about 5 minutes on 2 idle cores)")
    argv = ["cmake", "--build", str(build), "--target", "llama-server", f"-j{jobs}"]
    _run_logged(argv, log, "cmake --build", nice=10)
    binary = server_binary(folder)
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_suffix(".partial")
    shutil.copy2(build / "bin" / "llama-server", partial)
    partial.rename(binary)
    return binary


def ensure_server(*, root: Path | None = None, jobs: int = 2, progress: Progress) -> Path:
    """The cached ``llama-server`` of this CPU, built first when missing."""
    folder = engine_dir(root)
    binary = server_binary(folder)
    if binary.exists():
        return binary
    for tool in ("cmake", "ninja", "c++"):
        if shutil.which(tool) is None:
            raise EngineError(f"building llama-server needs {tool!r} on PATH")
    with _locked(folder):
        if binary.exists():  # another builder finished while we waited for the lock
            return binary
        started = time.monotonic()
        built = build_server(folder, jobs=jobs, progress=progress)
        progress(f"built {built} in {time.monotonic() - started:.0f} s")
        return built
