"""tools.twins: public names defined in two modules of a package."""

from __future__ import annotations

from pathlib import Path

from tools.twins import twins


def _write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def test_twins_names_a_public_name_defined_in_two_modules(tmp_path: Path) -> None:
    _write(tmp_path, "a.py", "def figure():\n    pass\n\nclass Shared:\n    pass\n")
    _write(tmp_path, "b/c.py", "def figure():\n    pass\n\ndef _private():\n    pass\n")
    _write(tmp_path, "d.py", "class Shared:\n    pass\n\ndef _private():\n    pass\n")
    found = twins(tmp_path)
    assert found == {
        "Shared": [str(tmp_path / "a.py"), str(tmp_path / "d.py")],
        "figure": [str(tmp_path / "a.py"), str(tmp_path / "b/c.py")],
    }


def test_twins_excepts_cli_commands_and_the_simulators_routes(tmp_path: Path) -> None:
    _write(tmp_path, "cli/run.py", "def command():\n    pass\n")
    _write(tmp_path, "cli/report.py", "def command():\n    pass\n")
    _write(tmp_path, "sim/app.py", "async def server_info(request):\n    pass\n")
    _write(tmp_path, "sim/info.py", "def server_info(config):\n    pass\n")
    _write(tmp_path, "inner.py", "def outer():\n    def command():\n        pass\n")
    assert twins(tmp_path) == {}


def test_twins_counts_a_plain_function_in_the_simulators_app(tmp_path: Path) -> None:
    _write(tmp_path, "sim/app.py", "def build_app():\n    pass\n")
    _write(tmp_path, "proxy/app.py", "def build_app():\n    pass\n")
    assert list(twins(tmp_path)) == ["build_app"]


def test_the_package_defines_each_public_name_once() -> None:
    """No public function or class name is defined in two modules of ``specproxy``."""
    package = Path(__file__).resolve().parents[1] / "specproxy"
    assert twins(package) == {}
