"""The transformers shipped in plugins/ (loaded from the folder, as third-party
ones are) and the built-ins: interface conformance and behaviour."""

from __future__ import annotations

import gzip
import sys
import zlib
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from twisted.internet.defer import Deferred, succeed
from twisted.python.failure import Failure
from zope.interface.verify import verifyObject

from gateway.errors import ConfigError, TransformError
from gateway.interfaces import IConfigurableTransformer, IMessageTransformer
from gateway.message.model import BytesMessage, MapMessage, Message, TextMessage
from gateway.transform import (
    Branch,
    Deliver,
    Drop,
    TransformChains,
    TransformContext,
    build_plugin_manager,
    parse_transform_config,
)
from gateway.transform.catalog import TransformerCatalog, collect_transformers
from gateway.transform.manager import FOLDER_MODULE_PREFIX, plugin_records

PLUGINS = Path(__file__).resolve().parents[2] / "plugins"
SHIPPED = {"header-map", "json-map", "compress", "enrich", "route"}
BUILTIN = {"jms-byte", "jms-map-json", "jms-map-xml", "jms-json", "jms-xml", "jms-object-json", "jms-object-xml"}


@pytest.fixture
def catalog() -> Iterator[TransformerCatalog]:
    pm = build_plugin_manager(plugin_dirs=[str(PLUGINS)], load_entry_points=False)
    assert all(record.status == "loaded" for record in plugin_records(pm)), plugin_records(pm)
    yield collect_transformers(pm)
    for name in [name for name in sys.modules if name.startswith(FOLDER_MODULE_PREFIX)]:
        del sys.modules[name]


def ctx(direction: str = "inbound", /, **options: Any) -> TransformContext:
    return TransformContext(direction, "/queue/a", "/queue/a", "alice", options)  # type: ignore[arg-type]


def run(catalog: TransformerCatalog, name: str, message: Message, context: TransformContext) -> Any:
    transformer = catalog.entries[name].transformer
    if IConfigurableTransformer.providedBy(transformer):
        transformer.check_options(dict(context.options))
    return transformer.transform(message, context)


def text(body: str = "hello", **properties: Any) -> TextMessage:
    return TextMessage(destination="/queue/a", message_id="ID:1", text=body, properties=dict(properties))


def test_every_shipped_and_builtin_transformer_provides_the_interface(catalog: TransformerCatalog) -> None:
    assert set(catalog.names()) == SHIPPED | BUILTIN
    for name, entry in catalog.entries.items():
        assert verifyObject(IMessageTransformer, entry.transformer), name
        assert entry.transformer.name == name
        if name in SHIPPED:
            assert verifyObject(IConfigurableTransformer, entry.transformer), name
            assert type(entry.transformer).__doc__
            assert sys.modules[type(entry.transformer).__module__].__doc__


def test_every_plugin_module_is_documented() -> None:
    for path in PLUGINS.glob("*.py"):
        source = path.read_text()
        assert source.startswith('"""'), path
        assert "Options" in source or path.stem == "__init__", path


# -- header-map ----------------------------------------------------------------------------


def test_header_map_renames_sets_and_removes(catalog: TransformerCatalog) -> None:
    message = text(**{"X-Old": "v", "keep": "k", "X-Debug": "1", "x-env": "dev"})
    context = ctx(
        rename={"X-Old": "x-new", "absent": "y"},
        set_default={"x-env": "prod", "x-region": "eu"},
        set={"x-gateway": "gw-1", "x-count": 3},
        remove=["X-Debug", "absent"],
    )
    result = run(catalog, "header-map", message, context)
    assert result.properties == {
        "x-new": "v",
        "keep": "k",
        "x-env": "dev",
        "x-region": "eu",
        "x-gateway": "gw-1",
        "x-count": 3,
    }


