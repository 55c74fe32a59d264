"""Where ``twistd jmsgateway`` says a start-up failure: the log, and the console when the log is not it."""

from __future__ import annotations

from typing import Any

import pytest
from twisted.python import usage

from gateway.tap import Options, _logs_to_console


@pytest.mark.parametrize(("parent", "expected"), [
    (None, False),
    ({"nodaemon": True, "logfile": None, "syslog": False}, True),
    ({"nodaemon": True, "logfile": "-", "syslog": False}, True),
    ({"nodaemon": True, "logfile": "/var/log/gw.log", "syslog": False}, False),
    ({"nodaemon": True, "logfile": None, "syslog": True}, False),
    ({"nodaemon": False, "logfile": None, "syslog": False}, False),
])
def test_the_console_is_the_log_only_with_nodaemon_and_no_logfile(parent: dict[str, Any] | None,
                                                                   expected: bool) -> None:
    options: usage.Options = Options()
    if parent is not None:
        options.parent = usage.Options()  # (twistd's options: a dict of what it parsed)
        options.parent.update(parent)
    assert _logs_to_console(options) is expected
