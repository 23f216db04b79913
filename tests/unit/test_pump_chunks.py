"""The sorter hands PrewriteChunk parts to the index untouched: a part never pairs,
never holds or moves the watermark, and a Rollback of its transaction leaves it for GC."""

from __future__ import annotations

from pump.storage.segment import Pointer
from pump.storage.sorter import COMMIT, PREWRITE, PREWRITE_CHUNK, ROLLBACK, Part, Sorter


def test_parts_pass_through_without_pairing_or_watermark() -> None:
    sorter = Sorter()
    sorter.add(PREWRITE, 100, 0, Pointer(1, 0))
    sorter.add(COMMIT, 100, 110, Pointer(1, 10))
    assert sorter.watermark == 110
    sorter.add(PREWRITE_CHUNK, 200, 1, Pointer(1, 20))  # the record's third field: the chunk index
    sorter.add(PREWRITE_CHUNK, 200, 2, Pointer(1, 30))
    assert sorter.watermark == 110 and sorter.unpaired_count == 0 and sorter.orphan_count == 0
    changes = sorter.take_changes()
    assert changes.parts == [Part(200, 1, Pointer(1, 20)), Part(200, 2, Pointer(1, 30))]
    assert [c.commit_ts for c in changes.committed] == [110]
    sorter.add(PREWRITE, 200, 0, Pointer(1, 40))
    assert sorter.watermark == 199 and sorter.is_unpaired(200)  # the Prewrite, not its parts, bounds it
    sorter.add(ROLLBACK, 200, 0, Pointer(1, 50))
    assert not sorter.is_unpaired(200)
    changes = sorter.take_changes()
    assert changes.parts == [] and changes.committed == []
    assert sorter.counters.ignored == 0 and sorter.counters.rolled_back == 1
