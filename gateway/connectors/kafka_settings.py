"""The ``kafka://`` connector's ``[connectors.NAME]`` table, declared (the options are
described in :mod:`gateway.connectors.kafka`).  Imports no Kafka client."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import Field, model_validator

from gateway.schema import Bool, KeyProblem, NotNegative, Positive, Seconds, Section, Str, Table, validate


class KafkaSettings(Section):
    """A Kafka cluster (any Kafka-protocol broker) through confluent-kafka."""

    __tag__: ClassVar[str] = "kafka"
    uri: Str | None = None
    """kafka://host:9092[,host2:9092]: the bootstrap servers."""
    bootstrap: Annotated[Str, Field(min_length=1)] = ""
    """Bootstrap servers (default: the uri's)."""
    client_id: Str = "jmsgateway"
    """Kafka client.id (default: the gateway id)."""
    producer: Table = {}
    """librdkafka producer settings merged over ours (acks=all, enable.idempotence)."""
    consumer: Table = {}
    """librdkafka consumer settings merged over ours (enable.auto.commit=false)."""
    transactional_id: Str | None = None
    """Makes a batch one Kafka transaction; without it a batch is a sequence of idempotent sends."""
    text_records: Bool = True
    """Records without jms.MessageType whose value is UTF-8 become TextMessages."""
    topics: dict[str, Str] = {}
    """Destination -> topic; otherwise /topic/kafka.x, /queue/kafka.x, /topic/x, /queue/x mean topic x."""
    key_header: Str | None = None
    """Header/property giving the record key of plain sends (default: the message id)."""
    require_existing_topics: Bool = True
    """Fail a send to a topic the cluster does not list."""
    group_prefix: Str = "jmsgateway"
    """Prefix of the consumer groups subscriptions create."""
    poll_timeout: Seconds = 0.05
    """Seconds a consumer poll waits."""
    subscribe_timeout: Seconds = 60.0
    """Seconds a subscription may wait for its partitions."""
    pause_after: Seconds = 5.0
    """Seconds deliveries may stall before the subscription's partitions are paused."""
    metadata_timeout: Seconds = 10.0
    """Seconds start and topic checks wait for metadata."""
    delivered_topic: Str = "jmsgateway.delivered"
    """Topic where shared and durable subscriptions publish how far they delivered ("" turns it off)."""
    delivered_interval: Seconds = 0.2
    """Seconds between two publications of a subscription's delivered marks."""
    delivered_tail: NotNegative = 10_000
    """Records per partition of ``delivered_topic`` read when a partition is assigned."""
    dedup_window: NotNegative = 100_000
    """Idempotency keys (x-dedup-id, _AMQ_DUPL_ID) of sends this gateway remembers (0: no detection)."""
    dedup_window_seconds: Positive = 86_400
    """Seconds an idempotency key is remembered at most."""
    dedup_tail: NotNegative = 10_000
    """Records per partition read back from a topic's tail (their keys) before the first keyed send to it."""

    @model_validator(mode="before")
    @classmethod
    def _bootstrap_from_uri(cls, raw: Any) -> Any:
        if isinstance(raw, dict) and raw.get("bootstrap") is None and isinstance(raw.get("uri"), str):
            raw = {**raw, "bootstrap": raw["uri"].split("://", 1)[-1].rstrip("/")}
        if isinstance(raw, dict) and not raw.get("bootstrap"):
            raise KeyProblem("uri", "needs bootstrap servers (uri = 'kafka://host:9092')")
        return raw

    @classmethod
    def from_options(cls, options: dict[str, Any] | KafkaSettings, *, name: str = "kafka",
                     client_id: str = "jmsgateway", path: str = "") -> KafkaSettings:
        """Validate ``[connectors.<name>]`` options (raises ConfigError); ``client_id`` is the default."""
        if isinstance(options, dict) and "client_id" not in options:
            options = {**options, "client_id": client_id}
        elif isinstance(options, KafkaSettings) and "client_id" not in options.model_fields_set:
            options = options.model_copy(update={"client_id": client_id})
        return validate(cls, options, path=path, prefix=f"connectors.{name}")
