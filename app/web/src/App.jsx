import { useEffect, useState } from "react";
import { Chat } from "./Chat.jsx";
import { NAME_PATTERN, authToken, hashOf, isValidName, newName, readHash, recentNames, remember } from "./conversations.js";

function useAgentNames() {
  const [state, setState] = useState({ agents: null, error: null });
  useEffect(() => {
    let live = true;
    const token = authToken();
    const headers = { accept: "application/json", ...(token ? { authorization: `Bearer ${token}` } : {}) };
    fetch("/api/agents", { headers })
      .then(async (res) => {
        if (!res.ok) throw new Error(`GET /api/agents answered ${res.status}`);
        const agents = await res.json();
        if (!Array.isArray(agents)) throw new Error("GET /api/agents did not answer a list");
        if (live) setState({ agents, error: null });
      })
      .catch((e) => live && setState({ agents: null, error: String(e.message ?? e) }));
    return () => {
      live = false;
    };
  }, []);
  return state;
}

/**
 * The open conversation: the URL hash when it names a served agent, else the
 * agent's latest one (or a new one). Returns it with the agent's remembered names.
 */
function useConversation(agents) {
  const [current, setCurrent] = useState(() => readHash());
  const [recent, setRecent] = useState([]);
  useEffect(() => {
    const onHash = () => setCurrent(readHash());
    window.addEventListener("hashchange", onHash);
    return () => window.removeEventListener("hashchange", onHash);
  }, []);
  useEffect(() => {
    if (!agents || agents.length === 0) return;
    if (current && agents.includes(current.agent) && isValidName(current.name)) {
      setRecent(remember(current.agent, current.name));
      return;
    }
    const agent = current && agents.includes(current.agent) ? current.agent : agents[0];
    const next = { agent, name: recentNames(agent)[0] ?? newName() };
    window.history.replaceState(null, "", hashOf(next));
    setCurrent(next);
  }, [agents, current]);
  const valid = current && agents?.includes(current.agent) && isValidName(current.name);
  useEffect(() => {
    document.title = valid ? `${current.name} · ${current.agent} · think-server` : "think-server chat";
  }, [valid, current]);
  return valid ? { current, recent } : { current: null, recent };
}

function open(conversation) {
  window.location.hash = hashOf(conversation);
}

function Sidebar({ agents, current, recent }) {
  const [draft, setDraft] = useState("");
  const onCreate = (e) => {
    e.preventDefault();
    const name = draft.trim() || newName();
    if (!isValidName(name)) return;
    setDraft("");
    open({ agent: current.agent, name });
  };
  return (
    <nav className="sidebar" aria-label="Conversations">
      <label className="field">
        <span>Agent</span>
        <select
          value={current.agent}
          onChange={(e) => open({ agent: e.target.value, name: recentNames(e.target.value)[0] ?? newName() })}
        >
          {agents.map((a) => (
            <option key={a} value={a}>
              {a}
            </option>
          ))}
        </select>
      </label>
      <form className="new-conversation" onSubmit={onCreate}>
        <label className="field">
          <span>New conversation</span>
          <input
            name="conversation"
            value={draft}
            onChange={(e) => setDraft(e.target.value)}
            placeholder="name (optional)"
            pattern={NAME_PATTERN}
            title="Letters, digits, '.', '_' or '-', at most 64"
            autoComplete="off"
          />
        </label>
        <button type="submit">Open</button>
      </form>
      <h2>Recent</h2>
      <ul className="recent">
        {recent.map((name) => (
          <li key={name}>
            <a href={hashOf({ agent: current.agent, name })} aria-current={name === current.name ? "page" : undefined}>
              {name}
            </a>
          </li>
        ))}
      </ul>
    </nav>
  );
}

export function App() {
  const { agents, error } = useAgentNames();
  const { current, recent } = useConversation(agents);
  let body;
  if (error) {
    body = (
      <p className="notice error" role="alert">
        Cannot list the agents: {error}
      </p>
    );
  } else if (agents && agents.length === 0) {
    body = <p className="notice">This server has no agents.</p>;
  } else if (!agents || !current) {
    body = <p className="notice">Loading…</p>;
  } else {
    // A new conversation is a new socket and a new chat: remount rather than re-point the hooks.
    const key = `${current.agent}/${current.name}`;
    body = (
      <div className="layout">
        <Sidebar agents={agents} current={current} recent={recent} />
        <Chat key={key} agent={current.agent} name={current.name} />
      </div>
    );
  }
  return (
    <>
      <header className="top">
        <h1>think-server</h1>
        {current && (
          <p className="where">
            <span className="agent-name">{current.agent}</span> / <span data-testid="conversation">{current.name}</span>
          </p>
        )}
      </header>
      {body}
    </>
  );
}
