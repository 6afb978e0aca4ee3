import { getToolName, isToolUIPart } from "ai";
import { useContext, useEffect, useRef } from "react";
import { FILE_TOOLS, FileOpener } from "./Files.jsx";
import { Markdown } from "./Markdown.jsx";
import { SubAgentPart, subAgentOf } from "./Views.jsx";

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

/**
 * What a message shows, in order: text and reasoning parts that follow each other
 * (across model steps too: a reply continued after a restart is a new step) become
 * one block, so a sentence split over two parts reads as one.
 */
export function groupParts(parts) {
  const groups = [];
  let reasonings = 0; // a reasoning part's place among the message's reasoning parts: its time's index
  for (const [i, part] of (parts ?? []).entries()) {
    if (part.type === "text" || part.type === "reasoning") {
      const ordinal = part.type === "reasoning" ? reasonings++ : null;
      if (!part.text && part.state !== "streaming") continue;
      const last = groups[groups.length - 1];
      if (last?.type === part.type) {
        last.text += part.text ?? "";
        last.streaming ||= part.state === "streaming";
        if (ordinal !== null) last.ordinals.push(ordinal);
        continue;
      }
      groups.push({
        type: part.type,
        key: `${part.type}-${i}`,
        text: part.text ?? "",
        streaming: part.state === "streaming",
        ordinals: ordinal === null ? [] : [ordinal]
      });
    } else if (isToolUIPart(part)) {
      groups.push({ type: "tool", key: part.toolCallId ?? `tool-${i}`, part });
    }
    // step-start, sources, files and data parts: nothing to show, and they do not break a text block
  }
  return groups;
}

