"""Copies of parts of the checkout, for builds that must not touch it (a wheel, a compiled tree).

Building in the checkout itself writes ``build/``, ``*.egg-info`` and ``*.so`` files there, and two
test workers building at once would share them.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from pathlib import Path

from tests.support.gateway import REPO

_LEFT_OUT = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "build", ".*")
"""What a copy leaves out: byte code, built extension modules and build folders, hidden files."""


def copy_checkout(target: Path, names: Iterable[str]) -> Path:
    """``target`` holding a copy of each of the checkout's files and folders ``names``."""
    target.mkdir(parents=True, exist_ok=True)
    for name in names:
        source = REPO / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=_LEFT_OUT)
        else:
            shutil.copy2(source, target / name)
    return target
