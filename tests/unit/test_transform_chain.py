"""TransformChains: ordering, matching, decisions, async transformers, failure
policies, metrics and logs, the transformation header; a fresh PluginManager
and CollectorRegistry per test."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from pluggy import PluginManager
from prometheus_client import CollectorRegistry
from twisted.internet.defer import Deferred, succeed
from twisted.internet.task import Clock
from twisted.logger import formatEvent, globalLogPublisher
from twisted.python.failure import Failure
from zope.interface import implementer
from zope.interface.verify import verifyObject

from gateway.errors import ConfigError, TransformError
from gateway.interfaces import IConfigurableTransformer, IMessageTransformer, ITransformContext
from gateway.message.model import BytesMessage, MapMessage, Message, TextMessage
from gateway.transform import (
    Branch,
    DeadLettered,
    Deliver,
    Drop,
    Dropped,
    Outcome,
    Rejected,
    TransformChains,
    TransformConfig,
    TransformContext,
    build_plugin_manager,
    hookimpl,
    is_stomp_deliverable,
    parse_transform_config,
)
from gateway.transform.chain import DEAD_LETTER_CAUSE, DEAD_LETTER_TRANSFORMER, ORIGINAL_DESTINATION

INBOUND = TransformContext("inbound", source="/queue/orders.new", target="/queue/orders.new", login="alice")
OUTBOUND = TransformContext("outbound", source="/queue/orders.new", target="/queue/orders.new", login="bob")


@implementer(IMessageTransformer)
class Tag:
    """Appends its name to property ``trail`` (and records the options it saw)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.seen: list[dict[str, Any]] = []
        self.contexts: list[ITransformContext] = []

    def transform(self, message: Message, context: ITransformContext) -> Message:
        self.seen.append(dict(context.options))
        self.contexts.append(context)
        trail = str(message.properties.get("trail", ""))
        message.properties["trail"] = f"{trail},{self.name}" if trail else self.name
        return message


@implementer(IMessageTransformer)
class Returns:
    """Returns whatever its factory makes from the message."""

    def __init__(self, name: str, make: Callable[[Message], Any]) -> None:
        self.name = name
        self.make = make

    def transform(self, message: Message, context: ITransformContext) -> Any:
        return self.make(message)


@implementer(IConfigurableTransformer)
class Picky:
    name = "picky"

    def check_options(self, options: dict[str, Any]) -> None:
        if "level" in options and not 0 <= options["level"] <= 9:
            raise ValueError("level must be between 0 and 9")

    def transform(self, message: Message, context: ITransformContext) -> Message:
        return message


class ProvidingPlugin:
    """A plugin object providing the given transformers."""

    def __init__(self, transformers: Sequence[IMessageTransformer]) -> None:
        self.transformers = list(transformers)

    @hookimpl
    def jmsgateway_transformers(self, config: TransformConfig) -> list[IMessageTransformer]:
        return self.transformers


def fresh_pm(*transformers: IMessageTransformer, builtins: bool = False) -> PluginManager:
    pm = build_plugin_manager(plugin_dirs=(), load_entry_points=False, load_builtins=builtins)
    pm.register(ProvidingPlugin(transformers), name="testplugin")
    return pm


def chains_for(
    transformers: Sequence[IMessageTransformer],
    chain: list[dict[str, Any]],
    registry: CollectorRegistry,
    builtins: bool = False,
    clock: Clock | None = None,
    **section: Any,
) -> TransformChains:
    config = parse_transform_config({**section, "chain": chain}, "gw.toml")
    return TransformChains(fresh_pm(*transformers, builtins=builtins), config, registry=registry, clock=clock)


def result_of(d: Deferred[Outcome]) -> Outcome:
    results: list[Outcome | Failure] = []
    d.addBoth(results.append)
    assert results, "the Deferred has not fired"
    result = results[0]
    if isinstance(result, Failure):
        result.raiseException()
    assert not isinstance(result, Failure)
    return result


def text(body: str = "hello", **properties: Any) -> TextMessage:
    return TextMessage(destination="/queue/orders.new", message_id="ID:test-1", text=body, properties=dict(properties))


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


