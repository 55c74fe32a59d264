"""Broken transformer plugins and broken configurations (black-box, real gateway processes).

docs/plugins.md ("Failure policy"): a transformer that raises, returns the wrong type or None,
never answers, or puts values a message cannot hold into its properties fails the message by its
entry's ``on_error``: under ``reject`` the sender gets an ERROR naming the transformer and no
RECEIPT, the log names the transformer and its plugin, nothing is stored, and other connections
carry on.  docs/operations.md ("Signals"): a SIGHUP with a broken file changes nothing and says
why; docs/configuration.md: a bad value stops start-up naming the file and the key.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support.gateway import GatewayProcess, stopped_after
from tests.support.raw_stomp import RawStomp
from tests.support.waiting import wait_until

MakeGateway = Callable[..., GatewayProcess]

HOSTILE_PLUGIN = '''
"""Transformers that misbehave, for tests/integration/test_plugin_config_attacks.py."""
from twisted.internet.defer import Deferred
from zope.interface import implementer
from gateway.interfaces import IMessageTransformer
from gateway.transform import hookimpl


@implementer(IMessageTransformer)
class Broken:
    def __init__(self, name, action):
        self.name = name
        self.action = action

    def transform(self, message, context):
        return self.action(message)


def raises(message):
    raise ValueError("boom from raises")


def bad_properties(message):
    message.properties["x-object"] = object()
    message.properties["x-list"] = [1, 2]
    return message


def bad_key(message):
    message.properties[7] = "seven"
    return message


@hookimpl
def jmsgateway_transformers(config):
    return [
        Broken("raises", raises),
        Broken("wrong-type", lambda message: 42),
        Broken("returns-none", lambda message: None),
        Broken("never-answers", lambda message: Deferred()),
        Broken("bad-properties", bad_properties),
        Broken("bad-key", bad_key),
    ]
'''

NAMES = ["raises", "wrong-type", "returns-none", "never-answers", "bad-properties", "bad-key"]

CHAIN = "".join(f"""
[[transform.chain]]
transformer = "{name}"
destinations = ["/queue/in.{name}"]
direction = "inbound"
timeout = 1.0

[[transform.chain]]
transformer = "{name}"
destinations = ["/queue/out.{name}"]
direction = "outbound"
timeout = 1.0
""" for name in NAMES) + """
[[transform.chain]]
transformer = "raises"
destinations = ["/queue/dl.*"]
on_error = "dead-letter"
dead_letter = "/queue/DLQ.hostile"

