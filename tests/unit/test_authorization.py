"""``[[authorization]]`` entries, the failed-login throttle and password hashes, and the STOMP
session asking them (StringTransport with a Clock)."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry
from twisted.internet.task import Clock
from twisted.logger import Logger, formatEvent
from zope.interface.verify import verifyObject

from gateway.broker.broker import EmbeddedBroker
from gateway.config import parse_config
from gateway.errors import ConfigError
from gateway.interfaces import IAuthorizer, Permission
from gateway.message.destinations import destination_matches
from gateway.routing.destination_map import DestinationMap
from gateway.security.auth import build_portal
from gateway.security.authorization import (
    AuthorizationEntry,
    DestinationAuthorizer,
    build_authorizer,
    parse_authorization,
    parse_groups,
)
from gateway.security.login_throttle import LoginThrottle
from gateway.security.passwords import hash_password, is_hashed, password_matches
from gateway.security.settings import AuthSettings
from gateway.stomp.protocol import StompServerFactory
from tests.support.log_events import observer as log_observer
from tests.unit.test_session import Peer, connect

GROUPS = {"ops": ["alice", "olga"], "audit": ["bob"]}
ENTRIES = [
    {"destination": "/queue/orders.*", "read": ["group:ops", "group:audit"], "write": ["group:ops"],
     "admin": ["alice"]},
    {"destination": "/topic/prices.*", "read": ["*"], "write": ["user:carol"]},
    {"destination": "/queue/orders.eu", "write": ["bob"]},
]


def authorizer(entries: list[Any] | None = None, registry: CollectorRegistry | None = None
               ) -> DestinationAuthorizer:
    groups = parse_groups(GROUPS)
    return DestinationAuthorizer(parse_authorization(ENTRIES if entries is None else entries, groups), groups,
                                 registry)


@pytest.mark.parametrize(("destination", "pattern", "expected"), [
    ("/queue/orders.eu", "/queue/orders.*", True),
    ("/queue/orders", "/queue/orders.*", False),
    ("/queue/orders.eu.x", "/queue/orders.*", True),  # a glob: * crosses dots (as [[destinations]])
    ("/queue/Orders.eu", "/queue/orders.*", False),  # case-sensitive
    ("/topic/a", "/*", True),
    ("/queue/a1", "/queue/a?", True),
    ("/queue/ab", "/queue/a[0-9]", False),
])
def test_matcher(destination: str, pattern: str, expected: bool) -> None:
    assert destination_matches(destination, pattern) is expected


def test_permits_matrix() -> None:
    auth = authorizer()
    assert verifyObject(IAuthorizer, auth)
    cases: dict[tuple[str, Permission, str], bool] = {
        ("alice", "read", "/queue/orders.us"): True,
        ("alice", "write", "/queue/orders.us"): True,
        ("alice", "admin", "/queue/orders.us"): True,
        ("olga", "admin", "/queue/orders.us"): False,
        ("bob", "read", "/queue/orders.us"): True,
        ("bob", "write", "/queue/orders.us"): False,
        ("bob", "write", "/queue/orders.eu"): True,  # entries add up
        ("carol", "read", "/queue/orders.us"): False,
        ("carol", "write", "/topic/prices.x"): True,
        ("dave", "read", "/topic/prices.x"): True,  # "*": any login
        ("dave", "write", "/topic/prices.x"): False,
        ("alice", "read", "/queue/other"): False,  # no entry matches: denied
    }
    for (login, permission, destination), expected in cases.items():
        assert auth.permits(login, permission, destination) is expected, (login, permission, destination)
        assert auth.permits(login, permission, destination) is expected  # (cached)
    assert not auth.permits(None, "read", "/topic/prices.x")


def test_no_entries_allow_everything() -> None:
    auth = authorizer([])
    assert not auth.enabled
    assert auth.permits(None, "admin", "/queue/anything")
    assert auth.permits("x", "write", "/topic/y")


def test_replies_to_temporary_destinations() -> None:
    assert authorizer().permits("carol", "write", "/remote-temp-queue/jmsgw-1.a")
    guarded = authorizer([*ENTRIES, {"destination": "/remote-temp-queue/*", "write": ["group:ops"]}])
    assert guarded.permits("alice", "write", "/remote-temp-queue/jmsgw-1.a")
    assert not guarded.permits("carol", "write", "/remote-temp-queue/jmsgw-1.a")


def test_check_counts_and_logs_refusals() -> None:
    registry = CollectorRegistry()
    auth = authorizer(registry=registry)
    assert auth.check("alice", "write", "/queue/orders.x", "127.0.0.1:5")
    assert not auth.check("carol", "write", "/queue/orders.x", "127.0.0.1:5")
    assert not auth.check("carol", "read", "/queue/orders.x")
    assert not auth.check("carol", "read", "/queue/orders.x")
    value = registry.get_sample_value
    assert value("jmsgateway_authorization_denied_total", {"permission": "write"}) == 1
    assert value("jmsgateway_authorization_denied_total", {"permission": "read"}) == 2
    assert value("jmsgateway_authorization_denied_total", {"permission": "admin"}) == 0


@pytest.mark.parametrize(("entries", "key", "problem"), [
    ([{"destination": "/queue/a", "raed": ["x"]}], "authorization[0].raed", "did you mean 'read'"),
    ([{"read": ["x"]}], "authorization[0].destination", "destination pattern"),
    ([{"destination": "queue/a"}], "authorization[0].destination", "destination pattern"),
    ([{"destination": "/queue/a", "read": ["group:opps"]}], "authorization[0].read[0]", "did you mean 'ops'"),
    ([{"destination": "/queue/a", "write": [3]}], "authorization[0].write[0]", "expected a login"),
    ([{"destination": "/queue/a", "admin": ["team:x"]}], "authorization[0].admin[0]", "group:NAME"),
    (["x"], "authorization[0]", "expected a table"),
])
def test_bad_entries(entries: list[object], key: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_authorization(entries, parse_groups(GROUPS), "gw.toml")
    assert caught.value.key == key
    assert problem in str(caught.value)


def test_config_sections() -> None:
    config = parse_config({"auth": {"users": {"a": "b"}, "groups": {"ops": ["a"]}},
                           "authorization": [{"destination": "/queue/*", "read": ["group:ops"]}]})
    auth = build_authorizer(config.auth, config.authorization, has_users=True)
    assert auth.permits("a", "read", "/queue/x")
    with pytest.raises(ConfigError, match="need logins"):
        build_authorizer(config.auth, config.authorization, has_users=False)
    with pytest.raises(ConfigError, match="list of logins"):
        parse_groups({"ops": "a"})


# -- passwords -----------------------------------------------------------------


def test_password_hashes() -> None:
    hashed = hash_password("s3cret ü", rounds=4)
    assert is_hashed(hashed)
    assert password_matches("s3cret ü".encode(), hashed)
    assert not password_matches(b"s3cret", hashed)
    assert password_matches(b"plain", "plain")
    assert not password_matches(b"plain2", "plain")
    with pytest.raises(ValueError, match="72 bytes"):
        hash_password("x" * 73)


def test_plain_text_refused_when_not_allowed() -> None:
    with pytest.raises(ConfigError, match="allow_plaintext") as caught:
        build_portal(AuthSettings(users={"alice": "secret"}, allow_plaintext=False, allow_weak_passwords=True))
    assert caught.value.key == "auth.users.alice"
    assert build_portal(AuthSettings(users={"alice": hash_password("secret", rounds=4)}, allow_plaintext=False,
                                     allow_weak_passwords=True))


# -- the failed-login throttle -----------------------------------------------------


def test_throttle_locks_out_after_failures_with_a_growing_delay() -> None:
    clock = Clock()
    registry = CollectorRegistry()
    throttle = LoginThrottle(clock, max_failures=3, window=60, lockout=10, registry=registry)
    for _ in range(2):
        throttle.login_failed("10.0.0.1")
        clock.advance(1)
    assert throttle.refusal("10.0.0.1") is None
    throttle.login_failed("10.0.0.1")
    refusal = throttle.refusal("10.0.0.1")
    assert refusal is not None and "too many failed logins" in refusal
    assert throttle.refusal("10.0.0.2") is None  # per address
    clock.advance(10)
    assert throttle.refusal("10.0.0.1") is None
    for _ in range(3):
        throttle.login_failed("10.0.0.1")
    clock.advance(19)
    assert throttle.refusal("10.0.0.1") is not None  # the second lockout lasts 20 s
    clock.advance(1)
    assert throttle.refusal("10.0.0.1") is None
    throttle.login_succeeded("10.0.0.1", "alice")  # forgives alice's failures only: the next lockout is longer
    assert throttle.addresses["10.0.0.1"].lockouts == 2
    assert registry.get_sample_value("jmsgateway_stomp_logins_failed_total") == 6
    assert registry.get_sample_value("jmsgateway_stomp_logins_refused_total") == 2


def test_throttle_is_shared_by_stomp_and_admin_logins_and_counts_each_kind() -> None:
    clock = Clock()
    registry = CollectorRegistry()
    throttle = LoginThrottle(clock, max_failures=3, window=60, lockout=10, registry=registry)
    throttle.login_failed("10.0.0.1", "admin")
    throttle.login_failed("10.0.0.1")
    throttle.login_failed("10.0.0.1", "admin")  # failures add up across listener kinds
    seconds = throttle.locked_for("10.0.0.1", "admin")
    assert seconds == 10
    assert throttle.refusal("10.0.0.1") is not None  # the STOMP side is locked out too
    sample = registry.get_sample_value
    assert (sample("jmsgateway_admin_logins_failed_total"), sample("jmsgateway_admin_logins_refused_total")) == (2, 1)
    assert (sample("jmsgateway_stomp_logins_failed_total"), sample("jmsgateway_stomp_logins_refused_total")) == (1, 1)


def test_throttle_forgets_failures_outside_the_window() -> None:
    clock = Clock()
    throttle = LoginThrottle(clock, max_failures=3, window=60, lockout=10)
    for _ in range(5):
        throttle.login_failed("10.0.0.1")
        clock.advance(31)
    assert throttle.refusal("10.0.0.1") is None


# -- the session -------------------------------------------------------------------


def secured_factory(clock: Clock, broker: EmbeddedBroker, **throttle: float) -> StompServerFactory:
    users = {"alice": "a", "bob": "b", "carol": "c"}
    return StompServerFactory(clock, DestinationMap({"embedded": broker}),
                              portal=build_portal(AuthSettings(users=users, allow_weak_passwords=True)),
                              authorizer=authorizer(),
                              throttle=LoginThrottle(clock, **throttle))  # type: ignore[arg-type]


def test_refused_send_keeps_the_connection(clock: Clock, broker: EmbeddedBroker) -> None:
    factory = secured_factory(clock, broker)
    carol = Peer(factory)
    assert connect(carol, login="carol", passcode="c").command == "CONNECTED"
    carol.send("SEND", {"destination": "/queue/orders.us", "receipt": "r1"}, b"x")
    [error] = carol.received()
    assert error.command == "ERROR"
    assert error.headers["message"] == "not authorized to write /queue/orders.us"
    assert error.headers["receipt-id"] == "r1"
    assert b"'write' permission on /queue/orders.us" in error.body
    assert not carol.closed
    carol.send("SEND", {"destination": "/topic/prices.x", "receipt": "r2"}, b"y")
    assert [f.command for f in carol.received()] == ["RECEIPT"]
    alice = Peer(factory)
    connect(alice, login="alice", passcode="a")
    alice.send("SUBSCRIBE", {"destination": "/queue/orders.us", "id": "1", "receipt": "r3"})
    assert [f.command for f in alice.received()] == ["RECEIPT"]  # nothing was stored


def test_refused_subscribe_and_durable_needs_admin(clock: Clock, broker: EmbeddedBroker) -> None:
    factory = secured_factory(clock, broker)
    carol = Peer(factory)
    connect(carol, login="carol", passcode="c")
    carol.send("SUBSCRIBE", {"destination": "/queue/orders.us", "id": "1", "receipt": "r1"})
    [error] = carol.received()
    assert error.headers["message"] == "not authorized to read /queue/orders.us"
    assert not carol.closed and not carol.protocol.session.subscriptions  # type: ignore[union-attr]
    bob = Peer(factory)
    connect(bob, login="bob", passcode="b")
    bob.send("SUBSCRIBE", {"destination": "/queue/orders.us", "id": "1", "activemq.subscriptionName": "d"})
    assert bob.received()[0].headers["message"] == "not authorized to admin /queue/orders.us"
    bob.send("SUBSCRIBE", {"destination": "/queue/orders.us", "id": "1", "receipt": "r2"})
    assert [f.command for f in bob.received()] == ["RECEIPT"]
    # a connection's own temporary queue needs no entry
    bob.send("SUBSCRIBE", {"destination": "/temp-queue/replies", "id": "2", "receipt": "r3"})
    bob.send("SEND", {"destination": "/temp-queue/replies", "receipt": "r4"}, b"z")
    assert sorted(f.command for f in bob.received()) == ["MESSAGE", "RECEIPT", "RECEIPT"]


def test_lockout_refuses_even_the_right_password(clock: Clock, broker: EmbeddedBroker) -> None:
    factory = secured_factory(clock, broker, max_failures=2, window=60, lockout=5)
    for _ in range(2):
        peer = Peer(factory)
        assert connect(peer, login="alice", passcode="wrong").headers["message"] == "authentication failed"
    locked = Peer(factory)
    error = connect(locked, login="alice", passcode="a")
    assert error.headers["message"] == "too many failed logins"
    assert locked.closed
    clock.advance(5)
    assert connect(Peer(factory), login="alice", passcode="a").command == "CONNECTED"


def test_users_and_password_file_are_both_checked(tmp_path: object) -> None:
    from pathlib import Path

    from twisted.cred.credentials import UsernamePassword

    from gateway.interfaces import IStompUser

    password_file = Path(str(tmp_path)) / "passwords"
    password_file.write_text("# comment\nbob:from-file\n\n")
    portal = build_portal(AuthSettings(users={"alice": "from-config"}, password_file=str(password_file),
                                              allow_weak_passwords=True))
    assert portal is not None
    outcomes: list[object] = []
    for login, password in (("alice", "from-config"), ("bob", "from-file"), ("bob", "nope")):
        d = portal.login(UsernamePassword(login.encode(), password.encode()), None, IStompUser)
        d.addCallbacks(lambda result: outcomes.append(result[1].login), lambda failure: outcomes.append(None))
    assert outcomes == ["alice", "bob", None]


def test_refusals_are_logged_ten_per_origin_and_window_then_counted_only() -> None:
    """Before: every refusal was a log line with the whole name, and a refused SEND keeps its
    connection, so one client wrote a 4 KiB line a frame (771 KB for 3,000 SENDs, twistd rotating)."""
    registry = CollectorRegistry()
    clock = Clock()
    auth = DestinationAuthorizer([AuthorizationEntry("/queue/a", write=frozenset({"user:alice"}))],
                                 registry=registry, clock=clock.seconds)
    events: list[dict[str, Any]] = []
    auth.log = Logger(observer=log_observer(events.append))
    for index in range(25):
        assert not auth.check("carol", "write", f"/queue/x.{'y' * 5000}.{index}", "10.0.0.1:1")
    assert not auth.check("carol", "write", "/queue/x", "10.0.0.2:1")  # another connection: its own ten
    assert registry.get_sample_value("jmsgateway_authorization_denied_total", {"permission": "write"}) == 26
    texts = [formatEvent(event) for event in events]
    assert len(texts) == 12
    assert all(len(text) < 400 for text in texts), max(texts, key=len)
    assert "(5011 characters)" in texts[0]
    assert "more than 10 refusals from 10.0.0.1:1 within 10s" in texts[10] and "not logged" in texts[10]
    assert texts[11].endswith("may not write /queue/x")
    clock.advance(10)
    assert not auth.check("carol", "write", "/queue/x", "10.0.0.1:1")
    assert len(events) == 13  # a new window: logged again