@pytest.fixture
def log_events() -> Iterator[list[dict[str, Any]]]:
    events: list[dict[str, Any]] = []
    observer: Any = events.append
    globalLogPublisher.addObserver(observer)
    yield events
    globalLogPublisher.removeObserver(observer)


def failures(registry: CollectorRegistry, transformer: str, policy: str, direction: str = "inbound") -> float:
    value = registry.get_sample_value(
        "jmsgateway_transform_failures_total",
        {"transformer": transformer, "plugin": "testplugin", "direction": direction, "policy": policy},
    )
    return value or 0.0


def test_context_provides_its_interface() -> None:
    assert verifyObject(ITransformContext, INBOUND)
    assert INBOUND.stomp_destination == "/queue/orders.new"
    out = TransformContext("outbound", source="orders-topic", target="/topic/orders")
    assert out.stomp_destination == "/topic/orders"
    assert dict(out.options) == {}


def test_empty_chain_passes_the_same_message_at_once(registry: CollectorRegistry) -> None:
    chains = chains_for([Tag("a")], [], registry)
    message = text()
    outcome = result_of(chains.run(message, INBOUND))
    assert outcome == Deliver(message, "/queue/orders.new")
    assert isinstance(outcome, Deliver) and outcome.message is message
    assert not chains.has_work(INBOUND)
    assert message.properties == {}


def test_matching_entries_run_in_config_order(registry: CollectorRegistry) -> None:
    a, b, c, d = Tag("a"), Tag("b"), Tag("c"), Tag("d")
    chains = chains_for(
        [a, b, c, d],
        [
            {"transformer": "c", "destinations": ["/queue/orders.*"]},
            {"transformer": "a"},
            {"transformer": "d", "destinations": ["/topic/*"]},
            {"transformer": "b", "direction": "inbound"},
            {"transformer": "a", "direction": "outbound"},
        ],
        registry,
    )
    outcome = result_of(chains.run(text(), INBOUND))
    assert isinstance(outcome, Deliver)
    assert outcome.message.properties["trail"] == "c,a,b"
    assert chains.steps_for("outbound", "/queue/orders.new") == ["c", "a", "a"]
    assert chains.steps_for("inbound", "/topic/x") == ["a", "d", "b"]
    assert chains.has_work(INBOUND)


def test_shared_input_message_is_never_mutated(registry: CollectorRegistry) -> None:
    chains = chains_for([Tag("a")], [{"transformer": "a"}], registry)
    shared = text(existing="1")
    outcome = result_of(chains.run(shared, OUTBOUND))
    assert shared.properties == {"existing": "1"}
    assert isinstance(outcome, Deliver)
    assert outcome.message is not shared
    assert outcome.message.properties == {"existing": "1", "trail": "a"}


def test_each_step_gets_its_own_options_over_defaults(registry: CollectorRegistry) -> None:
    a = Tag("a")
    chains = chains_for(
        [a],
        [{"transformer": "a", "options": {"x": 1}}, {"transformer": "a", "options": {"y": 2, "z": 3}}],
        registry,
        options={"a": {"z": 0, "w": "default"}},
    )
    result_of(chains.run(text(), INBOUND))
    assert a.seen == [{"z": 0, "w": "default", "x": 1}, {"z": 3, "w": "default", "y": 2}]
    context = a.contexts[0]
    assert (context.direction, context.source, context.target, context.login) == (
        "inbound",
        "/queue/orders.new",
        "/queue/orders.new",
        "alice",
    )


def test_a_transformer_may_return_another_message_type(registry: CollectorRegistry) -> None:
    to_bytes = Returns("to-bytes", lambda m: BytesMessage(destination=m.destination, body=b"x"))
    chains = chains_for([to_bytes, Tag("after")], [{"transformer": "to-bytes"}, {"transformer": "after"}], registry)
    outcome = result_of(chains.run(text(), INBOUND))
    assert isinstance(outcome, Deliver)
    assert isinstance(outcome.message, BytesMessage)
    assert outcome.message.properties == {"trail": "after"}


