"""The ``[[authorization]]`` entries and test logins that the security tests write into a gateway's config.

One place renders an entry (:func:`grant`); the entries and ``--set`` arguments several test modules
start their secured gateways with are named here (:data:`ROOT_GRANT`, :data:`KAFKA_GRANTS`,
:data:`ROOT_AND_ALICE`).
"""

from __future__ import annotations

import json


def grant(destination: str, **permissions: list[str]) -> str:
    """One ``[[authorization]]`` entry as TOML: ``permissions`` maps read / write / admin to who holds it."""
    lines = [f'destination = "{destination}"'] + [f"{kind} = {json.dumps(who)}" for kind, who in permissions.items()]
    return "\n[[authorization]]\n" + "\n".join(lines) + "\n"


ROOT_GRANT = grant("/*", read=["root"], write=["root"], admin=["root"])
"""root reads, writes and administers every destination: the first entry of a test's deny-by-default gateway."""

KAFKA_GRANTS = grant("/queue/kafka.*", read=["alice"], write=["alice"]) + grant(
    "/topic/kafka.*", read=["alice", "eve"], write=["alice"])
"""One Kafka topic under two STOMP names (issue 9): alice holds both, eve may read only the topic name."""


def weak_logins(**passwords: str) -> list[str]:
    """``--set`` arguments giving the gateway these logins with plain-text passwords (weak ones allowed:
    quick test gateways only)."""
    users = ", ".join(f'{login} = "{password}"' for login, password in passwords.items())
    return ["--set", f"auth.users={{ {users} }}", "--set", "auth.allow_weak_passwords=true"]


ROOT_AND_ALICE = weak_logins(root="r00t!x", alice="alice-pw")
"""root (password ``r00t!x``) and alice (``alice-pw``)."""
