"""The Anthropic Messages API provider (harness/_anthropic.py) against a real local HTTP server.

The server (``anthropic_server.py``) speaks the streaming wire format as Anthropic
documents it; the event streams below are written by hand from that
documentation. Every test checks what the provider yields and what the server
received.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from think_server.harness import (
    Agent,
    Finish,
    ModelEvent,
    ModelRequest,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    TextDelta,
    TextEnd,
    TextStart,
    Tool,
    ToolCall,
    ToolDefinition,
    ToolInputDelta,
    ToolInputStart,
    Usage,
)
from think_server.harness.providers._anthropic import anthropic_from_spec
from think_server.harness.providers._transcript import CONTINUE_PROMPT

from .._doubles import GUARD, settle, user
from .anthropic_server import (
    AnthropicServer,
    Reply,
    block_delta,
    block_start,
    block_stop,
    error_reply,
    message_delta,
    message_start,
    message_stop,
    stream_reply,
)
from .anthropic_support import (
    HELLO,
    KEY,
    MODEL,
    SIGNATURE,
    WEATHER_SCHEMA,
    collect_all,
    fail,
    json_deltas,
    model_for,
    run,
    text_events,
    text_stream,
    ui,
)

# ---------------------------------------------------------------- streams


async def test_a_text_stream_becomes_text_events_and_the_request_is_the_documented_one() -> None:
    events, server = await run(text_stream("Hello", "!"))
    assert events == [
        TextStart("text-0"), TextDelta("text-0", "Hello"), TextDelta("text-0", "!"), TextEnd("text-0"),
        Finish("stop", Usage(input_tokens=25, output_tokens=15)),
    ]
    [received] = server.received
    assert (received.method, received.path) == ("POST", "/v1/messages")
    assert received.headers["x-api-key"] == KEY
    assert received.headers["anthropic-version"] == "2023-06-01"
    assert received.headers["content-type"] == "application/json"
    assert received.headers["accept"] == "text/event-stream"
    assert "authorization" not in received.headers
    assert received.json == {
        "model": MODEL,
        "max_tokens": 8192,
        "system": "Be brief.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
        "stream": True,
    }


async def test_thinking_streams_as_reasoning_before_the_text() -> None:
    events, _ = await run(stream_reply(
        message_start(),
        block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        block_delta(0, {"type": "thinking_delta", "thinking": "I need to find the GCD of 1071 and 462 "}),
        block_delta(0, {"type": "thinking_delta", "thinking": "using the Euclidean algorithm."}),
        block_delta(0, {"type": "signature_delta", "signature": SIGNATURE}),
        block_stop(0),
        block_start(1, {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIw"}),
        block_stop(1),
        block_start(2, {"type": "text", "text": ""}),
        block_delta(2, {"type": "text_delta", "text": "The GCD is 21."}),
        block_stop(2),
        message_delta("end_turn", 120),
        message_stop(),
    ))
    assert events == [
        ReasoningStart("reasoning-0"),
        ReasoningDelta("reasoning-0", "I need to find the GCD of 1071 and 462 "),
        ReasoningDelta("reasoning-0", "using the Euclidean algorithm."),
        ReasoningEnd("reasoning-0", {"anthropic": {"signature": SIGNATURE}}),
        ReasoningStart("reasoning-1"),
        ReasoningEnd("reasoning-1",
                     {"anthropic": {"redactedData": "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIw"}}),
        TextStart("text-2"), TextDelta("text-2", "The GCD is 21."), TextEnd("text-2"),
        Finish("stop", Usage(25, 120)),
    ]


TOOL_STREAM = [
    message_start(472, 2),
    block_start(0, {"type": "text", "text": ""}),
    block_delta(0, {"type": "text_delta", "text": "Okay, let me check"}),
    block_delta(0, {"type": "text_delta", "text": " the weather."}),
    block_stop(0),
    block_start(1, {"type": "tool_use", "id": "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "name": "get_weather", "input": {}}),
    *json_deltas(1, "", '{"location":', ' "San Fra', 'ncisco, CA"', ', "unit": "fah', 'renheit"}'),
    block_stop(1),
    message_delta("tool_use", 89),
    message_stop(),
]


@pytest.mark.parametrize("piece_size", [None, 7], ids=["one-chunk-per-event", "7-byte-chunks"])
async def test_a_tool_call_streams_its_input_in_pieces_and_ends_parsed(piece_size: int | None) -> None:
    events, _ = await run(stream_reply(*TOOL_STREAM, piece_size=piece_size))
    call = "toolu_01T1x1fJ34qAmk2tNTrN7Up6"
    assert events == [
        TextStart("text-0"), TextDelta("text-0", "Okay, let me check"), TextDelta("text-0", " the weather."),
        TextEnd("text-0"),
        ToolInputStart(call, "get_weather"),
        ToolInputDelta(call, '{"location":'),
        ToolInputDelta(call, ' "San Fra'),
        ToolInputDelta(call, 'ncisco, CA"'),
        ToolInputDelta(call, ', "unit": "fah'),
        ToolInputDelta(call, 'renheit"}'),
        ToolCall(call, "get_weather", {"location": "San Francisco, CA", "unit": "fahrenheit"}),
        Finish("tool-calls", Usage(472, 89)),
    ]


async def test_two_tool_calls_in_one_message_and_an_empty_input_is_an_empty_object() -> None:
    events, _ = await run(stream_reply(
        message_start(500),
        block_start(0, {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {}}),
        *json_deltas(0, "", '{"city": ', '"Paris"}'),
        block_stop(0),
        block_start(1, {"type": "tool_use", "id": "toolu_01B", "name": "get_time", "input": {}}),
        *json_deltas(1, ""),
        block_stop(1),
        message_delta("tool_use", 60),
        message_stop(),
    ))
    assert events == [
        ToolInputStart("toolu_01A", "get_weather"),
        ToolInputDelta("toolu_01A", '{"city": '),
        ToolInputDelta("toolu_01A", '"Paris"}'),
        ToolCall("toolu_01A", "get_weather", {"city": "Paris"}),
        ToolInputStart("toolu_01B", "get_time"),
        ToolCall("toolu_01B", "get_time", {}),
        Finish("tool-calls", Usage(500, 60)),
    ]


@pytest.mark.parametrize(("stop_reason", "finish"), [
    ("end_turn", "stop"), ("stop_sequence", "stop"), ("max_tokens", "length"), ("tool_use", "tool-calls"),
    ("refusal", "content-filter"), ("pause_turn", "other"), ("a_reason_added_later", "other"),
])
async def test_stop_reasons_map_to_finish_reasons(stop_reason: str, finish: str) -> None:
    events, _ = await run(text_stream("x", stop_reason=stop_reason))
    assert events[-1] == Finish(finish, Usage(25, 15))  # type: ignore[arg-type]


async def test_usage_is_cumulative_and_counts_cached_input() -> None:
    events, _ = await run(stream_reply(
        message_start(10, 1, cache_creation_input_tokens=200, cache_read_input_tokens=1000),
        block_start(0, {"type": "text", "text": ""}),
        block_delta(0, {"type": "text_delta", "text": "ok"}),
        block_stop(0),
        message_delta("end_turn", 7),
        message_delta("end_turn", 12, input_tokens=10, cache_creation_input_tokens=200, cache_read_input_tokens=1000),
        message_stop(),
    ))
    assert events[-1] == Finish("stop", Usage(input_tokens=1210, output_tokens=12))


async def test_unknown_events_and_blocks_are_ignored() -> None:
    events, _ = await run(stream_reply(
        message_start(),
        ("some_new_event", {"type": "some_new_event", "x": 1}),
        block_start(0, {"type": "server_tool_use", "id": "srvtoolu_1", "name": "web_search", "input": {}}),
        *json_deltas(0, '{"query": "x"}'),
        block_stop(0),
        block_start(1, {"type": "text", "text": ""}),
        block_delta(1, {"type": "citations_delta", "citation": {"type": "char_location", "cited_text": "x"}}),
        block_delta(1, {"type": "text_delta", "text": "Found it."}),
        block_stop(1),
        message_delta("end_turn", 5),
        message_stop(),
    ))
    assert events == [TextStart("text-1"), TextDelta("text-1", "Found it."), TextEnd("text-1"),
                      Finish("stop", Usage(25, 5))]


# ---------------------------------------------------------------- failures


async def test_an_http_error_gives_the_apis_message_and_is_not_retried() -> None:
    error, events, server = await fail(
        error_reply(400, "invalid_request_error", "messages.0.content.0.text: text content blocks must be non-empty"))
    assert str(error) == "anthropic: messages.0.content.0.text: text content blocks must be non-empty (HTTP 400)"
    assert events == []
    assert len(server.received) == 1


async def test_the_key_never_appears_in_an_error_even_when_the_api_echoes_it() -> None:
    error, _, _ = await fail(error_reply(401, "authentication_error", f"invalid x-api-key: {KEY}"))
    assert str(error) == "anthropic: invalid x-api-key: [redacted] (HTTP 401)"
    error, _, _ = await fail(stream_reply(
        message_start(), ("error", {"type": "error", "error": {"type": "api_error", "message": f"bad key {KEY}"}})))
    assert str(error) == "anthropic: bad key [redacted] (api_error)"


async def test_overloaded_529_is_retried_and_then_succeeds() -> None:
    events, server = await run(error_reply(529, "overloaded_error", "Overloaded", {"retry-after": "0"}),
                               text_stream("Hello"))
    assert events == [TextStart("text-0"), TextDelta("text-0", "Hello"), TextEnd("text-0"),
                      Finish("stop", Usage(25, 15))]
    assert len(server.received) == 2
    assert server.received[0].raw_body == server.received[1].raw_body
    assert server.received[1].headers["x-api-key"] == KEY


async def test_overloaded_until_the_retries_run_out_is_an_error() -> None:
    error, events, server = await fail(error_reply(529, "overloaded_error", "Overloaded"))
    assert str(error) == "anthropic: Overloaded (HTTP 529)"
    assert events == []
    assert len(server.received) == 3  # the first try and FAST's two retries


async def test_a_stream_cut_mid_way_is_an_error_after_what_arrived() -> None:
    error, events, server = await fail(stream_reply(
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        block_delta(0, {"type": "text_delta", "text": "Hel"}),
        cut=True,
    ))
    assert str(error).startswith("anthropic: the response broke off")
    assert events == [TextStart("text-0"), TextDelta("text-0", "Hel")]
    assert len(server.received) == 1  # never retried once an event has arrived


async def test_a_stream_that_ends_before_message_stop_is_an_error() -> None:
    error, events, _ = await fail(stream_reply(
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        block_delta(0, {"type": "text_delta", "text": "Hel"}),
        block_stop(0),
        message_delta("end_turn", 3),
    ))
    assert str(error) == "anthropic: the response ended before the message was complete"
    assert events == [TextStart("text-0"), TextDelta("text-0", "Hel"), TextEnd("text-0")]


async def test_an_error_event_in_the_stream_is_a_model_error_with_its_message() -> None:
    error, events, server = await fail(stream_reply(
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        block_delta(0, {"type": "text_delta", "text": "Hel"}),
        ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ))
    assert str(error) == "anthropic: Overloaded (overloaded_error)"
    assert events == [TextStart("text-0"), TextDelta("text-0", "Hel")]
    assert len(server.received) == 1


async def test_tool_input_that_is_not_json_is_an_error() -> None:
    # Not cut off by max_tokens (that is a "length" finish, test_cutoff.py): the model's own mistake.
    error, events, _ = await fail(stream_reply(
        message_start(),
        block_start(0, {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {}}),
        *json_deltas(0, '{"city": "Par'),
        block_stop(0),
        message_delta("tool_use", 12),
        message_stop(),
    ))
    assert str(error) == "anthropic: the input of the call to tool 'get_weather' is not valid JSON"
    assert events == [ToolInputStart("toolu_01A", "get_weather"), ToolInputDelta("toolu_01A", '{"city": "Par')]


async def test_a_success_status_without_an_event_stream_is_an_error() -> None:
    reply = Reply(status=200, headers={"content-type": "application/json"}, body=b'{"type": "message"}')
    error, events, _ = await fail(reply)
    assert str(error) == "anthropic: expected an event stream, got application/json"
    assert events == []


async def test_the_call_ends_at_message_stop_even_if_the_connection_stays_open() -> None:
    async with AnthropicServer(stream_reply(*text_events("Hi"), hang=True)) as server:
        model = model_for(server)
        try:
            events = await asyncio.wait_for(collect_all(model, HELLO), GUARD)
            await asyncio.wait_for(server.client_went_away.wait(), GUARD)
        finally:
            await model.aclose()
    assert events == [TextStart("text-0"), TextDelta("text-0", "Hi"), TextEnd("text-0"), Finish("stop", Usage(25, 15))]


async def test_cancelling_the_stream_closes_the_connection() -> None:
    async with AnthropicServer(stream_reply(
        message_start(),
        block_start(0, {"type": "text", "text": ""}),
        block_delta(0, {"type": "text_delta", "text": "Hel"}),
        hang=True,
    )) as server:
        model = model_for(server)
        got_delta = asyncio.Event()
        events: list[ModelEvent] = []

        async def consume() -> None:
            async for event in model.stream(HELLO):
                events.append(event)
                if isinstance(event, TextDelta):
                    got_delta.set()

        task = asyncio.create_task(consume())
        try:
            await asyncio.wait_for(got_delta.wait(), GUARD)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await asyncio.wait_for(server.client_went_away.wait(), GUARD)
        finally:
            task.cancel()
            await model.aclose()
    assert events == [TextStart("text-0"), TextDelta("text-0", "Hel")]


# ---------------------------------------------------------------- the request


async def test_the_transcript_becomes_alternating_messages_with_tool_use_and_tool_result() -> None:
    messages = [
        ui({"id": "u1", "role": "user", "parts": [
            {"type": "text", "text": "What is the weather in Paris?"},
            {"type": "file", "mediaType": "image/png", "url": "data:image/png;base64,iVBORw0KGgo=",
             "filename": "sky.png"},
        ]}),
        ui({"id": "a1", "role": "assistant", "parts": [
            {"type": "step-start"},
            {"type": "reasoning", "text": "The user wants the weather.", "state": "done",
             "providerMetadata": {"anthropic": {"signature": SIGNATURE}}},
            {"type": "reasoning", "text": "A thought without a signature.", "state": "done"},
            {"type": "text", "text": "Let me check.", "state": "done"},
            {"type": "tool-getWeather", "toolCallId": "toolu_01A", "state": "output-available",
             "input": {"city": "Paris"}, "output": {"condition": "sunny"}},
            {"type": "tool-getTime", "toolCallId": "toolu_01B", "state": "output-error", "input": {},
             "errorText": "the clock is broken"},
            {"type": "step-start"},
            {"type": "text", "text": "It is sunny in Paris.", "state": "done"},
        ]}),
        user("u2", "And tomorrow?"),
        user("s1", "Answer in English.", role="system"),
        user("u3", "Also in Lyon?"),
    ]
    weather = ToolDefinition("getWeather", "The weather of a city", WEATHER_SCHEMA)
    _, server = await run(text_stream("ok"), request=ModelRequest(messages=messages, system="Be brief.",
                                                                  tools=[weather, ToolDefinition("getTime")]))
    assert server.received[0].json == {
        "model": MODEL,
        "max_tokens": 8192,
        "system": "Be brief.\n\nAnswer in English.",
        "messages": [
            {"role": "user", "content": [
                {"type": "text", "text": "What is the weather in Paris?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
            ]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "The user wants the weather.", "signature": SIGNATURE},
                {"type": "text", "text": "Let me check."},
                {"type": "tool_use", "id": "toolu_01A", "name": "getWeather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "toolu_01B", "name": "getTime", "input": {}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01A", "content": '{"condition":"sunny"}',
                 "is_error": False},
                {"type": "tool_result", "tool_use_id": "toolu_01B", "content": "the clock is broken",
                 "is_error": True},
            ]},
            {"role": "assistant", "content": [{"type": "text", "text": "It is sunny in Paris."}]},
            {"role": "user", "content": [
                {"type": "text", "text": "And tomorrow?"},
                {"type": "text", "text": "Also in Lyon?"},
            ]},
        ],
        "tools": [
            {"name": "getWeather", "description": "The weather of a city", "input_schema": WEATHER_SCHEMA},
            {"name": "getTime", "input_schema": {"type": "object", "properties": {}}},
        ],
        "stream": True,
    }


async def test_a_continued_answer_ends_with_a_user_turn_and_foreign_tool_ids_are_made_valid() -> None:
    messages = [
        user("u1", "Weather?"),
        ui({"id": "a1", "role": "assistant", "parts": [
            {"type": "step-start"},
            {"type": "tool-getWeather", "toolCallId": "fc.1:abc/x", "state": "output-available",
             "input": {"city": "Paris"}, "output": "sunny"},
            {"type": "step-start"},
            {"type": "text", "text": "It is sun", "state": "streaming"},
        ]}),
    ]
    _, server = await run(text_stream("ny."), request=ModelRequest(messages=messages))
    body = server.received[0].json
    assert "system" not in body and "tools" not in body
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Weather?"}]},
        {"role": "assistant", "content": [
            {"type": "tool_use", "id": "fc_1_abc_x", "name": "getWeather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "fc_1_abc_x", "content": "sunny", "is_error": False}]},
        {"role": "assistant", "content": [{"type": "text", "text": "It is sun"}]},
        {"role": "user", "content": [{"type": "text", "text": CONTINUE_PROMPT}]},
    ]


async def test_files_become_image_and_document_blocks_or_a_note() -> None:
    pdf = "data:application/pdf;base64,JVBERi0xLjQK"
    note = "data:text/plain;base64,bm90ZXM="  # "notes"
    message = ui({"id": "u1", "role": "user", "parts": [
        {"type": "text", "text": "Look"},
        {"type": "file", "mediaType": "application/pdf", "url": pdf, "filename": "a.pdf"},
        {"type": "file", "mediaType": "text/plain", "url": note},
        {"type": "file", "mediaType": "image/jpeg", "url": "https://example.com/cat.jpg"},
        {"type": "file", "mediaType": "image/svg+xml", "url": "data:image/svg+xml,%3Csvg%2F%3E"},
        {"type": "file", "mediaType": "image/gif", "url": "data:image/gif,GIF89a"},
        {"type": "file", "mediaType": "application/zip", "url": "data:application/zip;base64,UEsDBA==",
         "filename": "x.zip"},
        {"type": "text", "text": "  "},
    ]})
    _, server = await run(text_stream("ok"), request=ModelRequest(messages=[message]))
    assert server.received[0].json["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "Look"},
        {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "JVBERi0xLjQK"}},
        {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "notes"}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
        {"type": "text", "text": "[The attached file (image/svg+xml) cannot be shown to this model.]"},
        {"type": "image", "source": {"type": "base64", "media_type": "image/gif", "data": "R0lGODlh"}},
        {"type": "text", "text": "[The attached file x.zip (application/zip) cannot be shown to this model.]"},
    ]}]


async def test_max_tokens_temperature_and_tool_choice_are_sent() -> None:
    tools = [ToolDefinition("getWeather", "The weather of a city", WEATHER_SCHEMA)]
    request = ModelRequest(messages=[user("u1", "Hi")], tools=tools, tool_choice="required",
                           max_output_tokens=1000, temperature=0.3)
    _, server = await run(text_stream("ok"), request=request)
    body = server.received[0].json
    assert (body["max_tokens"], body["temperature"], body["tool_choice"]) == (1000, 0.3, {"type": "any"})

    request = ModelRequest(messages=[user("u1", "Hi")], tools=tools,
                           tool_choice={"type": "tool", "toolName": "getWeather"})
    _, server = await run(text_stream("ok"), request=request)
    body = server.received[0].json
    assert body["tool_choice"] == {"type": "tool", "name": "getWeather"}
    assert "temperature" not in body


async def test_thinking_comes_from_provider_options_and_fits_in_max_tokens() -> None:
    request = ModelRequest(messages=[user("u1", "Hi")], max_output_tokens=1000, temperature=0.3,
                           provider_options={"anthropic": {"thinking": {"type": "enabled", "budgetTokens": 2048}}})
    _, server = await run(text_stream("ok"), request=request)
    body = server.received[0].json
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert body["max_tokens"] == 3048  # max_tokens counts the thinking, and must exceed its budget
    assert "temperature" not in body  # Anthropic rejects a temperature together with thinking

    request = ModelRequest(messages=[user("u1", "Hi")],
                           provider_options={"thinking": {"type": "enabled", "budget_tokens": 4000}})
    _, server = await run(text_stream("ok"), request=request)
    body = server.received[0].json
    assert (body["thinking"], body["max_tokens"]) == ({"type": "enabled", "budget_tokens": 4000}, 8192)


async def test_an_unsupported_tool_choice_fails_before_any_request() -> None:
    request = ModelRequest(messages=[user("u1", "Hi")], tools=[ToolDefinition("getWeather")], tool_choice=42)
    error, _, server = await fail(text_stream("ok"), request=request)
    assert str(error) == "anthropic: unsupported tool_choice 42"
    assert server.received == []


# ---------------------------------------------------------------- the spec string


@pytest.fixture
def no_secrets(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL", "THINK_SECRETS_FILE"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


async def test_the_spec_reads_the_key_and_base_url_and_calls_the_api(no_secrets: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    secrets = tmp_path / "secrets.env"
    secrets.write_text(f"OTHER=1\nANTHROPIC_API_KEY={KEY}\n")
    no_secrets.setenv("THINK_SECRETS_FILE", str(secrets))
    async with AnthropicServer(text_stream("Hi!")) as server:
        no_secrets.setenv("ANTHROPIC_BASE_URL", server.base_url)
        model = anthropic_from_spec("claude-haiku-4-5")
        try:
            events = await asyncio.wait_for(collect_all(model, HELLO), GUARD)
        finally:
            await model.aclose()
    assert events[-1] == Finish("stop", Usage(25, 15))
    assert server.received[0].headers["x-api-key"] == KEY
    assert server.received[0].json["model"] == "claude-haiku-4-5"


def test_the_spec_defaults_to_the_public_api(no_secrets: pytest.MonkeyPatch) -> None:
    no_secrets.setenv("ANTHROPIC_API_KEY", KEY)
    model = anthropic_from_spec("claude-sonnet-4-5")
    assert (model.base_url, model.model) == ("https://api.anthropic.com", "claude-sonnet-4-5")


def test_the_spec_without_a_key_names_the_variable_and_no_secret(no_secrets: pytest.MonkeyPatch,
                                                                 tmp_path: Path) -> None:
    secrets = tmp_path / "secrets.env"
    secrets.write_text("OPENAI_API_KEY=sk-openai-secret-value\n")
    no_secrets.setenv("THINK_SECRETS_FILE", str(secrets))
    with pytest.raises(ValueError, match="ANTHROPIC_API_KEY") as info:
        anthropic_from_spec("claude-sonnet-4-5")
    assert "sk-openai-secret-value" not in str(info.value)
    no_secrets.setenv("ANTHROPIC_API_KEY", KEY)
    with pytest.raises(ValueError, match="name a model"):
        anthropic_from_spec("  ")


# ---------------------------------------------------------------- end to end


async def test_an_agent_on_anthropic_runs_a_server_tool_over_two_steps(open_instance: Any, peek: Any) -> None:
    step_one = stream_reply(
        message_start(380),
        block_start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        block_delta(0, {"type": "thinking_delta", "thinking": "The user wants the weather in Paris."}),
        block_delta(0, {"type": "signature_delta", "signature": SIGNATURE}),
        block_stop(0),
        block_start(1, {"type": "text", "text": ""}),
        block_delta(1, {"type": "text_delta", "text": "Let me check."}),
        block_stop(1),
        block_start(2, {"type": "tool_use", "id": "toolu_01Weather", "name": "getWeather", "input": {}}),
        *json_deltas(2, "", '{"ci', 'ty": "Par', 'is"}'),
        block_stop(2),
        message_delta("tool_use", 64),
        message_stop(),
    )
    step_two = stream_reply(
        message_start(460),
        block_start(0, {"type": "text", "text": ""}),
        block_delta(0, {"type": "text_delta", "text": "It is sunny "}),
        block_delta(0, {"type": "text_delta", "text": "in Paris."}),
        block_stop(0),
        message_delta("end_turn", 9),
        message_stop(),
    )
    weather = Tool("getWeather", "The weather of a city", WEATHER_SCHEMA,
                   execute=lambda city: {"condition": "sunny", "city": city})
    async with AnthropicServer(step_one, step_two) as server:
        model = model_for(server)
        try:
            inst = await open_instance(model, Agent(system="Be brief.", tools=[weather]))
            s = await inst.session()
            receipt = await s.submit([user("u1", "What is the weather in Paris?")])
            result = await settle(s, receipt.operation_id)
        finally:
            await model.aclose()

    assert (result.outcome, result.text) == ("done", "Let me check.It is sunny in Paris.")
    asked, answer = (await s.transcript())
    assert asked.id == "u1"
    stored = answer.model_dump(mode="json", exclude_unset=True)
    assert stored["parts"] == [
        {"type": "step-start"},
        {"type": "reasoning", "text": "The user wants the weather in Paris.", "state": "done",
         "providerMetadata": {"anthropic": {"signature": SIGNATURE}}},
        {"type": "text", "text": "Let me check.", "state": "done"},
        {"type": "tool-getWeather", "toolCallId": "toolu_01Weather", "toolName": "getWeather",
         "state": "output-available", "input": {"city": "Paris"}, "output": {"condition": "sunny", "city": "Paris"}},
        {"type": "step-start"},
        {"type": "text", "text": "It is sunny in Paris.", "state": "done"},
    ]
    assert peek.message(s.id, answer.id) == stored  # what is on disk, not only in memory

    assert len(server.received) == 2
    first, second = (r.json for r in server.received)
    tools = [{"name": "getWeather", "description": "The weather of a city", "input_schema": WEATHER_SCHEMA}]
    assert (first["system"], first["tools"]) == ("Be brief.", tools)
    asked_turn = {"role": "user", "content": [{"type": "text", "text": "What is the weather in Paris?"}]}
    assert first["messages"] == [asked_turn]
    assert (second["system"], second["tools"]) == ("Be brief.", tools)
    # The stored reasoning part kept its signature, so its thinking block goes back (Anthropic requires it).
    assert second["messages"] == [
        asked_turn,
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "The user wants the weather in Paris.", "signature": SIGNATURE},
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_01Weather", "name": "getWeather", "input": {"city": "Paris"}},
        ]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_01Weather",
             "content": json.dumps({"condition": "sunny", "city": "Paris"}, separators=(",", ":")),
             "is_error": False},
        ]},
    ]
