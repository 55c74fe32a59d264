"""Per-destination authorization, password hashes, certificate logins and the failed-login
lockout, against real gateway processes with stomp.py over TCP and over WebSocket.

The matrix gateway has users with bcrypt hashes (and one with a plain-text
password, which its log warns about), groups, ``[[authorization]]`` entries on
embedded queues and topics and on a queue another gateway process serves
through the ``stomp://`` connector.  Every cell (user x SEND/SUBSCRIBE x
destination x TCP/WebSocket) is checked: an allowed SEND is stored and read
back, a refused one gets an ERROR naming destination and permission and
stores nothing (root reads the destination: only its own marker is there); an
allowed SUBSCRIBE receives, a refused one receives nothing (the message stays
for root).  Refused clients keep their connection for the next cells.
"""

from __future__ import annotations

import base64
import http.client
import json
import socket
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import websocket
from prometheus_client.parser import text_string_to_metric_families

from gateway.security.passwords import hash_password
from tests.support.authorization import ROOT_GRANT, grant
from tests.support.gateway import GatewayProcess
from tests.support.ports import free_port, wait_for_port
from tests.support.stomp_clients import Client
from tests.support.tls import TlsFiles, make_tls_files

PASSWORDS = {"root": "r00t!", "alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw"}
USERS = ("alice", "bob", "carol", "root")
DESTINATIONS = ("/queue/orders.us", "/topic/prices.x", "/queue/remote.jobs", "/queue/secret")
ALLOWED = {  # (login, permission) -> destinations, as the entries below grant
    ("alice", "read"): {"/queue/orders.us", "/topic/prices.x", "/queue/remote.jobs"},
    ("alice", "write"): {"/queue/orders.us"},
    ("bob", "read"): {"/queue/orders.us", "/topic/prices.x"},
    ("bob", "write"): {"/queue/remote.jobs"},
    ("carol", "read"): {"/topic/prices.x"},
    ("carol", "write"): {"/topic/prices.x"},
    ("root", "read"): set(DESTINATIONS),
    ("root", "write"): set(DESTINATIONS),
}
ENTRIES = """
[connectors.remote]
uri = "stomp://127.0.0.1:{remote_port}"

[[destinations]]
pattern = "/queue/remote.*"
connector = "remote"
""" + ROOT_GRANT + grant("/queue/orders.*", read=["group:ops", "group:audit"], write=["group:ops"]) + grant(
    "/topic/prices.*", read=["*"], write=["user:carol"]) + grant("/queue/remote.*", read=["group:ops"], write=["bob"])


WEAK = "--set=auth.allow_weak_passwords=true"
"""The logins have cost-4 hashes and a plain-text password (quick tests; development only)."""


def users_option(plain: tuple[str, ...] = ("carol",)) -> str:
    users = ", ".join(f'{login} = "{password if login in plain else hash_password(password, rounds=4)}"'
                      for login, password in PASSWORDS.items())
    return f"auth.users={{ {users} }}"


@dataclass
class Secured:
    process: GatewayProcess
    ws_port: int
    admin_port: int

    def address(self, transport: str) -> tuple[str, int]:
        return ("127.0.0.1", self.ws_port if transport == "ws" else self.process.port)

    def client(self, transport: str, login: str) -> Client:
        return Client(self.address(transport), "1.2", ws_path="/" if transport == "ws" else None,
                      login=login, passcode=PASSWORDS[login])


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    workdir = tmp_path_factory.mktemp("authz")
    remote = GatewayProcess(workdir / "remote", args=["--set", 'broker.persistence="memory"']).start()
    ws_port, admin_port = free_port(), free_port()
    process = GatewayProcess(workdir / "gateway", ENTRIES.format(remote_port=remote.port), args=[
        "--listen", f"ws:tcp:{ws_port}:interface=127.0.0.1",
        "--set", users_option(), WEAK, "--set", 'auth.groups={ ops = ["alice"], audit = ["bob"] }',
        "--set", "auth.max_failed_logins=0", "--set", f'admin.listen="tcp:{admin_port}:interface=127.0.0.1"',
        "--set", 'admin.roles={ bob = "operator", carol = "operator" }',  # their grants decide the console
    ]).start()
    wait_for_port(ws_port, timeout=10)
    wait_for_port(admin_port, timeout=10)
    yield Secured(process, ws_port, admin_port)
    process.stop()
    remote.stop()