def test_drop_ends_the_chain_and_is_counted(registry: CollectorRegistry, log_events: list[dict[str, Any]]) -> None:
    after = Tag("after")
    dropper = Returns("dropper", lambda m: Drop("not for us"))
    chains = chains_for([dropper, after], [{"transformer": "dropper"}, {"transformer": "after"}], registry)
    outcome = result_of(chains.run(text(), INBOUND))
    assert outcome == Dropped("not for us", "dropper")
    assert after.seen == []
    assert (
        registry.get_sample_value(
            "jmsgateway_transform_dropped_total", {"transformer": "dropper", "direction": "inbound"}
        )
        == 1.0
    )
    assert any(e.get("transformer") == "dropper" and e.get("message_id") == "ID:test-1" for e in log_events)


def test_branch_changes_the_destination_and_the_chain_goes_on(registry: CollectorRegistry) -> None:
    brancher = Returns("brancher", lambda m: Branch(m, "/queue/orders.eu"))
    chains = chains_for([brancher, Tag("after")], [{"transformer": "brancher"}, {"transformer": "after"}], registry)
    outcome = result_of(chains.run(text(), INBOUND))
    assert isinstance(outcome, Deliver)
    assert (outcome.destination, outcome.branched) == ("/queue/orders.eu", True)
    assert outcome.message.destination == "/queue/orders.eu"
    assert outcome.message.properties["trail"] == "after"
    assert (
        registry.get_sample_value(
            "jmsgateway_transform_branched_total", {"transformer": "brancher", "direction": "inbound"}
        )
        == 1.0
    )


def test_deferred_results_continue_the_chain_when_they_fire(registry: CollectorRegistry) -> None:
    pending: list[Deferred[Message]] = []

    def later(message: Message) -> Deferred[Message]:
        d: Deferred[Message] = Deferred()
        pending.append(d)
        message.properties["async"] = True
        return d

    chains = chains_for(
        [Tag("a"), Returns("slow", later), Tag("b")],
        [{"transformer": "a"}, {"transformer": "slow"}, {"transformer": "b"}],
        registry,
    )
    message = text()
    d = chains.run(message, INBOUND)
    results: list[Outcome] = []
    d.addCallback(results.append)
    assert results == []
    (waiting,) = pending
    copy = message.copy()
    copy.properties["given-back"] = True
    waiting.callback(copy)
    (outcome,) = results
    assert isinstance(outcome, Deliver)
    assert outcome.message.properties == {"trail": "b", "given-back": True}


def test_already_fired_deferreds_and_coroutines_are_results(registry: CollectorRegistry) -> None:
    async def coroutine(message: Message) -> Message:
        message.properties["coro"] = True
        return message

    chains = chains_for(
        [Returns("fired", succeed), Returns("coro", coroutine)],
        [{"transformer": "fired"}, {"transformer": "coro"}],
        registry,
    )
    outcome = result_of(chains.run(text(), INBOUND))
    assert isinstance(outcome, Deliver)
    assert outcome.message.properties == {"coro": True}
    # coroutines are driven by Deferred.fromCoroutine: no asyncio event loop involved
    chains = chains_for(
        [Returns("fired-drop", lambda m: succeed(Drop("x")))], [{"transformer": "fired-drop"}], registry
    )
    assert result_of(chains.run(text(), INBOUND)) == Dropped("x", "fired-drop")


def boom(message: Message) -> Message:
    message.properties["half-done"] = True
    raise RuntimeError("kaput")


def test_reject_is_the_default_policy(registry: CollectorRegistry, log_events: list[dict[str, Any]]) -> None:
    after = Tag("after")
    chains = chains_for(
        [Tag("a"), Returns("boom", boom), after],
        [{"transformer": "a"}, {"transformer": "boom"}, {"transformer": "after"}],
        registry,
    )
    outcome = result_of(chains.run(text(), INBOUND))
    assert isinstance(outcome, Rejected)
    assert outcome.error.transformer == "boom"
    assert "transformer 'boom' (plugin 'testplugin') failed: kaput" in str(outcome.error)
    assert after.seen == []
    assert failures(registry, "boom", "reject") == 1.0
    (event,) = [e for e in log_events if e.get("transformer") == "boom"]
    assert event["plugin"] == "testplugin"
    assert event["message_id"] == "ID:test-1"
    assert event["policy"] == "reject"
    assert isinstance(event["log_failure"].value, RuntimeError)  # unexpected errors keep their traceback


