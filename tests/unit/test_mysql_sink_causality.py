"""Causality routing and conflict detection of the MySQL sink (no services)."""

from __future__ import annotations

from bridge.proto import row_pb2
from drainer.sinks.mysql.causality import Causality, key_plan
from tests.support.binlog_events import table_schema

T = row_pb2.ColumnType


def itest() -> row_pb2.TableSchema:
    return table_schema("db", "itest", [("id", T.INT), ("name", T.VARCHAR), ("age", T.INT)], key=["id"])


def test_the_seed_example_routes_without_a_flush_and_conflicts_only_across_workers() -> None:
    plan = key_plan(itest())
    causality = Causality(16)
    sql1 = plan.keys((3, "a", 13), (4, "c", 15))  # update id 3 -> 4: keys 3, 4
    sql2 = plan.keys((2, "b", 14), (5, "b", 14))  # update id 2 -> 5: keys 2, 5
    sql3 = plan.keys((3, "d", 16), None)  # delete id 3: key 3
    assert [k[2:] for k in sql1] == [(3,), (4,)] and [k[2:] for k in sql3] == [(3,)]
    w1 = causality.route(sql1)
    w2 = causality.route(sql2)
    assert w1 is not None and w2 is not None
    assert causality.route(sql3) == w1  # key 3 is held by SQL1's worker only: it goes behind SQL1
    assert causality.conflicts == 0
    # A change whose keys are held by SQL1's and SQL2's workers conflicts, unless they are one worker.
    across = plan.keys((4, "c", 15), (5, "c", 15))
    routed = causality.route(across)
    if w1 == w2:
        assert routed == w1
    else:
        assert routed is None and causality.conflicts == 1
        assert len(causality) == 4  # keys 3, 4, 2, 5; nothing recorded for the conflicting change
        causality.reset()  # the caller flushed every worker
        assert len(causality) == 0
        assert causality.route(across) is not None


def test_a_conflict_is_detected_when_two_workers_hold_the_keys() -> None:
    plan = key_plan(itest())
    causality = Causality(2)
    # Find two ids on different workers.
    owners: dict[int, int] = {}
    for i in range(100):
        owner = causality.route(plan.keys(None, (i, "x", 1)))
        assert owner is not None
        owners.setdefault(owner, i)
        if len(owners) == 2:
            break
    a, b = owners[0], owners[1]
    assert causality.route(plan.keys((a, "x", 1), (b, "y", 2))) is None
    assert causality.conflicts == 1


def test_unique_keys_old_and_new_are_keys_and_null_is_none() -> None:
    schema = table_schema(
        "db", "u", [("id", T.INT), ("code", T.VARCHAR), ("n", T.INT)], key=["id"], unique=["code"]
    )
    plan = key_plan(schema)
    keys = plan.keys((1, "AbC ", 5), (1, None, 5))
    assert keys == [("db.u", 0, 1), ("db.u", 1, "abc")]  # text folded like a _ci collation, NULL no key
    assert key_plan(schema).keys(None, (2, "abc", 1))[1] == keys[1]  # 'abc' and 'AbC ' compete


def test_a_table_without_any_key_has_no_keys() -> None:
    plan = key_plan(table_schema("db", "n", [("a", T.INT), ("b", T.VARCHAR)]))
    assert plan.indexes == () and plan.keys((1, "x"), (2, "y")) == []
    assert Causality(4).route([]) == 0


def test_after_a_reset_new_keys_are_spread_over_the_active_workers_only() -> None:
    plan = key_plan(itest())
    causality = Causality(16)
    assert {causality.route(plan.keys(None, (i, "x", 1))) for i in range(200)} == set(range(16))
    causality.reset(3)
    assert causality.active == 3 and len(causality) == 0
    assert {causality.route(plan.keys(None, (i, "x", 1))) for i in range(200)} == {0, 1, 2}
    causality.reset(0)  # never fewer than one, never more than there are
    assert causality.active == 1
    causality.reset(99)
    assert causality.active == 16
