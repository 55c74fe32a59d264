"""contrib/jmsgateway.service is a unit systemd accepts, with what an operator expects in it.

``systemd-analyze`` comes with the Debian package ``systemd`` (scripts/install-system-deps.sh installs
it); the test fails, never skips, without it.  ``verify`` checks that the ExecStart binary exists, so
the unit is checked with its path pointed at this venv's twistd.
"""

from __future__ import annotations

import configparser
import shutil
import subprocess
from pathlib import Path

from tests.support.gateway import REPO, TWISTD

UNIT = REPO / "contrib" / "jmsgateway.service"
INSTALLED_TWISTD = "/opt/jmsgateway/bin/twistd"


def analyze() -> str:
    found = shutil.which("systemd-analyze")
    assert found, "systemd-analyze is missing: run scripts/install-system-deps.sh (Debian package systemd)"
    return found


def local_unit(tmp_path: Path) -> Path:
    text = UNIT.read_text()
    assert INSTALLED_TWISTD in text
    unit = tmp_path / "jmsgateway.service"
    unit.write_text(text.replace(INSTALLED_TWISTD, TWISTD))
    return unit


def test_systemd_analyze_verify_accepts_the_unit_without_a_warning(tmp_path: Path) -> None:
    result = subprocess.run([analyze(), "verify", str(local_unit(tmp_path))], capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "" and result.stderr.strip() == "", result.stdout + result.stderr


def test_verify_would_catch_a_bad_unit(tmp_path: Path) -> None:
    unit = tmp_path / "jmsgateway.service"
    unit.write_text(UNIT.read_text().replace("ExecReload=", "ExecRelaod="))
    result = subprocess.run([analyze(), "verify", str(unit)], capture_output=True, text=True, timeout=60)
    assert "Unknown key 'ExecRelaod'" in result.stderr
    assert "is not executable" in result.stderr  # /opt/jmsgateway/bin/twistd does not exist here


def test_the_unit_is_hardened_enough_for_systemd(tmp_path: Path) -> None:
    result = subprocess.run([analyze(), "security", "--offline=yes", str(local_unit(tmp_path))],
                            capture_output=True, text=True, timeout=60)
    overall = [line for line in result.stdout.splitlines() if "Overall exposure level" in line]
    assert overall and float(overall[0].split(":")[1].split()[0]) <= 2.5, result.stdout[-2000:]


def test_the_unit_has_what_an_operator_expects() -> None:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(UNIT.read_text())
    service = parser["Service"]
    assert service["Type"] in ("simple", "notify")
    assert service["User"] == "jmsgateway" and service["Group"] == "jmsgateway"
    assert int(service["LimitNOFILE"]) >= 65536
    assert service["ExecReload"] == "/bin/kill -HUP $MAINPID"
    assert "--nodaemon" in service["ExecStart"] and "--data-dir /var/lib/jmsgateway" in service["ExecStart"]
    for key in ("NoNewPrivileges", "ProtectSystem", "ProtectHome", "PrivateTmp", "RestrictAddressFamilies",
                "SystemCallFilter", "CapabilityBoundingSet", "StateDirectory"):
        assert key in service, key
    assert (REPO / "contrib" / "jmsgateway.sysusers.conf").read_text().count("u jmsgateway ") == 1