def test_plain_text_passwords_are_warned_about_naming_the_login(secured: Secured) -> None:
    log = secured.process.wait_for_log("the password of login 'carol' (auth.users.carol) is stored in plain text")
    assert "login 'alice' (auth.users.alice) is a bcrypt hash of cost 4 (below 10)" in log  # weak too
    assert log.count("the password of login 'carol'") == 1  # once per login


def denied(client: Client, receipt: str) -> str | None:
    """The ERROR answering the frame with ``receipt``: its message header (None if none came)."""
    error = client.error(timeout=10)
    if error is None:
        return None
    assert error.headers.get("receipt-id") == receipt, error.headers
    return str(error.headers["message"])


def drain(root: Client, count: int) -> dict[str, list[bytes]]:
    """The next ``count`` MESSAGEs root receives, bodies by destination."""
    got: dict[str, list[bytes]] = {}
    for frame in root.messages(count):
        got.setdefault(frame.headers["destination"], []).append(frame.body)
    return got


@pytest.mark.parametrize("transport", ["tcp", "ws"])
def test_matrix(secured: Secured, transport: str) -> None:  # noqa: C901 (one table of cases, read top to bottom)
    clients = {login: secured.client(transport, login) for login in USERS}
    root = secured.client(transport, "root")
    violations: list[str] = []
    checked = 0
    try:
        # -- SEND: root is the only consumer of every destination and sees what was stored
        for index, destination in enumerate(DESTINATIONS):
            root.subscribe(destination, f"root-{index}")
        for login in USERS:
            client = clients[login]
            for destination in DESTINATIONS:
                token = f"{transport}-{login}-send-{destination}-{uuid.uuid4().hex[:6]}".encode()
                allowed = destination in ALLOWED[(login, "write")]
                receipt = uuid.uuid4().hex
                client.connection.send(destination, token, headers={"receipt": receipt})
                if allowed:
                    client.wait_receipt(receipt)
                else:
                    message = denied(client, receipt)
                    if message != f"not authorized to write {destination}":
                        violations.append(f"{login} SEND {destination}: ERROR {message!r}")
                marker = f"marker-{uuid.uuid4().hex[:6]}".encode()
                root.send(destination, marker, receipt=True)
                got = drain(root, 2 if allowed else 1)
                expected = [token, marker] if allowed else [marker]
                if got != {destination: expected}:
                    violations.append(f"{login} SEND {destination} (allowed={allowed}): root read {got}")
                checked += 1
        for index in range(len(DESTINATIONS)):
            root.unsubscribe(f"root-{index}")
        # -- SUBSCRIBE: the user is the only consumer; root sends, and takes back what was refused
        for login in USERS:
            client = clients[login]
            for number, destination in enumerate(DESTINATIONS):
                allowed = destination in ALLOWED[(login, "read")]
                receipt = uuid.uuid4().hex
                sub_id = f"{login}-{number}"
                client.connection.subscribe(destination, sub_id, headers={"receipt": receipt})
                if allowed:
                    client.wait_receipt(receipt)
                else:
                    message = denied(client, receipt)
                    if message != f"not authorized to read {destination}":
                        violations.append(f"{login} SUBSCRIBE {destination}: ERROR {message!r}")
                token = f"{transport}-{login}-sub-{destination}-{uuid.uuid4().hex[:6]}".encode()
                root.send(destination, token, receipt=True)
                if allowed:
                    frame = client.message()
                    if frame.body != token:
                        violations.append(f"{login} SUBSCRIBE {destination}: received {frame.body!r}")
                    client.unsubscribe(sub_id)
                else:
                    if not client.no_message(0.3):
                        violations.append(f"{login} SUBSCRIBE {destination} (refused) received "
                                          f"{client.message().body!r}")
                    if destination.startswith("/queue/"):  # still stored: root takes it
                        root.subscribe(destination, "root-check")
                        body = root.message().body
                        root.unsubscribe("root-check")
                        if body != token:
                            violations.append(f"{login} SUBSCRIBE {destination}: root found {body!r}")
                checked += 1
        for login, client in clients.items():  # nothing else ever arrived, and every connection is still open
            if not client.no_message(0.1):
                violations.append(f"{login} received an unexpected {client.message().body!r}")
            if not client.connection.is_connected():
                violations.append(f"{login}'s connection was closed")
    finally:
        for client in [*clients.values(), root]:
            client.disconnect()
    assert violations == []
    assert checked == 2 * len(USERS) * len(DESTINATIONS)


