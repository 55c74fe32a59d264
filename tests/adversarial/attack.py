"""The attacker's toolbox: logins, grants, gateway configurations written as TOML, and raw clients.

Everything here is black-box: a gateway is configured only from a TOML file as
docs/security.md and docs/admin.md describe it, and driven over TCP (stomp.py
and raw sockets), WebSocket and plain HTTP.  :data:`GRANTS` is the one source
of the ``[[authorization]]`` entries written to the file *and* of what the
tests expect (:func:`allowed`), evaluated here with the documented glob rules,
not by the gateway's code.
"""

from __future__ import annotations

import base64
import fnmatch
import http.client
import json
import socket
import time
from functools import cache
from pathlib import Path
from typing import Any

from gateway.security.passwords import hash_password
from tests.support.authorization import grant
from tests.support.gateway import GatewayProcess
from tests.support.ports import free_port, wait_for_port

PASSWORDS = {
    "root": "r00t-pw!", "alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw", "eve": "eve-pw",
    "vic": "vic-pw", "dave": "dave-pw",
}
"""Every login of the secured gateways and its password."""

COST = 10
"""bcrypt cost of every configured hash: the lowest the contract accepts without allow_weak_passwords."""

GROUPS = {"ops": ["alice", "bob"], "audit": ["vic"]}

GRANTS: list[tuple[str, dict[str, list[str]]]] = [
    ("/*", {"read": ["root"], "write": ["root"], "admin": ["root"]}),
    ("/queue/orders.*", {"read": ["group:ops", "group:audit"], "write": ["group:ops"], "admin": ["alice"]}),
    ("/topic/prices.*", {"read": ["*"], "write": ["carol"]}),
    ("/topic/alerts.*", {"read": ["alice"], "admin": ["alice"]}),
    ("/topic/carol.*", {"read": ["carol"], "write": ["carol"], "admin": ["carol"]}),
    ("/queue/alice.*", {"read": ["alice"], "write": ["alice"], "admin": ["alice"]}),
    ("/queue/DLQ.alice.*", {"read": ["alice"], "write": ["alice"], "admin": ["alice"]}),
    ("/queue/up.*", {"read": ["alice"], "write": ["alice", "eve"]}),
    ("/queue/eve.*", {"read": ["eve"], "write": ["eve"], "admin": ["eve"]}),
]
"""``[[authorization]]`` entries (deny by default): /queue/payments and /queue/secret are root's alone."""

ROLES = {"root": "administrator", "alice": "operator", "bob": "operator", "carol": "operator",
         "eve": "operator", "vic": "viewer"}
"""``[admin] roles``; dave has none and ``default_role = "none"`` keeps him out of the console."""

UPSTREAM_SECRET = "Upstr3amS3cret"
"""The passcode inside the upstream connector's URL: it must never leave the gateway process."""


def allowed(login: str, permission: str, destination: str) -> bool:
    """Whether :data:`GRANTS` give ``login`` ``permission`` on ``destination`` (union of matching entries)."""
    groups = {f"group:{name}" for name, members in GROUPS.items() if login in members}
    names = {login, f"user:{login}", "*"} | groups
    return any(fnmatch.fnmatchcase(destination, pattern) and names & set(grant.get(permission, []))
               for pattern, grant in GRANTS)


@cache
def hashed(login: str) -> str:
    return hash_password(PASSWORDS[login], rounds=COST)


def auth_toml(*, max_failed_logins: int = 0, lockout_ms: int = 30000, extra: str = "") -> str:
    users = ", ".join(f'{login} = "{hashed(login)}"' for login in PASSWORDS)
    groups = ", ".join(f"{name} = {json.dumps(members)}" for name, members in GROUPS.items())
    return (f"[auth]\nusers = {{ {users} }}\ngroups = {{ {groups} }}\nmax_failed_logins = {max_failed_logins}\n"
            f"failed_login_window_ms = 60000\nlockout_ms = {lockout_ms}\n{extra}\n")


def grants_toml() -> str:
    return "".join(grant(pattern, **permissions) for pattern, permissions in GRANTS)


def write_config(process: GatewayProcess, text: str) -> GatewayProcess:
    """Replace the config file :class:`GatewayProcess` wrote by ``text`` alone (the shipped default has an
    ``[auth]`` table already, so a second one cannot be appended)."""
    process.config_path.write_text(text)
    return process