/** Whether the message shows anything at all (an answer that failed before its first word shows nothing). */
export function hasContent(message) {
  return groupParts(message.parts).some((g) => g.type === "tool" || g.text.trim() || g.streaming);
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

const RUNNING = new Set(["input-streaming", "input-available", "approval-responded"]);

/**
 * The server's error for a call still waiting for the user (an approval, this page's answer)
 * when a new turn started: it ended there and never runs (harness MOVED_ON_ERROR).
 */
export const MOVED_ON = "The user moved on without answering; this call was not run.";

/**
 * A card the user can no longer answer: the server ended it when a new turn started, or it still
 * asks in an answer that is not the last one (a newer message is on its way: the server ends it
 * when that message's turn starts).
 */
function isExpired(part, superseded) {
  if (part.state === "output-error") return part.errorText === MOVED_ON;
  return part.state === "approval-requested" && superseded;
}

function decisionOf(part) {
  if (part.state === "output-denied" || part.approval?.approved === false) return "denied";
  if (part.approval?.approved === true) return "approved";
  return null;
}

/**
 * What a file tool's card names in its summary: the file (or the pattern) it works on; and,
 * once the call is done, a button that shows the file in the Files panel.
 */
function FileTarget({ name, part }) {
  const openFile = useContext(FileOpener);
  const key = FILE_TOOLS[name];
  const target = key ? part.input?.[key] : null;
  if (typeof target !== "string" || !target) return null;
  const opens = key === "path" && name !== "delete" && part.state === "output-available" && openFile;
  return (
    <>
      <span className="tool-target" data-testid="tool-target">
        {target}
      </span>
      {opens && (
        <button
          type="button"
          className="secondary open-file"
          onClick={(e) => {
            e.preventDefault(); // inside <summary>: open the file, not the card
            openFile(target);
          }}
        >
          Open
        </button>
      )}
    </>
  );
}

function ToolPart({ part, onApproval, live, superseded }) {
  const name = getToolName(part);
  const fileTool = Object.hasOwn(FILE_TOOLS, name);
  const approvalId = part.approval?.id;
  const expired = isExpired(part, superseded);
  const asking = part.state === "approval-requested" && approvalId && !expired;
  const question = useRef(null);
  const decision = expired ? null : decisionOf(part);
  useEffect(() => {
    // An approval that comes while the page is open takes the focus: it is what the turn waits for.
    // The question takes it, not a button: an Enter meant for something else must not approve a
    // transfer. Tab goes on to Approve, then Deny.
    if (asking && live) question.current?.focus();
  }, [asking, live]);
  const hasInput = part.input !== undefined && Object.keys(part.input ?? {}).length > 0;
  return (
    <section
      className="tool"
      data-tool={name}
      data-state={part.state}
      data-expired={expired ? "true" : undefined}
      data-file-tool={fileTool ? "true" : undefined}
      aria-label={`Tool ${name}`}
    >
      <details open={asking ? true : undefined}>
        <summary>
          <span className="tool-name">{name}</span>
          {fileTool && <FileTarget name={name} part={part} />}
          <span className="tool-state">{expired ? "expired" : (TOOL_STATES[part.state] ?? part.state)}</span>
          {RUNNING.has(part.state) && <span className="spinner" aria-hidden="true" />}
          {decision && (
            <span className={`badge ${decision}`} data-decision={decision}>
              {decision === "approved" ? "Approved" : "Denied"}
            </span>
          )}
          {expired && (
            <span className="badge expired" data-decision="expired">
              Expired
            </span>
          )}
        </summary>
        <div className="tool-body">
          {hasInput && <Block className="tool-input" caption="Input" value={part.input} />}
          {!hasInput && <p className="caption">No input</p>}
          {part.state === "output-available" && <Block className="tool-output" caption="Output" value={part.output} />}
          {expired && (
            <p className="tool-expired">
              {part.state === "approval-requested"
                ? "A newer message was sent: this call will not run."
                : "You moved on without answering: this call was not run."}
            </p>
          )}
          {part.state === "output-error" && !expired && <p className="tool-error">{part.errorText}</p>}
          {part.state === "output-denied" && <p className="tool-denied">You denied this call.</p>}
        </div>
      </details>
      {asking && (
        <div className="approval" role="group" aria-label={`Approve ${name}?`} tabIndex={-1} ref={question}>
          <span className="approval-question">Run {name} with the input above?</span>
          <button type="button" className="approve" onClick={() => onApproval(approvalId, true)}>
            Approve
          </button>
          <button type="button" className="deny" onClick={() => onApproval(approvalId, false)}>
            Deny
          </button>
        </div>
      )}
    </section>
  );
}

/** The time the parts of one reasoning block took, as the server measured it; null when it did not. */
function thinkingTime(ordinals, reasoningMs) {
  const known = ordinals.map((k) => reasoningMs[k]).filter((ms) => typeof ms === "number");
  return known.length ? known.reduce((a, b) => a + b, 0) : null;
}

function Reasoning({ text, streaming, ms }) {
  const label = streaming
    ? "Thinking…"
    : ms !== null
      ? `Thought for ${Math.max(1, Math.round(ms / 1000))} s`
      : "Reasoning";
  return (
    <details className="reasoning" open={streaming ? true : undefined} data-state={streaming ? "streaming" : "done"}>
      <summary>
        {label}
        {streaming && <span className="spinner" aria-hidden="true" />}
      </summary>
      <div className="reasoning-text">{text}</div>
    </details>
  );
}

function Group({ group, role, onApproval, live, superseded, caret, reasoningMs }) {
  if (group.type === "text") {
    return (
      <div className="text" data-state={group.streaming ? "streaming" : "done"} data-caret={caret ? "true" : undefined}>
        {role === "assistant" ? <Markdown text={group.text} /> : group.text}
      </div>
    );
  }
  if (group.type === "reasoning") {
    return <Reasoning text={group.text} streaming={group.streaming} ms={thinkingTime(group.ordinals, reasoningMs)} />;
  }
  const agent = subAgentOf(group.part, getToolName(group.part));
  if (agent) return <SubAgentPart part={group.part} name={getToolName(group.part)} agent={agent} />;
  return <ToolPart part={group.part} onApproval={onApproval} live={live} superseded={superseded} />;
}

/** A failed turn's error, inside the reply it ended, with Retry for the last one. */
export function TurnError({ text, onRetry }) {
  return (
    <div className="turn-error" role="alert">
      <p>
        <strong>The answer failed:</strong> {text}
      </p>
      {onRetry && (
        <button type="button" className="retry" onClick={onRetry}>
          Retry
        </button>
      )}
    </div>
  );
}

/**
 * One message. `streaming`: the answer is still coming (a caret follows its text);
 * `stopped`: it was stopped; `error`: {text, onRetry} of the turn it failed (both from the
 * message's metadata: marks.js); `reasoningMs`: how long each of its reasoning parts took;
 * `pending`: typed while offline, not sent yet; `live`: it arrived while the page was open;
 * `superseded`: a newer message follows it (a card it still shows asking cannot be answered);
 * `actions`: the row of what can be done with it (Copy, Edit, Regenerate, Continue, its versions).
 */
export function Message({ message, onApproval, streaming, stopped, error, reasoningMs = [], pending, live, superseded, actions }) {
  const groups = groupParts(message.parts);
  const lastText = streaming ? groups.findLastIndex((g) => g.type === "text") : -1;
  return (
    <li
      className={`message ${message.role}`}
      data-role={message.role}
      data-id={message.id}
      data-pending={pending ? "true" : undefined}
      data-stopped={stopped ? "true" : undefined}
      data-failed={error ? "true" : undefined}
    >
      <h2 className="role">{ROLE_LABELS[message.role] ?? message.role}</h2>
      {groups.map((g, i) => (
        <Group
          key={g.key}
          group={g}
          role={message.role}
          onApproval={onApproval}
          live={live}
          superseded={superseded}
          caret={i === lastText && i === groups.length - 1}
          reasoningMs={reasoningMs}
        />
      ))}
      {streaming && (groups.length === 0 || lastText !== groups.length - 1) && (
        <span className="typing" aria-hidden="true" />
      )}
      {pending && <p className="pending-mark">Not sent yet: it goes when the connection is back.</p>}
      {stopped && <p className="stopped-mark">Stopped</p>}
      {error && <TurnError text={error.text} onRetry={error.onRetry} />}
      {actions}
    </li>
  );
}