def test_denials_are_logged_and_counted(secured: Secured) -> None:
    log = secured.process.wait_for_log("authorization denied: login 'carol'")
    assert "may not write /queue/secret" in log


def admin_request(port: int, method: str, path: str, login: str, password: str,
                  body: object = None) -> tuple[int, dict[str, str], bytes]:
    """One raw HTTP request to the admin endpoint with HTTP Basic credentials: (status, headers, body)."""
    headers = {"Authorization": "Basic " + base64.b64encode(f"{login}:{password}".encode()).decode()}
    data = None
    if body is not None:
        data = json.dumps(body).encode()
        headers["Content-Type"] = "application/json"
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        connection.request(method, path, body=data, headers=headers)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def denied_count(secured: Secured, permission: str) -> float:
    """``jmsgateway_authorization_denied_total{permission}`` as the admin endpoint's /metrics says."""
    status, _, text = admin_request(secured.admin_port, "GET", "/metrics", "root", PASSWORDS["root"])
    assert status == 200, text
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            if sample.name == "jmsgateway_authorization_denied_total" and sample.labels == {"permission": permission}:
                return float(sample.value)
    raise AssertionError(f"no jmsgateway_authorization_denied_total{{permission={permission!r}}} in /metrics")


def test_console_refusals_are_counted_with_the_stomp_ones(secured: Secured) -> None:
    admin_before, read_before = denied_count(secured, "admin"), denied_count(secured, "read")
    # bob reads /queue/orders.* (group audit) but holds no admin there: the console's purge is refused
    status, _, body = admin_request(secured.admin_port, "POST", "/console/api/purge", "bob", PASSWORDS["bob"],
                                    {"destination": "/queue/orders.us"})
    assert status == 403 and b"bob does not hold the admin permission on /queue/orders.us" in body, body
    assert denied_count(secured, "admin") == admin_before + 1
    # carol may not read /queue/orders.*: browsing it in the console is refused, and counted as a read
    status, _, body = admin_request(secured.admin_port, "GET", "/console/api/browse?destination=/queue/orders.us",
                                    "carol", PASSWORDS["carol"])
    assert status == 403, body
    assert denied_count(secured, "read") == read_before + 1
    assert denied_count(secured, "admin") == admin_before + 1  # once, not once more by the console
    log = secured.process.wait_for_log("authorization denied: login 'bob' from the admin console may not admin "
                                       "/queue/orders.us")
    assert "console: bob was refused a purge of '/queue/orders.us' (403)" in log


