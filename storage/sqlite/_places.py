"""Where each stream of a file has its next segment: a hint that spares a batch of chunks the look-up of
its place (``_streams.INSERT_AT``)."""

from __future__ import annotations

__all__ = ["Place", "Places", "after"]

#: Where a stream's next segment goes: its number and its first chunk.
Place = tuple[int, int]


class Places:
    """Where each stream of a file has its next segment, as what was written last says: ``committed``, and
    ``pending`` in the transaction in progress (kept at its commit, dropped otherwise; None there: no
    longer known). Only ever a hint: ``INSERT_AT`` at a stale place fails, and the place is looked up."""

    __slots__ = ("committed", "pending")

    def __init__(self) -> None:
        self.committed: dict[str, Place] = {}
        self.pending: dict[str, Place | None] = {}

    def get(self, stream_id: str) -> Place | None:
        if stream_id in self.pending:
            return self.pending[stream_id]
        return self.committed.get(stream_id)

    def keep(self, stream_id: str, place: Place | None) -> None:
        """A committed write says where the stream's next segment goes (None: not known, forgotten)."""
        if place is None:
            self.committed.pop(stream_id, None)
        else:
            self.committed[stream_id] = place

    def settle(self, committed: bool) -> None:
        """The transaction ended: its places kept if it ``committed``."""
        if committed:
            for stream_id, place in self.pending.items():
                self.keep(stream_id, place)
        self.pending.clear()


def after(place: Place, chunks: int) -> Place:
    """The place after a segment of ``chunks`` chunks written at ``place``."""
    return place[0] + 1, place[1] + chunks
