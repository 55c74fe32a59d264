"""No secret leaves the process (issue 33 #2): connector passwords as ``***`` on every admin page.

A gateway with a ``stomp://user:PASS@host`` connector, a JMS connector whose
provider URL and JNDI credentials carry passwords, and a Kafka connector with a
SASL password: the pages (/health, /status, /bridges, /metrics, the console's
API) and the connectors' own descriptions never show one.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from zope.interface import implementer

from gateway.admin.console import ConsoleRoot
from gateway.admin.site import admin_resource
from gateway.connectors.jms_settings import JmsSettings
from gateway.errors import ConfigError
from gateway.interfaces import Health, IStatusReporting
from gateway.message.model import TextMessage
from gateway.security.redaction import MASK, redact, redact_text
from tests.unit.test_admin import call, gateway_for
from tests.unit.test_console_api import call as console_call

SECRETS = ("S3cretPass", "JndiPw0rd", "SaslPw0rd", "UrlPw0rd")


@pytest.mark.parametrize(("text", "shown"), [
    ("stomp://gwuser:S3cretPass@127.0.0.1:61613", "stomp://gwuser:***@127.0.0.1:61613"),
    ("cannot connect to stomp+ssl://u:p%40ss@h:1: refused", "cannot connect to stomp+ssl://u:***@h:1: refused"),
    ("tcp://a:b@h1:1,tcp://c:d@h2:2", "tcp://a:***@h1:1,tcp://c:***@h2:2"),
    ("failover:(tcp://h:61616)?password=x1&user=y", "failover:(tcp://h:61616)?password=***&user=y"),
    ("sasl.password=S3cret, other=1", "sasl.password=***, other=1"),
    ("stomp://127.0.0.1:61613 and user@example.org", "stomp://127.0.0.1:61613 and user@example.org"),
    ("stomp://gwuser@127.0.0.1:61613", "stomp://gwuser@127.0.0.1:61613"),
])
def test_redact_text_hides_url_and_pair_passwords(text: str, shown: str) -> None:
    assert redact_text(text) == shown


def test_redact_masks_secret_keys_and_walks_documents() -> None:
    document = {"password": "x", "sasl.password": "y", "java.naming.security.credentials": "z",
                "login": "gw", "passcode": None, "nested": [{"uri": "stomp://a:b@h"}], "count": 3}
    assert redact(document) == {"password": MASK, "sasl.password": MASK, "java.naming.security.credentials": MASK,
                                "login": "gw", "passcode": None, "nested": [{"uri": "stomp://a:***@h"}], "count": 3}


CONNECTORS = {
    "connectors": {
        "amq": {"uri": "stomp://gwuser:S3cretPass@127.0.0.1:1"},
        "kafka": {"uri": "kafka://127.0.0.1:2", "producer": {"sasl.username": "k", "sasl.password": "SaslPw0rd"}},
    },
    "bridges": [{"name": "copy", "source": {"connector": "amq", "destination": "/queue/a"},
                 "target": {"connector": "embedded", "destination": "/queue/b"}}],
}


def shown(document: Any) -> bytes | str:
    return document if isinstance(document, bytes | str) else json.dumps(document)


@pytest.mark.parametrize("path", ["/health", "/status", "/bridges", "/metrics", "/console/api/overview",
                                  "/console/api/bridges", "/console/api/routes", "/"])
def test_no_page_shows_a_connector_password(path: str) -> None:
    gateway = gateway_for(CONNECTORS)
    _, document = call(admin_resource(gateway, gateway.admin), "GET", path)
    text = shown(document)
    text = text.decode() if isinstance(text, bytes) else text
    assert not any(secret in text for secret in SECRETS), f"{path} shows a password: {text}"
    if path in ("/health", "/status", "/console/api/overview"):
        assert "gwuser:***@127.0.0.1:1" in text


def test_connectors_describe_themselves_without_passwords() -> None:
    gateway = gateway_for(CONNECTORS)
    amq = gateway.connectors["amq"]
    assert "S3cretPass" not in amq.settings.uri and amq.settings.passcode == "S3cretPass"
    assert "S3cretPass" not in amq.health().detail and "S3cretPass" not in json.dumps(amq.status())


def test_a_jms_provider_is_named_without_its_password() -> None:
    jndi = JmsSettings("amq", (), "javax", user="gw", password="JndiPw0rd", jndi_environment=(
        ("java.naming.provider.url", "failover:(tcp://gw:UrlPw0rd@127.0.0.1:61616)?password=JndiPw0rd"),
        ("java.naming.security.credentials", "JndiPw0rd")))
    assert jndi.provider == "failover:(tcp://gw:***@127.0.0.1:61616)?password=***"
    factory = JmsSettings("amq", (), "javax", factory_class="F",
                          factory_properties=(("brokerURL", "tcp://u:UrlPw0rd@h:1"),))
    assert factory.provider == "tcp://u:***@h:1"


@implementer(IStatusReporting)
class Talkative:
    """A connector whose own status and health name its secrets (as a third-party one might)."""

    def health(self) -> Health:
        return Health(False, "cannot reach tcp://gw:UrlPw0rd@10.0.0.1:1 (sasl.password=SaslPw0rd)")

    def status(self) -> dict[str, Any]:
        return {"password": "JndiPw0rd", "url": "amqp://gw:UrlPw0rd@h", "options": {"sasl.password": "SaslPw0rd"}}


@pytest.mark.parametrize("path", ["/health", "/status", "/console/api/overview"])
def test_the_admin_endpoint_hides_what_a_connector_lets_slip(path: str) -> None:
    gateway = gateway_for({})
    gateway.connectors["talkative"] = Talkative()
    _, document = call(admin_resource(gateway, gateway.admin), "GET", path)
    text = json.dumps(document)
    assert "talkative" in text and MASK in text
    assert not any(secret in text for secret in SECRETS), text


def test_browsing_shows_a_message_as_it_is() -> None:
    gateway = gateway_for({})
    gateway.broker.send(TextMessage(destination="/queue/a", message_id="ID:1", text="password=kept"))
    code, document = console_call(ConsoleRoot(gateway), "GET", "/api/browse", args={b"destination": [b"/queue/a"]})
    assert code == 200 and document["messages"][0]["body_preview"] == "password=kept"


def test_a_bad_connector_uri_is_named_without_its_password() -> None:
    with pytest.raises(ConfigError) as caught:
        gateway_for({"connectors": {"amq": {"uri": "stomp://gw:S3cretPass@127.0.0.1:notaport"}}})
    assert "S3cretPass" not in str(caught.value) and "gw:***@127.0.0.1" in str(caught.value)