def test_transform_errors_keep_their_message(registry: CollectorRegistry, log_events: list[dict[str, Any]]) -> None:
    def refuse(message: Message) -> Message:
        raise TransformError("body is not JSON")

    chains = chains_for([Returns("json", refuse)], [{"transformer": "json"}], registry)
    outcome = result_of(chains.run(text(), INBOUND))
    assert isinstance(outcome, Rejected)
    assert str(outcome.error) == "transformer 'json' (plugin 'testplugin') failed: body is not JSON"
    (event,) = [e for e in log_events if e.get("transformer") == "json"]
    assert "log_failure" not in event


def test_dead_letter_sends_the_message_as_it_arrived(registry: CollectorRegistry) -> None:
    chains = chains_for(
        [Tag("a"), Returns("boom", boom)],
        [{"transformer": "a"}, {"transformer": "boom", "on_error": "dead-letter", "dead_letter": "/queue/DLQ.t"}],
        registry,
    )
    original = text(keep="me")
    outcome = result_of(chains.run(original, INBOUND))
    assert isinstance(outcome, DeadLettered)
    assert outcome.destination == "/queue/DLQ.t"
    dead = outcome.message
    assert dead.destination == "/queue/DLQ.t"
    assert isinstance(dead, TextMessage) and dead.text == "hello"
    assert dead.properties["keep"] == "me"
    assert "trail" not in dead.properties and "half-done" not in dead.properties
    assert "kaput" in str(dead.properties[DEAD_LETTER_CAUSE])
    assert dead.properties[DEAD_LETTER_TRANSFORMER] == "boom"
    assert dead.properties[ORIGINAL_DESTINATION] == "/queue/orders.new"
    assert original.properties == {"keep": "me"}
    assert failures(registry, "boom", "dead-letter") == 1.0


def test_skip_goes_on_with_the_message_from_before_the_failure(registry: CollectorRegistry) -> None:
    chains = chains_for(
        [Tag("a"), Returns("boom", boom), Tag("b")],
        [{"transformer": "a"}, {"transformer": "boom", "on_error": "skip"}, {"transformer": "b"}],
        registry,
    )
    outcome = result_of(chains.run(text(), INBOUND))
    assert isinstance(outcome, Deliver)
    assert outcome.message.properties == {"trail": "a,b"}
    assert failures(registry, "boom", "skip") == 1.0


def test_drop_policy(registry: CollectorRegistry) -> None:
    chains = chains_for([Returns("boom", boom)], [{"transformer": "boom", "on_error": "drop"}], registry)
    outcome = result_of(chains.run(text(), OUTBOUND))
    assert isinstance(outcome, Dropped)
    assert outcome.transformer == "boom"
    assert "kaput" in outcome.reason
    assert failures(registry, "boom", "drop", "outbound") == 1.0


def test_failed_deferreds_follow_the_policy(registry: CollectorRegistry) -> None:
    pending: list[Deferred[Message]] = []

    def later(message: Message) -> Deferred[Message]:
        d: Deferred[Message] = Deferred()
        pending.append(d)
        return d

    chains = chains_for(
        [Returns("slow", later), Tag("b")],
        [{"transformer": "slow", "on_error": "skip"}, {"transformer": "b"}],
        registry,
    )
    d = chains.run(text(), INBOUND)
    pending[0].errback(RuntimeError("remote service down"))
    outcome = result_of(d)
    assert isinstance(outcome, Deliver)
    assert outcome.message.properties == {"trail": "b"}
    assert failures(registry, "slow", "skip") == 1.0

    chains = chains_for([Returns("slow", later)], [{"transformer": "slow"}], CollectorRegistry())
    d = chains.run(text(), INBOUND)
    pending[1].errback(TransformError("timeout"))
    outcome = result_of(d)
    assert isinstance(outcome, Rejected)
    assert "timeout" in str(outcome.error)


@pytest.mark.parametrize("junk", [None, "text", 42, Branch("not a message", "/queue/x")])  # type: ignore[arg-type]
def test_invalid_results_are_failures(registry: CollectorRegistry, junk: Any) -> None:
    chains = chains_for([Returns("junk", lambda m: junk)], [{"transformer": "junk"}], registry)
    outcome = result_of(chains.run(text(), INBOUND))
    assert isinstance(outcome, Rejected)
    assert "expected a Message, Drop, Branch or a Deferred of one" in str(outcome.error)
    assert failures(registry, "junk", "reject") == 1.0


