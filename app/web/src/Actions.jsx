// What a person can do with a message once it is there: copy it; answer the last one again
// (Regenerate) or go on with a stopped one (Continue); edit one of their own, which sends the
// edited text as a new branch from that point; and, where the server holds other versions of
// a message (an earlier answer, the text before an edit), step through them: ‹ 2/3 ›.
// Nothing here deletes: the server keeps every branch, and the switcher reaches them.
import { useEffect, useRef, useState } from "react";
import { copyText } from "./Markdown.jsx";
import { groupParts } from "./Parts.jsx";

/** A message's text as the person would paste it: its text parts, the markdown as written. */
export function plainText(message) {
  return groupParts(message.parts)
    .filter((g) => g.type === "text")
    .map((g) => g.text)
    .join("\n\n")
    .trim();
}

function CopyButton({ text }) {
  const [said, setSaid] = useState(null);
  const timer = useRef(null);
  useEffect(() => () => clearTimeout(timer.current), []);
  const onCopy = async () => {
    try {
      await copyText(text);
      setSaid("Copied");
    } catch {
      setSaid("Cannot copy");
    }
    clearTimeout(timer.current);
    timer.current = setTimeout(() => setSaid(null), 1500);
  };
  return (
    <button type="button" className="action copy-message" onClick={onCopy} aria-label={said ?? "Copy message"} title="Copy">
      {said ?? "Copy"}
    </button>
  );
}

/** ‹ 2/3 ›: which version of this message shows, and the others a click away. */
function BranchSwitcher({ ids, current, onSwitch, disabled }) {
  const at = ids.indexOf(current);
  if (at < 0 || ids.length < 2) return null;
  return (
    <span className="branches" role="group" aria-label={`Version ${at + 1} of ${ids.length}`} data-testid="branches">
      <button
        type="button"
        className="action"
        aria-label="Previous version"
        disabled={disabled || at === 0}
        onClick={() => onSwitch(ids[at - 1])}
      >
        ‹
      </button>
      <span className="branch-count">
        {at + 1}/{ids.length}
      </span>
      <button
        type="button"
        className="action"
        aria-label="Next version"
        disabled={disabled || at === ids.length - 1}
        onClick={() => onSwitch(ids[at + 1])}
      >
        ›
      </button>
    </span>
  );
}

/**
 * The row under a message. `siblings`: the ids of its versions, when the server holds more than one;
 * `onRegenerate`, `onContinue`, `onEdit`, `onSwitch`: null where they do not apply now.
 */
export function MessageActions({ message, siblings, onRegenerate, onContinue, onEdit, onSwitch, busy }) {
  const text = plainText(message);
  return (
    <div className="message-actions" aria-label="Message actions" role="group">
      {siblings && <BranchSwitcher ids={siblings} current={message.id} onSwitch={onSwitch} disabled={busy || !onSwitch} />}
      {text && <CopyButton text={text} />}
      {onEdit && (
        <button type="button" className="action" onClick={onEdit} title="Edit and send again (the original stays)">
          Edit
        </button>
      )}
      {onRegenerate && (
        <button type="button" className="action" onClick={onRegenerate} title="Answer again (this answer stays)">
          Regenerate
        </button>
      )}
      {onContinue && (
        <button type="button" className="action" onClick={onContinue} title="Go on from where it stopped">
          Continue
        </button>
      )}
    </div>
  );
}

/** A user message being edited: its text in a box; Send makes the new branch, Esc or Cancel leaves it. */
export function EditForm({ message, onSend, onCancel }) {
  const [value, setValue] = useState(() => plainText(message));
  const box = useRef(null);
  useEffect(() => {
    const el = box.current;
    if (!el) return;
    el.focus();
    el.setSelectionRange(el.value.length, el.value.length);
  }, []);
  const submit = (e) => {
    e.preventDefault();
    const text = value.trim();
    if (text) onSend(text);
  };
  return (
    <li className="message user editing" data-role="user" data-id={message.id} data-editing="true">
      <h2 className="role">You</h2>
      <form
        className="edit-form"
        onSubmit={submit}
        onKeyDown={(e) => {
          if (e.key === "Escape") {
            e.preventDefault();
            onCancel();
          } else if (e.key === "Enter" && !e.shiftKey && !e.nativeEvent.isComposing) submit(e);
        }}
      >
        <label htmlFor={`edit-${message.id}`} className="visually-hidden">
          Edit your message
        </label>
        <textarea id={`edit-${message.id}`} ref={box} rows={3} value={value} onChange={(e) => setValue(e.target.value)} />
        <div className="edit-actions">
          <button type="button" className="secondary" onClick={onCancel}>
            Cancel
          </button>
          <button type="submit" className="send" disabled={!value.trim()}>
            Send
          </button>
        </div>
      </form>
    </li>
  );
}

/** An id for a message the page makes (an edit): unique enough, and no secure context needed. */
export function newMessageId() {
  return `m-${Date.now().toString(36)}-${Math.random().toString(36).slice(2, 10)}`;
}
