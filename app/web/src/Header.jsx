// The page's header: the conversations drawer's toggle, the conversation's title (the agent's
// name beside it only where the server has more than one), which model answers, and the Files
// sheet's toggle at phone width.
import { forwardRef } from "react";

/** What `GET /api/agents` calls the offline demo: the page offers the demo's topics only on it. */
export const DEMO_MODEL = "scripted (demo)";

/**
 * `GET /api/agents`: `{agents: [...], models: {agent: label}}`, or (a server before the models)
 * a plain list of names; `models` is null then.
 */
export function readAgents(body) {
  if (Array.isArray(body)) return { agents: body, models: null };
  if (body && Array.isArray(body.agents)) {
    return { agents: body.agents, models: body.models && typeof body.models === "object" ? body.models : null };
  }
  throw new Error("GET /api/agents did not answer a list of agents");
}

/** Whether the empty conversation offers the demo's topics: on the demo model (or a server that does not say). */
export const offersTopics = (models, agent) => (models ? models[agent] === DEMO_MODEL : true);

export const Header = forwardRef(function Header(
  { current, agents, models, title, drawer, hasFiles, sheet, onFiles },
  filesToggle
) {
  const model = current ? models?.[current.agent] : null;
  return (
    <header className="top">
      {current && (
        <button
          type="button"
          className="menu"
          ref={drawer.toggle}
          aria-controls="sidebar"
          aria-expanded={drawer.isOpen}
          onClick={() => (drawer.isOpen ? drawer.close() : drawer.open())}
        >
          <span aria-hidden="true">☰</span>
          <span className="visually-hidden">Conversations</span>
        </button>
      )}
      <h1>think-server</h1>
      {current && (
        <p className="where">
          <span className="conversation-title" data-testid="conversation">
            {title}
          </span>
          {agents.length > 1 && (
            <span className="agent-name" data-testid="agent">
              {" · "}
              {current.agent}
            </span>
          )}
        </p>
      )}
      {model && (
        <span className="model" data-testid="model" title={`The model that answers: ${model}`}>
          <span className="visually-hidden">Model: </span>
          {model}
        </span>
      )}
      {current && hasFiles && (
        <button
          type="button"
          className="files-toggle secondary"
          ref={filesToggle}
          aria-controls="files"
          aria-expanded={sheet}
          onClick={onFiles}
        >
          Files
        </button>
      )}
    </header>
  );
});
