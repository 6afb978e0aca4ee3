"""The OpenAI-family providers (harness/_openai.py) against real HTTP servers on loopback.

Every test starts :class:`WireServer` (openai_wire.py) on a free 127.0.0.1 port;
it plays response bodies written by hand from the public documentation of each
wire format (openai_bodies.sse) and records what the provider sent.
"""

from __future__ import annotations

import base64
import json
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from think_server.harness import Agent, ModelSpecError, Tool
from think_server.harness._model import (
    Finish,
    Model,
    ModelRequest,
    ReasoningDelta,
    ReasoningEnd,
    ReasoningStart,
    TextDelta,
    TextStart,
    ToolCall,
    ToolInputDelta,
    ToolInputStart,
    Usage,
)
from think_server.harness.providers._openai import (
    OpenAIChatModel,
    OpenAIResponsesModel,
    ollama_from_spec,
    openai_compatible_from_spec,
    openai_from_spec,
    workers_ai_from_spec,
)
from think_server.harness.providers._options import cut_off_message
from think_server.harness.providers._transcript import CONTINUE_PROMPT
from think_server.protocol import UIMessage

from .._doubles import settle, user
from .openai_support import FAST, KEY, RETRIES, WEATHER_TOOL, collect, hi, sse, text_events
from .openai_wire import Reply, WireServer, error_reply


def history() -> list[UIMessage]:
    """A transcript with an earlier answer: reasoning, text, a call with a result and one with an error."""
    return [
        user("u1", "What is the weather in Paris?"),
        UIMessage.model_validate({"id": "a1", "role": "assistant", "parts": [
            {"type": "step-start"},
            {"type": "reasoning", "text": "The user wants the weather.", "state": "done"},
            {"type": "text", "text": "Let me check.", "state": "done"},
            {"type": "tool-getWeather", "toolCallId": "call_1", "state": "output-available",
             "input": {"city": "Paris"}, "output": {"condition": "sunny"}},
            {"type": "tool-getWeather", "toolCallId": "call_2", "state": "output-error",
             "input": {"city": "Atlantis"}, "errorText": "city not found"},
            {"type": "step-start"},
            {"type": "text", "text": "It is sunny.", "state": "done"},
        ]}),
        user("u2", "And in Oslo?"),
    ]


# ---------------------------------------------------------------- Chat Completions: streams


