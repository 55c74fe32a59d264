"""The pluggy hook specifications of jmsgateway: the only way plugins register transformers.

Owns the project name, the ``hookspec`` / ``hookimpl`` markers and the typed
hook signatures; it must not import plugins or build a plugin manager
(:mod:`gateway.transform.manager` does).  A plugin is a module or object with
functions marked ``@hookimpl``::

    from gateway.transform import hookimpl

    @hookimpl
    def jmsgateway_transformers(config):
        return [UppercaseTransformer()]

Built-in transformers (:mod:`gateway.transform.builtin`), the plugins shipped
in ``plugins/``, and third-party packages (setuptools entry point group
``jmsgateway``) all register through these hooks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:  # pragma: no cover
    from gateway.interfaces import IMessageTransformer
    from gateway.transform.config import TransformConfig

PROJECT_NAME = "jmsgateway"
"""pluggy project name; also the setuptools entry point group plugins are found in."""

ENTRY_POINT_GROUP = PROJECT_NAME

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
"""Marks a hook specification (only this module defines them)."""

hookimpl = pluggy.HookimplMarker(PROJECT_NAME)
"""Marks a plugin's hook implementation; re-exported as ``gateway.transform.hookimpl``."""


@hookspec
def jmsgateway_transformers(config: TransformConfig) -> Sequence[IMessageTransformer]:
    """Return the message transformers this plugin provides.

    Called once each time the transform chains are built (at startup), with
    the validated ``[transform]`` configuration.  Every returned object must
    provide :class:`gateway.interfaces.IMessageTransformer`; its ``name`` is
    what ``[[transform.chain]]`` entries and the STOMP ``transformation``
    header refer to.  Per-entry options are not given here: they reach the
    transformer with each message as ``context.options`` (and, if the
    transformer provides :class:`gateway.interfaces.IConfigurableTransformer`,
    are checked once at startup).

    Names must be unique: when two plugins register the same name, the one
    pluggy calls first wins (plugins loaded later and ``tryfirst`` ones come
    first, so a plugin-folder module overrides an entry point, which
    overrides a built-in) and ``jmsgateway plugins`` reports the shadowed one.

    :param config: the parsed ``[transform]`` section.
    :return: a sequence (possibly empty) of transformer objects.
    """
    raise NotImplementedError  # pragma: no cover - specification only