def test_a_durable_subscription_needs_admin_as_well_as_read(secured: Secured) -> None:
    """carol reads /topic/prices.* (everyone does) but holds no admin there: a plain SUBSCRIBE works, a
    durable one gets an ERROR naming destination and permission, and the connection goes on."""
    topic = "/topic/prices.durable"
    carol = Client(secured.address("tcp"), "1.2", login="carol", passcode=PASSWORDS["carol"],
                   headers={"client-id": f"carol-{uuid.uuid4().hex[:6]}"})
    root = secured.client("tcp", "root")
    try:
        receipt = uuid.uuid4().hex
        carol.connection.subscribe(topic, "durable", headers={"receipt": receipt,
                                                              "activemq.subscriptionName": "carols"})
        assert denied(carol, receipt) == f"not authorized to admin {topic}"
        receipt = uuid.uuid4().hex
        carol.connection.subscribe(topic, "durable2", headers={"receipt": receipt,
                                                               "durable-subscription-name": "carols"})
        assert denied(carol, receipt) == f"not authorized to admin {topic}"
        carol.subscribe(topic, "plain")  # waits for its RECEIPT
        root.send(topic, b"tick", receipt=True)
        frame = carol.message()
        assert frame.body == b"tick" and frame.headers["subscription"] == "plain"
        assert carol.no_message(0.3)  # nothing for the refused durable subscriptions
        carol.send(topic, b"carol writes here", receipt=True)  # the connection is still usable
        assert carol.message().body == b"carol writes here"
        assert carol.connection.is_connected()
    finally:
        carol.disconnect()
        root.disconnect()
    log = secured.process.wait_for_log("authorization denied: login 'carol' from 127.0.0.1")
    assert f"may not admin {topic}" in log


# -- wrong passwords and brute force ------------------------------------------------------


def raw_connect(port: int, login: str, passcode: str) -> bytes:
    """CONNECT over a raw socket; what the gateway answers before it closes (or the CONNECTED frame)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(f"CONNECT\naccept-version:1.2\nhost:localhost\nlogin:{login}\npasscode:{passcode}\n\n\x00"
                     .encode())
        data = b""
        while b"\x00" not in data:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
        return data


@pytest.fixture
def lockout_gateway(tmp_path: Path) -> Iterator[GatewayProcess]:
    admin_port = free_port()
    process = GatewayProcess(tmp_path / "gateway", args=[
        "--set", users_option(), WEAK, "--set", "auth.max_failed_logins=3", "--set", "auth.lockout_ms=1500",
        "--set", f'admin.listen="tcp:{admin_port}:interface=127.0.0.1"',
    ]).start()
    wait_for_port(admin_port, timeout=10)
    process.admin_port = admin_port  # type: ignore[attr-defined]
    yield process
    process.stop()


def test_the_admin_endpoint_checks_hashed_passwords(lockout_gateway: GatewayProcess) -> None:
    import base64
    import urllib.error
    import urllib.request

    def status(login: str, password: str) -> int:
        request = urllib.request.Request(f"http://127.0.0.1:{lockout_gateway.admin_port}/status")  # type: ignore[attr-defined]
        token = base64.b64encode(f"{login}:{password}".encode()).decode()
        request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return int(response.status)
        except urllib.error.HTTPError as error:
            return error.code

    assert status("alice", PASSWORDS["alice"]) == 200
    assert status("alice", "wrong") == 401


def test_wrong_passwords_then_lockout_per_address(lockout_gateway: GatewayProcess) -> None:
    port = lockout_gateway.port
    assert raw_connect(port, "alice", PASSWORDS["alice"]).startswith(b"CONNECTED")  # a hashed password
    assert raw_connect(port, "carol", PASSWORDS["carol"]).startswith(b"CONNECTED")  # a plain-text one
    for login in ("alice", "nobody", "carol"):
        answer = raw_connect(port, login, "wrong")
        assert answer.startswith(b"ERROR") and b"message:authentication failed" in answer, answer
    started = time.monotonic()
    locked = raw_connect(port, "alice", PASSWORDS["alice"])  # even the right password
    assert locked.startswith(b"ERROR") and b"message:too many failed logins" in locked, locked
    assert raw_connect(port, "bob", PASSWORDS["bob"]).startswith(b"ERROR")
    time.sleep(max(0.0, 1.6 - (time.monotonic() - started)))
    assert raw_connect(port, "alice", PASSWORDS["alice"]).startswith(b"CONNECTED")
    log = lockout_gateway.wait_for_log("accepting logins from 127.0.0.1 again")
    assert log.count("refusing logins (STOMP CONNECTs, admin requests) from 127.0.0.1") == 1  # once per episode
    assert "(2 refused during the lockout)" in log


def admin_logins(process: GatewayProcess, kind: str) -> tuple[float, float]:
    """``jmsgateway_{kind}_logins_failed_total`` and ``…_refused_total`` from the admin endpoint's /metrics."""
    status, _, text = admin_request(process.admin_port, "GET", "/metrics", "root", PASSWORDS["root"])  # type: ignore[attr-defined]
    assert status == 200, text
    values = {sample.name: sample.value for family in text_string_to_metric_families(text.decode())
              for sample in family.samples}
    return values[f"jmsgateway_{kind}_logins_failed_total"], values[f"jmsgateway_{kind}_logins_refused_total"]


