"""``/status`` for a non-administrator lists only the destinations its role shows it (docs/admin.md):
:func:`gateway.admin.resources.status_shown` on the embedded broker's status.

The leak this closes was found by tests/integration/test_feature_authorization_attacks.py: a viewer
read every queue's name and depth (``/queue/secret.<tag>``) and every durable subscription's key
(other logins' client ids) on ``/status``, while the console showed it only its own.
"""

from __future__ import annotations

from typing import Any

from gateway.admin.resources import status_shown


def broker_status() -> dict[str, Any]:
    return {
        "memory": {"used": 10, "blocked": ["/queue/secret.a", "/queue/public.a"]},
        "queues": {"/queue/secret.a": {"pending": 3}, "/queue/public.a": {"pending": 1},
                   "/remote-temp-queue/jmsgw-1.x": {"pending": 0}},
        "durables": {"alice-client:orders": {"pending": 2, "active": True}},
        "topics": {"/topic/secret.t": 1, "/topic/public.t": 2},
        "paging": {"/queue/secret.a": {"paged": 0}, "alice-client:orders": {"paged": 0}},
        "scheduled": {"waiting": 0, "delivered": 0},
    }


def test_a_non_administrator_sees_only_its_destinations() -> None:
    shown = status_shown(broker_status(), lambda name: "public" in name)
    assert shown["queues"] == {"/queue/public.a": {"pending": 1}}
    assert shown["topics"] == {"/topic/public.t": 2}
    assert shown["paging"] == {}
    assert shown["durables"] == {}
    assert shown["memory"] == {"used": 10, "blocked": ["/queue/public.a"]}
    assert shown["scheduled"] == {"waiting": 0, "delivered": 0}


def test_other_connectors_status_is_left_as_it_is() -> None:
    kafka = {"state": "connected", "records_in_flight": 0}
    assert status_shown(kafka, lambda name: False) == kafka
    assert status_shown("unknown", lambda name: False) == "unknown"
