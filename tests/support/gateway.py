"""Run the real gateway as a separate ``twistd -n jmsgateway`` process.

:class:`GatewayProcess` writes a config file (the default one plus TOML
the test adds), starts twistd on a free port with its own data directory,
waits until the gateway process itself listens on that port (something else that took the port
accepts connections too), and can stop (SIGTERM), kill (SIGKILL) and
start again on the same data.  Benchmarks use it too.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from tests.support.ports import free_port, listening_ports, wait_for_port
from tests.support.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
TWISTD = str(Path(sys.executable).with_name("twistd"))


class GatewayProcess:
    """A gateway process on 127.0.0.1:``port`` with its config and data in ``workdir``."""

    def __init__(self, workdir: Path, extra_config: str = "", *, args: list[str] | None = None,
                 port: int | None = None) -> None:
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.config_path = self.workdir / "jmsgateway.toml"
        self.data_dir = self.workdir / "data"
        self.log_path = self.workdir / "twistd.log"
        self.args = list(args or [])
        self.config_path.write_text(default_config() + "\n" + extra_config)
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def command(self) -> list[str]:
        return [
            TWISTD, "-n", "--pidfile=", f"--logfile={self.log_path}", "jmsgateway",
            "--config", str(self.config_path), "--listen", f"tcp:{self.port}:interface=127.0.0.1",
            "--data-dir", str(self.data_dir), *self.args,
        ]

    def start(self, timeout: float = 30.0) -> GatewayProcess:
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.process = subprocess.Popen(
            self.command(), cwd=str(self.workdir), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                output = self.process.stdout.read().decode(errors="replace") if self.process.stdout else ""
                raise RuntimeError(f"gateway exited with {self.process.returncode}:\n{output}\n{self.log()}")
            if self.port in listening_ports(self.process.pid):  # (the gateway, not whoever took the port)
                wait_for_port(self.port, timeout=max(1.0, deadline - time.monotonic()))
                return self
            if time.monotonic() > deadline:
                self.kill()
                raise RuntimeError(f"gateway did not listen on {self.port}:\n{self.log()}")
            time.sleep(0.1)

    def start_fails(self, timeout: float = 30.0) -> str:
        """Start a gateway that must refuse to start; its output and log (AssertionError if it runs on).

        Waits for the process to end, not for a port: a listener that fails may
        come after one that already accepts."""
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.process = subprocess.Popen(
            self.command(), cwd=str(self.workdir), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
        )
        try:
            output, _ = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"the gateway kept running:\n{self.log()}") from None
        assert self.process.returncode != 0, f"the gateway ended with status 0:\n{self.log()}"
        return output.decode(errors="replace") + "\n" + self.log()

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def wait_for_log(self, text: str, timeout: float = 10.0) -> str:
        """The log once it contains ``text`` (AssertionError with the log after ``timeout``).

        :meth:`start` returns when the first listener accepts; what the
        gateway logs about the listeners after it may not be written yet."""
        try:
            wait_until(lambda: text in self.log(), timeout, f"{text!r} in the gateway's log")
        except AssertionError as error:
            raise AssertionError(f"{error}:\n{self.log()}") from None
        return self.log()

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM and wait; returns the exit code."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else None
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait(timeout)

    def kill(self) -> None:
        """SIGKILL: a crash, nothing flushed."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(15)

    def restart(self) -> GatewayProcess:
        self.stop()
        return self.start()


def default_config() -> str:
    """The shipped default config (listen and data dir are given on the command line)."""
    return (REPO / "etc" / "jmsgateway.toml").read_text()


@contextlib.contextmanager
def stopped_after(gateway: GatewayProcess) -> Iterator[GatewayProcess]:
    """Runs the block with ``gateway``: prints the tail of its log if the block fails, stops it afterwards."""
    try:
        yield gateway
    except BaseException:
        print(gateway.log()[-4000:])
        raise
    finally:
        gateway.stop()
