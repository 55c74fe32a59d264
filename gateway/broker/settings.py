"""``[broker]``: the embedded broker's settings, declared in the broker layer and composed into
the whole configuration by :mod:`gateway.config`."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, field_validator

from gateway.broker.limits import parse_size
from gateway.broker.virtual_topics import VirtualTopicNames
from gateway.schema import Bool, Int, NotNegative, Positive, Section, Str, TomlKind


def _size(value: Any) -> int:
    return parse_size(value)


Size = Annotated[Int, Field(ge=0), BeforeValidator(_size, json_schema_input_type=int | str),
                 TomlKind('a size ("64MB", "1GiB") or an integer of bytes')]
"""A size in bytes: an integer, or a string such as "64MB", "1GiB", "512KiB" (K/M/G are powers of 1024)."""


class DestinationLimits(Section):
    """``[broker.destinations."PATTERN"]``: the memory limit and full policy of matching destinations."""

    max_size: Size = 0
    """Bytes of queued messages one matching destination may hold in memory (0: only memory_limit applies)."""
    full_policy: Literal["PAGE", "BLOCK", "FAIL", "DROP"] = "PAGE"
    """What a full destination does with a SEND: PAGE (accept, keep only a window in memory),
    BLOCK (stop reading from its senders), FAIL (refuse with an ERROR) or DROP (discard, counted)."""

    last_value: Bool = False
    """A last-value queue (Artemis): a message with an _AMQ_LVQ_NAME header replaces the waiting one with the same
    value (one not yet delivered)."""
    exclusive: Bool = False
    """Every consumer of a matching queue is exclusive, as if it asked with activemq.exclusive:true."""

    @field_validator("full_policy", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value


class BrokerSettings(Section):
    """``[broker]``: the embedded broker."""

    persistence: Literal["memory", "sqlite"] = "sqlite"
    """Where persistent messages live: sqlite (they survive kill -9) or memory (lost on restart)."""
    database: Str = "broker.sqlite"
    """The SQLite file (relative to data_dir)."""
    default_persistent: Bool = False
    """Whether a SEND without a persistent header is persistent."""
    max_redeliveries: NotNegative = 6
    """Deliveries after the first before a message is dead-lettered."""
    dead_letter_prefix: Str = "/queue/DLQ."
    """Dead letters of /queue/x go to this prefix plus x."""
    expiry_check_interval_ms: Positive = 1000
    """How often expired messages are removed."""
    synchronous: Str = "FULL"
    """SQLite's synchronous pragma: FULL or NORMAL."""
    max_size: NotNegative = 0
    """Largest store in bytes (0: no limit)."""
    min_free: NotNegative = 16 * 1024 * 1024
    """Free disk bytes the store and the page file keep (0: no check)."""
    commit_linger_us: NotNegative = 200
    """Microseconds the SQLite store may hold a commit back for the SENDs of other producers that recently
    shared commits (each waiting for its RECEIPT); never for a lone producer (docs/persistence.md); 0: never."""
    max_scheduled_size: Size = 1 << 30
    """Bytes the scheduled messages waiting (AMQ_SCHEDULED_*) may take, as stored ("1GiB" by default; 0: no cap):
    past it a scheduled SEND gets ERROR "destination full" and nothing is stored (ActiveMQ's jobSchedulerUsage);
    the schedule's SQLite file also keeps min_free bytes of the disk free."""
    memory_limit: Size | None = None
    """Bytes queued messages may take in memory, process-wide ("512MB", "1GiB" or bytes).
    Unset: 1/8 of physical memory, at most 1 GiB (docs/paging.md); 0: no limit (nothing is paged for memory)."""
    dedup_window: NotNegative = 100_000
    """Idempotency keys (x-dedup-id headers) remembered: a resent SEND with one is acknowledged, not stored
    twice (docs/high-availability.md); 0: no duplicate detection."""
    dedup_window_seconds: Positive = 86_400
    """Seconds an idempotency key is remembered at most."""
    destinations: dict[str, DestinationLimits] = {}
    """Destination pattern ("/queue/orders.>", "/queue/*.audit", an fnmatch glob) -> max_size, full_policy,
    last_value, exclusive."""
    max_destinations: NotNegative = 50_000
    """Destinations the embedded broker holds at most: queues (temporary ones and virtual topics' consumer
    queues included), durable subscriptions and temporary topics (docs/stomp.md, "Destination limits"); a frame
    that would create one more gets ERROR "destination limit reached" and the connection stays open.
    0: no cap."""
    inactive_queue_timeout: NotNegative = 300
    """Seconds an auto-created queue (made by a SEND, SUBSCRIBE, browse, reply-to or dead letter) stays once it is
    inactive: nothing pending, paged or stored, no consumer, nothing in a transaction or scheduled for it, nothing
    sent, taken or subscribed; then it is removed and gives its place back to max_destinations and its login's
    max_queues (docs/stomp.md, "Inactive queues"). Queues the console created, virtual topics' consumer queues, durable
    subscriptions and temporary queues are never removed so. 0: never."""
    virtual_topic_prefix: Str = "VirtualTopic."
    """Topics named /topic/<prefix>... are virtual topics (ActiveMQ's): each consumer queue gets a copy ("" turns
    them off)."""
    virtual_topic_consumer_prefix: Str = "Consumer.*."
    """A virtual topic's consumer queues: /queue/<this, * the group>/<topic name>, e.g.
    /queue/Consumer.billing.VirtualTopic.orders."""

    @field_validator("synchronous")
    @classmethod
    def _pragma(cls, value: str) -> str:
        if value.upper() not in ("FULL", "NORMAL"):
            raise ValueError(f"must be 'FULL' or 'NORMAL', not {value!r}")
        return value

    @field_validator("virtual_topic_consumer_prefix")
    @classmethod
    def _consumer_prefix(cls, value: str) -> str:
        VirtualTopicNames("VirtualTopic.", value)  # (raises ValueError saying what is wrong)
        return value

    @field_validator("destinations")
    @classmethod
    def _patterns(cls, value: dict[str, DestinationLimits]) -> dict[str, DestinationLimits]:
        for pattern in value:
            if not pattern.startswith("/"):  # (it would match no destination, silently)
                raise ValueError(f"pattern {pattern!r} matches no destination: a pattern starts with '/' "
                                 f"(\"/queue/{pattern}\" or \"/topic/{pattern}\")")
        return value
