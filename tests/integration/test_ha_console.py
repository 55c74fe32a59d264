"""The admin console of a pair (issue 35 #4): the overview shows the role and the last takeover.

Two ``twistd jmsgateway`` processes on one data directory, each with its console; a real
Chromium reads the overview of the standby (``standby``, no takeover), then, after SIGKILL of
the active gateway, of the new active one (``active``, the takeover's time, duration and
recovered messages, as ``/status`` has them).
"""

from __future__ import annotations

from pathlib import Path

from tests.integration.test_admin import http
from tests.integration.test_console import ALICE, USERS, WEAK, api
from tests.support.browser import Console, chromium
from tests.support.standby import accepts, gateway_pair
from tests.support.stomp_clients import Client
from tests.support.waiting import wait_until

CONSOLE = """
users = ["alice"]
roles = { alice = "administrator" }
"""


def test_the_console_shows_the_role_and_the_last_takeover(tmp_path: Path) -> None:
    active, active_admin, standby, standby_admin = gateway_pair(tmp_path, [USERS, WEAK],
                                                                extra_config=CONSOLE)
    try:
        producer = Client(active.address, login="alice", passcode="secret")
        for n in range(7):
            producer.send("/queue/ha.console", f"m-{n}", receipt=True, persistent="true")
        producer.disconnect()
        status, overview = api(standby_admin, "overview")
        assert status == 200, overview
        assert overview["ha"]["role"] == "standby" and overview["ha"]["last_takeover"] is None
        assert api(active_admin, "overview")[1]["ha"]["role"] == "active"
        with chromium() as driver:
            console = Console(driver, standby_admin, ALICE)
            console.open("overview")
            assert console.text('[data-field="ha-role"]') == "standby"
            assert console.text('[data-field="ha-takeover"]') == "none"

            assert active.process is not None
            active.process.kill()
            active.process.wait(15)
            wait_until(lambda: accepts(standby.port), 60, "the standby's STOMP listener")
            last = http(standby_admin, "GET", "/status", ALICE)[1]["last_takeover"]
            assert api(standby_admin, "overview")[1]["ha"]["last_takeover"] == last
            console.open("overview")
            console.wait(lambda: console.text('[data-field="ha-role"]') == "active", what="the role: active")
            shown = console.text('[data-field="ha-takeover"]')
            assert f"{last['duration_seconds']}s, 7 recovered messages" in shown, shown
    finally:
        active.kill()
        standby.kill()
