"""A segment's batches: each held in memory, or a slice of a file mapping once paged.

How this works. ``held[i]`` is batch ``i``'s bytes until ``page`` moves it to a file
(rafka.shard.paging): then it is None and the batch is ``maps[which[i]]`` from
``starts[i]`` for ``sizes[i]`` bytes, a slice made each time it is read. So a paged batch
costs a list slot and three array items (~24 bytes), where its bytes (or a view kept per
batch) would cost 200 or more. Reads see either form: ``page`` sets the arrays before it
clears ``held[i]``, so a thread reading meanwhile (the log cleaner's) gets the bytes or the
slice, never neither.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from typing import Any


class Batches:
    """The batches of one segment, in offset order (a list's reads, ``append`` and ``page``)."""

    __slots__ = ("held", "maps", "sizes", "starts", "which")

    def __init__(self, batches: Iterable[bytes] = ()) -> None:
        self.held: list[bytes | memoryview | None] = []
        self.maps: list[memoryview] = []  # the file mappings paged batches are read from
        self.which = array("I")
        self.starts = array("Q")
        self.sizes = array("I")
        for batch in batches:
            self.append(batch)

    def append(self, batch: bytes | memoryview) -> None:
        self.held.append(batch)
        self.which.append(0)
        self.starts.append(0)
        self.sizes.append(0)

    def page(self, i: int, mapping: memoryview, start: int) -> None:
        """Read batch ``i`` from now on from ``mapping`` at ``start`` (it holds the same bytes)."""
        self.which[i], self.starts[i], self.sizes[i] = self.map_index(mapping), start, len(self.held[i])  # type: ignore[arg-type]
        self.held[i] = None

    def same_place(self, j: int, other: Batches, i: int) -> None:
        """Read batch ``j`` from where ``other`` reads its batch ``i`` (the same bytes), if that is paged."""
        if other.held[i] is None:
            self.page(j, other.maps[other.which[i]], other.starts[i])

    def map_index(self, mapping: memoryview) -> int:
        """Where ``mapping`` is in ``maps``, added if it is not."""
        maps = self.maps
        if maps and maps[-1] is mapping:
            return len(maps) - 1
        for k, known in enumerate(maps):  # by identity (``in`` would compare views by content)
            if known is mapping:
                return k
        maps.append(mapping)
        return len(maps) - 1

    def __getitem__(self, i: int) -> Any:
        if type(i) is slice:
            return [self[j] for j in range(*i.indices(len(self.held)))]
        batch = self.held[i]
        if batch is not None:
            return batch
        start = self.starts[i]
        return self.maps[self.which[i]][start : start + self.sizes[i]]

    def __len__(self) -> int:
        return len(self.held)

    def __bool__(self) -> bool:
        return bool(self.held)

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self.held)):
            yield self[i]

    def __eq__(self, other: object) -> bool:
        return list(self) == (list(other) if isinstance(other, Batches) else other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Batches({len(self.held)}, {sum(b is None for b in self.held)} paged)"
