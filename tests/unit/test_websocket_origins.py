"""``[gateway] allowed_origins`` (issue 33 #10): which pages may open a STOMP WebSocket."""

from __future__ import annotations

import pytest

from gateway.config import GatewaySection
from gateway.stomp.origins import origin_refusal, parse_allowed, parse_origin


def test_origins_are_normalised() -> None:
    assert parse_origin("HTTPS://App.Example.com") == ("https", "app.example.com", 443)
    assert parse_origin("http://127.0.0.1:8080/") == ("http", "127.0.0.1", 8080)
    for bad in ("app.example.com", "ftp://x", "https://x/path", "https://user@x", "https://x:99999"):
        with pytest.raises(ValueError):
            parse_origin(bad)


@pytest.mark.parametrize(("origin", "host", "secure", "allowed"), [
    (None, "127.0.0.1:61614", False, True),  # not a browser page
    ("http://127.0.0.1:61614", "127.0.0.1:61614", False, True),  # same origin
    ("https://gw.example:443", "gw.example", True, True),
    ("http://attacker.example", "127.0.0.1:61614", False, False),
    ("http://127.0.0.1:8000", "127.0.0.1:61614", False, False),  # another port is another origin
    ("null", "127.0.0.1:61614", False, False),  # a sandboxed page or a file
])
def test_same_origin_by_default(origin: str | None, host: str, secure: bool, allowed: bool) -> None:
    assert (origin_refusal(origin, host, parse_allowed([]), secure) is None) is allowed


def test_a_configured_list_and_any() -> None:
    listed = parse_allowed(["https://app.example.com", "http://localhost:3000"])
    assert origin_refusal("https://app.example.com:443", "gw:61614", listed, True) is None
    assert origin_refusal("http://localhost:3000", "gw:61614", listed, False) is None
    refusal = origin_refusal("http://gw:61614", "gw:61614", listed, False)  # a list replaces same-origin
    assert refusal is not None and "allowed_origins" in refusal
    assert origin_refusal("http://anything.example", "gw", parse_allowed(["*"]), False) is None


def test_a_bad_entry_is_a_config_error() -> None:
    with pytest.raises(ValueError, match="scheme://host"):
        GatewaySection(allowed_origins=["app.example.com"])
