"""The admin endpoint's cross-site check (:mod:`gateway.admin.requests`), header by header."""

from __future__ import annotations

import pytest
from twisted.web.http_headers import Headers

from gateway.admin.requests import cross_site_refusal, same_origin


@pytest.mark.parametrize(("origin", "host", "secure", "same"), [
    ("http://127.0.0.1:8161", "127.0.0.1:8161", False, True),
    ("http://LOCALHOST:8161", "localhost:8161", False, True),
    ("https://admin.example", "admin.example:443", True, True),
    ("http://admin.example", "admin.example", False, True),
    ("http://admin.example", "admin.example", True, False),  # the page is http, the endpoint https
    ("http://127.0.0.1:8162", "127.0.0.1:8161", False, False),
    ("http://evil.example", "127.0.0.1:8161", False, False),
    ("null", "127.0.0.1:8161", False, False),
    ("http://127.0.0.1:99999", "127.0.0.1:8161", False, False),
    ("http://127.0.0.1:8161", "", False, False),
])
def test_same_origin(origin: str, host: str, secure: bool, same: bool) -> None:
    assert same_origin(origin, host, secure) is same


def headers(**values: str) -> Headers:
    return Headers({name.replace("_", "-").encode(): [value.encode()] for name, value in values.items()})


@pytest.mark.parametrize(("method", "given", "refused"), [
    (b"GET", headers(origin="http://evil.example"), False),
    (b"HEAD", headers(), False),
    (b"POST", headers(content_type="application/json"), False),
    (b"POST", headers(content_type="Application/JSON; charset=utf-8"), False),
    (b"POST", headers(x_requested_with="XMLHttpRequest"), False),
    (b"POST", headers(content_type="application/json", origin="http://h:1", host="h:1"), False),
    (b"POST", headers(), True),
    (b"POST", headers(content_type="application/x-www-form-urlencoded"), True),
    (b"POST", headers(content_type="multipart/form-data; boundary=x"), True),
    (b"POST", headers(content_type="text/plain"), True),
    (b"POST", headers(content_type="application/json", origin="http://evil.example", host="h:1"), True),
    (b"DELETE", headers(), True),
])
def test_cross_site_refusal(method: bytes, given: Headers, refused: bool) -> None:
    assert (cross_site_refusal(method, given, secure=False) is not None) is refused


def test_an_origin_allowed_by_the_host_policy_may_take_actions() -> None:
    """``[admin] allowed_origins`` lists a console served elsewhere: its JSON POST is not cross-site
    (the policy judged the Origin); the content type is still required."""
    listed = headers(content_type="application/json", origin="https://console.example", host="gw.example:8161")
    assert cross_site_refusal(b"POST", listed, secure=False) is not None
    assert cross_site_refusal(b"POST", listed, secure=False, origin_allowed=True) is None
    form = headers(content_type="text/plain", origin="https://console.example", host="gw.example:8161")
    assert cross_site_refusal(b"POST", form, secure=False, origin_allowed=True) is not None