async def test_chat_text_stream_and_the_request_it_sends(chat: Any) -> None:
    async with WireServer(sse("chat-text")) as server:
        events, error = await collect(chat(server), hi(system="Be brief."))
    assert error is None
    assert events == [*text_events("t-0", "Hel", "lo", " world"), Finish("stop", Usage(19, 3))]

    [received] = server.requests
    assert (received.method, received.path) == ("POST", "/v1/chat/completions")
    assert received.headers["authorization"] == f"Bearer {KEY}"
    assert received.headers["accept"] == "text/event-stream"
    assert received.json() == {
        "model": "gpt-4.1-mini",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def test_chat_text_then_parallel_tool_calls_with_arguments_split_across_chunks(chat: Any) -> None:
    async with WireServer(sse("chat-tools")) as server:
        events, error = await collect(chat(server), hi(tools=[WEATHER_TOOL]))
    assert error is None
    a, b = "call_DdmO9pD3xa9XTPNJ32zg2hcA", "call_ABTx7BNZ9MvQmUXt3HBcJ5Gq"
    assert events == [
        *text_events("t-0", "Let me check."),
        ToolInputStart(a, "getWeather"),
        ToolInputDelta(a, '{"ci'),
        ToolInputDelta(a, 'ty": "Paris"}'),
        ToolInputStart(b, "getWeather"),
        ToolInputDelta(b, '{"city"'),
        ToolInputDelta(b, ': "Oslo"}'),
        ToolCall(a, "getWeather", {"city": "Paris"}),
        ToolCall(b, "getWeather", {"city": "Oslo"}),
        Finish("tool-calls", Usage(81, 46)),
    ]


async def test_chat_reasoning_content_deepseek_style(chat: Any) -> None:
    async with WireServer(sse("chat-reasoning-deepseek")) as server:
        events, error = await collect(chat(server), hi())
    assert error is None
    assert events == [
        ReasoningStart("r-0"), ReasoningDelta("r-0", "The user"), ReasoningDelta("r-0", " greets me."),
        ReasoningEnd("r-0"),
        *text_events("t-0", "Hi", "!"),
        Finish("stop", Usage(13, 9)),
    ]


async def test_chat_reasoning_ollama_style(chat: Any) -> None:
    async with WireServer(sse("chat-reasoning-ollama")) as server:
        events, error = await collect(chat(server), hi())
    assert error is None
    assert events == [
        ReasoningStart("r-0"), ReasoningDelta("r-0", "Greeting;"), ReasoningDelta("r-0", " answer briefly."),
        ReasoningEnd("r-0"),
        *text_events("t-0", "Hi!"),
        Finish("stop", Usage(11, 7)),
    ]


async def test_chat_a_whole_call_without_id_and_a_stop_reason_is_still_a_tool_call(chat: Any) -> None:
    async with WireServer(sse("chat-whole-call")) as server:
        events, error = await collect(chat(server), hi(tools=[WEATHER_TOOL]))
    assert error is None
    start = events[0]
    assert isinstance(start, ToolInputStart) and start.tool_call_id.startswith("call_")
    call_id = start.tool_call_id
    assert events == [
        ToolInputStart(call_id, "getWeather"),
        ToolInputDelta(call_id, '{"city":"Paris"}'),
        ToolCall(call_id, "getWeather", {"city": "Paris"}),
        Finish("tool-calls", None),
    ]


async def test_chat_invalid_json_arguments_fail_the_call_and_no_tool_call_is_made(chat: Any) -> None:
    async with WireServer(sse("chat-invalid-arguments")) as server:
        events, error = await collect(chat(server), hi(tools=[WEATHER_TOOL]))
    assert events == [ToolInputStart("call_bad", "getWeather"), ToolInputDelta("call_bad", '{"city": "Par')]
    assert error is not None
    assert str(error).startswith("openai: the model sent invalid JSON as the input of tool 'getWeather': ")


async def test_chat_finish_reason_without_done_is_a_complete_answer(chat: Any) -> None:
    async with WireServer(sse("chat-finish-without-done")) as server:
        events, error = await collect(chat(server), hi())
    assert error is None
    assert events == [*text_events("t-0", "Done."), Finish("length", None)]


# ---------------------------------------------------------------- Chat Completions: the request


async def test_chat_maps_a_transcript_with_tool_calls_results_tools_and_options(chat: Any) -> None:
    request = ModelRequest(messages=history(), system="Be brief.", tools=[WEATHER_TOOL], tool_choice="required",
                           max_output_tokens=200, temperature=0.2)
    async with WireServer(sse("chat-ok")) as server:
        _, error = await collect(chat(server), request)
    assert error is None
    assert server.requests[0].json() == {
        "model": "gpt-4.1-mini",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": "Let me check.", "tool_calls": [
                {"id": "call_1", "type": "function",
                 "function": {"name": "getWeather", "arguments": '{"city":"Paris"}'}},
                {"id": "call_2", "type": "function",
                 "function": {"name": "getWeather", "arguments": '{"city":"Atlantis"}'}},
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": '{"condition":"sunny"}'},
            {"role": "tool", "tool_call_id": "call_2", "content": "city not found"},
            {"role": "assistant", "content": "It is sunny."},
            {"role": "user", "content": "And in Oslo?"},
        ],
        "tools": [{"type": "function", "function": {
            "name": "getWeather", "description": "The weather of a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        }}],
        "tool_choice": "required",
        "max_completion_tokens": 200,
        "temperature": 0.2,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def test_chat_a_partial_answer_of_reasoning_only_is_not_sent_back(chat: Any) -> None:
    partial = UIMessage.model_validate({"id": "a1", "role": "assistant", "parts": [
        {"type": "step-start"}, {"type": "reasoning", "text": "Thinking about it", "state": "done"}]})
    async with WireServer(sse("chat-ok")) as server:
        _, error = await collect(chat(server), ModelRequest(messages=[user("u1", "Hello"), partial]))
    assert error is None
    assert server.requests[0].json()["messages"] == [
        {"role": "user", "content": "Hello"},
        {"role": "user", "content": CONTINUE_PROMPT},
    ]


async def test_chat_sends_images_as_image_url_parts_and_text_files_as_text(chat: Any) -> None:
    png = "data:image/png;base64," + base64.b64encode(b"\x89PNG fake").decode()
    notes = "data:text/plain;base64," + base64.b64encode("line one\nligne deux é".encode()).decode()
    message = UIMessage.model_validate({"id": "u1", "role": "user", "parts": [
        {"type": "text", "text": "Look:"},
        {"type": "file", "mediaType": "image/png", "url": png, "filename": "a.png"},
        {"type": "file", "mediaType": "image/jpeg", "url": "https://example.com/b.jpg"},
        {"type": "file", "mediaType": "text/plain", "url": notes, "filename": "notes.txt"},
        {"type": "file", "mediaType": "application/zip", "url": "https://example.com/c.zip", "filename": "c.zip"},
    ]})
    async with WireServer(sse("chat-ok")) as server:
        _, error = await collect(chat(server), ModelRequest(messages=[message]))
    assert error is None
    assert server.requests[0].json()["messages"] == [{"role": "user", "content": [
        {"type": "text", "text": "Look:"},
        {"type": "image_url", "image_url": {"url": png}},
        {"type": "image_url", "image_url": {"url": "https://example.com/b.jpg"}},
        {"type": "text", "text": "[File notes.txt (text/plain)]\nline one\nligne deux é"},
        {"type": "text", "text": "[Attached file c.zip (application/zip) at https://example.com/c.zip: "
                                 "its content cannot be shown to this model]"},
    ]}]


async def test_chat_forced_tool_choice_options_and_provider_options(chat: Any) -> None:
    request = hi(tools=[WEATHER_TOOL], tool_choice={"type": "tool", "toolName": "getWeather"},
                 provider_options={"reasoning_effort": "low"}, max_output_tokens=50)
    async with WireServer(sse("chat-ok")) as server:
        model = chat(server, options={"seed": 7, "reasoning_effort": "high"}, max_tokens_field="max_tokens")
        _, error = await collect(model, request)
    assert error is None
    body = server.requests[0].json()
    assert body["tool_choice"] == {"type": "function", "function": {"name": "getWeather"}}
    assert (body["seed"], body["reasoning_effort"], body["max_tokens"]) == (7, "low", 50)
    assert "max_completion_tokens" not in body


# ---------------------------------------------------------------- Chat Completions: failures


async def test_chat_an_error_status_is_a_model_error_with_the_providers_message(chat: Any) -> None:
    body = {"error": {"message": "Invalid 'messages[1].content': string too long.", "type": "invalid_request_error",
                      "param": "messages[1].content", "code": "string_above_max_length"}}
    async with WireServer(error_reply(400, body)) as server:
        events, error = await collect(chat(server), hi())
    assert events == []
    assert str(error) == "openai: Invalid 'messages[1].content': string too long. (HTTP 400)"
    assert len(server.requests) == 1  # a 400 is not retried


async def test_chat_a_429_is_retried_and_the_retry_succeeds(chat: Any) -> None:
    limited = error_reply(429, {"error": {"message": "Rate limit reached for gpt-4.1-mini", "type": "requests",
                                          "param": None, "code": "rate_limit_exceeded"}}, **{"Retry-After": "0"})
    async with WireServer(limited, sse("chat-text")) as server:
        events, error = await collect(chat(server), hi())
    assert error is None
    assert events == [*text_events("t-0", "Hel", "lo", " world"), Finish("stop", Usage(19, 3))]
    assert len(server.requests) == 2
    assert server.requests[0].json() == server.requests[1].json()


async def test_chat_a_500_on_every_attempt_is_an_error_after_the_retries(chat: Any) -> None:
    failing = [error_reply(500, {"error": {"message": "The server had an error while processing your request.",
                                           "type": "server_error"}}) for _ in range(RETRIES + 1)]
    async with WireServer(*failing) as server:
        events, error = await collect(chat(server), hi())
    assert events == []
    assert str(error) == "openai: The server had an error while processing your request. (HTTP 500)"
    assert len(server.requests) == RETRIES + 1


async def test_chat_an_error_event_in_the_stream_is_a_model_error(chat: Any) -> None:
    async with WireServer(sse("chat-error-in-stream")) as server:
        events, error = await collect(chat(server), hi())
    assert events == [TextStart("t-0"), TextDelta("t-0", "Partial")]
    assert str(error) == "openai: The server had an error while processing your request. Sorry about that!"


async def test_chat_a_connection_cut_mid_body_is_a_model_error(chat: Any) -> None:
    async with WireServer(sse("chat-unfinished", ending="cut")) as server:
        events, error = await collect(chat(server), hi())
    assert events == [TextStart("t-0"), TextDelta("t-0", "Once upon"), TextDelta("t-0", " a time")]
    assert error is not None and str(error).startswith("openai: the response broke off")
    assert len(server.requests) == 1  # events had arrived: not retried


async def test_chat_a_body_that_ends_before_the_model_finished_is_a_model_error(chat: Any) -> None:
    async with WireServer(sse("chat-unfinished", ending="eof")) as server:
        events, error = await collect(chat(server), hi())
    assert events == [TextStart("t-0"), TextDelta("t-0", "Once upon"), TextDelta("t-0", " a time")]
    assert str(error) == "openai: the response ended before the model finished (no finish_reason, no [DONE])"


async def test_chat_the_key_is_sent_only_as_a_header_and_never_shown(chat: Any, caplog: pytest.LogCaptureFixture,
                                                                      ) -> None:
    caplog.set_level(logging.DEBUG)
    echo = error_reply(401, {"error": {"message": f"Incorrect API key provided: {KEY}.",
                                       "type": "invalid_request_error", "code": "invalid_api_key"}})
    echo_in_stream = Reply(body='data: {"error": {"message": "key ' + KEY + ' is revoked", "type": "auth"}}\n\n')
    async with WireServer(echo, echo_in_stream) as server:
        model = chat(server)
        _, error = await collect(model, hi())
        _, error2 = await collect(model, hi())
    assert str(error) == "openai: Incorrect API key provided: [redacted]. (HTTP 401)"
    assert str(error2) == "openai: key [redacted] is revoked"
    assert KEY not in repr(model)
    for received in server.requests:
        assert received.headers["authorization"] == f"Bearer {KEY}"
        assert KEY.encode() not in received.body
        assert KEY not in received.path
    assert all(KEY not in record.getMessage() for record in caplog.records)


# ---------------------------------------------------------------- Responses API


async def test_responses_text_stream_and_the_request_it_sends(responses: Any) -> None:
    async with WireServer(sse("responses-text")) as server:
        events, error = await collect(responses(server), hi(system="Be brief."))
    assert error is None
    assert events == [*text_events("t-0", "Hi", " there", "!"), Finish("stop", Usage(37, 11))]
    [received] = server.requests
    assert (received.method, received.path) == ("POST", "/v1/responses")
    assert received.headers["authorization"] == f"Bearer {KEY}"
    assert received.json() == {
        "model": "gpt-4.1",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hello"}]}],
        "instructions": "Be brief.",
        "stream": True,
        "store": False,
    }


async def test_responses_reasoning_summary_and_parallel_function_calls(responses: Any) -> None:
    async with WireServer(sse("responses-tools")) as server:
        events, error = await collect(responses(server), hi(tools=[WEATHER_TOOL]))
    assert error is None
    item = {"openai": {"itemId": "rs_1"}}  # no encrypted content: none was asked for
    assert events == [
        ReasoningStart("r-0", item), ReasoningDelta("r-0", "**Checking"), ReasoningDelta("r-0", " the weather**"),
        ReasoningEnd("r-0", item),
        ToolInputStart("call_1", "getWeather"),
        ToolInputDelta("call_1", '{"city":'),
        ToolInputDelta("call_1", '"Paris"}'),
        ToolCall("call_1", "getWeather", {"city": "Paris"}),
        ToolInputStart("call_2", "getWeather"),
        ToolInputDelta("call_2", '{"city":"Os'),
        ToolInputDelta("call_2", 'lo"}'),
        ToolCall("call_2", "getWeather", {"city": "Oslo"}),
        Finish("tool-calls", Usage(80, 40)),
    ]


async def test_responses_maps_a_transcript_with_tool_calls_results_and_tools(responses: Any) -> None:
    request = ModelRequest(messages=history(), system="Be brief.", tools=[WEATHER_TOOL], tool_choice="getWeather",
                           max_output_tokens=300, temperature=0.5)
    async with WireServer(sse("responses-text")) as server:
        _, error = await collect(responses(server), request)
    assert error is None
    assert server.requests[0].json() == {
        "model": "gpt-4.1",
        "instructions": "Be brief.",
        "input": [
            {"role": "user", "content": [{"type": "input_text", "text": "What is the weather in Paris?"}]},
            {"role": "assistant", "content": [{"type": "output_text", "text": "Let me check."}]},
            {"type": "function_call", "call_id": "call_1", "name": "getWeather", "arguments": '{"city":"Paris"}'},
            {"type": "function_call", "call_id": "call_2", "name": "getWeather", "arguments": '{"city":"Atlantis"}'},
            {"type": "function_call_output", "call_id": "call_1", "output": '{"condition":"sunny"}'},
            {"type": "function_call_output", "call_id": "call_2", "output": "city not found"},
            {"role": "assistant", "content": [{"type": "output_text", "text": "It is sunny."}]},
            {"role": "user", "content": [{"type": "input_text", "text": "And in Oslo?"}]},
        ],
        "tools": [{"type": "function", "name": "getWeather", "description": "The weather of a city",
                   "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                  "required": ["city"]},
                   "strict": False}],
        "tool_choice": {"type": "function", "name": "getWeather"},
        "max_output_tokens": 300,
        "temperature": 0.5,
        "stream": True,
        "store": False,
    }


async def test_responses_sends_images_and_pdfs_as_input_parts(responses: Any) -> None:
    png = "data:image/png;base64," + base64.b64encode(b"\x89PNG fake").decode()
    pdf = "data:application/pdf;base64," + base64.b64encode(b"%PDF-1.7 fake").decode()
    message = UIMessage.model_validate({"id": "u1", "role": "user", "parts": [
        {"type": "text", "text": "Read these."},
        {"type": "file", "mediaType": "image/png", "url": png},
        {"type": "file", "mediaType": "application/pdf", "url": pdf, "filename": "report.pdf"},
        {"type": "file", "mediaType": "application/pdf", "url": "https://example.com/r.pdf"},
    ]})
    async with WireServer(sse("responses-text")) as server:
        _, error = await collect(responses(server), ModelRequest(messages=[message]))
    assert error is None
    assert server.requests[0].json()["input"] == [{"role": "user", "content": [
        {"type": "input_text", "text": "Read these."},
        {"type": "input_image", "image_url": png, "detail": "auto"},
        {"type": "input_file", "filename": "report.pdf", "file_data": pdf},
        {"type": "input_file", "file_url": "https://example.com/r.pdf"},
    ]}]


async def test_responses_incomplete_for_max_output_tokens_finishes_with_length(responses: Any) -> None:
    async with WireServer(sse("responses-incomplete")) as server:
        events, error = await collect(responses(server), hi(max_output_tokens=16))
    assert error is None
    assert events == [*text_events("t-0", "A very long"), Finish("length", Usage(10, 16))]


async def test_responses_a_call_cut_by_max_output_tokens_is_not_made(responses: Any) -> None:
    async with WireServer(sse("responses-incomplete-call")) as server:
        events, error = await collect(responses(server), hi(tools=[WEATHER_TOOL], max_output_tokens=8))
    assert error is None
    assert events == [ToolInputStart("call_7", "getWeather"), ToolInputDelta("call_7", '{"city":"Par'),
                      Finish("length", Usage(10, 8), cut_off_message(["getWeather"]))]


async def test_responses_failed_is_a_model_error_with_its_message(responses: Any) -> None:
    async with WireServer(sse("responses-failed")) as server:
        events, error = await collect(responses(server), hi())
    assert events == []
    assert str(error) == "openai: The model failed to generate a response."


async def test_responses_an_error_event_is_a_model_error_with_its_message(responses: Any) -> None:
    async with WireServer(sse("responses-error-event")) as server:
        events, error = await collect(responses(server), hi())
    assert events == []
    assert str(error) == "openai: Something went wrong"


@pytest.mark.parametrize("ending", ["eof", "cut"])
async def test_responses_a_stream_cut_before_completion_is_a_model_error(responses: Any, ending: str) -> None:
    async with WireServer(sse("responses-unfinished", ending=ending)) as server:
        events, error = await collect(responses(server), hi())
    assert events == [TextStart("t-0"), TextDelta("t-0", "Once upon")]
    expected = ("openai: the response ended before the model finished (no response.completed)" if ending == "eof"
                else "openai: the response broke off: RemoteProtocolError")
    assert str(error) == expected


async def test_responses_an_error_status_is_a_model_error_with_the_providers_message(responses: Any) -> None:
    body = {"error": {"message": "The model `gpt-nope` does not exist or you do not have access to it.",
                      "type": "invalid_request_error", "param": None, "code": "model_not_found"}}
    async with WireServer(error_reply(404, body)) as server:
        events, error = await collect(responses(server), hi())
    assert events == []
    assert str(error) == ("openai: The model `gpt-nope` does not exist or you do not have access to it. "
                          "(HTTP 404)")


# ---------------------------------------------------------------- model settings


async def test_openai_spec_reads_key_and_base_url_and_calls_chat_completions(clean_env: pytest.MonkeyPatch,
                                                                             models: list[Model]) -> None:
    async with WireServer(sse("chat-ok")) as server:
        clean_env.setenv("OPENAI_API_KEY", KEY)
        clean_env.setenv("OPENAI_BASE_URL", server.base_url)
        model = openai_from_spec("gpt-4.1-mini")
        models.append(model)
        assert isinstance(model, OpenAIChatModel)
        events, error = await collect(model, hi())
    assert error is None and isinstance(events[-1], Finish)
    assert server.requests[0].path == "/v1/chat/completions"
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert server.requests[0].json()["model"] == "gpt-4.1-mini"


async def test_openai_responses_spec_calls_the_responses_api(clean_env: pytest.MonkeyPatch, tmp_path: Path,
                                                             models: list[Model]) -> None:
    secrets = tmp_path / "secrets.env"
    secrets.write_text(f"OPENAI_API_KEY={KEY}\n")
    async with WireServer(sse("responses-text")) as server:
        clean_env.setenv("THINK_SECRETS_FILE", str(secrets))
        clean_env.setenv("OPENAI_BASE_URL", server.base_url + "/")
        model = openai_from_spec("responses/gpt-4.1-mini")
        models.append(model)
        assert isinstance(model, OpenAIResponsesModel)
        _, error = await collect(model, hi())
    assert error is None
    assert server.requests[0].path == "/v1/responses"
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"
    assert server.requests[0].json()["model"] == "gpt-4.1-mini"


def test_openai_spec_chat_prefix_and_default_base_url(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("OPENAI_API_KEY", KEY)
    model = openai_from_spec("chat/gpt-4.1")
    assert isinstance(model, OpenAIChatModel)
    assert (model.model, model.base_url, model.max_tokens_field) == (
        "gpt-4.1", "https://api.openai.com/v1", "max_completion_tokens")


@pytest.mark.parametrize(("make", "arg", "variable"), [
    (openai_from_spec, "gpt-4.1-mini", "OPENAI_API_KEY"),
    (openai_from_spec, "responses/gpt-4.1-mini", "OPENAI_API_KEY"),
    (workers_ai_from_spec, "@cf/moonshotai/kimi-k2.6", "CLOUDFLARE_ACCOUNT_ID"),
])
def test_a_missing_secret_is_a_spec_error_naming_the_variable(clean_env: pytest.MonkeyPatch, make: Any, arg: str,
                                                              variable: str) -> None:
    with pytest.raises(ModelSpecError, match=variable):
        make(arg)


def test_workers_ai_needs_the_token_and_builds_the_account_url(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("CLOUDFLARE_ACCOUNT_ID", "0123abcd")
    with pytest.raises(ModelSpecError, match="CLOUDFLARE_API_TOKEN"):
        workers_ai_from_spec("@cf/moonshotai/kimi-k2.6")
    clean_env.setenv("CLOUDFLARE_API_TOKEN", KEY)
    model = workers_ai_from_spec("@cf/moonshotai/kimi-k2.6")
    assert isinstance(model, OpenAIChatModel)
    assert (model.model, model.base_url, model.provider) == (
        "@cf/moonshotai/kimi-k2.6", "https://api.cloudflare.com/client/v4/accounts/0123abcd/ai/v1", "workers-ai")
    assert KEY not in repr(model)


async def test_workers_ai_model_against_a_local_server(models: list[Model]) -> None:
    """What workers_ai_from_spec builds, pointed at loopback: the model name and token go out as Cloudflare wants."""
    async with WireServer(sse("chat-reasoning-deepseek")) as server:
        model = OpenAIChatModel("@cf/moonshotai/kimi-k2.6", base_url=server.base_url, api_key=KEY,
                                provider="workers-ai", max_tokens_field="max_tokens", settings=FAST)
        models.append(model)
        events, error = await collect(model, hi(max_output_tokens=64))
    assert error is None and events[0] == ReasoningStart("r-0")
    body = server.requests[0].json()
    assert (body["model"], body["max_tokens"]) == ("@cf/moonshotai/kimi-k2.6", 64)
    assert server.requests[0].headers["authorization"] == f"Bearer {KEY}"


async def test_openai_compatible_spec_with_and_without_a_key(clean_env: pytest.MonkeyPatch,
                                                             models: list[Model]) -> None:
    async with WireServer(sse("chat-ok"), sse("chat-ok")) as server:
        anonymous = openai_compatible_from_spec(f"{server.base_url}#Qwen/Qwen3-8B")
        models.append(anonymous)
        _, error = await collect(anonymous, hi(max_output_tokens=10))
        assert error is None
        clean_env.setenv("OPENAI_COMPATIBLE_API_KEY", KEY)
        keyed = openai_compatible_from_spec(f"{server.base_url}#Qwen/Qwen3-8B")
        models.append(keyed)
        _, error = await collect(keyed, hi())
        assert error is None
    first, second = server.requests
    assert first.path == second.path == "/v1/chat/completions"
    assert "authorization" not in first.headers
    assert first.json()["model"] == "Qwen/Qwen3-8B"
    assert first.json()["max_tokens"] == 10
    assert second.headers["authorization"] == f"Bearer {KEY}"


@pytest.mark.parametrize(("arg", "message"), [
    ("http://127.0.0.1:8000/v1", "base-url#model"),
    ("http://127.0.0.1:8000/v1#", "model name is missing"),
    ("127.0.0.1:8000/v1#m", "http:// or https://"),
])
def test_openai_compatible_spec_errors(clean_env: pytest.MonkeyPatch, arg: str, message: str) -> None:
    with pytest.raises(ModelSpecError, match=re.escape(message)):
        openai_compatible_from_spec(arg)


async def test_ollama_spec_defaults_and_base_url_without_path(clean_env: pytest.MonkeyPatch,
                                                              models: list[Model]) -> None:
    default = ollama_from_spec("llama3.2")
    models.append(default)
    assert isinstance(default, OpenAIChatModel)
    assert (default.base_url, default.provider) == ("http://127.0.0.1:11434/v1", "ollama")
    async with WireServer(sse("chat-reasoning-ollama")) as server:
        clean_env.setenv("OLLAMA_BASE_URL", server.origin)
        model = ollama_from_spec("qwen3")
        models.append(model)
        events, error = await collect(model, hi())
    assert error is None and events[-1] == Finish("stop", Usage(11, 7))
    assert server.requests[0].path == "/v1/chat/completions"
    assert "authorization" not in server.requests[0].headers
    assert server.requests[0].json()["model"] == "qwen3"


def test_ollama_spec_needs_a_model_name(clean_env: pytest.MonkeyPatch) -> None:
    with pytest.raises(ModelSpecError, match="model name is missing"):
        ollama_from_spec(" ")


# ---------------------------------------------------------------- end to end


async def test_an_instance_runs_a_server_tool_between_two_streamed_model_calls(open_instance: Any, peek: Any,
                                                                               models: list[Model]) -> None:
    weather = Tool("getWeather", "The weather of a city", WEATHER_TOOL.parameters,
                   execute=lambda city: {"condition": "sunny", "city": city})
    async with WireServer(sse("chat-weather-call"), sse("chat-weather-answer")) as server:
        model = OpenAIChatModel("gpt-4.1-mini", base_url=server.base_url, api_key=KEY, settings=FAST)
        models.append(model)
        agent = Agent(model=model, system="You tell the weather.", tools=[weather])
        inst = await open_instance(model, agent)
        s = await inst.session()
        receipt = await s.submit([user("u1", "Weather in Paris?")])
        result = await settle(s, receipt.operation_id)

    assert (result.outcome, result.text) == ("done", "It is sunny in Paris.")
    _, answer = (await s.transcript())
    stored = peek.message(s.id, answer.id)
    assert stored == {"id": answer.id, "role": "assistant", "parts": [
        {"type": "step-start"},
        {"type": "tool-getWeather", "toolCallId": "call_w1", "toolName": "getWeather", "state": "output-available",
         "input": {"city": "Paris"}, "output": {"condition": "sunny", "city": "Paris"}},
        {"type": "step-start"},
        {"type": "text", "text": "It is sunny in Paris.", "state": "done"},
    ]}

    first, second = (r.json() for r in server.requests)
    assert first["messages"] == [{"role": "system", "content": "You tell the weather."},
                                 {"role": "user", "content": "Weather in Paris?"}]
    assert first["tools"][0]["function"]["name"] == "getWeather"
    assert second["messages"] == [
        {"role": "system", "content": "You tell the weather."},
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_w1", "type": "function", "function": {"name": "getWeather", "arguments": '{"city":"Paris"}'}},
        ]},
        {"role": "tool", "tool_call_id": "call_w1", "content": '{"condition":"sunny","city":"Paris"}'},
    ]
    assert all(KEY not in json.dumps(part) for part in stored["parts"])
