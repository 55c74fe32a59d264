"""Third-party plugins through setuptools entry points (group ``jmsgateway``).

The example package in examples/jmsgateway-example-plugin is pip-installed
into the running interpreter's environment (idempotent: skipped when the
installed copy matches the source), then discovered by build_plugin_manager.
Broken entry points are simulated with a dist-info folder on sys.path.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import sys
import textwrap
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from zope.interface.verify import verifyObject

from gateway.interfaces import IConfigurableTransformer
from gateway.message.model import BytesMessage, TextMessage
from gateway.transform import (
    Deliver,
    TransformChains,
    TransformContext,
    build_plugin_manager,
    describe_plugins,
    parse_transform_config,
    plugin_records,
)
from gateway.transform.catalog import collect_transformers
from tests.support.example_plugin import DIST, ensure_example_installed, source_version


@pytest.fixture(scope="module")
def example_installed(tmp_path_factory: pytest.TempPathFactory) -> None:
    """pip-install the example package (no deps, no network) unless the same copy is installed."""
    ensure_example_installed(tmp_path_factory.mktemp("example"))


def test_example_plugin_is_discovered_through_its_entry_point(example_installed: None) -> None:
    pm = build_plugin_manager(plugin_dirs=(), load_entry_points=True)
    records = {record.name: record for record in plugin_records(pm)}
    record = records["example"]
    assert (record.source, record.status) == ("entry point", "loaded")
    assert record.origin == f"{DIST} {source_version()} (jmsgateway_example_plugin)"
    catalog = collect_transformers(pm)
    entry = catalog.entries["uppercase"]
    assert entry.plugin == "example"
    assert verifyObject(IConfigurableTransformer, entry.transformer)
    assert type(entry.transformer).__module__ == "jmsgateway_example_plugin"
    report = describe_plugins(pm)
    assert f"example [entry point] {DIST} {source_version()}" in report
    assert "transformers: uppercase" in report


def test_example_transformer_runs_in_a_chain(example_installed: None) -> None:
    pm = build_plugin_manager(plugin_dirs=(), load_entry_points=True)
    config = parse_transform_config(
        {"chain": [{"transformer": "uppercase", "destinations": ["/queue/shout.*"], "options": {"properties": ["s"]}}]},
        "gw.toml",
    )
    chains = TransformChains(pm, config, registry=CollectorRegistry())
    message = TextMessage(destination="/queue/shout.a", text="hello", properties={"s": "quiet", "t": "quiet"})
    results: list[object] = []
    chains.run(message, TransformContext("inbound", "/queue/shout.a", "/queue/shout.a")).addCallback(results.append)
    (outcome,) = results
    assert isinstance(outcome, Deliver)
    assert isinstance(outcome.message, TextMessage)
    assert outcome.message.text == "HELLO"
    assert outcome.message.properties == {"s": "QUIET", "t": "quiet"}
    header = TransformContext("inbound", "/queue/other", "/queue/other", transformation="uppercase")
    chains.run(BytesMessage(body=b"abc"), header).addCallback(results.append)
    assert isinstance(results[1], Deliver) and results[1].message.body == b"ABC"  # type: ignore[attr-defined]


def test_entry_point_plugins_can_be_blocked_or_not_loaded(example_installed: None) -> None:
    pm = build_plugin_manager(plugin_dirs=(), blocked=["example"])
    records = {record.name: record for record in plugin_records(pm)}
    assert records["example"].status == "blocked"
    assert "uppercase" not in collect_transformers(pm).entries
    pm = build_plugin_manager(plugin_dirs=(), load_entry_points=False)
    assert "example" not in {record.name for record in plugin_records(pm)}


def fake_distribution(root: Path, name: str, entry_points: str) -> None:
    info = root / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))


def test_broken_entry_points_are_reported_not_fatal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_distribution(
        tmp_path,
        "broken_gw_plugins",
        """
        [jmsgateway]
        ghost = no_such_module_for_jmsgateway
        wrongattr = json:no_such_attribute
        """,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    pm = build_plugin_manager(plugin_dirs=())
    records = {record.name: record for record in plugin_records(pm)}
    assert records["ghost"].status == "failed"
    assert "ModuleNotFoundError: No module named 'no_such_module_for_jmsgateway'" in records["ghost"].error
    assert records["ghost"].origin == "broken_gw_plugins 1.0 (no_such_module_for_jmsgateway)"
    assert records["wrongattr"].status == "failed"
    assert "AttributeError" in records["wrongattr"].error
    assert records["builtin"].status == "loaded"
    report = describe_plugins(pm)
    assert "ghost [entry point] broken_gw_plugins 1.0" in report
    assert "FAILED: import failed: ModuleNotFoundError" in report


def test_entry_point_modules_from_sys_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "gw_tmp_plugin_mod.py").write_text(
        textwrap.dedent(
            """
            from zope.interface import implementer
            from gateway.interfaces import IMessageTransformer
            from gateway.transform import hookimpl

            @implementer(IMessageTransformer)
            class Noop:
                name = "noop-from-ep"
                def transform(self, message, context):
                    return message

            @hookimpl
            def jmsgateway_transformers(config):
                return [Noop()]
            """
        )
    )
    fake_distribution(tmp_path, "gw_tmp_plugin", "[jmsgateway]\ntmpplugin = gw_tmp_plugin_mod\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    try:
        pm = build_plugin_manager(plugin_dirs=())
        assert collect_transformers(pm).entries["noop-from-ep"].plugin == "tmpplugin"
    finally:
        sys.modules.pop("gw_tmp_plugin_mod", None)
