"""Where the gateway finds its configuration file and the files it ships.

Owns the configuration look-up order (docs/operations.md, "Where the
configuration comes from"): ``--config FILE``, then ``$JMSGATEWAY_CONFIG``,
then ``./etc/jmsgateway.toml``, then ``/etc/jmsgateway/jmsgateway.toml``, then
the default shipped in the package.  An explicit choice (the option or the
variable) that names a missing file is an error, not a reason to look further.

The shipped files (the default configuration, the examples and the
transformer plugins) live in the installed package under ``gateway/shipped/``
(setup.py puts them there) or, in a checkout, beside the package in ``etc/``
and ``plugins/``.  Nothing here reads or writes anything else.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from gateway.errors import ConfigError

CONFIG_VARIABLE = "JMSGATEWAY_CONFIG"
"""The environment variable naming the configuration file."""
LOCAL_CONFIG = os.path.join("etc", "jmsgateway.toml")
"""The configuration looked for in the working directory."""
SYSTEM_CONFIG = "/etc/jmsgateway/jmsgateway.toml"
"""The system-wide configuration."""

_PACKAGE = Path(__file__).resolve().parent
_INSTALLED = _PACKAGE / "shipped"
_CHECKOUT = _PACKAGE.parent


def shipped_folder(name: str) -> Path | None:
    """The shipped folder ``name`` (``etc`` or ``plugins``): in the installed package, else in the
    checkout the package was imported from; None when neither has it."""
    if (_INSTALLED / name).is_dir():
        return _INSTALLED / name
    if (_CHECKOUT / "setup.cfg").is_file() and (_CHECKOUT / name).is_dir():
        return _CHECKOUT / name
    return None


def packaged_config() -> Path | None:
    """The default configuration shipped with the package (None if missing)."""
    etc = shipped_folder("etc")
    path = etc / "jmsgateway.toml" if etc is not None else None
    return path if path is not None and path.is_file() else None


@dataclass(frozen=True, slots=True)
class ConfigChoice:
    """The configuration file chosen and why (``--config``, ``$JMSGATEWAY_CONFIG`` ...)."""

    path: str
    reason: str


def choose_config(option: str | None, environ: Mapping[str, str] | None = None,
                  system_config: str = SYSTEM_CONFIG) -> ConfigChoice:
    """The configuration file to load, in the documented order; ConfigError when there is none."""
    env = os.environ if environ is None else environ
    if option:
        return ConfigChoice(option, "--config")
    variable = env.get(CONFIG_VARIABLE, "")
    if variable:
        return ConfigChoice(variable, f"${CONFIG_VARIABLE}")
    if os.path.isfile(LOCAL_CONFIG):
        return ConfigChoice(LOCAL_CONFIG, "found in the working directory")
    if os.path.isfile(system_config):
        return ConfigChoice(system_config, "the system configuration")
    packaged = packaged_config()
    if packaged is not None:
        return ConfigChoice(str(packaged), "the default shipped with the package")
    raise ConfigError(f"no configuration: give --config FILE or set ${CONFIG_VARIABLE} "
                      f"(none in ./{LOCAL_CONFIG} or {system_config}, and the package ships none)")


def resolve_plugin_folder(folder: str) -> str:
    """A relative plugin folder missing from the working directory is taken from the shipped ones
    (``plugins`` -> the package's shipped plugins); anything else is returned as given."""
    if os.path.isabs(folder) or os.path.isdir(folder) or os.path.normpath(folder) != "plugins":
        return folder
    shipped = shipped_folder("plugins")
    return str(shipped) if shipped is not None else folder