def test_transformation_header_runs_first_inbound_and_last_outbound(registry: CollectorRegistry) -> None:
    chains = chains_for([Tag("a"), Tag("named")], [{"transformer": "a"}], registry)
    inbound = TransformContext("inbound", "/queue/orders.new", "/queue/orders.new", transformation="named")
    outbound = TransformContext("outbound", "/queue/orders.new", "/queue/orders.new", transformation="named")
    assert chains.steps_for("inbound", "/queue/x", "named") == ["named", "a"]
    first = result_of(chains.run(text(), inbound))
    last = result_of(chains.run(text(), outbound))
    assert isinstance(first, Deliver) and first.message.properties["trail"] == "named,a"
    assert isinstance(last, Deliver) and last.message.properties["trail"] == "a,named"


def test_activemq_map_json_header_with_builtins(registry: CollectorRegistry) -> None:
    chains = chains_for([], [], registry, builtins=True)
    inbound = TransformContext("inbound", "/queue/m", "/queue/m", transformation="jms-map-json")
    outcome = result_of(chains.run(text('{"a": 1, "b": "x"}'), inbound))
    assert isinstance(outcome, Deliver)
    assert isinstance(outcome.message, MapMessage)
    assert outcome.message.map == {"a": 1, "b": "x"}
    outbound = TransformContext("outbound", "/queue/m", "/queue/m", transformation="jms-map-json")
    back = result_of(chains.run(outcome.message, outbound))
    assert isinstance(back, Deliver) and isinstance(back.message, TextMessage)
    assert back.message.text == '{"map":{"entry":[{"string":"a","int":1},{"string":["b","x"]}]}}'


def test_unknown_transformation_is_rejected(registry: CollectorRegistry) -> None:
    chains = chains_for([Tag("a")], [], registry)
    context = TransformContext("inbound", "/queue/a", "/queue/a", transformation="jms-xml")
    with pytest.raises(TransformError, match="unknown transformation 'jms-xml'; known: a"):
        chains.check_transformation("jms-xml")
    chains.check_transformation("a")
    chains.check_transformation(None)
    assert chains.has_work(context)
    outcome = result_of(chains.run(text(), context))
    assert isinstance(outcome, Rejected)
    assert outcome.error.transformer == "jms-xml"
    assert (
        registry.get_sample_value(
            "jmsgateway_transform_failures_total",
            {"transformer": "jms-xml", "plugin": "", "direction": "inbound", "policy": "reject"},
        )
        == 1.0
    )


def test_transformation_header_can_be_turned_off(registry: CollectorRegistry) -> None:
    chains = chains_for([Tag("a")], [], registry, transformation_header=False)
    context = TransformContext("inbound", "/queue/a", "/queue/a", transformation="a")
    chains.check_transformation("anything")
    outcome = result_of(chains.run(text(), context))
    assert isinstance(outcome, Deliver) and outcome.message.properties == {}


def test_unknown_transformer_in_config_is_a_config_error(registry: CollectorRegistry) -> None:
    with pytest.raises(ConfigError) as info:
        chains_for([Tag("header-map")], [{"transformer": "header-mop"}], registry)
    assert info.value.key == "transform.chain[0].transformer"
    assert "unknown transformer 'header-mop'; did you mean 'header-map'?" in info.value.problem
    with pytest.raises(ConfigError) as info:
        chains_for([Tag("a")], [], registry, options={"zzz": {}})
    assert info.value.key == "transform.options.zzz"


def test_unknown_transformer_names_plugins_that_did_not_load(registry: CollectorRegistry) -> None:
    pm = build_plugin_manager(plugin_dirs=(), blocked=["builtin"], load_entry_points=False)
    config = parse_transform_config({"chain": [{"transformer": "jms-byte"}]}, "gw.toml")
    with pytest.raises(ConfigError, match="not loaded: builtin"):
        TransformChains(pm, config, registry=registry)


