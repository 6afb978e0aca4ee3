"""The agent the cluster-node tests run on several server processes sharing one PostgreSQL database:
a long, slow answer (a node is stopped or killed in the middle of it) and a quick one."""

from __future__ import annotations

from think_server.harness import Agent, RecoveryPolicy, ScriptedModel

#: Words of the slow answer, and the pause between two of them (about 7 s in all).
SLOW_WORDS = 120
#: The one agent, and the text its slow answer streams.
AGENT = "node-agent"
WORDS = "".join(f"w{i} " for i in range(SLOW_WORDS))
SLOW_INTERVAL_MS = 60

SCRIPT = {
    "rules": [
        {"match": "slow", "steps": [[{"text": [f"w{i} " for i in range(SLOW_WORDS)],
                                      "interval_ms": SLOW_INTERVAL_MS}]]},
        {"match": "*", "steps": [[{"text": ["You said: {user}"]}]]},
    ]
}

agents = {
    AGENT: Agent(model=ScriptedModel(SCRIPT), recovery=RecoveryPolicy(backoff_ms=50, crash_limit=3)),
}
