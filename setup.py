"""Packaging beyond setup.cfg: the files a gateway needs to run from any directory.

setup.cfg declares everything else (its ``[options.package_data]`` is merged in
here, since a ``package_data`` given to ``setup()`` replaces it).  This file
adds two folders of the checkout to the package, so an installed gateway
carries them (:mod:`gateway.shipped` finds them, in the package or in a checkout):

* ``plugins/`` (the shipped transformer plugins) as ``gateway/shipped/plugins/``;
* ``etc/`` (the default configuration, its JSON Schema and the examples) as ``gateway/shipped/etc/``.
"""

import configparser

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


setup(
    packages=find_namespace_packages(include=["gateway", "gateway.*", "twisted.plugins"]) + list(SHIPPED),
    package_dir=SHIPPED,
    package_data=package_data(),
)