def test_admin_logins_are_locked_out_per_address(lockout_gateway: GatewayProcess) -> None:
    """The admin endpoint's HTTP Basic logins share the STOMP listeners' lockout: 401 for each wrong
    password, then 429 with Retry-After even for the right one, until the lockout ends."""
    port = lockout_gateway.admin_port  # type: ignore[attr-defined]
    alice = PASSWORDS["alice"]
    assert admin_request(port, "GET", "/status", "alice", alice)[0] == 200
    for password in ("wrong", "guess", "again"):
        status, headers, _ = admin_request(port, "GET", "/status", "alice", password)
        assert status == 401 and "www-authenticate" in headers
    started = time.monotonic()
    status, headers, body = admin_request(port, "GET", "/status", "alice", alice)  # the right password
    assert status == 429, (status, body)
    assert 1 <= int(headers["retry-after"]) <= 2 and b"too many failed logins from 127.0.0.1" in body
    purge = admin_request(port, "POST", "/console/api/purge", "root", PASSWORDS["root"], {"destination": "/queue/a"})
    assert purge[0] == 429  # every login from the address, whatever the path
    assert b"message:too many failed logins" in raw_connect(lockout_gateway.port, "alice", alice)  # STOMP too
    time.sleep(max(0.0, 1.6 - (time.monotonic() - started)))
    assert admin_request(port, "GET", "/status", "alice", alice)[0] == 200
    assert admin_logins(lockout_gateway, "admin") == (3, 2)
    assert admin_logins(lockout_gateway, "stomp") == (0, 1)
    log = lockout_gateway.wait_for_log("accepting logins from 127.0.0.1 again")
    assert log.count("refusing logins (STOMP CONNECTs, admin requests) from 127.0.0.1") == 1  # once per episode
    assert "(3 refused during the lockout)" in log


def test_plain_text_refused_when_allow_plaintext_is_false(tmp_path: Path) -> None:
    output = GatewayProcess(tmp_path / "gateway", args=[
        "--set", users_option(), WEAK, "--set", "auth.allow_plaintext=false"]).start_fails()
    assert "auth.users.carol" in output and "allow_plaintext is false" in output


def test_weak_passwords_stop_start_up_unless_allowed(tmp_path: Path) -> None:
    """Issue 33 #14: plain text and low bcrypt costs are refused at start, naming the login and key."""
    output = GatewayProcess(tmp_path / "gateway", args=["--set", users_option()]).start_fails()
    assert "auth.users.root" in output and "cost 4 (below 10)" in output and "allow_weak_passwords" in output


def test_hash_password_command() -> None:
    done = subprocess.run([sys.executable, "-m", "gateway.cli", "hash-password", "--rounds", "4"],
                          input="correct horse\n", capture_output=True, text=True, check=True,
                          cwd=str(Path(__file__).resolve().parents[2]))
    import bcrypt

    hashed = done.stdout.strip()
    assert hashed.startswith("$2b$04$")
    assert bcrypt.checkpw(b"correct horse", hashed.encode())


# -- certificate identities on the mtls: listener ---------------------------------------


@dataclass
class MtlsGateway:
    port: int
    """The ``mtls:`` listener (STOMP over TCP)."""
    ws_port: int
    """The ``ws:mtls:`` listener (STOMP over WebSocket over the same mutual TLS)."""
    tls: TlsFiles


