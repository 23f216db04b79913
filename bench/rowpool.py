"""The rows of ``bench drainer``'s ``orders`` table made before a timed load (:class:`RowPool`)."""

from __future__ import annotations

from bench.drainer import row_values


class RowPool:
    """``row_values(i)`` from a pool made beforehand: row ``i``'s id is ``i``, its other columns
    those of row ``i % size`` (``size`` a multiple of 6, so the NULLs and flags keep their mix).
    A bench whose timed part is the SDK and the pipeline, not making Python values, takes its rows
    from here; the SDK still encodes every row."""

    def __init__(self, size: int = 6000) -> None:
        if size < 6 or size % 6:
            raise ValueError("the pool's size must be a positive multiple of 6")
        self._size = size
        self._rest = [row_values(i)[1:] for i in range(size)]

    def __call__(self, i: int) -> tuple[object, ...]:
        return (i, *self._rest[i % self._size])
