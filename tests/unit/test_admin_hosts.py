"""The Host and Origin headers the admin endpoint answers (issue 33 #8, DNS rebinding)."""

from __future__ import annotations

import socket

import pytest

from gateway.admin.hosts import HostPolicy, default_hosts, listener_interface, split_host
from gateway.admin.settings import parse_admin_settings
from gateway.errors import ConfigError


@pytest.mark.parametrize(("endpoint", "interface"), [
    ("tcp:8161:interface=127.0.0.1", "127.0.0.1"), ("tcp:8161", ""), ("ssl:8443:interface=\\:\\:1:privateKey=k", "::1"),
    ("tcp:port=8161:interface=10.1.2.3", "10.1.2.3"),
])
def test_listener_interface(endpoint: str, interface: str) -> None:
    assert listener_interface(endpoint) == interface


def test_default_hosts_follow_the_listeners() -> None:
    assert default_hosts(["tcp:8161:interface=127.0.0.1"]) == {"127.0.0.1", "localhost", "::1"}
    assert default_hosts(["tcp:8161:interface=10.1.2.3"]) == {"10.1.2.3"}
    everywhere = default_hosts(["tcp:8161"])
    assert {"localhost", "127.0.0.1", "::1", socket.gethostname().lower()} <= everywhere


@pytest.mark.parametrize(("header", "split"), [
    ("127.0.0.1:8161", ("127.0.0.1", 8161)), ("LocalHost.", ("localhost", None)), ("[::1]:80", ("::1", 80)),
    ("a@b", None), ("h:x", None), ("h/p", None),
])
def test_split_host(header: str, split: tuple[str, int | None] | None) -> None:
    assert split_host(header) == split


def test_a_foreign_host_is_misdirected() -> None:
    policy = HostPolicy.from_settings(["tcp:8161:interface=127.0.0.1"], None, None)
    assert policy.host_refusal("127.0.0.1:8161") is None
    assert policy.host_refusal("localhost:8161") is None
    assert policy.host_refusal("[::1]:8161") is None
    for bad in ("attacker.example:8161", "attacker.example", "127.0.0.1.attacker.example", None, "", "a@127.0.0.1"):
        assert policy.host_refusal(bad) is not None, bad


def test_origins_default_to_the_endpoints_own() -> None:
    policy = HostPolicy.from_settings(["tcp:0:interface=127.0.0.1"], None, None)
    assert policy.origin_refusal("http://127.0.0.1:8161", False, 8161) is None
    assert policy.origin_refusal("http://localhost:8161", False, 8161) is None
    assert policy.origin_refusal("https://127.0.0.1:8161", False, 8161) is not None  # another scheme
    assert policy.origin_refusal("http://127.0.0.1:8162", False, 8161) is not None  # another port
    assert policy.origin_refusal("http://attacker.example:8161", False, 8161) is not None
    assert policy.origin_refusal("null", False, 8161) is not None


def test_configured_hosts_and_origins() -> None:
    settings = parse_admin_settings({"listen": "tcp:8161", "allowed_hosts": ["admin.example.org"],
                                     "allowed_origins": ["https://admin.example.org"]})
    policy = HostPolicy.from_settings(settings.listen, settings.allowed_hosts, settings.allowed_origins)
    assert policy.host_refusal("admin.example.org:8161") is None
    assert policy.host_refusal("localhost:8161") is not None
    assert policy.origin_refusal("https://admin.example.org:443", True, 8161) is None
    assert policy.origin_refusal("https://admin.example.org:8161", True, 8161) is not None


@pytest.mark.parametrize(("raw", "key"), [
    ({"allowed_hosts": ["admin.example.org:8161"]}, "admin.allowed_hosts"),
    ({"allowed_hosts": ["http://admin"]}, "admin.allowed_hosts"),
    ({"allowed_origins": ["admin.example.org"]}, "admin.allowed_origins"),
    ({"allowed_origins": ["ftp://admin"]}, "admin.allowed_origins"),
    ({"roles": {"alice": "root"}}, "admin.roles.alice"),
    ({"default_role": "guest"}, "admin.default_role"),
])
def test_bad_settings_name_the_key(raw: dict[str, object], key: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_admin_settings(raw, "gw.toml", has_users=True)
    assert caught.value.key == key
