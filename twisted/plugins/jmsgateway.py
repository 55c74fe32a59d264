"""twistd plugin: ``twistd jmsgateway`` (see gateway.tap), and the ``mtls:`` listener (gateway.security.tls_server)."""

from twisted.application.service import ServiceMaker

from gateway.security.tls_server import MutualTlsServerParser

jmsgateway = ServiceMaker("jmsgateway", "gateway.tap", "A plugin-based STOMP gateway broker.", "jmsgateway")
mtls = MutualTlsServerParser()