def test_transformers_check_their_options_at_startup(registry: CollectorRegistry) -> None:
    chains_for([Picky()], [{"transformer": "picky", "options": {"level": 3}}], registry)
    with pytest.raises(ConfigError) as info:
        chains_for([Picky()], [{"transformer": "picky"}, {"transformer": "picky", "options": {"level": 12}}], registry)
    assert info.value.key == "transform.chain[1].options"
    assert "level must be between 0 and 9" in info.value.problem
    with pytest.raises(ConfigError) as info:
        chains_for([Picky()], [], registry, options={"picky": {"level": -1}})
    assert info.value.key == "transform.options.picky"


def test_chain_cache_is_bounded(registry: CollectorRegistry) -> None:
    config = parse_transform_config({"chain": [{"transformer": "a", "destinations": ["/queue/a.*"]}]}, "")
    chains = TransformChains(fresh_pm(Tag("a")), config, registry=registry, cache_size=3)
    for index in range(10):
        assert chains.steps_for("inbound", f"/queue/a.{index}") == ["a"]
        assert chains.steps_for("inbound", f"/queue/b.{index}") == []
    assert len(chains._cache) <= 3


def test_two_chains_share_one_registry() -> None:
    registry = CollectorRegistry()
    chains_for([Tag("a")], [], registry)
    chains_for([Tag("a")], [], registry)  # counters are created once per registry


def test_bad_direction_is_a_programming_error(registry: CollectorRegistry) -> None:
    chains = chains_for([], [], registry)
    with pytest.raises(ValueError, match="direction"):
        chains.steps_for("sideways", "/queue/a")


@pytest.mark.parametrize(
    ("message", "deliverable"),
    [
        (TextMessage(text="x"), True),
        (BytesMessage(body=b"x"), True),
        (MapMessage(map={"a": 1}), False),
        (Message(), False),
    ],
)
def test_glassfish_rule(message: Message, deliverable: bool) -> None:
    assert is_stomp_deliverable(message) is deliverable


def never(message: Message) -> Deferred[Message]:
    return Deferred()


def test_slow_asynchronous_transformers_time_out(registry: CollectorRegistry) -> None:
    clock = Clock()
    chains = chains_for(
        [Returns("stuck", never), Tag("b")],
        [{"transformer": "stuck", "timeout": 2.5}, {"transformer": "b"}],
        registry,
        clock=clock,
    )
    results: list[Outcome] = []
    chains.run(text(), INBOUND).addCallback(results.append)
    clock.advance(2.4)
    assert results == []
    clock.advance(0.2)
    (outcome,) = results
    assert isinstance(outcome, Rejected)
    assert str(outcome.error) == "transformer 'stuck' (plugin 'testplugin') timed out after 2.5s"
    assert failures(registry, "stuck", "reject") == 1.0
    assert clock.getDelayedCalls() == []


def test_section_timeout_applies_and_zero_means_no_limit(registry: CollectorRegistry) -> None:
    clock = Clock()
    chains = chains_for(
        [Returns("stuck", never)],
        [{"transformer": "stuck", "on_error": "skip"}, {"transformer": "stuck", "timeout": 0}],
        registry,
        clock=clock,
        timeout=1,
    )
    results: list[Outcome] = []
    chains.run(text(), INBOUND).addCallback(results.append)
    clock.advance(1)
    assert results == []  # the first one timed out (skipped), the second one waits without limit
    assert failures(registry, "stuck", "skip") == 1.0
    assert clock.getDelayedCalls() == []


def test_header_transformer_options_are_checked(registry: CollectorRegistry) -> None:
    chains = chains_for([Picky()], [], registry, options={"picky": {"level": 3}})
    context = TransformContext("inbound", "/queue/a", "/queue/a", transformation="picky")
    assert isinstance(result_of(chains.run(text(), context)), Deliver)

    @implementer(IConfigurableTransformer)
    class NeedsOptions(Picky):
        name = "needs"

        def check_options(self, options: dict[str, Any]) -> None:
            if "property" not in options:
                raise ValueError("property is required")

    chains = chains_for([NeedsOptions()], [], CollectorRegistry())
    context = TransformContext("inbound", "/queue/a", "/queue/a", transformation="needs")
    outcome = result_of(chains.run(text(), context))
    assert isinstance(outcome, Rejected)
    assert "transformation 'needs' cannot run with its [transform.options]: property is required" in str(outcome.error)


