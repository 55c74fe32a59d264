"""twistd plugin: ``twistd jmsgateway`` (see gateway.tap), and the ``mtls:`` listener (gateway.tls_server)."""

from twisted.application.service import ServiceMaker

from gateway.tls_server import MutualTlsServerParser

jmsgateway = ServiceMaker("jmsgateway", "gateway.tap", "A plugin-based STOMP gateway broker.", "jmsgateway")
mtls = MutualTlsServerParser()
