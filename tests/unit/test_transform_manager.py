"""build_plugin_manager, the transformer catalog and describe_plugins, with a fresh
PluginManager per test and plugin folders written into tmp_path."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from pluggy import PluginManager

from gateway.transform import builtin
from gateway.transform.catalog import collect_transformers
from gateway.transform.config import TransformConfig
from gateway.transform.hookspecs import PROJECT_NAME, hookimpl
from gateway.transform.manager import (
    FOLDER_MODULE_PREFIX,
    GatewayPluginManager,
    PluginRecord,
    build_plugin_manager,
    plugin_manager_for,
    plugin_records,
)
from gateway.transform.report import describe_plugins

GOOD = """
from zope.interface import implementer
from gateway.interfaces import IMessageTransformer
from gateway.transform import hookimpl

@implementer(IMessageTransformer)
class Shout:
    name = "{name}"
    def transform(self, message, context):
        return message

@hookimpl
def jmsgateway_transformers(config):
    return [Shout()]
"""


@pytest.fixture(autouse=True)
def forget_folder_modules() -> Iterator[None]:
    """Folder plugins land in sys.modules; each test starts without them."""
    yield
    for name in [name for name in sys.modules if name.startswith(FOLDER_MODULE_PREFIX)]:
        del sys.modules[name]


def write(folder: Path, name: str, source: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(source))
    return path


def records_by_name(pm: PluginManager) -> dict[str, PluginRecord]:
    return {record.name: record for record in plugin_records(pm)}


def test_builtins_register_through_the_hook() -> None:
    pm = build_plugin_manager(plugin_dirs=(), load_entry_points=False)
    assert isinstance(pm, GatewayPluginManager)
    assert pm.project_name == PROJECT_NAME
    assert pm.get_plugin("builtin") is builtin
    assert records_by_name(pm)["builtin"] == PluginRecord("builtin", "built-in", "gateway.transform.builtin")
    catalog = collect_transformers(pm)
    assert catalog.names() == [
        "jms-byte", "jms-json", "jms-map-json", "jms-map-xml", "jms-object-json", "jms-object-xml", "jms-xml",
    ]
    assert {entry.plugin for entry in catalog.entries.values()} == {"builtin"}


def test_folder_plugins_load_in_name_order_and_skip_private_files(tmp_path: Path) -> None:
    write(tmp_path, "zeta", GOOD.format(name="zeta"))
    write(tmp_path, "alpha", GOOD.format(name="alpha"))
    write(tmp_path, "_helper", "raise RuntimeError('private modules are not plugins')")
    pm = build_plugin_manager(plugin_dirs=[str(tmp_path)], load_entry_points=False, load_builtins=False)
    records = plugin_records(pm)
    assert [(r.name, r.source, r.status) for r in records] == [
        ("alpha", "folder", "loaded"),
        ("zeta", "folder", "loaded"),
    ]
    assert records[0].origin == str(tmp_path / "alpha.py")
    assert collect_transformers(pm).names() == ["alpha", "zeta"]
    assert f"{FOLDER_MODULE_PREFIX}alpha" in sys.modules


def test_broken_plugins_are_reported_not_fatal(tmp_path: Path) -> None:
    write(tmp_path, "good", GOOD.format(name="good"))
    write(tmp_path, "syntax", "def broken(:\n")
    write(tmp_path, "raises", "raise RuntimeError('no database configured')\n")
    write(
        tmp_path,
        "badargs",
        """
        from gateway.transform import hookimpl

        @hookimpl
        def jmsgateway_transformers(config, reactor):
            return []
        """,
    )
    write(
        tmp_path,
        "unknownhook",
        """
        from gateway.transform import hookimpl

        @hookimpl
        def jmsgateway_transformer(config):
            return []
        """,
    )
    pm = build_plugin_manager(plugin_dirs=[str(tmp_path)], load_entry_points=False)
    records = records_by_name(pm)
    assert records["good"].status == "loaded"
    assert records["builtin"].status == "loaded"
    assert records["syntax"].status == "failed"
    assert "SyntaxError" in records["syntax"].error
    assert records["raises"].status == "failed"
    assert "RuntimeError: no database configured" in records["raises"].error
    assert records["badargs"].status == "failed"
    assert "reactor" in records["badargs"].error
    # check_pending() found the misspelled hook; the plugin was unregistered
    assert records["unknownhook"].status == "failed"
    assert "unknown hook 'jmsgateway_transformer'" in records["unknownhook"].error
    assert not pm.has_plugin("unknownhook")
    pm.check_pending()  # passes now
    assert collect_transformers(pm).names() == ["good", "jms-byte", "jms-json", "jms-map-json", "jms-map-xml",
                                                "jms-object-json", "jms-object-xml", "jms-xml"]


def test_blocked_plugins_are_never_imported(tmp_path: Path) -> None:
    write(tmp_path, "noisy", "raise SystemExit('imported although blocked')\n")
    pm = build_plugin_manager(plugin_dirs=[str(tmp_path)], blocked=["noisy", "builtin"], load_entry_points=False)
    records = records_by_name(pm)
    assert records["noisy"].status == "blocked"
    assert records["builtin"].status == "blocked"
    assert pm.is_blocked("noisy")
    assert collect_transformers(pm).names() == []


def test_same_stem_in_two_folders_is_refused(tmp_path: Path) -> None:
    write(tmp_path / "one", "shared", GOOD.format(name="from-one"))
    write(tmp_path / "two", "shared", GOOD.format(name="from-two"))
    pm = build_plugin_manager(
        plugin_dirs=[str(tmp_path / "one"), str(tmp_path / "two")], load_entry_points=False, load_builtins=False
    )
    first, second = plugin_records(pm)
    assert first.status == "loaded"
    assert second.status == "failed"
    assert "already taken by folder" in second.error
    assert collect_transformers(pm).names() == ["from-one"]


def test_missing_folder_is_recorded(tmp_path: Path) -> None:
    pm = build_plugin_manager(plugin_dirs=[str(tmp_path / "nope")], load_entry_points=False, load_builtins=False)
    (record,) = plugin_records(pm)
    assert record.status == "missing"
    assert record.source == "folder"


def test_later_plugins_shadow_earlier_names(tmp_path: Path) -> None:
    write(tmp_path, "override", GOOD.format(name="jms-byte"))
    pm = build_plugin_manager(plugin_dirs=[str(tmp_path)], load_entry_points=False)
    catalog = collect_transformers(pm)
    assert catalog.entries["jms-byte"].plugin == "override"
    ((loser, winner),) = catalog.shadowed
    assert (loser.plugin, winner.plugin) == ("builtin", "override")
    assert "jms-byte (shadowed by plugin override)" in describe_plugins(pm)


def test_hooks_returning_junk_are_reported(tmp_path: Path) -> None:
    write(
        tmp_path,
        "junk",
        """
        from gateway.transform import hookimpl

        class NotDeclared:
            name = "nd"
            def transform(self, message, context):
                return message

        @hookimpl
        def jmsgateway_transformers(config):
            return [NotDeclared(), "text"]
        """,
    )
    write(
        tmp_path,
        "explodes",
        """
        from gateway.transform import hookimpl

        @hookimpl
        def jmsgateway_transformers(config):
            raise KeyError("api_key")
        """,
    )
    write(
        tmp_path,
        "scalar",
        "from gateway.transform import hookimpl\n\n@hookimpl\ndef jmsgateway_transformers(config):\n    return 3\n",
    )
    pm = build_plugin_manager(plugin_dirs=[str(tmp_path)], load_entry_points=False, load_builtins=False)
    catalog = collect_transformers(pm)
    assert catalog.names() == []
    problems = {(p.plugin, p.problem.split(" ")[0]) for p in catalog.problems}
    assert ("explodes", "jmsgateway_transformers") in problems
    assert ("scalar", "jmsgateway_transformers") in problems
    assert sum(1 for p in catalog.problems if p.plugin == "junk") == 2
    report = describe_plugins(pm)
    assert "PROBLEM: jmsgateway_transformers raised KeyError: 'api_key'" in report
    assert "does not provide IMessageTransformer" in report


def test_hooks_receive_the_config(tmp_path: Path) -> None:
    write(
        tmp_path,
        "configured",
        """
        from zope.interface import implementer
        from gateway.interfaces import IMessageTransformer
        from gateway.transform import hookimpl

        @implementer(IMessageTransformer)
        class Named:
            def __init__(self, name):
                self.name = name
            def transform(self, message, context):
                return message

        @hookimpl
        def jmsgateway_transformers(config):
            return [Named(f"blocked-{len(config.blocked)}")]
        """,
    )
    pm = build_plugin_manager(plugin_dirs=[str(tmp_path)], load_entry_points=False, load_builtins=False)
    config = TransformConfig(blocked=("a", "b"))
    assert collect_transformers(pm, config).names() == ["blocked-2"]


def test_plugin_manager_for_uses_the_config(tmp_path: Path) -> None:
    write(tmp_path, "one", GOOD.format(name="one"))
    pm = plugin_manager_for(
        TransformConfig(plugin_dirs=(str(tmp_path),), blocked=("builtin",), load_entry_points=False)
    )
    assert collect_transformers(pm).names() == ["one"]
    assert records_by_name(pm)["builtin"].status == "blocked"


def test_describe_plugins_lists_sources_transformers_and_failures(tmp_path: Path) -> None:
    write(tmp_path, "good", GOOD.format(name="good-one"))
    write(tmp_path, "broken", "import not_a_module_anywhere\n")
    write(tmp_path, "blockme", GOOD.format(name="never"))
    pm = build_plugin_manager(
        plugin_dirs=[str(tmp_path), str(tmp_path / "absent")], blocked=["blockme"], load_entry_points=False
    )
    report = describe_plugins(pm)
    assert "builtin [built-in] gateway.transform.builtin" in report
    assert f"good [folder] {tmp_path / 'good.py'}" in report
    assert "transformers: good-one" in report
    assert "FAILED: import failed: ModuleNotFoundError: No module named 'not_a_module_anywhere'" in report
    assert "blocked by configuration" in report
    assert "not found" in report
    assert "8 transformer(s) from 2 plugin(s); 1 failed to load" in report
    assert "never" not in report


def test_records_of_a_plain_plugin_manager() -> None:
    pm = PluginManager(PROJECT_NAME)

    class Plugin:
        @hookimpl
        def jmsgateway_transformers(self, config: TransformConfig) -> list[object]:
            return []

    pm.register(Plugin(), name="plain")
    pm.register(builtin, name="builtin")
    pm.set_blocked("off")
    records = records_by_name(pm)
    assert records["plain"].status == "loaded"
    assert records["builtin"].source == "built-in"
    assert records["off"].status == "blocked"
