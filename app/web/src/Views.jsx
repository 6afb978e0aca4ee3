// Views of their own for what the server sends beyond text and plain tool calls: a sub-agent's
// answer as it comes (an agent tool's preliminary output, README "Sub-agents") and the agent's
// MCP servers (the socket's cf_agent_mcp_servers frame, README "MCP tools").
import { Markdown } from "./Markdown.jsx";

/**
 * The agent a tool call hands a task to, or null for any other call: its preliminary output
 * names it ({agent, instance, status, text}); once answered (and after a reload) an agent tool
 * is known by its name (`ask_<agent>`) and its `task`.
 */
export function subAgentOf(part, name) {
  const out = part.output;
  if (out && typeof out === "object" && typeof out.agent === "string" && typeof out.text === "string") return out.agent;
  if (typeof part.input?.task === "string" && name.startsWith("ask_")) return name.slice(4);
  return null;
}

const WORKING = new Set(["input-streaming", "input-available", "approval-responded"]);

/** An agent tool's call: the task, the other agent's answer as it writes it, then its answer. */
export function SubAgentPart({ part, name, agent }) {
  const running = WORKING.has(part.state) || (part.state === "output-available" && part.preliminary === true);
  const out = part.output;
  const text = typeof out === "string" ? out : typeof out?.text === "string" ? out.text : "";
  const state = running ? "working…" : part.state === "output-available" ? "answered" : "failed";
  return (
    <section
      className="tool subagent"
      data-tool={name}
      data-state={part.state}
      data-running={running ? "true" : "false"}
      aria-label={`Agent ${agent}`}
    >
      <details open={running ? true : undefined}>
        <summary>
          <span className="tool-name">{agent}</span>
          <span className="tool-state">{state}</span>
          {running && <span className="spinner" aria-hidden="true" />}
        </summary>
        <div className="tool-body">
          {typeof part.input?.task === "string" && (
            <p className="subagent-task">
              <span className="caption">Task</span> {part.input.task}
            </p>
          )}
          {text && (
            <div className="subagent-text" data-testid="subagent-text">
              <Markdown text={text} />
            </div>
          )}
          {running && !text && <p className="caption">Waiting for its first words…</p>}
          {part.state === "output-error" && <p className="tool-error">{part.errorText}</p>}
        </div>
      </details>
    </section>
  );
}

/** The agent's MCP servers, each with its state, its error and its tools; nothing when it has none. */
export function McpServers({ mcp }) {
  const servers = Object.values(mcp?.servers ?? {});
  if (servers.length === 0) return null;
  const tools = Array.isArray(mcp?.tools) ? mcp.tools : [];
  const ready = servers.filter((s) => s.state === "ready").length;
  return (
    <details className="mcp-servers" data-testid="mcp-servers">
      <summary>
        MCP servers: {ready}/{servers.length} ready
      </summary>
      <ul>
        {servers.map((s) => {
          const own = tools.filter((t) => t.serverId === s.name).map((t) => t.name);
          return (
            <li key={s.name} className="mcp-server" data-server={s.name} data-state={s.state}>
              <span className="mcp-name">{s.name}</span> <span className={`badge mcp-state ${s.state}`}>{s.state}</span>
              {own.length > 0 && <span className="mcp-tools">{own.join(", ")}</span>}
              {s.error && <span className="mcp-error">{s.error}</span>}
            </li>
          );
        })}
      </ul>
    </details>
  );
}
