"""twistd plugin: ``twistd jmsgateway`` (see gateway.tap)."""

from twisted.application.service import ServiceMaker

jmsgateway = ServiceMaker("jmsgateway", "gateway.tap", "A plugin-based STOMP gateway broker.", "jmsgateway")
