"""What became of a record produced to Kafka: the delivery report, the delivery error and the
``settled(error, record)`` callback type.

Shared by the Kafka connector (:mod:`gateway.connectors.kafka`), which produces the records, and
``[routing]`` (:mod:`gateway.routing.service`), which reads the outcome; no client import, no I/O.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gateway.errors import ConnectorError

HARD_ERROR_CODES = frozenset(
    {
        "UNKNOWN_TOPIC_OR_PART",
        "_UNKNOWN_TOPIC",
        "TOPIC_AUTHORIZATION_FAILED",
        "CLUSTER_AUTHORIZATION_FAILED",
        "TOPIC_EXCEPTION",
        "INVALID_TOPIC_EXCEPTION",
        "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
        "_FATAL",
    }
)
"""Kafka errors that routing treats as hard failures (no retry makes them go away)."""

REFUSED_CODES = frozenset(
    {
        "MSG_SIZE_TOO_LARGE",
        "_MSG_SIZE_TOO_LARGE",
        "RECORD_LIST_TOO_LARGE",
        "INVALID_RECORD",
        "INVALID_MSG",
        "INVALID_MSG_SIZE",
        "CORRUPT_MESSAGE",
        "_INVALID_ARG",
    }
)
"""Kafka errors about the record itself: sending it again gives the same answer."""

Settled = Callable[[Exception | None, Any], None]
"""``settled(error, record)``: the outcome of one produced record (see :meth:`KafkaConnector.produce`)."""

class KafkaDeliveryError(ConnectorError):
    """Kafka refused or lost a record.

    :ivar code: the Kafka error name (``UNKNOWN_TOPIC_OR_PART``, ``_MSG_TIMED_OUT`` …).
    :ivar hard: whether retrying cannot help (unknown topic, not authorised).
    :ivar permanent: hard, or the record itself is refused (too large, invalid).
    """

    def __init__(self, message: str, *, code: str = "", topic: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.topic = topic
        self.hard = code in HARD_ERROR_CODES
        self.permanent = self.hard or code in REFUSED_CODES


@dataclass(frozen=True, slots=True)
class DeliveryReport:
    """Where Kafka stored a record."""

    topic: str
    partition: int
    offset: int

    @classmethod
    def of(cls, record: Any) -> DeliveryReport:
        """The report of a record confluent-kafka delivered."""
        return cls(record.topic(), record.partition(), record.offset())
