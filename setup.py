"""Packaging beyond setup.cfg: the files a gateway needs to run from any directory.

setup.cfg declares everything else (its ``[options.package_data]`` is merged in
here, since a ``package_data`` given to ``setup()`` replaces it).  This file
adds two folders of the checkout to the package, so an installed gateway
carries them (:mod:`gateway.shipped` finds them, in the package or in a checkout):

* ``plugins/`` (the shipped transformer plugins) as ``gateway/shipped/plugins/``;
* ``etc/`` (the default configuration, its JSON Schema and the examples) as ``gateway/shipped/etc/``.

It also compiles the hot modules (``gateway.wire.compiled.HOT_MODULES``) with mypyc,
which ``pyproject.toml`` puts in the build environment: ``pip install .`` builds them
unless ``JMSGATEWAY_MYPYC=0``, never for an editable install (a compiled module would
hide edits to its source).  Without a C compiler, or when mypyc fails, the build goes
on with the pure-Python modules (docs/performance.md, "Compiled hot modules").
"""

import configparser
import os
import sys

from setuptools import find_namespace_packages, setup

SHIPPED = {"gateway.shipped.plugins": "plugins", "gateway.shipped.etc": "etc"}


def package_data() -> dict[str, list[str]]:
    """setup.cfg's ``[options.package_data]`` plus the shipped folders' files."""
    cfg = configparser.ConfigParser()
    cfg.read("setup.cfg", encoding="utf-8")
    data = {package: [p.strip() for p in patterns.replace("\n", ",").split(",") if p.strip()]
            for package, patterns in (cfg["options.package_data"].items() if cfg.has_section(
                "options.package_data") else [])}
    data["gateway.shipped.plugins"] = ["*.py"]
    data["gateway.shipped.etc"] = ["*.toml", "*.json", "examples/*.toml"]
    return data


HOT_MODULES = ["gateway/wire/codec.py", "gateway/stomp/delivery.py"]
"""As ``gateway.wire.compiled.HOT_MODULES`` (a test checks they agree)."""


def compiled_extensions() -> list:
    """mypyc's extension modules for :data:`HOT_MODULES`, or none (the pure-Python build).

    mypy checks the modules with none of setup.cfg's ``[mypy]`` settings: its plugins
    (mypy-zope, pydantic) are not in the build environment, and whatever the hot modules
    import from other packages is only ``Any`` to them.
    """
    if os.environ.get("JMSGATEWAY_MYPYC") == "0" or any("editable" in arg or arg == "develop" for arg in sys.argv):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        print("mypyc is not installed in the build environment: the hot modules stay pure Python", file=sys.stderr)
        return []
    options = ["--config-file", os.devnull, "--ignore-missing-imports", "--follow-imports=silent"]
    try:
        extensions = mypycify([*options, *HOT_MODULES], opt_level="3")
    except (Exception, SystemExit) as error:  # (mypy's errors exit: the pure modules still work)
        print(f"mypyc failed ({error!r}): the hot modules stay pure Python", file=sys.stderr)
        return []
    for extension in extensions:
        extension.optional = True  # (no C compiler: build_ext warns and the pure module is installed)
    return extensions


setup(
    ext_modules=compiled_extensions(),
    packages=find_namespace_packages(include=["gateway", "gateway.*", "twisted.plugins"]) + list(SHIPPED),
    package_dir=SHIPPED,
    package_data=package_data(),
)
