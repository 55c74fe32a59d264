"""Real stomp.py clients for integration tests, with blocking helpers.

:class:`Client` wraps one stomp.py connection of a chosen version and
collects what the server sends (MESSAGE, RECEIPT, ERROR, disconnects) in
thread-safe queues, so a test can say ``client.message(timeout=5)``.
Given ``ws_path`` it speaks STOMP over WebSocket (stomp.py's WebSocket
transport) instead of TCP.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import uuid
from collections.abc import Mapping
from typing import Any

import stomp
from stomp.adapter.ws import WSTransport
from stomp.connect import BaseConnection
from stomp.protocol import Protocol11
from stomp.utils import Frame as StompPyFrame

CONNECTIONS = {"1.0": stomp.Connection10, "1.1": stomp.Connection11, "1.2": stomp.Connection12}


class WSConnection11(stomp.Connection11):
    """STOMP 1.1 over WebSocket: stomp.py's 1.1 connection on its WebSocket transport
    (stomp.py ships a WebSocket connection for 1.2 only, built the same way)."""

    def __init__(self, host_and_ports: list[tuple[str, int]], *, ws_path: str | None = None,
                 heartbeats: tuple[int, int] = (0, 0), auto_decode: bool = True,
                 auto_content_length: bool = True) -> None:
        transport = WSTransport(host_and_ports, auto_decode=auto_decode, ws_path=ws_path)
        BaseConnection.__init__(self, transport)
        Protocol11.__init__(self, transport, heartbeats, auto_content_length)


WS_CONNECTIONS: dict[str, Any] = {"1.1": WSConnection11, "1.2": stomp.WSStompConnection}


class Collector(stomp.ConnectionListener):
    """A stomp.py listener that queues everything it hears."""

    def __init__(self) -> None:
        self.messages: queue.Queue[StompPyFrame] = queue.Queue()
        self.errors: queue.Queue[StompPyFrame] = queue.Queue()
        self.receipts: dict[str, threading.Event] = {}
        self.receipt_lock = threading.Lock()
        self.disconnected = threading.Event()
        self.heartbeat_timeouts = 0
        self.heartbeats = 0

    def on_message(self, frame: StompPyFrame) -> None:
        self.messages.put(frame)

    def on_error(self, frame: StompPyFrame) -> None:
        self.errors.put(frame)

    def on_receipt(self, frame: StompPyFrame) -> None:
        with self.receipt_lock:
            self.receipts.setdefault(frame.headers["receipt-id"], threading.Event()).set()

    def on_disconnected(self) -> None:
        self.disconnected.set()

    def on_heartbeat_timeout(self) -> None:
        self.heartbeat_timeouts += 1

    def on_heartbeat(self) -> None:
        self.heartbeats += 1

    def receipt_event(self, receipt: str) -> threading.Event:
        with self.receipt_lock:
            return self.receipts.setdefault(receipt, threading.Event())


class Client:
    """One connected stomp.py client."""

    def __init__(self, address: tuple[str, int], version: str = "1.2", *, text: bool = False,
                 heartbeats: tuple[int, int] = (0, 0), ca_certs: str | None = None,
                 ws_path: str | None = None, login: str | None = None, passcode: str | None = None,
                 headers: Mapping[str, str] | None = None, **connect_headers: str) -> None:
        """Connect; CONNECT carries ``headers`` (names that are no Python identifier) and ``connect_headers``."""
        connect_headers = {**(headers or {}), **connect_headers}
        kwargs: dict[str, Any] = {"auto_decode": False, "auto_content_length": not text}
        if version != "1.0":
            kwargs["heartbeats"] = heartbeats
        self.version = version
        if ws_path is None:
            self.connection = CONNECTIONS[version]([address], **kwargs)
        else:  # STOMP over WebSocket at that URL path
            self.connection = WS_CONNECTIONS[version]([address], ws_path=ws_path, **kwargs)
        if ca_certs is not None:  # TLS, verifying the server against this CA
            self.connection.set_ssl(for_hosts=[address], ca_certs=ca_certs)
        self.listener = Collector()
        self.connection.set_listener("collector", self.listener)
        self.connection.connect(login, passcode, wait=True, headers=connect_headers)

    # -- sending ------------------------------------------------------------

    def send(self, destination: str, body: str | bytes = "", *, receipt: bool = False, timeout: float = 10.0,
             headers: Mapping[str, str] | None = None, **more_headers: str) -> None:
        """SEND with ``headers`` and ``more_headers``; with ``receipt`` wait for the RECEIPT (else AssertionError)."""
        frame_headers = {**(headers or {}), **more_headers}
        if receipt:
            receipt_id = uuid.uuid4().hex
            event = self.listener.receipt_event(receipt_id)
            frame_headers["receipt"] = receipt_id
            self.connection.send(destination, body, headers=frame_headers)
            self.wait_receipt(receipt_id, event, timeout)
        else:
            self.connection.send(destination, body, headers=frame_headers)

    def wait_receipt(self, receipt_id: str, event: threading.Event | None = None, timeout: float = 10.0) -> None:
        event = event or self.listener.receipt_event(receipt_id)
        if not event.wait(timeout):
            error = self.error(timeout=0.01)
            raise AssertionError(f"no RECEIPT {receipt_id} within {timeout}s; error: {error}")

    def subscribe(self, destination: str, sub_id: str = "1", ack: str = "auto", *, receipt: bool = True,
                  headers: Mapping[str, str] | None = None, **more_headers: str) -> None:
        """SUBSCRIBE with ``headers`` and ``more_headers``; with ``receipt`` wait for the RECEIPT."""
        frame_headers = {**(headers or {}), **more_headers}
        if receipt:
            receipt_id = uuid.uuid4().hex
            event = self.listener.receipt_event(receipt_id)
            frame_headers["receipt"] = receipt_id
            self.connection.subscribe(destination, sub_id, ack=ack, headers=frame_headers)
            self.wait_receipt(receipt_id, event)
        else:
            self.connection.subscribe(destination, sub_id, ack=ack, headers=frame_headers)

    def unsubscribe(self, sub_id: str = "1", **headers: Any) -> None:
        receipt_id = uuid.uuid4().hex
        event = self.listener.receipt_event(receipt_id)
        headers["receipt"] = receipt_id
        self.connection.unsubscribe(sub_id, headers=headers)
        self.wait_receipt(receipt_id, event)

    def ack(self, frame: StompPyFrame, transaction: str | None = None, *, receipt: bool = True) -> None:
        self._ack_or_nack("ack", frame, transaction, receipt)

    def nack(self, frame: StompPyFrame, transaction: str | None = None, *, receipt: bool = True) -> None:
        self._ack_or_nack("nack", frame, transaction, receipt)

    def _ack_or_nack(self, what: str, frame: StompPyFrame, transaction: str | None, receipt: bool) -> None:
        receipt_id = uuid.uuid4().hex if receipt else None
        event = self.listener.receipt_event(receipt_id) if receipt_id else None
        method = getattr(self.connection, what)
        if self.version == "1.2":
            method(frame.headers["ack"], transaction=transaction, receipt=receipt_id)
        elif self.version == "1.1":
            method(frame.headers["message-id"], frame.headers["subscription"], transaction=transaction,
                   receipt=receipt_id)
        else:
            method(frame.headers["message-id"], transaction=transaction, receipt=receipt_id)
        if receipt_id:
            self.wait_receipt(receipt_id, event)

    def begin(self, transaction: str) -> None:
        self.connection.begin(transaction)

    def commit(self, transaction: str, *, timeout: float = 10.0) -> None:
        receipt_id = uuid.uuid4().hex
        event = self.listener.receipt_event(receipt_id)
        self.connection.commit(transaction, headers={"receipt": receipt_id})
        self.wait_receipt(receipt_id, event, timeout)

    def abort(self, transaction: str) -> None:
        receipt_id = uuid.uuid4().hex
        event = self.listener.receipt_event(receipt_id)
        self.connection.abort(transaction, headers={"receipt": receipt_id})
        self.wait_receipt(receipt_id, event)

    # -- receiving ----------------------------------------------------------

    def message(self, timeout: float = 10.0) -> StompPyFrame:
        """The next MESSAGE (AssertionError if none arrives in time)."""
        try:
            return self.listener.messages.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no MESSAGE within {timeout}s; error: {self.error(0.01)}") from None

    def messages(self, count: int, timeout: float = 10.0) -> list[StompPyFrame]:
        return [self.message(timeout) for _ in range(count)]

    def no_message(self, wait: float = 0.5) -> bool:
        """True if no MESSAGE arrives within ``wait`` seconds."""
        try:
            frame = self.listener.messages.get(timeout=wait)
        except queue.Empty:
            return True
        self.listener.messages.put(frame)
        return False

    def error(self, timeout: float = 5.0) -> StompPyFrame | None:
        try:
            return self.listener.errors.get(timeout=timeout)
        except queue.Empty:
            return None

    def disconnect(self) -> None:
        if self.connection.is_connected():
            try:
                self.connection.disconnect(receipt=uuid.uuid4().hex)
            except Exception:
                self.connection.disconnect(receipt=None)

    def drop(self) -> None:
        """Close the socket without DISCONNECT (a crashed client)."""
        self.connection.transport.disconnect_socket()
        self.listener.disconnected.wait(5)


class StompClients:
    """Makes clients for one gateway and disconnects them all at the end."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.address = address
        self.clients: list[Client] = []

    def connect(self, version: str = "1.2", **kwargs: Any) -> Client:
        client = Client(self.address, version, **kwargs)
        self.clients.append(client)
        return client

    def close(self) -> None:
        for client in self.clients:
            with contextlib.suppress(Exception):
                client.disconnect()
