"""The verified sender identity stamped on every SEND the gateway accepts.

ActiveMQ's ``populateJMSXUserID`` and RabbitMQ's validated ``user-id``: a
consumer can trust who sent a message only if the gateway, not the client,
says so.  On a SEND from an authenticated connection ``JMSXUserID`` and
``user-id`` are set to the login, overwriting what the client wrote; without
authentication (no ``[auth]`` users) they are removed, since nothing was
verified.  A ``login`` or ``passcode`` header on a SEND is removed in both
cases (a passcode never travels on with a message).

The headers become message properties like any other, so they reach STOMP
subscribers, ActiveMQ (``JMSXUserID``) and Kafka (``jms.JMSXUserID``).  This
module only edits a SEND's headers; the session calls it once per SEND.
"""

from __future__ import annotations

USER_ID_PROPERTY = "JMSXUserID"
"""The JMS property naming the sender's verified login."""

USER_ID_HEADER = "user-id"
"""The same login under RabbitMQ's header name."""

CREDENTIAL_HEADERS = ("login", "passcode")
"""CONNECT headers that have no business on a SEND."""

_CLAIMS = (USER_ID_PROPERTY, USER_ID_HEADER, *CREDENTIAL_HEADERS)

IDENTITY_HEADERS = frozenset(_CLAIMS)
"""Every header :func:`stamp_sender` sets or removes: without a verified login, a SEND with none of
them has nothing to stamp (the sender asks this once, a C-level test, before calling it)."""


def stamp_sender(headers: dict[str, str], verified_login: str | None) -> None:
    """Set (``verified_login`` given) or remove (None) the identity headers of a SEND,
    and remove its ``login`` and ``passcode`` headers, in place."""
    if verified_login is None:
        for name in _CLAIMS:
            headers.pop(name, None)
        return
    for name in CREDENTIAL_HEADERS:
        headers.pop(name, None)
    headers[USER_ID_PROPERTY] = verified_login
    headers[USER_ID_HEADER] = verified_login