def test_passes_through_only_when_no_entry_and_no_header_applies(registry: CollectorRegistry) -> None:
    idle = chains_for([Tag("a")], [], registry)
    assert idle.passes_through("inbound", None) and idle.passes_through("outbound", None)
    assert not idle.passes_through("inbound", "a")  # a SEND naming a transformer still runs it
    outbound_only = chains_for([Tag("a")], [{"transformer": "a", "direction": "outbound"}], CollectorRegistry())
    assert outbound_only.passes_through("inbound", None) and not outbound_only.passes_through("outbound", None)
    header_off = chains_for([Tag("a")], [], CollectorRegistry(), transformation_header=False)
    assert header_off.passes_through("inbound", "a")


def with_object(message: Message) -> Message:
    message.properties["x-object"] = object()  # type: ignore[assignment]
    return message


def with_int_name(message: Message) -> Message:
    message.properties[7] = "seven"  # type: ignore[index]
    return message


@pytest.mark.parametrize(("make", "problem"), [
    (with_object, "property 'x-object' holding a object"),
    (with_int_name, "a property named 7 (a int, not a string)"),
    (lambda message: Branch(with_object(message), "/queue/elsewhere"), "property 'x-object' holding a object"),
    (lambda message: succeed(with_object(message)), "property 'x-object' holding a object"),
])
def test_a_property_no_message_can_carry_fails_the_step_that_set_it(
        registry: CollectorRegistry, make: Callable[[Message], Any], problem: str) -> None:
    """Before: passed on, so the store answered `message store failure`, a name that is not a string
    an `internal error`, and a MESSAGE header showed `<object object at 0x...>`; none named the
    transformer."""
    chains = chains_for([Returns("bad", make)], [{"transformer": "bad"}], registry)
    outcome = result_of(chains.run(text(), INBOUND))
    assert isinstance(outcome, Rejected), outcome
    assert outcome.error.transformer == "bad"
    assert f"transformer 'bad' (plugin 'testplugin') returned a message with {problem}" in str(outcome.error)
    assert failures(registry, "bad", "reject") == 1.0


def test_under_skip_a_bad_property_leaves_the_message_as_it_was(registry: CollectorRegistry) -> None:
    chains = chains_for([Returns("bad", with_object)], [{"transformer": "bad", "on_error": "skip"}], registry)
    outcome = result_of(chains.run(text(keep="yes"), INBOUND))
    assert isinstance(outcome, Deliver)
    assert outcome.message.properties == {"keep": "yes"}


def test_plain_property_values_pass(registry: CollectorRegistry) -> None:
    def fine(message: Message) -> Message:
        message.properties.update({"s": "x", "i": 1, "f": 1.5, "b": True, "y": b"\x00", "n": None})
        return message

    chains = chains_for([Returns("fine", fine)], [{"transformer": "fine"}], registry)
    outcome = result_of(chains.run(text(), INBOUND))
    assert isinstance(outcome, Deliver) and outcome.message.properties["y"] == b"\x00"


def test_failures_are_logged_ten_per_transformer_and_window_then_counted_only(
        registry: CollectorRegistry, log_events: list[dict[str, Any]]) -> None:
    """Before: every failure was a log line (with a traceback for an unexpected exception): under
    `skip` one client's 2,000 SENDs wrote 1.5 MB of log."""
    clock = Clock()
    chains = chains_for([Returns("boom", boom)], [{"transformer": "boom", "on_error": "skip"}], registry,
                        clock=clock)
    for _ in range(25):
        assert isinstance(result_of(chains.run(text(), INBOUND)), Deliver)
    assert failures(registry, "boom", "skip") == 25.0
    mine = [event for event in log_events if event.get("transformer") == "boom"]
    assert len(mine) == 11
    assert all("log_failure" in event for event in mine[:10])
    assert "failed more than 10 times (inbound) within 10s" in formatEvent(mine[10])
    clock.advance(10)
    result_of(chains.run(text(), INBOUND))
    assert len([event for event in log_events if event.get("transformer") == "boom"]) == 12
