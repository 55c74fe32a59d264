"""The example third-party plugin package, pip-installed for the tests that need it.

Installation is idempotent: skipped when the installed copy matches the
source in examples/jmsgateway-example-plugin (no deps, no network).
"""

from __future__ import annotations

import configparser
import importlib
import importlib.metadata
import shutil
import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "jmsgateway-example-plugin"
DIST = "jmsgateway-example-plugin"
PACKAGE_FILE = "jmsgateway_example_plugin/__init__.py"


def source_version() -> str:
    parser = configparser.ConfigParser()
    parser.read(EXAMPLE / "setup.cfg")
    return parser["metadata"]["version"]


def installed_matches_source() -> bool:
    try:
        dist = importlib.metadata.distribution(DIST)
    except importlib.metadata.PackageNotFoundError:
        return False
    if dist.version != source_version():
        return False
    if not any(ep.group == "jmsgateway" and ep.name == "example" for ep in dist.entry_points):
        return False
    installed = Path(str(dist.locate_file(PACKAGE_FILE)))
    return installed.is_file() and installed.read_bytes() == (EXAMPLE / PACKAGE_FILE).read_bytes()


def ensure_example_installed(scratch: Path) -> None:
    """pip-install the example package unless the same copy is installed."""
    if not installed_matches_source():
        # build from a copy so the source tree gets no build/ or *.egg-info
        source = scratch / "jmsgateway-example-plugin"
        shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
        command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", str(source)]
        done = subprocess.run(command, capture_output=True, text=True, timeout=180)
        assert done.returncode == 0, f"pip install failed:\n{done.stdout}\n{done.stderr}"
        importlib.invalidate_caches()
    assert installed_matches_source()
