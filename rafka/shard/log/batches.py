"""A segment's batches: each held in memory, or a slice of a file mapping once paged.

How this works. ``held[i]`` is batch ``i``'s bytes until ``page`` moves it to a file
(rafka.shard.paging): then ``i`` leaves ``held`` (a dict of the batches still in memory)
and the batch is ``maps[which[i]]`` from ``starts[i]`` for ``sizes[i]`` bytes, a slice made
each time it is read. So a paged batch costs three array items (10 bytes), where its bytes
(or a view kept per batch) would cost 200 or more. Reads see either form: ``page`` sets the
arrays before it takes ``i`` out of ``held``, so a thread reading meanwhile (the log
cleaner's) gets the bytes or the slice, never neither.
"""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator
from typing import Any


class Batches:
    """The batches of one segment, in offset order (a list's reads, ``append`` and ``page``)."""

    __slots__ = ("held", "maps", "sizes", "starts", "which")

    def __init__(self, batches: Iterable[bytes] = ()) -> None:
        self.held: dict[int, bytes | memoryview] = {}  # index -> bytes of the batches not paged
        self.maps: list[memoryview] = []  # the file mappings paged batches are read from
        self.which = array("H")  # a segment reads from a few files
        self.starts = array("I")  # a WAL file holds under 4 GiB (64 MiB and one entry)
        self.sizes = array("I")
        for batch in batches:
            self.append(batch)

    def append(self, batch: bytes | memoryview) -> None:
        self.held[len(self.sizes)] = batch
        self.which.append(0)
        self.starts.append(0)
        self.sizes.append(0)

    def page(self, i: int, mapping: memoryview, start: int) -> None:
        """Read batch ``i`` from now on from ``mapping`` at ``start`` (it holds the same bytes)."""
        self.which[i], self.starts[i], self.sizes[i] = self.map_index(mapping), start, len(self.held[i])
        del self.held[i]

    def repack(self) -> None:
        """Move ``held`` to a new dict: a dict keeps the room of the entries it lost, so after
        page-outs the few batches left would cost what all of them did."""
        self.held = dict(self.held)

    def same_place(self, j: int, other: Batches, i: int) -> None:
        """Read batch ``j`` from where ``other`` reads its batch ``i`` (the same bytes), if that is paged."""
        if i not in other.held:
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
            return [self[j] for j in range(*i.indices(len(self.sizes)))]
        n = len(self.sizes)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("batch index out of range")
        batch = self.held.get(i)
        if batch is not None:
            return batch
        start = self.starts[i]
        return self.maps[self.which[i]][start : start + self.sizes[i]]

    def __len__(self) -> int:
        return len(self.sizes)

    def __bool__(self) -> bool:
        return bool(self.sizes)

    def __iter__(self) -> Iterator[Any]:
        for i in range(len(self.sizes)):
            yield self[i]

    def __eq__(self, other: object) -> bool:
        return list(self) == (list(other) if isinstance(other, Batches) else other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Batches({len(self.sizes)}, {len(self.sizes) - len(self.held)} paged)"