[[transform.chain]]
transformer = "raises"
destinations = ["/queue/skip.*"]
on_error = "skip"
"""


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    workdir = tmp_path_factory.mktemp("hostile")
    (workdir / "plugins").mkdir()
    (workdir / "plugins" / "hostile.py").write_text(HOSTILE_PLUGIN)
    process = GatewayProcess(workdir, CHAIN).start()
    yield process
    process.stop()


def send(gateway: GatewayProcess, destination: str, body: str = "hello") -> RawStomp:
    client = RawStomp(gateway.address)
    client.connect()
    client.send(f"SEND\ndestination:{destination}\nreceipt:r\npersistent:true\n\n{body}\x00")
    return client


def nothing_stored(gateway: GatewayProcess, destination: str) -> None:
    reader = RawStomp(gateway.address)
    reader.connect()
    reader.send(f"SUBSCRIBE\nid:0\ndestination:{destination}\nack:auto\n\n\x00")
    item = reader.item(0.5)
    reader.close()
    assert item is None, f"something reached {destination}: {item}"


def healthy(gateway: GatewayProcess) -> None:
    client = send(gateway, "/queue/bystander")
    assert client.frame(3).command == "RECEIPT"
    client.close()


@pytest.mark.parametrize("name", NAMES)
def test_a_broken_inbound_transformer_rejects_the_send_and_names_itself(hostile: GatewayProcess, name: str) -> None:
    started = time.monotonic()
    client = send(hostile, f"/queue/in.{name}")
    frame = client.frame(5)
    client.close()
    assert frame.command == "ERROR", f"{name}: {frame}"
    assert name in frame.headers.get("message", "") + frame.body.decode(errors="replace"), frame
    assert time.monotonic() - started < 3.0
    log = hostile.wait_for_log(name)
    lines = [line for line in log.splitlines() if name in line and "hostile" in line]
    assert lines, f"no log line names the transformer {name} and its plugin:\n{log[-3000:]}"
    nothing_stored(hostile, f"/queue/in.{name}")
    healthy(hostile)


@pytest.mark.parametrize("name", NAMES)
def test_a_broken_outbound_transformer_keeps_the_message_and_other_subscribers(
        hostile: GatewayProcess, name: str) -> None:
    """The delivery is refused (docs: `Rejected`); the message is not lost: it is still there for a
    subscriber once the chain no longer runs (here: a second subscriber on the same queue that the
    chain rejects as well: the message stays in the queue, and the gateway serves others)."""
    destination = f"/queue/out.{name}"
    client = send(hostile, destination, "keep me")
    assert client.frame(3).command == "RECEIPT"
    client.close()
    reader = RawStomp(hostile.address)
    reader.connect()
    reader.send(f"SUBSCRIBE\nid:0\ndestination:{destination}\nack:client-individual\n\n\x00")
    item = reader.item(2.5)
    assert item is None or getattr(item, "command", "") == "ERROR", f"{name}: delivered {item}"
    reader.close()
    healthy(hostile)


def test_the_dead_letter_policy_keeps_the_message_as_it_arrived(hostile: GatewayProcess) -> None:
    client = send(hostile, "/queue/dl.orders", "original")
    assert client.frame(3).command == "RECEIPT"
    client.close()
    reader = RawStomp(hostile.address)
    reader.connect()
    reader.send("SUBSCRIBE\nid:0\ndestination:/queue/DLQ.hostile\nack:auto\n\n\x00")
    frame = reader.frame(5)
    reader.close()
    assert frame.body == b"original"
    assert frame.headers.get("JMSGW_TRANSFORMER") == "raises"
    assert frame.headers.get("JMSGW_ORIGINAL_DESTINATION") == "/queue/dl.orders"
    assert "boom from raises" in frame.headers.get("dlqDeliveryFailureCause", "")


def log_bytes(gateway: GatewayProcess) -> int:
    """The log's size, rotated files included (twistd rotates at 1 MB)."""
    return sum(path.stat().st_size for path in gateway.log_path.parent.glob(gateway.log_path.name + "*"))


def test_a_transformer_failing_on_every_message_does_not_flood_the_log(hostile: GatewayProcess) -> None:
    """Under `skip` every message goes on and every failure is logged (docs/plugins.md), with its
    traceback: one client's 2,000 SENDs must not write a traceback each; the counter counts all."""
    size = log_bytes(hostile)
    client = RawStomp(hostile.address)
    client.connect()
    for batch in range(4):
        client.send("".join(f"SEND\ndestination:/queue/skip.flood\nreceipt:{batch}.{index}\n\nm\x00"
                            for index in range(500)))
        for _ in range(500):
            assert client.frame(5).command == "RECEIPT"
    client.close()
    grown = log_bytes(hostile) - size
    assert grown < 100_000, f"the log grew {grown} bytes for 2,000 failures of one transformer"
    assert "not logged" in hostile.log()


# --- configuration: start and reload -------------------------------------------------------------


