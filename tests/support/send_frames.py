"""Hypothesis strategies for the differential tests of the SEND shortcuts (JMS and Kafka)."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st


@st.composite
def send_bodies(draw: Any, headers: dict[str, str], *, nul: bool = True) -> bytes:
    """A SEND body: bytes with a ``content-length`` (put in ``headers``), UTF-8 text, or bytes
    that may not be UTF-8 without one; without ``nul`` no NUL byte in a body lacking the length."""
    if draw(st.booleans()):  # a BytesMessage
        body: bytes = draw(st.binary(max_size=40))
        headers["content-length"] = str(len(body))
        return body
    if draw(st.booleans()):
        return str(draw(st.text(max_size=20).filter(lambda text: nul or "\x00" not in text))).encode("utf-8")
    return bytes(draw(st.binary(max_size=20).filter(lambda data: nul or b"\x00" not in data)))  # maybe not UTF-8
