"""Where the harness's spans go (README "Tracing"): nowhere (the API's no-op) unless the standard
``OTEL_*`` variables ask for OTLP export, which the ``otel`` extra (in the image) provides."""

from __future__ import annotations

import atexit
import logging
import os
from collections.abc import Mapping

from opentelemetry import trace

from think_server.harness import configure_tracing

__all__ = ["setup_tracing"]

log = logging.getLogger("think_server.tracing")

_ASKS_FOR_OTLP = ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")


def wants_otlp(env: Mapping[str, str]) -> bool:
    """Whether the environment asks for OTLP export of traces (and the SDK is not turned off)."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporter = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporter:
        return "otlp" in exporter.split(",")
    return any(env.get(k) for k in _ASKS_FOR_OTLP)


def setup_tracing(content: bool, env: Mapping[str, str] = os.environ) -> bool:
    """Spans with message content only if ``content``; an OTLP exporter if the environment asks
    for one (True then). Called once by ``think-server serve``; a library user sets up their own."""
    configure_tracing(content=content)
    if not wants_otlp(env):
        return False
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError:
        log.warning("OTEL_* variables ask for OTLP export of traces, but the OpenTelemetry SDK is not "
                    "installed: pip install 'think-server[otel]'")
        return False
    # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES win over this default.
    resource = Resource.create({SERVICE_NAME: env.get("OTEL_SERVICE_NAME") or "think-server"})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))  # endpoint, headers: OTEL_* too
    trace.set_tracer_provider(provider)
    atexit.register(provider.shutdown)  # what is batched goes out before the process ends
    log.info("tracing: OTLP export to %s", env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
             or env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or "the default endpoint")
    return True
