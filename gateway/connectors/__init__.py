"""Connectors: the places messages go to and come from (embedded broker,
JMS brokers over STOMP, Kafka), and the map from destinations to them."""
