"""A typed Twisted ``DummyRequest`` for the admin and console unit tests.

Twisted's ``DummyRequest`` has ``content`` and ``path`` at run time (set by the
tests as a real request has them), but its stubs do not declare them.
"""

from __future__ import annotations

from typing import IO

from twisted.web.test.requesthelper import DummyRequest


class Request(DummyRequest):
    """``DummyRequest`` with the attributes of a real request the tests set."""

    content: IO[bytes]
    path: bytes
