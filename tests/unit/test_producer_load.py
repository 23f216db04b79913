"""bridge.apps.load without services: the mix, option checks, reproducible plans, the summary line."""

from __future__ import annotations

import io
import json

import pytest

from bridge.apps.load.options import DEFAULT_MIX, LoadOptions, parse_mix
from bridge.apps.load.plans import PLANNERS
from bridge.apps.load.stats import Progress, Stats, summary
from bridge.apps.load.workload import KEYED, Worker
from bridge.errors import ConfigError


def test_mix_overrides_defaults() -> None:
    assert parse_mix("") == DEFAULT_MIX
    mix = parse_mix("large=0, transfer=50")
    assert mix == {**DEFAULT_MIX, "large": 0, "transfer": 50}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("bogus=1", "kind one of"),
        ("transfer", "kind=weight"),
        ("transfer=x", "must be an integer"),
        ("transfer=-1", "cannot be negative"),
        (",".join(f"{k}=0" for k in DEFAULT_MIX), "every weight is 0"),
    ],
)
def test_bad_mixes_are_refused(text: str, fragment: str) -> None:
    with pytest.raises(ConfigError, match=fragment):
        parse_mix(text)


def test_options_are_checked() -> None:
    LoadOptions().validate()
    with pytest.raises(ConfigError, match="--concurrency"):
        LoadOptions(concurrency=0).validate()
    with pytest.raises(ConfigError, match="--seconds"):
        LoadOptions(seconds=0).validate()


def planned(seed: int, worker: int, count: int) -> list[tuple[str, int, list[tuple[str, int]]]]:
    """The first ``count`` plans of a worker, each as (kind, steps, rows added), all committing."""
    w = Worker(worker, 4, seed, {t: 1 for t in KEYED}, accounts=50)
    out = []
    for _ in range(count):
        kind = w.rng.choices(list(DEFAULT_MIX), list(DEFAULT_MIX.values()))[0]
        plan = PLANNERS[kind](w, 4, 40)
        w.commit(plan)
        out.append((plan.kind, len(plan.steps), plan.added))
    return out


def test_plans_are_reproducible_from_the_seed() -> None:
    assert planned(7, 0, 300) == planned(7, 0, 300)
    assert planned(7, 0, 300) != planned(8, 0, 300)
    kinds = {kind for kind, _, _ in planned(7, 1, 300)}
    assert kinds == set(DEFAULT_MIX)


def test_workers_own_disjoint_keys() -> None:
    keys = [
        {key for _, _, added in planned(3, w, 200) for table, key in added if table == "load_orders"}
        for w in range(4)
    ]
    assert all(a.isdisjoint(b) for i, a in enumerate(keys) for b in keys[i + 1 :])
    assert all(k % 4 == w for w, ks in enumerate(keys) for k in (key - 1 for key in ks))


def test_progress_line_and_summary() -> None:
    stats = Stats()
    stats.committed(5)
    stats.committed(3)
    stats.ddl_committed()
    stats.rolled_back()
    stats.failed()
    line = Progress(stats, stream=io.StringIO()).line()
    assert "txns 2 rows 8 ddl 1 rollbacks 2 errors 1" in line
    assert " txn/s " in line and " rows/s " in line
    result = json.loads(summary(stats, 2.0, upstream="sqlite"))
    assert result == {
        "upstream": "sqlite",
        "elapsed": 2.0,
        "transactions": 2,
        "rows": 8,
        "ddl": 1,
        "rollbacks": 2,
        "errors": 1,
        "txn_per_s": 1.0,
        "rows_per_s": 4.0,
    }


class SlotTable:
    """load_slots as the upstream checks it: the unique slot after every statement."""

    def __init__(self) -> None:
        self.rows: dict[int, dict[str, object]] = {}
        self.statements = 0

    def insert(self, table: str, row: dict[str, object]) -> None:
        assert table == "load_slots" and row["id"] not in self.rows
        self.rows[int(row["id"])] = dict(row)  # type: ignore[call-overload]
        self._check()

    def update(self, table: str, where: dict[str, object], changes: dict[str, object]) -> None:
        assert table == "load_slots" and list(where) == ["id"]
        self.rows[int(where["id"])].update(changes)  # type: ignore[call-overload]
        self._check()

    def _check(self) -> None:
        self.statements += 1
        slots = [row["slot"] for row in self.rows.values()]
        assert len(slots) == len(set(slots)), f"unique slot violated after statement {self.statements}"


def test_swaps_keep_the_unique_slot_unique_after_every_statement() -> None:
    workers = [Worker(i, 2, 11, {t: 1 for t in KEYED}, accounts=5) for i in range(2)]
    table = SlotTable()
    swapped = 0
    for n in range(400):
        w = workers[n % 2]
        plan = PLANNERS["swap"](w, 4, 40)
        plan.run(table)  # type: ignore[arg-type]
        w.commit(plan)
        swapped += not plan.added
        assert {k: int(r["slot"]) for k, r in table.rows.items() if k in w.slots} == w.slots  # type: ignore[call-overload]
    assert swapped > 300
    moved = [row for row in table.rows.values() if row["slot"] != row["id"]]
    assert moved and all(int(row["slot"]) > 0 for row in table.rows.values())  # type: ignore[call-overload]
