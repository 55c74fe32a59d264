"""A composite destination (``/queue/a,/queue/b``) is judged on every part by the authorizer itself,
and the admin console refuses it for every action and every role.

The hole this closes was found by tests/integration/test_feature_authorization_attacks.py: an
operator with ``write`` on ``/queue/olga.*`` only sent a console test message to
``/queue/olga.x,/queue/secret.x`` (the glob ``*`` matched the comma and the second part) and it
reached ``/queue/secret.x``; the same held for a planted dead letter's ``original-destination``.
"""

from __future__ import annotations

import pytest

from gateway.admin.permissions import ConsoleAccess, Forbidden
from gateway.admin.roles import Principal
from gateway.security.authorization import DestinationAuthorizer, parse_authorization


def authorizer() -> DestinationAuthorizer:
    return DestinationAuthorizer(parse_authorization([
        {"destination": "/queue/olga.*", "read": ["olga"], "write": ["olga"], "admin": ["olga"]},
        {"destination": "/queue/shared.*", "write": ["olga"]},
    ], {}))


@pytest.mark.parametrize(("destination", "allowed"), [
    ("/queue/olga.x,/queue/secret.x", False),
    ("/queue/olga.x,secret.x", False),            # (a part without a prefix is a queue too)
    ("/queue/olga.x, /queue/olga.y", True),
    ("/queue/olga.x,/queue/shared.y", True),      # two entries, one per part
    ("/queue/olga.x,,/queue/olga.y", False),      # not a composite the gateway takes
    ("/queue/olga.x,/remote-temp-queue/s.x", True),  # (replies are open without /remote-temp- entries)
])
def test_the_authorizer_judges_every_part(destination: str, allowed: bool) -> None:
    assert authorizer().permits("olga", "write", destination) is allowed


@pytest.mark.parametrize("role", ["operator", "administrator"])
@pytest.mark.parametrize("action", ["send", "browse", "purge", "delete", "move", "create_queue", "delete_queue"])
def test_the_console_refuses_a_composite_to_everyone(role: str, action: str) -> None:
    access = ConsoleAccess(authorizer())
    principal = Principal("olga", role)  # type: ignore[arg-type]
    with pytest.raises(Forbidden, match="composite destination"):
        access.require(principal, action, "/queue/olga.x,/queue/olga.y")  # type: ignore[arg-type]
    with pytest.raises(Forbidden, match="composite destination"):
        access.require_write(principal, "/queue/olga.x,/queue/secret.x")
    assert access.refusal(principal, action, "/queue/olga.x") is None  # type: ignore[arg-type]
