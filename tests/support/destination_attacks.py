"""Helpers for the black-box attacks on the destination features (``tests/integration/test_*_attacks.py``).

Frames built as bytes for pipelining (many frames in one write), draining a queue with a real stomp.py
client, and reading a gateway process' resident memory.
"""

from __future__ import annotations

import queue
from collections.abc import Mapping
from pathlib import Path

from tests.support.raw_stomp import RawStomp
from tests.support.stomp_clients import Client


def send_frame(destination: str, body: str, headers: Mapping[str, str] | None = None) -> bytes:
    """One SEND frame with a content-length, as bytes."""
    data = body.encode()
    lines = [f"destination:{destination}", f"content-length:{len(data)}"]
    lines += [f"{name}:{value}" for name, value in (headers or {}).items()]
    return ("SEND\n" + "\n".join(lines) + "\n\n").encode() + data + b"\x00"


def frame(command: str, headers: Mapping[str, str]) -> bytes:
    """A frame without a body."""
    return (command + "\n" + "".join(f"{name}:{value}\n" for name, value in headers.items()) + "\n\x00").encode()


def pipelined(raw: RawStomp, frames: list[bytes], receipt: str, timeout: float = 30.0) -> list[str]:
    """Write ``frames`` and a last frame asking for ``receipt`` in one write; the commands of every frame the
    server sends back until that RECEIPT (AssertionError on an ERROR or a closed connection)."""
    raw.send(b"".join(frames) + frame("BEGIN", {"transaction": "_noop", "receipt": receipt})
             + frame("ABORT", {"transaction": "_noop"}))
    seen: list[str] = []
    while True:
        answer = raw.frame(timeout)
        seen.append(answer.command)
        assert answer.command != "ERROR", f"ERROR: {answer.headers} {answer.body!r}"
        if answer.command == "RECEIPT" and answer.headers.get("receipt-id") == receipt:
            return seen


def drain(client: Client, destination: str, *, quiet: float = 1.0, timeout: float = 30.0,
          sub_id: str = "drain") -> list[tuple[str, dict[str, str]]]:
    """Subscribe (auto ack) and take every MESSAGE until none arrives for ``quiet`` seconds; (body, headers)
    in arrival order; unsubscribes afterwards."""
    client.subscribe(destination, sub_id)
    got: list[tuple[str, dict[str, str]]] = []
    while True:
        try:
            message = client.listener.messages.get(timeout=quiet)
        except queue.Empty:
            break
        body = message.body.decode() if isinstance(message.body, bytes) else message.body
        got.append((body, dict(message.headers)))
    client.unsubscribe(sub_id)
    return got


def collect(client: Client, quiet: float = 0.7) -> list[bytes]:
    """The bodies of the MESSAGEs that arrive until none comes for ``quiet`` seconds, in arrival order
    (``Client.no_message`` puts a frame back at the end of the queue: not for reading many in order)."""
    got: list[bytes] = []
    while True:
        try:
            message = client.listener.messages.get(timeout=quiet)
        except queue.Empty:
            return got
        got.append(message.body if isinstance(message.body, bytes) else message.body.encode())


def rss_kib(pid: int) -> int:
    """The resident set of process ``pid`` in KiB (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for {pid}")
