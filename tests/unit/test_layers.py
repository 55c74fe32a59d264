"""The layer contract of setup.cfg (docs/architecture.md) holds, and covers every module.

``lint-imports`` runs the import-linter contracts: imports run downward only (imports inside
functions and under ``TYPE_CHECKING`` included), services know connectors only by interface,
broker client libraries stay in connectors.  The unit suite runs it so a change that breaks a
layer fails here too, not only in ``make check``.
"""

from __future__ import annotations

import configparser
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def layer_modules() -> list[str]:
    """Every module named in the layers contract of setup.cfg."""
    parser = configparser.ConfigParser()
    parser.read(REPO / "setup.cfg")
    names: list[str] = []
    for line in parser["importlinter:contract:layers"]["layers"].splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.extend(part.strip() for part in line.split("|"))
    return names


def test_the_import_contracts_are_kept() -> None:
    result = subprocess.run(
        [sys.executable, "-c", "from importlinter.cli import lint_imports_command; lint_imports_command()",
         "--no-cache"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=240,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "0 broken" in result.stdout


def test_every_module_of_the_package_root_is_in_a_layer() -> None:
    """A new top-level module or package must be placed in the contract, or it escapes it."""
    named = set(layer_modules())
    root = REPO / "gateway"
    present = {f"gateway.{path.stem}" for path in root.glob("*.py") if path.stem != "__init__"}
    present |= {f"gateway.{path.name}" for path in root.iterdir() if (path / "__init__.py").is_file()}
    assert present - named == set(), "modules outside the layer contract of setup.cfg"
    assert named - present == set(), "layers naming no module"
