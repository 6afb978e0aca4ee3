// The smallest app on the AI SDK's own useChat over HTTP: the chat (#name=…&chat=…) is loaded
// from get-messages?session=, then useChat resumes whatever still streams (resume: true).
import { createElement as h, useState } from "react";
import { createRoot } from "react-dom/client";
import { useChat } from "@ai-sdk/react";
import { DefaultChatTransport } from "ai";

const hash = new URLSearchParams(location.hash.slice(1));
const name = hash.get("name") ?? "page";
const chatId = hash.get("chat") ?? "chat";
const api = `/agents/my-agent/${name}/chat`;
const transport = new DefaultChatTransport({ api });

function Chat({ initial }) {
  const { messages, sendMessage, status } = useChat({ id: chatId, messages: initial, transport, resume: true });
  const [draft, setDraft] = useState("");
  const send = (e) => {
    e.preventDefault();
    sendMessage({ text: draft });
    setDraft("");
  };
  return h("main", null,
    h("p", { id: "status" }, status),
    h("ul", null, messages.map((m) =>
      h("li", { key: m.id, className: "message", "data-role": m.role, "data-id": m.id },
        m.parts.filter((p) => p.type === "text").map((p, i) => h("span", { key: i, className: "text" }, p.text))))),
    h("form", { onSubmit: send },
      h("input", { id: "draft", value: draft, onChange: (e) => setDraft(e.target.value) }),
      h("button", { type: "submit" }, "Send")));
}

const initial = await (await fetch(`/agents/my-agent/${name}/get-messages?session=${encodeURIComponent(chatId)}`)).json();
createRoot(document.getElementById("root")).render(h(Chat, { initial }));
