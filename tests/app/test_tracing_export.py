"""The real server exports its spans over OTLP/HTTP when the standard OTEL_* variables ask,
continuing the trace context of the request that submitted the turn."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from tests.serverproc import ServerProcess
from think_server.app._telemetry import wants_otlp

PARENT_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT_SPAN = "00f067aa0ba902b7"


class Collector(ThreadingHTTPServer):
    """An OTLP/HTTP traces endpoint: keeps each export request it gets, decoded."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.paths: list[str] = []
        collector = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                collector.paths.append(self.path)
                request = ExportTraceServiceRequest()
                request.ParseFromString(body)
                collector.requests.append(request)
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)

    def spans(self) -> list[tuple[str, str, str, dict[str, object], str]]:
        """(name, trace id, parent span id, attributes, service name) of every span received."""
        out = []
        for request in self.requests:
            for resource_spans in request.resource_spans:
                service = next((a.value.string_value for a in resource_spans.resource.attributes
                                if a.key == "service.name"), "")
                for scope in resource_spans.scope_spans:
                    for s in scope.spans:
                        attrs = {a.key: a.value.string_value or a.value.int_value or a.value.bool_value
                                 for a in s.attributes}
                        out.append((s.name, s.trace_id.hex(), s.parent_span_id.hex(), attrs, service))
        return out


@pytest.fixture
def collector() -> Iterator[Collector]:
    server = Collector()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


def test_which_environments_ask_for_otlp() -> None:
    assert not wants_otlp({})
    assert wants_otlp({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"})
    assert wants_otlp({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"})
    assert wants_otlp({"OTEL_TRACES_EXPORTER": "otlp"})
    assert not wants_otlp({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})
    assert not wants_otlp({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"})


async def test_spans_go_to_the_otlp_endpoint_and_continue_the_callers_trace(
        tmp_path: Path, collector: Collector) -> None:
    server = ServerProcess(app=None, data_dir=tmp_path / "data", log_path=tmp_path / "server.log", env={
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{collector.server_address[1]}",
        "OTEL_BSP_SCHEDULE_DELAY": "50",
    })
    await server.start()
    try:
        async with httpx.AsyncClient(base_url=server.base, timeout=30) as http:
            r = await http.post("/agents/assistant/traced/submit", json={"input": "weather"},
                                headers={"traceparent": f"00-{PARENT_TRACE}-{PARENT_SPAN}-01"})
            op = r.json()["operation_id"]
            info = (await http.get(f"/agents/assistant/traced/operations/{op}", params={"wait": "20"})).json()
            assert info["status"] == "completed", info
        for _ in range(100):
            if {"think.turn", "think.model_call", "think.tool_call"} <= {s[0] for s in collector.spans()}:
                break
            await asyncio.sleep(0.05)
    finally:
        server.stop()
    spans = collector.spans()
    assert collector.paths and set(collector.paths) == {"/v1/traces"}
    (turn,) = [s for s in spans if s[0] == "think.turn"]
    assert (turn[1], turn[2]) == (PARENT_TRACE, PARENT_SPAN), "the turn continues the request's trace"
    assert turn[3]["think.operation"] == op and turn[3]["think.agent"] == "assistant"
    assert turn[4] == "think-server"
    tools = [s for s in spans if s[0] == "think.tool_call"]
    assert [t[3]["gen_ai.tool.name"] for t in tools] == ["getWeather"]
    assert all(s[1] == PARENT_TRACE for s in spans if s[0].startswith("think."))