@pytest.mark.parametrize(
    "options",
    [{"renames": {}}, {"rename": {"a": 1}}, {"set": {"a": [1]}}, {"remove": "X-Debug"}, {"set_default": 3}],
)
def test_header_map_refuses_bad_options(catalog: TransformerCatalog, options: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        catalog.entries["header-map"].transformer.check_options(options)  # type: ignore[attr-defined]


def test_bad_options_stop_the_gateway_with_the_key(catalog: TransformerCatalog) -> None:
    pm = build_plugin_manager(plugin_dirs=[str(PLUGINS)], load_entry_points=False)
    config = parse_transform_config(
        {"chain": [{"transformer": "header-map", "options": {"renmae": {}}}]}, "etc/jmsgateway.toml"
    )
    with pytest.raises(ConfigError) as info:
        TransformChains(pm, config, registry=CollectorRegistry())
    assert info.value.key == "transform.chain[0].options"
    assert "unknown option 'renmae'" in str(info.value)


# -- json-map ------------------------------------------------------------------------------


def test_json_map_inbound_text_and_bytes_become_maps(catalog: TransformerCatalog) -> None:
    result = run(catalog, "json-map", text('{"qty": 2, "sku": "A-1"}', keep="p"), ctx())
    assert isinstance(result, MapMessage)
    assert result.map == {"qty": 2, "sku": "A-1"}
    assert (result.message_id, result.destination, result.properties) == ("ID:1", "/queue/a", {"keep": "p"})
    raw = BytesMessage(destination="/queue/a", body='{"ü": true}'.encode())
    assert run(catalog, "json-map", raw, ctx()).map == {"ü": True}


def test_json_map_outbound_map_becomes_json_text(catalog: TransformerCatalog) -> None:
    message = MapMessage(destination="/queue/a", map={"b": 1, "a": b"\x00\x01"}, priority=7)
    result = run(catalog, "json-map", message, ctx("outbound", sort_keys=True))
    assert isinstance(result, TextMessage)
    assert result.text == '{"a": "AAE=", "b": 1}'
    assert result.priority == 7
    plain = text("not a map")
    assert run(catalog, "json-map", plain, ctx("outbound")) is plain


def test_json_map_errors(catalog: TransformerCatalog) -> None:
    with pytest.raises(TransformError, match="not JSON"):
        run(catalog, "json-map", text("{oops"), ctx())
    with pytest.raises(TransformError, match="needs an object"):
        run(catalog, "json-map", text("[1, 2]"), ctx())
    with pytest.raises(TransformError, match="expected a map message"):
        run(catalog, "json-map", text("x"), ctx("outbound", strict=True))
    map_message = MapMessage(map={"a": 1})
    assert run(catalog, "json-map", map_message, ctx("outbound", mode="to-map")) is map_message
    with pytest.raises(ValueError):
        catalog.entries["json-map"].transformer.check_options({"mode": "xml"})  # type: ignore[attr-defined]


def test_json_map_round_trip_through_a_chain(catalog: TransformerCatalog) -> None:
    pm = build_plugin_manager(plugin_dirs=[str(PLUGINS)], load_entry_points=False)
    config = parse_transform_config({"chain": [{"transformer": "json-map"}]}, "")
    chains = TransformChains(pm, config, registry=CollectorRegistry())
    inbound = result_of(chains.run(text('{"n": 1}'), TransformContext("inbound", "/queue/a", "/queue/a")))
    assert isinstance(inbound, Deliver) and isinstance(inbound.message, MapMessage)
    outbound = result_of(chains.run(inbound.message, TransformContext("outbound", "/queue/a", "/queue/a")))
    assert isinstance(outbound, Deliver) and isinstance(outbound.message, TextMessage)
    assert outbound.message.text == '{"n": 1}'


# -- compress ------------------------------------------------------------------------------


def immediate(work: Callable[[], Message]) -> Deferred[Message]:
    """A run_in_thread double that records it was used."""
    immediate.calls += 1  # type: ignore[attr-defined]
    return succeed(work())


immediate.calls = 0  # type: ignore[attr-defined]


def compressor(catalog: TransformerCatalog) -> Any:
    cls: Any = type(catalog.entries["compress"].transformer)
    return cls(run_in_thread=immediate)


def test_compress_round_trip_of_text(catalog: TransformerCatalog) -> None:
    body = "order line\n" * 200
    compressed = run(catalog, "compress", text(body, keep="1"), ctx())
    assert isinstance(compressed, BytesMessage)
    assert gzip.decompress(compressed.body) == body.encode()
    assert compressed.properties == {"keep": "1", "JMSGW_COMPRESSION": "gzip", "JMSGW_COMPRESSION_TEXT": True}
    assert len(compressed.body) < len(body)
    again = run(catalog, "compress", compressed, ctx())
    assert again is compressed  # never compressed twice
    restored = run(catalog, "compress", compressed, ctx("outbound"))
    assert isinstance(restored, TextMessage)
    assert restored.text == body
    assert restored.properties == {"keep": "1"}


def test_compress_zlib_bytes_and_small_bodies(catalog: TransformerCatalog) -> None:
    body = bytes(range(256)) * 8
    message = BytesMessage(destination="/queue/a", body=body)
    compressed = run(catalog, "compress", message, ctx(algorithm="zlib", level=9, property="Z"))
    assert zlib.decompress(compressed.body) == body
    assert compressed.properties == {"Z": "zlib"}
    restored = run(catalog, "compress", compressed, ctx(mode="decompress", property="Z"))
    assert isinstance(restored, BytesMessage) and restored.body == body
    small = text("tiny")
    assert run(catalog, "compress", small, ctx()) is small
    plain = BytesMessage(body=b"no flag")
    assert run(catalog, "compress", plain, ctx("outbound")) is plain


def test_compress_refuses_bombs_and_garbage(catalog: TransformerCatalog) -> None:
    bomb = BytesMessage(body=gzip.compress(b"\0" * 100_000), properties={"JMSGW_COMPRESSION": "gzip"})
    with pytest.raises(TransformError, match="larger than max_size"):
        run(catalog, "compress", bomb, ctx("outbound", max_size=1000))
    garbage = BytesMessage(body=b"definitely not gzip", properties={"JMSGW_COMPRESSION": "gzip"})
    with pytest.raises(TransformError, match="corrupt"):
        run(catalog, "compress", garbage, ctx("outbound"))
    truncated = BytesMessage(body=gzip.compress(b"x" * 1000)[:-10], properties={"JMSGW_COMPRESSION": "gzip"})
    with pytest.raises(TransformError, match="truncated"):
        run(catalog, "compress", truncated, ctx("outbound"))
    unknown = BytesMessage(body=b"x", properties={"JMSGW_COMPRESSION": "brotli"})
    with pytest.raises(TransformError, match="unknown compression 'brotli'"):
        run(catalog, "compress", unknown, ctx("outbound"))
    for bad in ({"algorithm": "lz4"}, {"level": 10}, {"min_size": -1}, {"property": ""}, {"speed": 1}):
        with pytest.raises(ValueError):
            catalog.entries["compress"].transformer.check_options(bad)  # type: ignore[attr-defined]


def test_compress_hands_large_bodies_to_a_thread(catalog: TransformerCatalog) -> None:
    transformer = compressor(catalog)
    before = immediate.calls  # type: ignore[attr-defined]
    result = transformer.transform(text("x" * 5000), ctx(thread_threshold=4096))
    assert isinstance(result, Deferred)
    assert immediate.calls == before + 1  # type: ignore[attr-defined]
    assert isinstance(result_of(result), BytesMessage)
    assert isinstance(transformer.transform(text("x" * 5000), ctx()), BytesMessage)


# -- enrich --------------------------------------------------------------------------------


def enricher(catalog: TransformerCatalog) -> Any:
    cls: Any = type(catalog.entries["enrich"].transformer)
    return cls(clock=lambda: 1700000000.5, gateway_id="gw-a")


def test_enrich_stamps_gateway_metadata(catalog: TransformerCatalog) -> None:
    transformer = enricher(catalog)
    result = transformer.transform(text(), ctx(login=True, direction=True, path=True))
    assert result.properties == {
        "JMSGW_GATEWAY": "gw-a",
        "JMSGW_TIMESTAMP": 1700000000500,
        "JMSGW_HOPS": 1,
        "JMSGW_PATH": "gw-a",
        "JMSGW_LOGIN": "alice",
        "JMSGW_DIRECTION": "inbound",
    }
    again = transformer.transform(result, ctx(gateway_id="gw-b", path=True, prefix="JMSGW_"))
    assert again.properties["JMSGW_HOPS"] == 2
    assert again.properties["JMSGW_PATH"] == "gw-a,gw-b"
    assert again.properties["JMSGW_GATEWAY"] == "gw-b"


def test_enrich_drops_loops_and_hop_overflows(catalog: TransformerCatalog) -> None:
    transformer = enricher(catalog)
    looped = text(JMSGW_PATH="gw-x,gw-a", JMSGW_HOPS="2")
    decision = transformer.transform(looped, ctx(path=True, drop_loops=True))
    assert isinstance(decision, Drop) and "loop" in decision.reason
    decision = transformer.transform(text(JMSGW_HOPS="3"), ctx(max_hops=3))
    assert isinstance(decision, Drop) and "hop limit 3" in decision.reason
    assert transformer.transform(text(JMSGW_HOPS="2"), ctx(max_hops=3)).properties["JMSGW_HOPS"] == 3
    with pytest.raises(TransformError, match="not a hop count"):
        transformer.transform(text(JMSGW_HOPS="many"), ctx())
    for bad in ({"drop_loops": True}, {"max_hops": -1}, {"gateway_id": ""}, {"path": "yes"}, {"colour": 1}):
        with pytest.raises(ValueError):
            transformer.check_options(bad)


# -- route ---------------------------------------------------------------------------------


def test_route_branches_by_property(catalog: TransformerCatalog) -> None:
    options: Mapping[str, Any] = {"property": "region", "routes": {"eu": "/queue/o.eu"}, "default": "/queue/o.x"}
    decision = run(catalog, "route", text(region="eu"), ctx(**options))
    assert isinstance(decision, Branch) and decision.destination == "/queue/o.eu"
    decision = run(catalog, "route", text(region="us"), ctx(**options))
    assert isinstance(decision, Branch) and decision.destination == "/queue/o.x"
    message = text()
    assert run(catalog, "route", message, ctx(property="region")) is message
    assert isinstance(run(catalog, "route", text(), ctx(property="region", unrouted="drop")), Drop)
    with pytest.raises(TransformError, match="no route"):
        run(catalog, "route", text(), ctx(property="region", unrouted="fail"))
    with pytest.raises(ValueError):
        run(catalog, "route", text(), ctx(routes={}))


# -- built-ins -----------------------------------------------------------------------------


def test_jms_byte(catalog: TransformerCatalog) -> None:
    result = run(catalog, "jms-byte", text("héllo", k="v"), ctx())
    assert isinstance(result, BytesMessage)
    assert result.body == "héllo".encode()
    assert result.properties == {"k": "v"}
    raw = BytesMessage(body=b"x")
    assert run(catalog, "jms-byte", raw, ctx("outbound")) is raw


def test_jms_map_json(catalog: TransformerCatalog) -> None:
    xstream = '{"map":{"entry":[{"string":["a","x"]},{"string":"n","int":3}]}}'
    result = run(catalog, "jms-map-json", text(xstream, k="v"), ctx())
    assert isinstance(result, MapMessage) and result.map == {"a": "x", "n": 3}
    assert result.properties == {"k": "v", "transformation": "jms-map-json"}  # the form it was sent in
    back = run(catalog, "jms-map-json", result, ctx("outbound"))
    assert isinstance(back, TextMessage) and back.text == xstream
    assert back.properties == {"k": "v", "transformation": "jms-map-json"}
    plain = run(catalog, "jms-map-json", text('{"a": 1, "b": "x"}'), ctx())  # still taken
    assert isinstance(plain, MapMessage) and plain.map == {"a": 1, "b": "x"}
    with pytest.raises(TransformError, match="jms-map-json: the body is not a map"):
        run(catalog, "jms-map-json", text("3"), ctx())


def test_jms_map_xml(catalog: TransformerCatalog) -> None:
    body = ("<map><entry><string>a</string><string>x</string></entry>"
            "<entry><string>n</string><long>3</long></entry></map>")
    result = run(catalog, "jms-map-xml", BytesMessage(body=body.encode()), ctx())
    assert isinstance(result, MapMessage) and result.map == {"a": "x", "n": 3}
    back = run(catalog, "jms-map-xml", result, ctx("outbound"))
    assert isinstance(back, TextMessage) and back.properties["transformation"] == "jms-map-xml"
    assert back.text == ("<map>\n  <entry>\n    <string>a</string>\n    <string>x</string>\n  </entry>\n"
                         "  <entry>\n    <string>n</string>\n    <int>3</int>\n  </entry>\n</map>")
    with pytest.raises(TransformError, match="jms-map-xml: the body is not a map: not XML"):
        run(catalog, "jms-map-xml", text("not xml"), ctx())
    plain = text("hello")
    assert run(catalog, "jms-map-xml", plain, ctx("outbound")) is plain


def test_jms_xml_and_jms_json_are_subscriber_formats(catalog: TransformerCatalog) -> None:
    mapped = MapMessage(map={"a": "x"})
    as_json = run(catalog, "jms-json", mapped, ctx("outbound"))
    assert as_json.text == '{"map":{"entry":{"string":["a","x"]}}}'
    assert as_json.properties["transformation"] == "jms-map-json"
    as_xml = run(catalog, "jms-xml", mapped, ctx("outbound"))
    assert as_xml.properties["transformation"] == "jms-map-xml" and as_xml.text.startswith("<map>")
    plain = text("hello")
    assert run(catalog, "jms-json", plain, ctx()) is plain


@pytest.mark.parametrize("name", ["jms-object-xml", "jms-object-json"])
def test_jms_object_transformations_are_refused(catalog: TransformerCatalog, name: str) -> None:
    with pytest.raises(TransformError, match=f"{name}: object messages are not supported"):
        run(catalog, name, text("<string>s</string>"), ctx())


def result_of(d: Deferred[Any]) -> Any:
    results: list[Any] = []
    d.addBoth(results.append)
    assert results, "the Deferred has not fired"
    if isinstance(results[0], Failure):
        results[0].raiseException()
    return results[0]
