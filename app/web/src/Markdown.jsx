// An assistant's text as GitHub-flavoured markdown (react-markdown + remark-gfm), with
// code blocks highlighted (rehype-highlight, highlight.js's common languages) and a
// copy button on each. Raw HTML in the text is never rendered. A half-streamed text
// renders well as it is: an unclosed ``` fence is already a code block.
import { memo, useRef, useState } from "react";
import ReactMarkdown from "react-markdown";
import rehypeHighlight from "rehype-highlight";
import remarkGfm from "remark-gfm";

const REMARK = [remarkGfm];
// Only fenced blocks that name their language are highlighted: guessing one is slow and often wrong.
const REHYPE = [[rehypeHighlight, { detect: false }]];

export async function copyText(text) {
  if (navigator.clipboard && window.isSecureContext) {
    await navigator.clipboard.writeText(text);
    return;
  }
  // Plain http on another host is no secure context: the old way still works there.
  const area = document.createElement("textarea");
  area.value = text;
  area.setAttribute("readonly", "");
  area.style.position = "fixed";
  area.style.opacity = "0";
  document.body.appendChild(area);
  area.select();
  try {
    if (!document.execCommand("copy")) throw new Error("the browser refused to copy");
  } finally {
    area.remove();
  }
}

function CodeBlock({ children, node: _node, ...props }) {
  const pre = useRef(null);
  const [copied, setCopied] = useState(null);
  const code = Array.isArray(children) ? children[0] : children;
  const lang = /language-([\w+#.-]+)/.exec(code?.props?.className ?? "")?.[1];
  const onCopy = async () => {
    try {
      await copyText(pre.current?.querySelector("code")?.textContent ?? pre.current?.textContent ?? "");
      setCopied("Copied");
    } catch {
      setCopied("Cannot copy");
    }
    setTimeout(() => setCopied(null), 1500);
  };
  return (
    <div className="code-block">
      <div className="code-bar">
        <span className="code-lang">{lang ?? "code"}</span>
        <button type="button" className="copy" onClick={onCopy} aria-label={copied ?? "Copy code"}>
          {copied ?? "Copy"}
        </button>
      </div>
      <pre ref={pre} {...props}>
        {children}
      </pre>
    </div>
  );
}

function Link({ node: _node, ...props }) {
  return <a {...props} target="_blank" rel="noreferrer noopener" />;
}

const COMPONENTS = { pre: CodeBlock, a: Link };

/** Markdown text; re-rendered only when the text changes. */
export const Markdown = memo(function Markdown({ text }) {
  return (
    <ReactMarkdown remarkPlugins={REMARK} rehypePlugins={REHYPE} components={COMPONENTS}>
      {text}
    </ReactMarkdown>
  );
});
