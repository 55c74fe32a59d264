"""The embedded broker: queues, topics, durable subscriptions, redelivery,
dead letters, expiry and priorities, behind the IConnector interface."""

from gateway.broker.broker import EmbeddedBroker

__all__ = ["EmbeddedBroker"]
