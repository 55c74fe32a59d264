"""Weak passwords and login timing (issue 33 #14): plain text and low bcrypt costs stop start-up
unless ``[auth] allow_weak_passwords``; every check of a name costs what a configured login's does."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.cred.credentials import UsernamePassword
from twisted.logger import LogLevel, globalLogPublisher

from gateway.errors import ConfigError
from gateway.security import passwords
from gateway.security.auth import build_portal, configured_passwords
from gateway.security.passwords import PasswordChecker, bcrypt_cost, hash_password, weak_password
from gateway.security.settings import AuthSettings
from tests.support.log_events import observer

STRONG = hash_password("root-pw", rounds=10)
WEAK = hash_password("bob-pw", rounds=4)


def test_weakness() -> None:
    assert weak_password("secret") == "stored in plain text"
    assert weak_password(WEAK) == "a bcrypt hash of cost 4 (below 10)"
    assert weak_password(STRONG) is None
    assert bcrypt_cost(STRONG) == 10 and bcrypt_cost("plain") is None


@pytest.mark.parametrize(("password", "what"), [("secret", "plain text"), (WEAK, "cost 4")],
                         ids=["plain text", "cost 4"])  # (fixed ids: a salted hash differs in each xdist worker)
def test_a_weak_password_stops_start_up_naming_the_login_and_key(password: str, what: str) -> None:
    with pytest.raises(ConfigError, match="allow_weak_passwords") as caught:
        build_portal(AuthSettings(users={"root": STRONG, "carol": password}))
    assert caught.value.key == "auth.users.carol"
    assert "'carol'" in str(caught.value) and what in str(caught.value)


def test_a_weak_password_in_the_password_file_names_the_file(tmp_path: Any) -> None:
    path = tmp_path / "users.txt"
    path.write_text("dave:plain\n")
    with pytest.raises(ConfigError) as caught:
        build_portal(AuthSettings(password_file=str(path)))
    assert caught.value.key == "auth.password_file"


def test_allowed_weak_passwords_are_warned_about_once_per_login() -> None:
    seen: list[str] = []

    def observe(event: dict[str, Any]) -> None:
        if event.get("log_level") == LogLevel.warn and "login" in event:
            seen.append(event["log_format"].format(**event))

    globalLogPublisher.addObserver(observer(observe))
    try:
        configured_passwords(AuthSettings(users={"root": STRONG, "carol": "secret", "bob": WEAK},
                                          allow_weak_passwords=True))
    finally:
        globalLogPublisher.removeObserver(observer(observe))
    assert len(seen) == 2
    assert any("'carol' (auth.users.carol) is stored in plain text" in line for line in seen)
    assert any("'bob' (auth.users.bob) is a bcrypt hash of cost 4" in line for line in seen)


class SyncReactor:
    """Runs "threaded" work at once (the test only looks at which hashes were checked)."""

    def getThreadPool(self) -> SyncReactor:
        return self

    def callInThreadWithCallback(self, on_result: Any, f: Any, *args: Any, **kwargs: Any) -> None:
        on_result(True, f(*args, **kwargs))

    def callFromThread(self, f: Any, *args: Any, **kwargs: Any) -> None:
        f(*args, **kwargs)


def checked_hashes(checker: PasswordChecker, login: str, monkeypatch: pytest.MonkeyPatch) -> list[int | None]:
    costs: list[int | None] = []
    real = passwords.password_matches

    def spy(password: bytes, configured: str) -> bool:
        costs.append(bcrypt_cost(configured))
        return real(password, configured)

    monkeypatch.setattr(passwords, "password_matches", spy)
    result = checker.requestAvatarId(UsernamePassword(login.encode(), b"guess"))
    result.addErrback(lambda _: None)
    return costs


def test_every_name_costs_a_configured_logins_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """An unknown login: a dummy of a configured cost; a weak known one: padded with such a dummy."""
    checker = PasswordChecker({"root": STRONG, "carol": "secret", "bob": WEAK}, SyncReactor())
    configured = {4, 10}
    for name in ("nobody", "x", "admin", "guest"):
        [cost] = checked_hashes(checker, name, monkeypatch)
        assert cost in configured
    assert checked_hashes(checker, "root", monkeypatch) == [10]
    carol = checked_hashes(checker, "carol", monkeypatch)
    assert carol[0] is None and carol[1] in configured  # plain text, then a bcrypt check all the same


def test_all_plain_text_stays_plain(monkeypatch: pytest.MonkeyPatch) -> None:
    """(development: no bcrypt anywhere, an unknown login compares plain text like the others)"""
    checker = PasswordChecker({"carol": "secret"}, SyncReactor())
    assert checked_hashes(checker, "nobody", monkeypatch) == [None]
