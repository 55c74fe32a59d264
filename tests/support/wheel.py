"""A wheel of the checkout, built from a copy of its sources.

Building in the checkout itself writes ``build/`` and ``*.egg-info`` there, and two test workers
building at once would share them; a copy of what setup.py packages avoids both.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tests.support.gateway import REPO

SOURCES = ("setup.py", "setup.cfg", "pyproject.toml", "README.md", "gateway", "twisted", "plugins", "etc")


def build_wheel(workdir: Path, env: Mapping[str, str] | None = None) -> Path:
    """A wheel of the checkout (no dependencies) built under ``workdir`` with this venv's setuptools and
    mypy (its hot modules compiled unless ``env`` says ``JMSGATEWAY_MYPYC=0``); its path."""
    source = workdir / "source"
    source.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SOURCES:
        path = REPO / name
        if path.is_dir():
            shutil.copytree(path, source / name, ignore=ignore)
        else:
            shutil.copy2(path, source / name)
    wheels = workdir / "wheels"
    environment = {key: value for key, value in os.environ.items() if key != "JMSGATEWAY_MYPYC"}
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                            str(wheels), str(source)], cwd=workdir, capture_output=True, text=True,
                           env={**environment, **(env or {})})
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = wheels.glob("jmsgateway-*.whl")
    return wheel
