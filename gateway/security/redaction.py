"""Secrets kept inside the process: the text and documents the gateway shows, with passwords as ``***``.

:func:`redact_text` hides the password of every URL with credentials
(``scheme://user:PASS@host`` → ``scheme://user:***@host``) and of every
``password=…`` / ``sasl.password=…`` pair in a text; :func:`redact` does the same to
every string of a JSON-ready document and replaces the value of every key
that names a secret (``password``, ``passcode``, ``sasl.password``,
``java.naming.security.credentials``, ``secret``, ``token``) with ``***``.

Connectors and bridges describe themselves through these (health, status,
log lines, error messages) and the admin endpoint passes every document it
serves through :func:`redact`, so a secret from the configuration never
reaches a page, a log, a metric label or an ERROR frame.  Pure: imports
nothing of the gateway.
"""

from __future__ import annotations

import re
from typing import Any

MASK = "***"
"""What a secret is shown as."""

_URL_PASSWORD = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.\-]*://[^\s:/@?#\[\]'\"]*:)(?P<secret>[^\s/@?#'\"]+)(?=@)")
"""The password of ``scheme://user:PASS@``."""

_SECRET_WORDS = r"(?:password|passcode|passwd|credentials|secret|token)"
_PAIR = re.compile(rf"(?P<head>[\w.\-]*{_SECRET_WORDS}\s*=\s*)(?P<secret>[^\s,;&'\"}})]+)", re.IGNORECASE)
"""``password=PASS`` / ``passcode=PASS`` / ``sasl.password=PASS`` in free text."""

_SECRET_KEY = re.compile(rf"(?:^|[._\-]){_SECRET_WORDS}$", re.IGNORECASE)


def is_secret_key(key: str) -> bool:
    """Whether a configuration or document key names a secret (``password``, ``sasl.password`` …)."""
    return bool(_SECRET_KEY.search(key))


def redact_text(text: str) -> str:
    """``text`` with the password of every credentialed URL and every ``password=`` pair as ``***``."""
    if "://" in text:
        text = _URL_PASSWORD.sub(lambda m: m.group("head") + MASK, text)
    return _PAIR.sub(lambda m: m.group("head") + MASK, text)


def redact(document: Any) -> Any:
    """A copy of a JSON-ready ``document`` (dicts, lists, tuples, strings, numbers) with its secrets as
    ``***``: every string through :func:`redact_text`, every value under a secret-naming key masked."""
    if isinstance(document, str):
        return redact_text(document)
    if isinstance(document, dict):
        return {key: (MASK if isinstance(key, str) and is_secret_key(key) and value not in (None, "")
                      else redact(value))
                for key, value in document.items()}
    if isinstance(document, list | tuple):
        return [redact(item) for item in document]
    return document
