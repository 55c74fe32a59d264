"""One HTTP request to a real gateway's admin endpoint, as the console's script sends it: a JSON body,
``X-Requested-With``, the endpoint's own ``Host``, HTTP Basic for a login (for the integration tests that
attack the admin endpoint and read ``/status`` and ``/metrics``)."""

from __future__ import annotations

import base64
import http.client
import json


def admin_request(port: int, method: str, path: str, credentials: tuple[str, str] | None = None,
                  body: object = None, headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """``method path`` on ``127.0.0.1:port``: (status, raw body).  ``credentials`` (login, password) for
    HTTP Basic, none without; ``body`` as given when bytes, else as JSON; ``headers`` added (they win)."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    sent = {"Host": f"127.0.0.1:{port}", "X-Requested-With": "test", **(headers or {})}
    if credentials is not None:
        token = base64.b64encode(":".join(credentials).encode()).decode()
        sent["Authorization"] = f"Basic {token}"
    payload = None
    if body is not None:
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        sent.setdefault("Content-Type", "application/json")
    try:
        connection.request(method, path, body=payload, headers=sent)
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()
