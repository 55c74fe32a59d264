"""What a client writes into the gateway's log and ``/metrics`` (black-box, real gateway processes).

docs/operations.md ("Logs") and docs/admin.md ("/metrics"): a client's login, destination names,
client id and header values reach the log and the metrics' labels.  The promise checked: no client
can forge a log line (CR/LF, ANSI escapes) in the text log, every JSON log line stays one JSON
object, a label value with quotes, backslashes or a newline is escaped in the exposition, and one
client cannot grow the metric families without limit by inventing names.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.gateway import GatewayProcess, stopped_after
from tests.support.ports import free_port
from tests.support.raw_stomp import RawStomp
from tests.support.waiting import wait_until

MakeGateway = Callable[..., GatewayProcess]

FORGED = "2026-01-01T00:00:00+0000 [gateway.tap#info] FORGED"
# STOMP 1.2 escapes: \n a line feed, \r a carriage return; ESC and BEL travel as themselves
INJECTION = "x\\n" + FORGED + "\\r" + FORGED + "\x1b[2J\x1b]0;pwned\x07"

AUTH = '[auth]\nallow_weak_passwords = true\nusers = { alice = "secret" }\n'
AUTHORIZATION = """
[[authorization]]
destination = "/queue/ok.*"
read = ["alice"]
write = ["alice"]
"""


def admin_config(port: int) -> str:
    return f'\n[admin]\nlisten = ["tcp:{port}:interface=127.0.0.1"]\n'


def with_logins(workdir: Path, args: list[str]) -> GatewayProcess:
    """A gateway with alice's login and her one grant (the shipped file has an empty [auth] table)."""
    process = GatewayProcess(workdir, args=args)
    text = process.config_path.read_text()
    assert "\n[auth]\n" in text
    process.config_path.write_text(text.replace("\n[auth]\n", "\n" + AUTH, 1) + AUTHORIZATION)
    return process.start()


def admin_gateway(make_gateway: MakeGateway) -> tuple[GatewayProcess, int]:
    port = free_port()
    gateway = make_gateway(admin_config(port))
    gateway.wait_for_log("admin endpoint on")
    return gateway, port


def attack_the_log(gateway: GatewayProcess) -> None:
    """Every place a client's string reaches the log: a refused login, an authorization refusal,
    the connect line's login and client id, an ERROR naming a destination."""
    client = RawStomp(gateway.address)
    client.send(f"CONNECT\naccept-version:1.2\nhost:x\nlogin:{INJECTION}\npasscode:no\n\n\x00")
    client.until_closed()
    client = RawStomp(gateway.address)
    client.connect(extra=f"login:alice\npasscode:secret\nclient-id:{INJECTION}\n")
    client.send(f"SEND\ndestination:/queue/{INJECTION}\nreceipt:r\n\nbody\x00")
    assert client.frame().command == "ERROR"  # refused with its receipt: the connection stays
    client.close()
    client = RawStomp(gateway.address)
    client.connect(extra="login:alice\npasscode:secret\n")
    client.send(f"SUBSCRIBE\nid:{INJECTION}\ndestination:/nowhere/{INJECTION}\nreceipt:r\n\n\x00")
    assert client.frame().command == "ERROR"
    client.close()


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_client_cannot_forge_log_lines(tmp_path: Path, log_format: str) -> None:
    gateway = with_logins(tmp_path / "gw", ["--log-format", log_format])
    with stopped_after(gateway):
        attack_the_log(gateway)
        gateway.wait_for_log("authorization denied")
    raw = gateway.log_path.read_bytes()
    assert b"\x1b" not in raw and b"\x07" not in raw, "a terminal escape reached the log"
    assert b"\r" not in raw, "a carriage return reached the log"
    lines = raw.decode().splitlines()
    assert lines and "FORGED" in raw.decode(), "the attack strings were not logged at all"
    if log_format == "json":
        for line in lines:
            assert isinstance(json.loads(line), dict), line
    else:
        forged = [line for line in lines if line.startswith(FORGED[:10]) or line.startswith("FORGED")]
        assert not forged, f"forged log lines: {forged}"


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        return str(response.read().decode())


def series(exposition: str, family: str) -> list[dict[str, str]]:
    return [sample.labels for metric in text_string_to_metric_families(exposition) if metric.name == family
            for sample in metric.samples]


def test_destination_names_cannot_inject_labels_or_samples(make_gateway: MakeGateway) -> None:
    gateway, port = admin_gateway(make_gateway)
    hostile = '/queue/a"b\\c\nd} forged_metric 1\n# TYPE x counter'
    wire = hostile.replace("\\", "\\\\").replace("\n", "\\n").replace(":", "\\c")
    client = RawStomp(gateway.address)
    client.connect()
    client.send(f"SEND\ndestination:{wire}\nreceipt:r\n\nbody\x00")
    assert client.frame().command == "RECEIPT"
    client.close()
    exposition = scrape(port)
    assert not any(line.startswith(("forged_metric", "# TYPE x")) for line in exposition.splitlines())
    depths = series(exposition, "jmsgateway_broker_destination_messages")
    assert {"destination": hostile} in depths, depths


