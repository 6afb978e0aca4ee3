// The conversation follows the answer as it grows, unless the reader scrolled up to read
// something else; then a "Jump to latest" button takes them back down, and following again.
import { useCallback, useEffect, useRef, useState } from "react";

/** Within this many pixels of the end, the reader is at the end. */
const NEAR_END_PX = 80;

/**
 * Scrolls ``end`` into view when ``changes`` change, while the reader is at the end of ``list``;
 * ``away``: they scrolled up; ``jump()``: back to the end.
 */
export function useFollow(list, end, changes) {
  const atEnd = useRef(true);
  const stickRef = useRef(() => {});
  const [away, setAway] = useState(false);
  useEffect(() => {
    const el = list.current;
    if (!el) return;
    let lastTop = el.scrollTop;
    const onScroll = () => {
      atEnd.current = el.scrollHeight - el.scrollTop - el.clientHeight < NEAR_END_PX;
      lastTop = el.scrollTop;
      setAway(!atEnd.current);
    };
    el.addEventListener("scroll", onScroll, { passive: true });
    // The end moves without a new message too: the markdown renderer or the highlighter arriving,
    // a message's actions showing once it is done, the composer growing. At the end, stay there;
    // unless the reader just scrolled up (their scroll event may not have come yet).
    const stick = () => {
      if (el.scrollTop < lastTop - 1) onScroll();
      if (atEnd.current) end.current?.scrollIntoView({ block: "end" });
      lastTop = el.scrollTop;
    };
    stickRef.current = stick;
    const changed = new MutationObserver(stick);
    changed.observe(el, { childList: true, subtree: true, characterData: true });
    const resized = new ResizeObserver(stick);
    resized.observe(el);
    return () => {
      el.removeEventListener("scroll", onScroll);
      changed.disconnect();
      resized.disconnect();
    };
  }, [list, end]);
  useEffect(() => stickRef.current(), changes);
  const jump = useCallback(() => {
    // At once, not smoothly: a smooth scroll's first steps would read as the reader scrolling up.
    atEnd.current = true;
    setAway(false);
    end.current?.scrollIntoView({ block: "end" });
  }, [end]);
  return { away, jump };
}

/** Floats over the end of the conversation, just above the composer. */
export function JumpToLatest({ onJump, streaming }) {
  return (
    <div className="jump-latest-wrap">
      <button
        type="button"
        className="jump-latest"
        onClick={onJump}
        title={streaming ? "Back to the answer as it is written" : "Back to the latest message"}
      >
        <span aria-hidden="true">↓ </span>Jump to latest
      </button>
    </div>
  );
}
