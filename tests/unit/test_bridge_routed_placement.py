"""Defect 4 of issue 32 at the router: what a copy becomes in a bridge's Kafka transaction
(``KafkaRouter.place_in_transaction``) follows the route's ``on_soft_failure`` as a send does."""

from __future__ import annotations

import pytest

from gateway.errors import ConnectorError
from gateway.routing.service import RouteStopped
from tests.unit.test_routing_service import make, message, sample


def test_a_routed_copy_becomes_the_routes_record() -> None:
    router, *_ = make()
    target = router.transactional_target("/queue/foo")
    assert not isinstance(target, str), target
    _, topic, key, place = target
    assert (topic, key) == ("foo-topic", "msg.header.CorrelationId")
    record = place(message("/queue/foo"))
    assert record is not None and record[0] == "foo-topic" and record[1] == b"k1"


def test_skip_leaves_the_copy_out() -> None:
    router, _, _, registry = make("routes.foo.on-soft-failure=skip\n")
    assert router.place_in_transaction(message("/queue/foo", correlation=None)) is None
    assert sample(registry, "jmsgateway_routing_skipped_total", route="foo") == 1


def test_dead_letter_puts_the_dead_letter_record_in_the_transaction() -> None:
    router, kafka, _, registry = make("routing.on-soft-failure=dead-letter\n")
    record = router.place_in_transaction(message("/queue/foo", correlation=None))
    assert record is not None and record[0] == "dlq"
    assert kafka.sent == [], "not published on its own: it commits with the batch"
    assert sample(registry, "jmsgateway_routing_dead_lettered_total", route="foo") == 1


def test_stop_stops_the_route_and_no_retry_helps() -> None:
    router, *_ = make()
    with pytest.raises(RouteStopped) as stopped:
        router.place_in_transaction(message("/queue/foo", correlation=None))
    assert isinstance(stopped.value, ConnectorError) and stopped.value.permanent and not stopped.value.in_doubt
    assert "foo" in router.stopped_routes
    with pytest.raises(RouteStopped):
        router.place_in_transaction(message("/queue/foo"))