@pytest.fixture
def mtls_gateway(tmp_path: Path) -> Iterator[MtlsGateway]:
    tls = make_tls_files(tmp_path / "tls")
    port, ws_port = free_port(), free_port()
    files = f"privateKey={tls.server_key}:certKey={tls.server_cert}:caCerts={tls.ca_cert}"
    process = GatewayProcess(tmp_path / "gateway", ENTRIES.format(remote_port=free_port()), args=[
        "--listen", f"mtls:{port}:interface=127.0.0.1:{files}",
        "--listen", f"ws:mtls:{ws_port}:interface=127.0.0.1:{files}",
        "--set", users_option(), WEAK, "--set", 'auth.groups={ ops = ["alice"], audit = ["bob"] }',
        "--set", 'auth.certificates={ "jmsgateway client" = "alice" }',
    ]).start()
    wait_for_port(port, timeout=10)
    wait_for_port(ws_port, timeout=10)
    yield MtlsGateway(port, ws_port, tls)
    process.stop()


def tls_exchange(port: int, tls: TlsFiles, frames: bytes, answers: int) -> list[bytes]:
    context = ssl.create_default_context(cafile=str(tls.ca_cert))
    context.check_hostname = False
    context.load_cert_chain(str(tls.client_cert), str(tls.client_key))
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
            context.wrap_socket(raw, server_hostname="localhost") as sock:
        sock.sendall(frames)
        data = b""
        while data.count(b"\x00") < answers:
            chunk = sock.recv(4096)
            if not chunk:
                break
            data += chunk
    return [frame.lstrip(b"\n") for frame in data.split(b"\x00") if frame.strip(b"\n")]


def test_a_certificate_logs_in_as_its_mapped_user(mtls_gateway: MtlsGateway) -> None:
    port, tls = mtls_gateway.port, mtls_gateway.tls
    frames = (b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\x00"
              b"SEND\ndestination:/queue/orders.us\nreceipt:r1\n\nhello\x00"
              b"SEND\ndestination:/queue/secret\nreceipt:r2\n\nhello\x00"
              b"DISCONNECT\nreceipt:r3\n\n\x00")
    connected, sent, refused, bye = tls_exchange(port, tls, frames, 4)
    assert connected.startswith(b"CONNECTED")
    assert sent.startswith(b"RECEIPT") and b"receipt-id:r1" in sent
    assert refused.startswith(b"ERROR") and b"message:not authorized to write /queue/secret" in refused
    assert b"login 'alice'" in refused
    assert bye.startswith(b"RECEIPT")
    # naming another login without its passcode is refused; with the passcode the password decides
    [other] = tls_exchange(port, tls, b"CONNECT\naccept-version:1.2\nhost:localhost\nlogin:bob\n\n\x00", 1)
    assert b"message:authentication failed" in other
    [bob] = tls_exchange(port, tls, f"CONNECT\naccept-version:1.2\nhost:localhost\nlogin:bob\npasscode:"
                         f"{PASSWORDS['bob']}\n\n\x00".encode(), 1)
    assert bob.startswith(b"CONNECTED")


def ws_exchange(gateway: MtlsGateway, frames: list[bytes], answers: int, *, certificate: bool = True) -> list[bytes]:
    """``frames`` over STOMP-over-WebSocket on the ``ws:mtls:`` listener (presenting the client
    certificate); the first ``answers`` frames the gateway sends back."""
    sslopt: dict[str, object] = {"ca_certs": str(gateway.tls.ca_cert), "check_hostname": False}
    if certificate:
        sslopt.update(certfile=str(gateway.tls.client_cert), keyfile=str(gateway.tls.client_key))
    sock = websocket.create_connection(f"wss://127.0.0.1:{gateway.ws_port}/", subprotocols=["v12.stomp"],
                                       timeout=10, sslopt=sslopt)
    try:
        for frame in frames:
            sock.send_binary(frame)
        got: list[bytes] = []
        while len(got) < answers:
            data = sock.recv()
            got.extend(f.lstrip(b"\n") for f in (data if isinstance(data, bytes) else data.encode()).split(b"\x00")
                       if f.strip(b"\n"))
        return got
    finally:
        sock.close()


