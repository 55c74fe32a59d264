"""The pure router: first match wins, predicates, keys, soft failures, the origin guard."""

from __future__ import annotations

import pytest

from gateway.message.kafka_records import ERROR_HEADER, ORIGIN_HEADER, ROUTE_HEADER
from gateway.message.model import BytesMessage, MapMessage, Message, TextMessage
from gateway.routing.config import parse_routing_config
from gateway.routing.predicates import compile_predicate
from gateway.routing.router import CYCLE, ROUTED, SOFT_FAILURE, UNROUTED, Router

ROUTES = """
routing.dead-letter-topic=dlq
routes.vip.in.include=msg.header.tier==gold
routes.vip.out.topic=vip-topic
routes.foo.in.include=msg.address==foo-topic
routes.foo.out.topic=foobar-topic
routes.foo.conv.key=msg.header.CorrelationId
routes.any-foo.in.include=msg.address==/topic/foo-topic
routes.any-foo.out.topic=never-topic
routes.red.in.include=color = 'red' AND weight > 2
routes.red.out.topic=red-topic
"""


def router(extra: str = "", origin: str = "gw-1") -> Router:
    return Router(parse_routing_config({"properties": ROUTES + extra}), origin)


def text(destination: str, **properties: object) -> TextMessage:
    return TextMessage(destination=destination, message_id="ID:m-1", text="hello", properties=dict(properties))  # type: ignore[arg-type]


def headers_of(decision: object) -> dict[str, bytes | None]:
    return dict(decision.headers)  # type: ignore[attr-defined]


def test_first_matching_route_wins() -> None:
    message = text("/topic/foo-topic", tier="gold")
    message.correlation_id = "abc"
    decision = router().route(message)
    assert decision.outcome == ROUTED
    assert decision.route_name == "vip" and decision.topic == "vip-topic"


def test_address_predicate_matches_bare_name_or_whole_destination() -> None:
    message = text("/queue/foo-topic")
    message.correlation_id = "c1"
    assert router().route(message).route_name == "foo"  # bare name: queue or topic
    predicate = compile_predicate("msg.address == '/topic/foo-topic'")
    assert predicate.matches(text("/topic/foo-topic"))
    assert not predicate.matches(text("/queue/foo-topic"))


def test_key_comes_from_the_configured_header() -> None:
    message = text("/topic/foo-topic")
    message.correlation_id = "order-42"
    decision = router().route(message)
    assert decision.key == b"order-42"
    assert decision.value == b"hello"
    assert headers_of(decision)["jms.CorrelationId"] == b"order-42"


def test_numeric_key_and_default_message_id_key() -> None:
    numeric = Router(
        parse_routing_config({"properties": "routes.n.in.include=msg.address==n\nroutes.n.out.topic=t\n"
                                             "routes.n.conv.key=msg.header.customer\n"}), "gw")
    assert numeric.route(text("/queue/n", customer=1234)).key == b"1234"
    assert router().route(text("/topic/x", color="red", weight=3)).key == b"ID:m-1"


def test_selector_predicate() -> None:
    decision = router().route(text("/topic/other", color="red", weight=5))
    assert decision.outcome == ROUTED and decision.route_name == "red"
    assert router().route(text("/topic/other", color="red", weight=1)).outcome == UNROUTED


def test_header_predicate_accepts_jms_names_and_quotes() -> None:
    predicate = compile_predicate('msg.header.JMSType == "invoice"')
    message = text("/queue/a")
    message.type = "invoice"
    assert predicate.matches(message)
    assert not predicate.matches(text("/queue/a"))


def test_unrouted_message() -> None:
    assert router().route(text("/topic/nothing")).outcome == UNROUTED


def test_origin_header_is_added_and_own_messages_are_not_routed_back() -> None:
    message = text("/topic/x", color="red", weight=3)
    decision = router().route(message)
    assert headers_of(decision)[ORIGIN_HEADER] == b"gw-1"
    looped = text("/topic/x", color="red", weight=3, **{ORIGIN_HEADER: "gw-1"})
    assert router().route(looped).outcome == CYCLE
    foreign = text("/topic/x", color="red", weight=3, **{ORIGIN_HEADER: "gw-2"})
    assert router().route(foreign).outcome == ROUTED


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (text("/topic/foo-topic"), "no-key"),
        (TextMessage(destination="/topic/foo-topic", message_id="ID:m", correlation_id="has space"),
         "key-not-alphanumeric"),
        (MapMessage(destination="/topic/foo-topic", message_id="ID:m", correlation_id="k1", map={"a": 1}),
         "unsupported-type"),
    ],
)
def test_soft_failures_stop_by_default(message: Message, reason: str) -> None:
    decision = router().route(message)
    assert decision.outcome == SOFT_FAILURE
    assert decision.failure is not None and decision.failure.reason == reason
    assert decision.policy == "stop" and decision.topic is None


def test_soft_failure_dead_letter_policy_builds_the_dead_letter_record() -> None:
    route = router("routes.foo.on-soft-failure=dead-letter\n")
    message = BytesMessage(destination="/topic/foo-topic", message_id="ID:m-9", body=b"\x00\x01")
    decision = route.route(message)
    assert decision.outcome == SOFT_FAILURE and decision.policy == "dead-letter"
    assert decision.topic == "dlq" and decision.key == b"ID:m-9" and decision.value == b"\x00\x01"
    headers = headers_of(decision)
    assert headers[ROUTE_HEADER] == b"foo"
    error = headers[ERROR_HEADER]
    assert error is not None and error.startswith(b"no-key")


def test_soft_failure_skip_policy() -> None:
    decision = router("routes.foo.on-soft-failure=skip\n").route(text("/topic/foo-topic"))
    assert decision.outcome == SOFT_FAILURE and decision.policy == "skip" and decision.topic is None
