"""Builds the pluggy PluginManager: built-ins, entry points, plugin folders.

Owns :func:`build_plugin_manager` (a factory: nothing is loaded at import
time) and the record of what was loaded from where.  Loading order, which
is also the order duplicates are resolved in (later wins, see
:mod:`gateway.transform.hookspecs`):

1. built-in transformers (:mod:`gateway.transform.builtin`, plugin name ``builtin``);
2. setuptools entry points in group ``jmsgateway`` (plugin name = entry point name);
3. every ``*.py`` file (not starting with ``_``) in each plugin folder, in
   name order (plugin name = file stem).

Blocked names are never imported.  A plugin that fails to import, does not
validate against the hookspecs or implements an unknown hook
(``check_pending``) is recorded with the reason, logged and left out: the
gateway still starts.  :func:`plugin_records` lists the records.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Literal

from pluggy import PluginManager, PluginValidationError
from twisted.logger import Logger

from gateway.locations import resolve_plugin_folder
from gateway.transform import builtin, hookspecs
from gateway.transform.config import TransformConfig

PluginSource = Literal["built-in", "entry point", "folder"]
PluginStatus = Literal["loaded", "blocked", "failed", "missing"]

FOLDER_MODULE_PREFIX = "jmsgateway_folder_plugin_"
"""Folder plugins are imported as ``sys.modules[FOLDER_MODULE_PREFIX + stem]``."""


@dataclass(slots=True, frozen=True)
class PluginRecord:
    """What happened to one plugin (or one plugin folder) at load time.

    :ivar name: the plugin name (what ``blocked`` refers to); for a missing
        folder, the folder.
    :ivar source: ``built-in``, ``entry point`` or ``folder``.
    :ivar origin: where it came from: the module, ``dist version (module:attr)``
        or the file path.
    :ivar status: ``loaded``, ``blocked``, ``failed`` or ``missing`` (a folder
        that does not exist).
    :ivar error: why it failed, for humans.
    """

    name: str
    source: PluginSource
    origin: str
    status: PluginStatus = "loaded"
    error: str = ""


class GatewayPluginManager(PluginManager):
    """A PluginManager that remembers what was loaded from where."""

    def __init__(self) -> None:
        super().__init__(hookspecs.PROJECT_NAME)
        self.add_hookspecs(hookspecs)
        self.records: list[PluginRecord] = []


class _PluginLoader:
    """Registers plugins from each source into one manager, recording the outcome."""

    log = Logger()

    def __init__(self, manager: GatewayPluginManager) -> None:
        self.manager = manager

    def record(self, record: PluginRecord) -> None:
        self.manager.records.append(record)
        if record.status == "failed":
            self.log.warn(
                "plugin {plugin} ({source} {origin}) not loaded: {error}",
                plugin=record.name,
                source=record.source,
                origin=record.origin,
                error=record.error,
            )
        elif record.status == "missing":
            self.log.info("plugin folder {folder} does not exist", folder=record.origin)

    def register(self, plugin: object, name: str, source: PluginSource, origin: str) -> None:
        if self.manager.is_blocked(name):
            self.record(PluginRecord(name, source, origin, "blocked"))
            return
        if self.manager.has_plugin(name):
            self.record(PluginRecord(name, source, origin, "failed", self._taken(name)))
            return
        try:
            self.manager.register(plugin, name=name)
        except (PluginValidationError, ValueError) as exc:
            self.record(PluginRecord(name, source, origin, "failed", f"invalid plugin: {exc}"))
            return
        self.record(PluginRecord(name, source, origin))

    def _taken(self, name: str) -> str:
        for earlier in self.manager.records:
            if earlier.name == name and earlier.status == "loaded":
                return f"the name {name!r} is already taken by {earlier.source} {earlier.origin}"
        return f"the name {name!r} is already taken"

    def load_builtins(self) -> None:
        self.register(builtin, builtin.PLUGIN_NAME, "built-in", builtin.__name__)

    def load_entry_points(self) -> None:
        entry_points = importlib.metadata.entry_points(group=hookspecs.ENTRY_POINT_GROUP)
        for entry_point in sorted(entry_points, key=lambda ep: ep.name):
            dist = entry_point.dist
            where = f"{dist.name} {dist.version} " if dist is not None else ""
            origin = f"{where}({entry_point.value})"
            if self.manager.is_blocked(entry_point.name):
                self.record(PluginRecord(entry_point.name, "entry point", origin, "blocked"))
                continue
            if self.manager.has_plugin(entry_point.name):
                error = self._taken(entry_point.name)
                self.record(PluginRecord(entry_point.name, "entry point", origin, "failed", error))
                continue
            try:
                plugin = entry_point.load()
            except Exception as exc:
                error = f"import failed: {type(exc).__name__}: {exc}"
                self.record(PluginRecord(entry_point.name, "entry point", origin, "failed", error))
                continue
            self.register(plugin, entry_point.name, "entry point", origin)

    def load_folder(self, folder: str) -> None:
        path = Path(resolve_plugin_folder(folder))
        if not path.is_dir():
            self.record(PluginRecord(folder, "folder", os.path.abspath(folder), "missing", "no such folder"))
            return
        for file in sorted(path.glob("*.py")):
            if file.name.startswith("_"):
                continue
            name = file.stem
            origin = str(file)
            if self.manager.is_blocked(name):
                self.record(PluginRecord(name, "folder", origin, "blocked"))
                continue
            if self.manager.has_plugin(name):
                self.record(PluginRecord(name, "folder", origin, "failed", self._taken(name)))
                continue
            try:
                module = _import_file(file)
            except Exception as exc:
                error = f"import failed: {type(exc).__name__}: {exc}"
                self.record(PluginRecord(name, "folder", origin, "failed", error))
                continue
            self.register(module, name, "folder", origin)

    def check_pending(self) -> None:
        """``check_pending()`` until it passes, dropping each plugin it complains about."""
        while True:
            try:
                self.manager.check_pending()
            except PluginValidationError as exc:
                name = self.manager.get_name(exc.plugin) or repr(exc.plugin)
                self.manager.unregister(exc.plugin)
                self._mark_failed(name, f"invalid plugin: {exc}")
            else:
                return

    def _mark_failed(self, name: str, error: str) -> None:
        records = self.manager.records
        for index, record in enumerate(records):
            if record.name == name and record.status == "loaded":
                records[index] = replace(record, status="failed", error=error)
                self.log.warn("plugin {plugin} not loaded: {error}", plugin=name, error=error)
                return


def _import_file(file: Path) -> ModuleType:
    module_name = FOLDER_MODULE_PREFIX + file.stem
    spec = importlib.util.spec_from_file_location(module_name, file)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot import {file}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def build_plugin_manager(
    plugin_dirs: Sequence[str] = ("plugins",),
    blocked: Sequence[str] = (),
    load_entry_points: bool = True,
    *,
    load_builtins: bool = True,
) -> PluginManager:
    """A new plugin manager with every plugin found, minus the blocked ones.

    :param plugin_dirs: folders whose ``*.py`` files are plugins (relative
        paths are taken from the current directory; ``plugins``, when the
        current directory has none, is the package's shipped plugins); a
        missing folder is recorded, not an error.
    :param blocked: plugin names never registered (``builtin``, an entry
        point name, a file stem).
    :param load_entry_points: load setuptools entry points of group ``jmsgateway``.
    :param load_builtins: register :mod:`gateway.transform.builtin` (tests
        turn it off to start from an empty manager).
    :return: a :class:`GatewayPluginManager`; see :func:`plugin_records`.
    """
    manager = GatewayPluginManager()
    for name in blocked:
        manager.set_blocked(name)
    loader = _PluginLoader(manager)
    if load_builtins:
        loader.load_builtins()
    if load_entry_points:
        importlib.invalidate_caches()
        loader.load_entry_points()
    for folder in plugin_dirs:
        loader.load_folder(folder)
    loader.check_pending()
    return manager


def plugin_manager_for(config: TransformConfig) -> PluginManager:
    """:func:`build_plugin_manager` with the ``[transform]`` settings."""
    return build_plugin_manager(config.plugin_dirs, config.blocked, config.load_entry_points)


def plugin_records(plugin_manager: PluginManager) -> list[PluginRecord]:
    """What was loaded (or not) and from where, in load order.

    For a manager not built by :func:`build_plugin_manager`, the registered
    plugins are listed with source ``entry point`` if pluggy knows their
    distribution, else ``folder``.
    """
    records = getattr(plugin_manager, "records", None)
    if records is not None:
        return list(records)
    from_dists = {id(plugin): dist for plugin, dist in plugin_manager.list_plugin_distinfo()}
    listed: list[PluginRecord] = []
    for name, plugin in plugin_manager.list_name_plugin():
        if plugin is None:
            listed.append(PluginRecord(name, "folder", "", "blocked"))
            continue
        dist = from_dists.get(id(plugin))
        origin = getattr(plugin, "__file__", None) or getattr(plugin, "__name__", repr(plugin))
        source: PluginSource = "entry point" if dist is not None else "folder"
        if plugin is builtin:
            source = "built-in"
        listed.append(PluginRecord(name, source, str(origin)))
    return listed
