"""The agents whose data dir the migrate-data tests copy: ``desk`` (a tool, memory, the workspace,
compaction) and the crash tests' ``crash-agent`` (its slow answer is the turn a test interrupts)."""

from __future__ import annotations

from tests.crash_app import agents as crash_agents
from think_server.harness import Agent, Block, Compaction, Memory, ScriptedModel, WorkspaceTools, tool

DESK_SCRIPT = {
    "rules": [
        {"match": "messages to summarize", "steps": [[{"text": ["The user asked about parcels."]}]]},
        {"match": "weather", "steps": [
            [{"tool_call": {"name": "getWeather", "input": {"city": "Paris"}}}],
            [{"text": ["It is ", "{result}", " in Paris."]}],
        ]},
        {"match": "remember", "steps": [
            [{"tool_call": {"name": "memory_append", "input": {"label": "notes", "text": "Prefers tea."}}}],
            [{"text": ["Noted."]}],
        ]},
        {"match": "write the notes", "steps": [
            [{"tool_call": {"name": "write", "input": {"path": "notes.md", "content": "tea, not coffee\n"}}}],
            [{"text": ["Written: ", "{result}"]}],
        ]},
        {"match": "*", "steps": [[{"text": ["You said: {user}"]}]]},
    ]
}


@tool(name="getWeather")
async def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


agents = {
    "desk": Agent(
        model=ScriptedModel(DESK_SCRIPT),
        tools=[get_weather],
        memory=Memory([Block("notes", "What you learned about the user", limit=1000)]),
        workspace=WorkspaceTools(),
        compaction=Compaction(keep_messages=2, keep_tokens=0),
    ),
    "crash-agent": crash_agents["crash-agent"],
}
