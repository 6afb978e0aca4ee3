"""Where each stream's next segment goes: a transaction's places count once it commits, and only then."""

from __future__ import annotations

from think_server.storage.sqlite._places import Places


def test_a_transactions_places_are_kept_at_its_commit_and_dropped_at_its_rollback() -> None:
    places = Places()
    places.committed["a"] = (3, 7)
    places.pending["a"] = (4, 9)
    places.pending["b"] = (0, 0)
    assert places.get("a") == (4, 9), "in the transaction, its own place"
    places.settle(committed=False)
    assert (places.get("a"), places.get("b")) == ((3, 7), None)
    places.pending["a"] = (4, 9)
    places.pending["b"] = (0, 0)
    places.settle(committed=True)
    assert places.committed == {"a": (4, 9), "b": (0, 0)} and not places.pending


def test_a_place_no_longer_known_in_a_transaction_is_forgotten_when_it_commits() -> None:
    places = Places()
    places.committed["a"] = (3, 7)
    places.pending["a"] = None  # looked up in the transaction: where it ended is not known
    assert places.get("a") is None
    places.settle(committed=True)
    assert places.committed == {}
