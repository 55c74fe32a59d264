"""A wheel of the checkout, built from a copy of what setup.py packages (:mod:`tests.support.checkout`)."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

from tests.support.checkout import copy_checkout

SOURCES = ("setup.py", "setup.cfg", "pyproject.toml", "README.md", "gateway", "twisted", "plugins", "etc")


def build_wheel(workdir: Path, env: Mapping[str, str] | None = None) -> Path:
    """A wheel of the checkout (no dependencies) built under ``workdir`` with this venv's setuptools and
    mypy (its hot modules compiled unless ``env`` says ``JMSGATEWAY_MYPYC=0``); its path."""
    source = copy_checkout(workdir / "source", SOURCES)
    wheels = workdir / "wheels"
    environment = {key: value for key, value in os.environ.items() if key != "JMSGATEWAY_MYPYC"}
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                            str(wheels), str(source)], cwd=workdir, capture_output=True, text=True,
                           env={**environment, **(env or {})})
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = wheels.glob("jmsgateway-*.whl")
    return wheel


def compiled_wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel of the checkout as ``pip install .`` builds it (its hot modules compiled), built once for
    the whole test run: the pytest-xdist workers of one run share the folder above their own, and the first
    to come builds it while the others wait on its lock (a mypyc build costs ~10 s of CPU, more on a busy host)."""
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    folder = shared / "compiled-wheel"
    folder.mkdir(exist_ok=True)
    with (folder / "lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = sorted(folder.glob("wheels/jmsgateway-*.whl"))
        return built[0] if built else build_wheel(folder)