def test_inventing_transformation_names_does_not_grow_the_metric_families(make_gateway: MakeGateway) -> None:
    """200 SENDs each naming a transformation nobody has: each is refused, and the failures counter
    is not labelled by the invented name (one series a name would grow without limit)."""
    gateway, port = admin_gateway(make_gateway)
    for index in range(200):
        client = RawStomp(gateway.address)
        client.connect()
        client.send(f"SEND\ndestination:/queue/t\ntransformation:invented-{index}\nreceipt:r\n\nbody\x00")
        assert client.frame().command == "ERROR"
        client.close()
    failures = series(scrape(port), "jmsgateway_transform_failures_total")
    assert len(failures) < 10, f"{len(failures)} series: {failures[:5]} ..."


def test_inventing_destination_names_without_messages_does_not_grow_the_metric_families(
        make_gateway: MakeGateway) -> None:
    """A client subscribes to and leaves 300 invented queues, sending nothing: the queues are empty
    and unused, and /metrics should not keep a series for each.  Until 2026-11-29 (a strict xfail) they
    stayed for the life of the process; now ``[broker] inactive_queue_timeout`` (1 s here, 300 s by default)
    collects them, and counts them in ``jmsgateway_broker_queues_collected_total``."""
    port = free_port()
    gateway = make_gateway(admin_config(port), args=["--set", "broker.inactive_queue_timeout=1"])
    gateway.wait_for_log("admin endpoint on")
    before = len(series(scrape(port), "jmsgateway_broker_destination_messages"))
    client = RawStomp(gateway.address)
    client.connect()
    for index in range(300):
        client.send(f"SUBSCRIBE\nid:{index}\ndestination:/queue/invented.{index}\n\n\x00"
                    f"UNSUBSCRIBE\nid:{index}\n\n\x00")
    client.send("DISCONNECT\nreceipt:bye\n\n\x00")
    assert client.frame().command == "RECEIPT"
    client.close()

    def grown() -> int:
        return len(series(scrape(port), "jmsgateway_broker_destination_messages")) - before

    wait_until(lambda: grown() < 50, 15.0, "the invented queues' series to go")
    wait_until(lambda: "jmsgateway_broker_queues_collected_total 300.0" in scrape(port), 10.0,
               "300 queues counted as collected")
    log = gateway.log()
    assert "queues inactive for 1 s ([broker] inactive_queue_timeout)" in log
    assert "/queue/invented.7" not in log, "a line for each collected queue at info"


def log_bytes(gateway: GatewayProcess) -> int:
    """The log's size, rotated files included (twistd rotates at 1 MB)."""
    return sum(path.stat().st_size for path in gateway.log_path.parent.glob(gateway.log_path.name + "*"))


def test_one_connection_cannot_flood_the_log_with_refusals(tmp_path: Path) -> None:
    """Refused SENDs keep the connection (ActiveMQ's rule, docs/security.md), so one client can send
    thousands a second, each naming a 4 KiB destination: the log must not grow with them (the
    counter counts every one), and it must say that refusals are being left out."""
    gateway = with_logins(tmp_path / "gw", [])
    with stopped_after(gateway):
        client = RawStomp(gateway.address)
        client.connect(extra="login:alice\npasscode:secret\n")
        size = log_bytes(gateway)
        name = "/queue/secret." + "x" * 4096
        for batch in range(10):
            client.send("".join(f"SEND\ndestination:{name}{batch}.{index}\nreceipt:{batch}.{index}\n\nb\x00"
                                for index in range(300)))
            for _ in range(300):
                assert client.frame().command == "ERROR"
        client.send("SEND\ndestination:/queue/ok.fine\nreceipt:ok\n\nb\x00")
        assert client.frame().command == "RECEIPT"
        client.close()
        grown = log_bytes(gateway) - size
        assert grown < 100_000, f"the log grew {grown} bytes for 3,000 refusals of one connection"
        assert "not logged" in gateway.log()


def test_headers_a_stomp_1_0_subscriber_cannot_carry_do_not_flood_the_log(make_gateway: MakeGateway) -> None:
    """A 1.2 producer puts a line break in a header of 2,000 messages; a 1.0 subscriber cannot be
    given it (the header is left out and logged): one log line a MESSAGE would let one producer
    write the log at its sending rate."""
    gateway = make_gateway()
    consumer = RawStomp(gateway.address, version="1.0")
    consumer.connect(version="1.0")
    consumer.send("SUBSCRIBE\nid:0\ndestination:/queue/v10\nack:auto\n\n\x00")
    producer = RawStomp(gateway.address)
    producer.connect()
    size = log_bytes(gateway)
    for _ in range(4):
        producer.send("SEND\ndestination:/queue/v10\nx-two:line\\nbreak\n\nm\x00" * 500)
    producer.send("SEND\ndestination:/queue/v10\nreceipt:end\n\nlast\x00")
    assert producer.frame(10).command == "RECEIPT"
    frames = [consumer.frame(10) for _ in range(2001)]
    assert frames[-1].body == b"last" and not any("x-two" in frame.headers for frame in frames)
    grown = log_bytes(gateway) - size
    assert grown < 100_000, f"the log grew {grown} bytes for 2,000 MESSAGEs"
    assert "left out" in gateway.log()