def test_a_certificate_logs_in_over_websocket_on_an_mtls_listener(mtls_gateway: MtlsGateway) -> None:
    """``ws:mtls:``: the certificate the TLS handshake verified logs in as its mapped user (alice) without
    a passcode, and alice's [[authorization]] entries apply, as on the plain ``mtls:`` listener."""
    connected, sent, refused = ws_exchange(mtls_gateway, [
        b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\x00",
        b"SEND\ndestination:/queue/orders.us\nreceipt:r1\n\nhello\x00",
        b"SEND\ndestination:/queue/secret\nreceipt:r2\n\nhello\x00",
    ], 3)
    assert connected.startswith(b"CONNECTED"), connected
    assert sent.startswith(b"RECEIPT") and b"receipt-id:r1" in sent, sent
    assert refused.startswith(b"ERROR") and b"message:not authorized to write /queue/secret" in refused
    assert b"login 'alice'" in refused
    # naming another login without its passcode is refused: the certificate is alice's
    [other] = ws_exchange(mtls_gateway, [b"CONNECT\naccept-version:1.2\nhost:localhost\nlogin:bob\n\n\x00"], 1)
    assert other.startswith(b"ERROR") and b"message:authentication failed" in other
    # without a client certificate the handshake itself fails
    with pytest.raises((ssl.SSLError, ConnectionError, websocket.WebSocketException)):
        ws_exchange(mtls_gateway, [b"CONNECT\naccept-version:1.2\nhost:localhost\n\n\x00"], 1, certificate=False)


# -- what ActiveMQ does, which the gateway follows -------------------------------------------

ACTIVEMQ_SECURITY = """    <plugins>
      <simpleAuthenticationPlugin>
        <users>
          <authenticationUser username="carol" password="carol-pw" groups="others"/>
        </users>
      </simpleAuthenticationPlugin>
      <authorizationPlugin>
        <map>
          <authorizationMap>
            <authorizationEntries>
              <authorizationEntry queue="secret" read="admins" write="admins" admin="admins"/>
              <authorizationEntry topic="prices.>" read="others" write="others" admin="others"/>
              <authorizationEntry topic="ActiveMQ.Advisory.>" read="others" write="others" admin="others"/>
            </authorizationEntries>
          </authorizationMap>
        </map>
      </authorizationPlugin>
    </plugins>
"""


def refusals_keep_the_connection(address: tuple[str, int], forbidden: str, allowed: str) -> list[str]:
    """carol's SEND and SUBSCRIBE to ``forbidden``: an ERROR with the receipt-id each, and the
    connection still sends to ``allowed`` afterwards.  What differs from that (empty: nothing)."""
    problems = []
    carol = Client(address, "1.2", login="carol", passcode="carol-pw")
    try:
        for command in ("SEND", "SUBSCRIBE"):
            receipt = uuid.uuid4().hex
            if command == "SEND":
                carol.connection.send(forbidden, b"no", headers={"receipt": receipt})
            else:
                carol.connection.subscribe(forbidden, "1", headers={"receipt": receipt})
            error = carol.error(timeout=10)
            if error is None or error.headers.get("receipt-id") != receipt:
                problems.append(f"{command}: {error and error.headers}")
            try:
                carol.send(allowed, b"yes", receipt=True)
            except AssertionError as failure:
                problems.append(f"after the refused {command}: {failure}")
    finally:
        carol.disconnect()
    return problems


def test_refusals_keep_the_connection_as_at_activemq(secured: Secured, tmp_path: Path) -> None:
    from tests.support.activemq import ActiveMQBroker

    broker = ActiveMQBroker(tmp_path / "activemq", kahadb=False)
    config = broker.config_file.read_text()
    broker.config_file.write_text(config.replace("    <transportConnectors>",
                                                 ACTIVEMQ_SECURITY + "    <transportConnectors>"))
    with broker:
        assert refusals_keep_the_connection(("127.0.0.1", broker.stomp_port), "/queue/secret", "/topic/prices.x") == []
    assert refusals_keep_the_connection(secured.address("tcp"), "/queue/secret", "/topic/prices.x") == []