def gateway_from_toml(workdir: Path, text: str, *, ws_port: int | None = None,
                      admin_port: int | None = None, extra_args: list[str] | None = None) -> GatewayProcess:
    """A started gateway configured by ``text``; waits for its WebSocket and admin listeners too."""
    args = list(extra_args or [])
    if ws_port is not None:
        args += ["--listen", f"ws:tcp:{ws_port}:interface=127.0.0.1"]
    process = write_config(GatewayProcess(workdir, args=args), text)
    process.start()
    for port in (ws_port, admin_port):
        if port is not None:
            wait_for_port(port, timeout=20)
    return process


def admin_toml(admin_port: int, *, roles: bool = True, users: list[str] | None = None) -> str:
    text = f'[admin]\nlisten = ["tcp:{admin_port}:interface=127.0.0.1"]\n'
    if users is not None:
        text += f"users = {json.dumps(users)}\n"
    if roles:
        text += "roles = { " + ", ".join(f'{k} = "{v}"' for k, v in ROLES.items()) + ' }\ndefault_role = "none"\n'
    return text


# -- HTTP -------------------------------------------------------------------------------------


def basic(login: str, password: str | None = None, *, padded: bool = True) -> str:
    token = base64.b64encode(f"{login}:{password or PASSWORDS[login]}".encode()).decode()
    return "Basic " + (token if padded else token.rstrip("="))


def http_call(port: int, method: str, path: str, login: str | None = None, body: Any = None, *,
              headers: dict[str, str] | None = None, timeout: float = 15.0) -> tuple[int, dict[str, str], bytes]:
    """One raw HTTP request to 127.0.0.1:``port`` (status, lower-cased headers, body).

    A POST gets ``Content-Type: application/json`` and no ``Origin`` unless ``headers`` say otherwise;
    ``headers`` may set ``Host`` (http.client then sends no Host of its own)."""
    sent = {"Authorization": basic(login)} if login is not None else {}
    data = None
    if body is not None or method == "POST":
        data = json.dumps(body if body is not None else {}).encode()
        sent["Content-Type"] = "application/json"
    sent.update(headers or {})
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request(method, path, body=data, headers=sent)
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def api(port: int, method: str, name: str, login: str | None, body: Any = None, **kwargs: Any) -> tuple[int, Any]:
    """``/console/api/<name>``: (status, JSON document or raw text)."""
    status, _, raw = http_call(port, method, f"/console/api/{name}", login, body, **kwargs)
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode(errors="replace")


def pending_bodies(port: int, queue: str) -> list[str]:
    """The body previews of ``queue``'s pending messages, browsed by root (the administrator)."""
    status, document = api(port, "GET", f"browse?destination={queue}", "root")
    if status == 404:
        return []
    assert status == 200, (status, document)
    return [message["body_preview"] for message in document["messages"]]


# -- raw STOMP ------------------------------------------------------------------------------------


def connect_frame(login: str, passcode: str) -> bytes:
    return f"CONNECT\naccept-version:1.2\nhost:localhost\nlogin:{login}\npasscode:{passcode}\n\n\x00".encode()


def read_frame(sock: socket.socket) -> bytes:
    """Bytes up to the first NUL (or what came before the server closed)."""
    data = b""
    while b"\x00" not in data:
        try:
            chunk = sock.recv(4096)
        except (ConnectionResetError, TimeoutError):
            break
        if not chunk:
            break
        data += chunk
    return data


def raw_connect(port: int, login: str, passcode: str, *, source: str | None = None,
                timeout: float = 30.0) -> tuple[bytes, float]:
    """CONNECT on a socket of its own (from ``source`` if given): (the answer, seconds it took)."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=timeout,
                                  source_address=(source, 0) if source else None) as sock:
        sock.sendall(connect_frame(login, passcode))
        answer = read_frame(sock)
    return answer, time.monotonic() - started


def answer_kind(answer: bytes) -> str:
    """``connected``, ``failed`` (authentication failed), ``locked`` (too many failed logins) or the raw start."""
    if answer.startswith(b"CONNECTED"):
        return "connected"
    if b"message:authentication failed" in answer:
        return "failed"
    if b"message:too many failed logins" in answer:
        return "locked"
    return answer[:80].decode(errors="replace") or "closed"


def new_port() -> int:
    return free_port()
