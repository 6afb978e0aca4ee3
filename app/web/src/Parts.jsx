import { getToolName, isToolUIPart } from "ai";

const ROLE_LABELS = { user: "You", assistant: "Assistant", system: "System" };

function json(value) {
  if (value === undefined) return "";
  try {
    return JSON.stringify(value, null, 2);
  } catch {
    return String(value);
  }
}

function Block({ className, caption, value }) {
  return (
    <div className={className}>
      <p className="caption">{caption}</p>
      <pre>{json(value)}</pre>
    </div>
  );
}

const TOOL_STATES = {
  "input-streaming": "preparing the call…",
  "input-available": "running…",
  "approval-requested": "needs your approval",
  "approval-responded": "answered, continuing…",
  "output-available": "done",
  "output-error": "failed",
  "output-denied": "denied"
};

function ToolPart({ part, onApproval }) {
  const name = getToolName(part);
  const approvalId = part.approval?.id;
  return (
    <section className="tool" data-tool={name} data-state={part.state} aria-label={`Tool ${name}`}>
      <header>
        <span className="tool-name">{name}</span>
        <span className="tool-state">{TOOL_STATES[part.state] ?? part.state}</span>
      </header>
      {part.input !== undefined && Object.keys(part.input ?? {}).length > 0 && (
        <Block className="tool-input" caption="Input" value={part.input} />
      )}
      {part.state === "approval-requested" && approvalId && (
        <div className="approval" role="group" aria-label={`Approve ${name}?`}>
          <button type="button" className="approve" onClick={() => onApproval(approvalId, true)}>
            Approve
          </button>
          <button type="button" className="deny" onClick={() => onApproval(approvalId, false)}>
            Deny
          </button>
        </div>
      )}
      {part.state === "output-available" && (
        <Block className="tool-output" caption="Output" value={part.output} />
      )}
      {part.state === "output-error" && <p className="tool-error">{part.errorText}</p>}
      {part.state === "output-denied" && <p className="tool-denied">You denied this call.</p>}
    </section>
  );
}

function Part({ part, onApproval }) {
  if (part.type === "text") {
    return (
      <div className="text" data-state={part.state ?? "done"}>
        {part.text}
      </div>
    );
  }
  if (part.type === "reasoning") {
    return (
      <details className="reasoning" open data-state={part.state ?? "done"}>
        <summary>{part.state === "streaming" ? "Thinking…" : "Reasoning"}</summary>
        <div className="reasoning-text">{part.text}</div>
      </details>
    );
  }
  if (isToolUIPart(part)) return <ToolPart part={part} onApproval={onApproval} />;
  return null; // step-start, sources, files and data parts: nothing to show here
}

export function Message({ message, onApproval }) {
  return (
    <li className={`message ${message.role}`} data-role={message.role} data-id={message.id}>
      <h2 className="role">{ROLE_LABELS[message.role] ?? message.role}</h2>
      {message.parts.map((part, i) => (
        <Part key={part.toolCallId ?? `${part.type}-${i}`} part={part} onApproval={onApproval} />
      ))}
    </li>
  );
}
