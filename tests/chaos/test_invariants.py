"""The chaos checker's comparisons, on hand-made data (the loop itself: tests/e2e/test_chaos.py)."""

from __future__ import annotations

from tests.chaos.invariants import served_differs

USER = {"id": "u1", "role": "user", "parts": [{"type": "text", "text": "hi"}]}
ANSWER = {"id": "a1", "role": "assistant", "parts": [{"type": "text", "text": "Hello", "state": "done"}]}


def test_get_messages_as_stored_is_no_difference() -> None:
    assert served_differs([USER, ANSWER], [USER, dict(ANSWER)]) is None


def test_a_message_that_differs_is_shown_both_ways() -> None:
    stopped = {**ANSWER, "parts": [{"type": "text", "text": "Hel", "state": "done"}]}
    said = served_differs([USER, ANSWER], [USER, stopped])
    assert said is not None and "first differing" in said
    assert "'Hello'" in said and "'Hel'" in said, said


def test_other_ids_are_named_without_a_message() -> None:
    said = served_differs([USER], [USER, ANSWER])
    assert said == "get-messages serves ['u1']; the file's active path is ['u1', 'a1']"
