"""Which STOMP connections the gateway admits: ``[stomp] max_connections`` and
``max_connections_per_address``.

:class:`ConnectionAdmission` counts the admitted connections (in total and per
client address), refuses one past a cap, counts refusals in Prometheus
(``jmsgateway_stomp_connections_refused_total{limit="total"|"per_address"}``,
and ``jmsgateway_stomp_connections`` for the open ones) and logs a refusal
episode twice: once when it starts and once when the gateway admits again
(with how many it refused), never once per connection.  It owns no sockets:
the protocol asks it at ``connectionMade`` and tells it when the connection is
gone.
"""

from __future__ import annotations

import resource

from prometheus_client import CollectorRegistry, Counter, Gauge
from twisted.logger import Logger

FD_RESERVE = 1000
"""File descriptors an automatic ``max_connections`` leaves for everything else
(stores, broker and Kafka connections, the admin endpoint, refused sockets)."""

MIN_AUTOMATIC = 100
"""The least an automatic ``max_connections`` admits, however low the descriptor limit."""


def automatic_max_connections() -> int:
    """The cap when ``max_connections = 0``: the process's open-file limit less a reserve."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1_000_000
    return max(MIN_AUTOMATIC, soft - min(FD_RESERVE, soft // 4))


class ConnectionAdmission:
    """Caps on open connections, with their episode log and metrics.

    :param max_total: connections admitted at once (0: :func:`automatic_max_connections`).
    :param max_per_address: connections admitted at once from one client address (0: no cap).
    """

    log = Logger()

    def __init__(self, max_total: int = 0, max_per_address: int = 0, registry: CollectorRegistry | None = None) -> None:
        self.max_total = max_total or automatic_max_connections()
        self.max_per_address = max_per_address
        self.total = 0
        self.per_address: dict[str, int] = {}
        self._refused_total = 0
        """Refusals of the episode in progress at the total cap (0: no episode)."""
        self._refused_from: dict[str, int] = {}
        """Refusals per address of the episodes in progress at the per-address cap."""
        registry = registry or CollectorRegistry()
        self.refused = Counter("jmsgateway_stomp_connections_refused", "STOMP connections refused at a "
                               "max_connections cap", ["limit"], registry=registry)
        self.refused.labels("total")
        self.refused.labels("per_address")
        Gauge("jmsgateway_stomp_connections", "Open (admitted) STOMP connections",
              registry=registry).set_function(lambda: self.total)

    def admit(self, address: str) -> str | None:
        """Admit a connection from ``address`` (counted until :meth:`release`), or say why not."""
        if self.total >= self.max_total:
            self.refused.labels("total").inc()
            if not self._refused_total:
                self.log.warn("refusing STOMP connections: {total} open, the limit is {limit} "
                              "([stomp] max_connections); logged again when connections are accepted",
                              total=self.total, limit=self.max_total)
            self._refused_total += 1
            return (f"the gateway has {self.total} connections open, its limit ([stomp] max_connections "
                    f"= {self.max_total}); try again later")
        count = self.per_address.get(address, 0)
        if self.max_per_address and count >= self.max_per_address:
            self.refused.labels("per_address").inc()
            if address not in self._refused_from:
                self.log.warn("refusing STOMP connections from {address}: {count} open, the limit per "
                              "client address is {limit} ([stomp] max_connections_per_address); logged again "
                              "when its connections are accepted", address=address, count=count,
                              limit=self.max_per_address)
                self._refused_from[address] = 0
            self._refused_from[address] += 1
            return (f"{address} has {count} connections open, the limit per client address "
                    f"([stomp] max_connections_per_address = {self.max_per_address}); try again later")
        if self._refused_total:
            self.log.info("accepting STOMP connections again ({refused} refused at max_connections)",
                          refused=self._refused_total)
            self._refused_total = 0
        if self._refused_from:
            refused = self._refused_from.pop(address, 0)
            if refused:
                self.log.info("accepting STOMP connections from {address} again ({refused} refused at "
                              "max_connections_per_address)", address=address, refused=refused)
        self.total += 1
        self.per_address[address] = count + 1
        return None

    def release(self, address: str) -> None:
        """An admitted connection from ``address`` is gone."""
        self.total -= 1
        count = self.per_address.get(address, 0) - 1
        if count > 0:
            self.per_address[address] = count
        else:
            self.per_address.pop(address, None)
            refused = self._refused_from.pop(address, 0)
            if refused:  # the address left for good: end its episode now (a bounded table)
                self.log.info("STOMP connections from {address} closed ({refused} refused at "
                              "max_connections_per_address)", address=address, refused=refused)
