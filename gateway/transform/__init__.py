"""Message transformers: plugin hooks, plugin loading, configuration and chains.

Plugins import their marker from here: ``from gateway.transform import hookimpl``,
and the decisions a transformer may return: :class:`Drop`, :class:`Branch`.
The gateway builds the runtime with::

    config = parse_transform_config(toml.get("transform"), path)
    plugin_manager = plugin_manager_for(config)          # or build_plugin_manager(...)
    chains = TransformChains(plugin_manager, config)    # raises ConfigError on a bad chain
    outcome = await chains.run(message, TransformContext("inbound", source, target, login))

Modules: :mod:`~gateway.transform.hookspecs` (hooks), :mod:`~gateway.transform.manager`
(loading), :mod:`~gateway.transform.config` (``[transform]``),
:mod:`~gateway.transform.chain` (running), :mod:`~gateway.transform.report`
(``jmsgateway plugins``), :mod:`~gateway.transform.builtin` (ActiveMQ names),
:mod:`~gateway.transform.bodies` (type conversions for transformer authors).
"""

from gateway.transform.chain import (
    DeadLettered,
    Deliver,
    Dropped,
    Outcome,
    Rejected,
    TransformChains,
    is_stomp_deliverable,
)
from gateway.transform.config import ChainEntry, TransformConfig, parse_transform_config
from gateway.transform.context import TransformContext
from gateway.transform.decisions import Branch, Drop
from gateway.transform.hookspecs import hookimpl, hookspec
from gateway.transform.manager import PluginRecord, build_plugin_manager, plugin_manager_for, plugin_records
from gateway.transform.report import describe_plugins

__all__ = [
    "Branch",
    "ChainEntry",
    "DeadLettered",
    "Deliver",
    "Drop",
    "Dropped",
    "Outcome",
    "PluginRecord",
    "Rejected",
    "TransformChains",
    "TransformConfig",
    "TransformContext",
    "build_plugin_manager",
    "describe_plugins",
    "hookimpl",
    "hookspec",
    "is_stomp_deliverable",
    "parse_transform_config",
    "plugin_manager_for",
    "plugin_records",
]
