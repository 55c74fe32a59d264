"""The hot modules compiled with mypyc (``setup.py``: ``pip install .`` compiles them unless
``JMSGATEWAY_MYPYC=0``) pass the tests of the code they hold, as the pure-Python modules do in every
other test run; a wheel holds them compiled by default, and pure without a C compiler.

The checkout is copied to a temporary directory, the extension modules of the wheel ``pip install .``
builds (mypyc and the host's C compiler; :func:`tests.support.wheel.compiled_wheel`, built once for the
run) are put beside its ``gateway/wire/codec.py`` and ``gateway/stomp/delivery.py``, and the codec,
encoder, protocol and session tests run there in a subprocess, against the extension modules (checked:
:func:`gateway.wire.compiled.compiled_modules` names both).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from gateway.wire.compiled import HOT_MODULES, compiled_modules
from tests.support.checkout import copy_checkout
from tests.support.wheel import build_wheel, compiled_wheel

REPO = Path(__file__).resolve().parents[2]
COPIED = ("gateway", "tests", "twisted", "plugins", "etc", "setup.py", "setup.cfg", "pyproject.toml")
TESTS = ("tests/unit/test_codec.py", "tests/unit/test_codec_properties.py", "tests/unit/test_delivery_encoder.py",
         "tests/unit/test_protocol_input.py", "tests/unit/test_protocol_output.py", "tests/unit/test_session.py",
         "tests/unit/test_websocket.py", "tests/unit/test_stomp_fuzz.py", "tests/unit/test_stomp_client.py",
         "tests/unit/test_large_body_path.py", "tests/unit/test_oversized_messages.py")


def test_setup_compiles_the_modules_the_gateway_names() -> None:
    tree = ast.parse((REPO / "setup.py").read_text())
    listed = next(ast.literal_eval(node.value) for node in tree.body
                  if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "HOT_MODULES")
    assert tuple(listed) == HOT_MODULES


def test_this_run_is_the_pure_python_variant() -> None:
    """(The checkout is never built in place: an editable install does not compile.)"""
    assert compiled_modules() == []


def extension_modules_in_a_wheel(wheel: Path) -> list[str]:
    """Names the hot modules ``wheel`` holds as extension modules."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    assert "gateway/wire/codec.py" in names and "gateway/stomp/delivery.py" in names  # (the fallback is there too)
    return sorted(name.split(".")[0].replace("/", ".") for name in names
                  if name.startswith("gateway/") and name.endswith(".so"))


def test_a_wheel_compiles_the_hot_modules_by_default(tmp_path_factory: pytest.TempPathFactory) -> None:
    assert extension_modules_in_a_wheel(compiled_wheel(tmp_path_factory)) == sorted(["gateway.wire.codec",
                                                                                     "gateway.stomp.delivery"])


@pytest.mark.parametrize("env", [{"JMSGATEWAY_MYPYC": "0"}, {"CC": "/bin/false"}], ids=["opted-out", "no-compiler"])
def test_a_wheel_without_compiling_holds_the_pure_modules(tmp_path: Path, env: dict[str, str]) -> None:
    assert extension_modules_in_a_wheel(build_wheel(tmp_path, env)) == []


def test_the_compiled_modules_pass_their_tests(tmp_path: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    copy = copy_checkout(tmp_path / "tree", COPIED)
    env = dict(os.environ, PYTHONPATH=str(copy))
    with zipfile.ZipFile(compiled_wheel(tmp_path_factory)) as archive:  # (mypyc's runtime library and the modules)
        archive.extractall(copy, [name for name in archive.namelist() if name.endswith(".so")])
    which = subprocess.run([sys.executable, "-c", "from gateway.wire.compiled import compiled_modules as c; "
                            "print(','.join(c()))"], cwd=copy, env=env, capture_output=True, text=True, timeout=60)
    assert which.stdout.split() == ["gateway.wire.codec,gateway.stomp.delivery"], which.stdout + which.stderr
    tested = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *TESTS],
                            cwd=copy, env=env, capture_output=True, text=True, timeout=900)
    assert tested.returncode == 0, tested.stdout[-5000:] + tested.stderr[-2000:]
    assert " passed" in tested.stdout and "skipped" not in tested.stdout, tested.stdout[-2000:]
