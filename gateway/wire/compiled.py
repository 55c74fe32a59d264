"""Which hot modules run compiled (mypyc), and the one mypyc marker their source needs.

``setup.py`` compiles :data:`HOT_MODULES` with mypyc for ``pip install .``
(unless ``JMSGATEWAY_MYPYC=0``; never for editable installs; the pure modules
when there is no C compiler: docs/performance.md); from a checkout on
``PYTHONPATH`` they run as the pure Python they are written in.
:func:`compiled_modules` says which are compiled in this process (the gateway
logs it at start-up).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TypeVar

HOT_MODULES = ("gateway/wire/codec.py", "gateway/stomp/delivery.py")
"""The modules a compiled build compiles (paths from the project's root)."""

_T = TypeVar("_T")

try:
    from mypy_extensions import mypyc_attr
except ImportError:  # (no mypy here: the decorator only matters to mypyc)

    def mypyc_attr(*attrs: str, **kwattrs: object) -> Callable[[_T], _T]:
        return lambda cls: cls


def compiled_modules() -> list[str]:
    """The :data:`HOT_MODULES` that are compiled extension modules in this process."""
    names = [path.removesuffix(".py").replace("/", ".") for path in HOT_MODULES]
    return [name for name in names if not str(importlib.import_module(name).__file__).endswith(".py")]


__all__ = ["HOT_MODULES", "compiled_modules", "mypyc_attr"]
