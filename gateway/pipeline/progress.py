"""Progress a user can see: one log line per micro-batch with rows/s, lag and outcomes.

:class:`ProgressLogger` is a Spark ``StreamingQueryListener`` (it runs on
the driver); :func:`summarize` turns one query progress (Spark's
``StreamingQueryProgress`` JSON) into a :class:`BatchProgress`: input rows,
input and processing rates, the lag (records between the batch's end offset
and the latest offset the source reported, summed over partitions) and the
outcome counts the job observed (``observe("jmsgateway", ...)``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener
from twisted.logger import Logger

OBSERVATION = "jmsgateway"
"""Name of the observed metrics holding the outcome counts."""


@dataclass(frozen=True, slots=True)
class BatchProgress:
    """One micro-batch, as the user sees it."""

    batch: int
    rows: int
    input_rate: float
    processed_rate: float
    lag: int | None
    outcomes: dict[str, int] = field(default_factory=dict)
    duration_ms: int = 0


def offsets_lag(end: Any, latest: Any) -> int | None:
    """Records between ``end`` and ``latest`` offsets (JSON text or dicts); None if unknown."""
    try:
        end_offsets = json.loads(end) if isinstance(end, str) else end
        latest_offsets = json.loads(latest) if isinstance(latest, str) else latest
    except (TypeError, ValueError):
        return None
    if not isinstance(end_offsets, dict) or not isinstance(latest_offsets, dict):
        return None
    lag = 0
    for topic, parts in latest_offsets.items():
        done = end_offsets.get(topic, {})
        if not isinstance(parts, dict) or not isinstance(done, dict):
            return None
        for partition, high in parts.items():
            lag += max(0, int(high) - int(done.get(partition, 0)))
    return lag


def summarize(progress: dict[str, Any]) -> BatchProgress:
    """A :class:`BatchProgress` from a query progress as JSON (``json.loads(progress.json)``)."""
    lags = [offsets_lag(source.get("endOffset"), source.get("latestOffset")) for source in progress.get("sources", [])]
    known = [lag for lag in lags if lag is not None]
    observed = progress.get("observedMetrics", {}).get(OBSERVATION, {}) or {}
    return BatchProgress(
        batch=int(progress.get("batchId", -1)),
        rows=int(progress.get("numInputRows", 0)),
        input_rate=float(progress.get("inputRowsPerSecond", 0.0) or 0.0),
        processed_rate=float(progress.get("processedRowsPerSecond", 0.0) or 0.0),
        lag=sum(known) if known else None,
        outcomes={str(k): int(v or 0) for k, v in observed.items()},
        duration_ms=int((progress.get("durationMs") or {}).get("triggerExecution", 0)),
    )


class ProgressLogger(StreamingQueryListener):
    """Logs every micro-batch of the pipeline's queries and keeps the totals.

    :ivar totals: outcome counts over every batch seen (a re-run batch counts twice).
    """

    log = Logger()

    def __init__(self) -> None:
        self.totals: dict[str, int] = {}
        self.batches: list[BatchProgress] = []

    def onQueryStarted(self, event: Any) -> None:
        self.log.info("pipeline query {name} started (id {id}, run {run})", name=event.name, id=str(event.id),
                      run=str(event.runId))

    def onQueryProgress(self, event: Any) -> None:
        batch = summarize(json.loads(event.progress.json))
        self.record(batch)

    def record(self, batch: BatchProgress) -> None:
        """Log ``batch`` and add it to the totals."""
        self.batches.append(batch)
        for name, count in batch.outcomes.items():
            self.totals[name] = self.totals.get(name, 0) + count
        outcomes = ", ".join(f"{name} {count}" for name, count in sorted(batch.outcomes.items()) if count)
        self.log.info(
            "micro-batch {batch}: {rows} rows, {input_rate:.0f} rows/s in, {processed_rate:.0f} rows/s processed, "
            "lag {lag} record(s), {duration} ms{outcomes}",
            batch=batch.batch,
            rows=batch.rows,
            input_rate=batch.input_rate,
            processed_rate=batch.processed_rate,
            lag="?" if batch.lag is None else batch.lag,
            duration=batch.duration_ms,
            outcomes=f" ({outcomes})" if outcomes else "",
        )

    def onQueryIdle(self, event: Any) -> None:
        """Nothing to report while no records arrive."""

    def onQueryTerminated(self, event: Any) -> None:
        if event.exception:
            self.log.error("pipeline query {id} failed: {error}", id=str(event.id), error=event.exception)
        else:
            self.log.info("pipeline query {id} stopped", id=str(event.id))