@pytest.mark.parametrize(("extra", "key"), [
    ("[stomp]\nmax_frame_size = -1\n", "stomp.max_frame_size"),
    ("[stomp]\nheartbeat_grace = \"soon\"\n", "stomp.heartbeat_grace"),
    ("[stomp]\nmax_frame_size = 1e3\n", "stomp.max_frame_size"),
    ("[broker]\nmax_redeliveries = -5\n", "broker.max_redeliveries"),
    ("[transform]\ntimeout = -1\n", "transform.timeout"),
    ("[[transform.chain]]\ntransformer = \"no-such\"\n", "transform.chain[0]"),
    ("[connectors.amq]\nuri = \"stomp://127.0.0.1:1\"\nsend_timeout = 0\n", "connectors.amq.send_timeout"),
    ("[connectors.amq]\nuri = \"stomp://127.0.0.1:1\"\nheartbeat = [1]\n", "connectors.amq.heartbeat"),
    ("[connectors.amq]\nuri = \"stomp://127.0.0.1:1\"\nfailure_retry_interval = 0\n",
     "connectors.amq.failure_retry_interval"),
    ("[connectors.amq]\nuri = \"stmop://127.0.0.1:1\"\n", "connectors.amq"),
    ("[gateway]\nlog_level = \"loud\"\n", "gateway.log_level"),
    ("[stomp]\nmax_connections = \"many\"\n", "stomp.max_connections"),
    ("[[bridges]]\nsource = { connector = \"embedded\", destination = \"/queue/a\" }\n"
     "target = { connector = \"embedded\", destination = \"/queue/b\" }\nqos = \"EXACTLY_ONCE\"\n",
     "bridges[0].qos"),
    ("[[bridges]]\nsource = { connector = \"embedded\", destination = \"/queue/a\" }\n"
     "target = { connector = \"embedded\", destination = \"/queue/b\" }\nmax_batch_time = \"fast\"\n",
     "bridges[0].max_batch_time"),
    ("[[transform.chain]]\ntransformer = \"compress\"\noptions = { level = 42 }\n", "transform.chain[0]"),
    ("[[destinations]]\npattern = \"/queue/x.*\"\nconnector = \"nowhere\"\n", "destinations[0].connector"),
])
def test_a_bad_value_stops_start_up_naming_the_file_and_the_key(tmp_path: Path, extra: str, key: str) -> None:
    process = GatewayProcess(tmp_path / "gw")
    text = process.config_path.read_text()
    section, setting = extra.split("\n")[0], extra.split("\n")[-2]
    name = setting.split(" = ")[0]
    existing = re.search(rf"^{re.escape(name)} = .*$", text, re.MULTILINE)
    if section in text.splitlines() and existing is not None:
        text = text[:existing.start()] + setting + text[existing.end():]  # the shipped file sets it: replace
    elif section in text.splitlines():
        text = text.replace(section + "\n", section + "\n" + setting + "\n", 1)
    else:
        text += "\n" + extra
    process.config_path.write_text(text)
    output = process.start_fails()
    assert key in output, f"{key} not named:\n{output[-2000:]}"
    assert str(process.config_path) in output or "jmsgateway.toml" in output, output[-2000:]
    assert "Traceback" not in output, output[-3000:]


def test_a_reload_with_a_broken_file_keeps_the_old_configuration_under_traffic(tmp_path: Path) -> None:
    process = GatewayProcess(tmp_path / "gw").start()
    with stopped_after(process):
        good = process.config_path.read_text()
        consumer = RawStomp(process.address)
        consumer.connect()
        consumer.send("SUBSCRIBE\nid:0\ndestination:/queue/flow\nack:auto\n\n\x00")
        producer = RawStomp(process.address)
        producer.connect()
        lines = good.splitlines()
        broken_line = len(lines) + 2
        process.config_path.write_text(good + "\n[stomp\nmax_frame_size = 1\n")
        assert process.process is not None
        received = 0
        for index in range(200):
            producer.send(f"SEND\ndestination:/queue/flow\n\nm{index}\x00")
            if index == 50:
                process.process.send_signal(signal.SIGHUP)
        producer.send("SEND\ndestination:/queue/flow\nreceipt:end\n\nlast\x00")
        assert producer.frame(5).command == "RECEIPT"
        while received < 201:
            frame = consumer.frame(5)
            assert frame.command == "MESSAGE"
            received += 1
        log = process.wait_for_log("not reloaded")
        line = next(line for line in log.splitlines() if "not reloaded" in line)
        assert "jmsgateway.toml" in line and f"line {broken_line}" in line, line
        # a second reload with a bad value (valid TOML) names the key
        process.config_path.write_text(re.sub(r"^max_frame_size = .*$", "max_frame_size = -3", good,
                                              count=1, flags=re.MULTILINE))
        process.process.send_signal(signal.SIGHUP)
        wait_until(lambda: process.log().count("not reloaded") >= 2, 10, "the second refusal")
        second = [line for line in process.log().splitlines() if "not reloaded" in line][1]
        assert "stomp.max_frame_size" in second, second
        producer.send("SEND\ndestination:/queue/flow\nreceipt:after\n\nafter\x00")
        assert producer.frame(5).command == "RECEIPT"
        assert consumer.frame(5).body == b"after"
