"""The transformers the loaded plugins provide, by name, with where each came from.

Owns :func:`collect_transformers`: it calls every plugin's
``jmsgateway_transformers`` hook one plugin at a time (so a plugin whose
hook raises or returns junk is reported and skipped, not fatal, and every
transformer is attributed to its plugin) and resolves duplicate names in
pluggy's call order.  It does not run transformers or read configuration
files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pluggy import PluginManager
from twisted.logger import Logger

from gateway.interfaces import IMessageTransformer
from gateway.transform.config import TransformConfig


@dataclass(slots=True, frozen=True)
class TransformerEntry:
    """A transformer and the plugin that registered it."""

    name: str
    transformer: IMessageTransformer
    plugin: str


@dataclass(slots=True, frozen=True)
class CatalogProblem:
    """Something wrong with what a plugin's hook returned."""

    plugin: str
    problem: str


@dataclass(slots=True)
class TransformerCatalog:
    """Transformers by name (the winners), the shadowed duplicates and the problems.

    :ivar shadowed: ``(loser, winner)`` pairs for names registered twice.
    """

    entries: dict[str, TransformerEntry] = field(default_factory=dict)
    shadowed: list[tuple[TransformerEntry, TransformerEntry]] = field(default_factory=list)
    problems: list[CatalogProblem] = field(default_factory=list)

    def get(self, name: str) -> TransformerEntry | None:
        """The transformer registered as ``name``, or None."""
        return self.entries.get(name)

    def names(self) -> list[str]:
        """Every known transformer name, sorted."""
        return sorted(self.entries)

    def by_plugin(self) -> Mapping[str, list[TransformerEntry]]:
        """Transformers grouped by plugin name (winners only)."""
        grouped: dict[str, list[TransformerEntry]] = {}
        for entry in self.entries.values():
            grouped.setdefault(entry.plugin, []).append(entry)
        return grouped


class _Collector:
    log = Logger()

    def collect(self, plugin_manager: PluginManager, config: TransformConfig) -> TransformerCatalog:
        catalog = TransformerCatalog()
        hook = getattr(plugin_manager.hook, "jmsgateway_transformers", None)
        if hook is None:
            return catalog
        arguments: dict[str, Any] = {"config": config}
        # pluggy calls implementations last-registered (and tryfirst) first.
        for impl in reversed(hook.get_hookimpls()):
            if impl.hookwrapper or impl.wrapper:
                continue
            plugin = impl.plugin_name
            try:
                provided = impl.function(*(arguments[name] for name in impl.argnames))
            except Exception as exc:
                self._problem(catalog, plugin, f"jmsgateway_transformers raised {type(exc).__name__}: {exc}")
                continue
            if provided is None:
                continue
            if isinstance(provided, str | bytes) or not hasattr(provided, "__iter__"):
                self._problem(
                    catalog, plugin, f"jmsgateway_transformers returned {type(provided).__name__}, not a list"
                )
                continue
            for transformer in provided:
                self._add(catalog, plugin, transformer)
        return catalog

    def _add(self, catalog: TransformerCatalog, plugin: str, transformer: Any) -> None:
        if not IMessageTransformer.providedBy(transformer):
            self._problem(
                catalog,
                plugin,
                f"{transformer!r} does not provide IMessageTransformer (add @implementer(IMessageTransformer))",
            )
            return
        name = getattr(transformer, "name", None)
        if not isinstance(name, str) or not name or not callable(getattr(transformer, "transform", None)):
            self._problem(catalog, plugin, f"{transformer!r} needs a non-empty str name and a transform method")
            return
        entry = TransformerEntry(name, transformer, plugin)
        winner = catalog.entries.get(name)
        if winner is None:
            catalog.entries[name] = entry
            return
        catalog.shadowed.append((entry, winner))
        self.log.warn(
            "transformer {transformer} of plugin {plugin} is shadowed by the one of plugin {winner}",
            transformer=name,
            plugin=plugin,
            winner=winner.plugin,
        )

    def _problem(self, catalog: TransformerCatalog, plugin: str, problem: str) -> None:
        catalog.problems.append(CatalogProblem(plugin, problem))
        self.log.warn("plugin {plugin}: {problem}", plugin=plugin, problem=problem)


def collect_transformers(plugin_manager: PluginManager, config: TransformConfig | None = None) -> TransformerCatalog:
    """Ask every registered plugin for its transformers.

    :param config: passed to the hooks; the defaults if None.
    """
    return _Collector().collect(plugin_manager, config if config is not None else TransformConfig())
