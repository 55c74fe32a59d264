"""What a SUBSCRIBE asks for, checked alone (:func:`gateway.stomp.subscriptions.read_subscribe`),
and the Deferred helper the session's answers rely on."""

from __future__ import annotations

import pytest
from twisted.internet.defer import Deferred, fail, succeed

from gateway.stomp.errors import StompError
from gateway.stomp.receipts import succeeded_already
from gateway.stomp.settings import StompSettings
from gateway.stomp.subscriptions import read_subscribe
from gateway.wire.frame import Frame


def subscribe(**headers: str) -> Frame:
    return Frame("SUBSCRIBE", {"destination": "/queue/a", **headers})


def test_the_defaults_and_the_activemq_headers() -> None:
    request = read_subscribe(subscribe(id="s"), "1.2", StompSettings(), ())
    assert (request.ack_mode, request.selector, request.durable, request.exclusive) == ("auto", None, None, False)
    assert request.prefetch == StompSettings().default_prefetch
    asked = read_subscribe(subscribe(**{"id": "s", "activemq.prefetchSize": "5", "activemq.exclusive": "true",
                                        "activemq.subscriptionName": "d", "selector": "a = 1"}),
                           "1.2", StompSettings(), ())
    assert (asked.prefetch, asked.exclusive, asked.durable, asked.selector) == (5, True, "d", "a = 1")


def test_stomp_1_0_names_the_subscription_by_its_destination() -> None:
    assert read_subscribe(subscribe(), "1.0", StompSettings(), ()).sub_id == "/queue/a"
    with pytest.raises(StompError, match="missing id header"):
        read_subscribe(subscribe(), "1.2", StompSettings(), ())


@pytest.mark.parametrize(("headers", "error"), [
    ({"ack": "sometimes"}, "invalid ack header"),
    ({"selector": "a = = 1"}, "invalid selector"),
    ({"prefetch-count": "0"}, "invalid prefetch-count header"),
    ({"browser": "yes"}, "invalid browser header"),
])
def test_a_bad_header_is_named(headers: dict[str, str], error: str) -> None:
    with pytest.raises(StompError, match=error):
        read_subscribe(subscribe(id="s", **headers), "1.2", StompSettings(), ())


def test_a_duplicate_id_comes_before_the_limit_and_the_limit_holds() -> None:
    with pytest.raises(StompError, match="duplicate subscription id"):
        read_subscribe(subscribe(id="s"), "1.2", StompSettings(max_subscriptions=1), {"s"})
    with pytest.raises(StompError, match="too many subscriptions"):
        read_subscribe(subscribe(id="t"), "1.2", StompSettings(max_subscriptions=1), {"s"})


def test_the_transformation_is_checked_by_the_callers_hook() -> None:
    def unknown(name: str) -> None:
        raise StompError("unknown transformation", name)

    with pytest.raises(StompError, match="unknown transformation"):
        read_subscribe(subscribe(id="s", transformation="nope"), "1.2", StompSettings(), (), unknown)


def test_succeeded_already_tells_without_touching_the_result() -> None:
    done = succeed("value")
    assert succeeded_already(done)
    assert done.result == "value"
    failed = fail(ValueError("no"))
    assert not succeeded_already(failed)
    failed.addErrback(lambda _: None)
    pending: Deferred[str] = Deferred()
    assert not succeeded_already(pending)
    pending.callback("later")
    assert pending.result == "later"
