"""Prometheus metrics: one registry per app, fed by harness events and the edge."""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.metrics_core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from think_server.harness import (
    ChunksCommitted,
    HarnessEvent,
    ModelCallFinished,
    OperationSettled,
    RunStarted,
    ToolCallFinished,
)

__all__ = ["CONTENT_TYPE_LATEST", "Metrics"]

_LATENCY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class _Tally(Collector):
    """A counter the loop adds to as a plain int, read at a scrape. Prometheus' Counter takes a lock
    at every ``inc``; the chunk count is added to at every committed batch (a paced stream: every
    chunk, thousands a second), where that lock was some 2 % of the server's time."""

    def __init__(self, name: str, documentation: str, registry: CollectorRegistry) -> None:
        self.name, self.documentation, self.value = name, documentation, 0
        registry.register(self)

    def collect(self) -> Iterator[Metric]:
        yield CounterMetricFamily(self.name, self.documentation, value=self.value)


class Metrics:
    def __init__(self, open_actors: Callable[[], int], transcript_bytes: Callable[[], int] = lambda: 0,
                 hibernating_actors: Callable[[], int] = lambda: 0,
                 storage_memory: Callable[[], int | None] = lambda: None) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.actors = Gauge("think_open_actors", "Agent instances open in this process", registry=r)
        self.actors.set_function(lambda: float(open_actors()))
        hibernating = Gauge("think_hibernating_actors",
                            "Open agent instances whose file is closed until their next use (THINK_HIBERNATE_AFTER_S)",
                            registry=r)
        hibernating.set_function(lambda: float(hibernating_actors()))
        self.connections = Gauge("think_connections", "Open WebSocket connections", registry=r)
        transcripts = Gauge("think_transcript_memory_bytes",
                            "Memory the transcripts of open conversations hold, about (THINK_TRANSCRIPT_MEMORY_MB)",
                            registry=r)
        transcripts.set_function(lambda: float(transcript_bytes()))
        sqlite = Gauge("think_sqlite_memory_bytes", "Memory SQLite holds: page caches and statements", registry=r)
        sqlite.set_function(lambda: float(storage_memory() or 0))
        self.turns = Counter("think_turns", "Operations settled, by outcome", ["outcome"], registry=r)
        self.chunks = _Tally("think_chunks_streamed", "UI chunks committed and streamed", r)
        self.model_latency = Histogram("think_model_call_seconds", "Model call duration", ["outcome"],
                                       buckets=_LATENCY_BUCKETS, registry=r)
        self.tool_latency = Histogram("think_tool_call_seconds", "Server tool call duration", ["tool", "outcome"],
                                      buckets=_LATENCY_BUCKETS, registry=r)
        self.recoveries = Counter("think_recovery_events", "Interrupted operations resumed", registry=r)
        self.refusals = Counter("think_refusals", "Requests refused, by reason", ["reason"], registry=r)

    def on_event(self, event: HarnessEvent) -> None:
        if isinstance(event, ChunksCommitted):
            self.chunks.value += len(event.bodies)
        elif isinstance(event, OperationSettled):
            self.turns.labels(event.status).inc()
        elif isinstance(event, ModelCallFinished):
            self.model_latency.labels(event.outcome).observe(event.seconds)
        elif isinstance(event, ToolCallFinished):
            self.tool_latency.labels(event.tool, "ok" if event.ok else "error").observe(event.seconds)
        elif isinstance(event, RunStarted) and event.recovering:
            self.recoveries.inc()

    def render(self) -> bytes:
        return generate_latest(self.registry)
