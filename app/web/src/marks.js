// How each reply's turn ended, as the server keeps it: the `think` key of the message's metadata
// (README "The page"): {outcome: "stopped" | "failed", error, reasoning_ms: [ms of each reasoning
// part]}. A reload and every tab read the same marks.
import { useEffect, useState } from "react";

function thinkOf(message) {
  const think = message?.metadata?.think;
  return think && typeof think === "object" ? think : null;
}

function marksOf(messages) {
  return new Map((Array.isArray(messages) ? messages : []).filter((m) => m?.id).map((m) => [m.id, thinkOf(m)]));
}

/**
 * The marks of each message as the server's frames last told them (the transcripts, a message's
 * update, a stream's `message-metadata`). The hook's own messages carry them too, except the
 * reply this tab streamed and stopped: the hook keeps its copy of it, made before the stream's
 * end, over the server's transcript.
 */
export function useServerMarks(socket, stored) {
  const [marks, setMarks] = useState(() => marksOf(stored));
  useEffect(() => {
    const replies = new Map(); // request id -> the reply its stream started
    const onMessage = (event) => {
      const data = event.data;
      if (typeof data !== "string") return;
      const transcript = data.includes('"cf_agent_chat_messages"') || data.includes('"cf_agent_message_updated"');
      if (!transcript && !data.includes("message-metadata") && !data.includes('\\"start\\"')) return;
      let frame;
      try {
        frame = JSON.parse(data);
        if (frame?.type === "cf_agent_chat_messages" && Array.isArray(frame.messages)) {
          setMarks(marksOf(frame.messages));
        } else if (frame?.type === "cf_agent_message_updated" && frame.message?.id) {
          setMarks((all) => new Map(all).set(frame.message.id, thinkOf(frame.message)));
        } else if (frame?.type === "cf_agent_use_chat_response" && !frame.done && typeof frame.body === "string") {
          const chunk = JSON.parse(frame.body);
          if (chunk?.type === "start" && typeof chunk.messageId === "string") replies.set(frame.id, chunk.messageId);
          const id = replies.get(frame.id);
          const think = chunk?.messageMetadata?.think;
          if (id && think && typeof think === "object") setMarks((all) => new Map(all).set(id, think));
        }
      } catch {
        // not JSON: nothing to learn
      }
    };
    socket.addEventListener("message", onMessage);
    return () => socket.removeEventListener("message", onMessage);
  }, [socket]);
  return marks;
}

/**
 * `{stopped, error, reasoningMs}` of a message: the server's latest word (`marks`) where it has
 * one, else the message's own metadata.
 */
export function outcomeOf(message, marks) {
  const think = marks?.has(message.id) ? marks.get(message.id) : thinkOf(message);
  if (!think) return { stopped: false, error: null, reasoningMs: [] };
  return {
    stopped: think.outcome === "stopped",
    error: think.outcome === "failed" ? String(think.error || "The model could not answer.") : null,
    reasoningMs: Array.isArray(think.reasoning_ms) ? think.reasoning_ms : []
  };
}
