"""Table filters (do-db, do-table, ignore-db, ignore-table, ~regex) and their config."""

from __future__ import annotations

import pytest

from bridge.config import build
from bridge.errors import ConfigError, skip_hint
from bridge.proto import row_pb2
from drainer.config import FilterConfig
from drainer.sync.filter import TableFilter

Change = row_pb2.SchemaChange


def test_no_rule_replicates_everything() -> None:
    f = TableFilter()
    assert f.replicates_everything
    assert f.allows("any", "table") and f.allows_db("any")


def test_do_db_and_do_table_are_a_union() -> None:
    f = TableFilter(do_db=["shop"], do_table=["crm.customers"])
    assert f.allows("shop", "orders")
    assert f.allows("SHOP", "Orders")  # names compare case-insensitively
    assert f.allows("crm", "customers")
    assert not f.allows("crm", "leads")
    assert not f.allows("hr", "people")
    assert f.allows_db("shop") and f.allows_db("crm") and not f.allows_db("hr")


def test_ignore_rules_win_over_do_rules() -> None:
    f = TableFilter(do_db=["shop"], ignore_table=["shop.audit"], ignore_db=["mysql"])
    assert f.allows("shop", "orders")
    assert not f.allows("shop", "audit")
    assert not f.allows("mysql", "user") and not f.allows_db("mysql")
    only_ignore = TableFilter(ignore_table=["shop.audit"])
    assert only_ignore.allows("hr", "people") and not only_ignore.allows("shop", "audit")


def test_regex_entries_start_with_a_tilde() -> None:
    f = TableFilter(do_db=["~^shop_\\d+$"], do_table=["~^crm\\.cust"], ignore_table=["~_tmp$"])
    assert f.allows("shop_1", "orders") and f.allows("Shop_22", "orders")
    assert not f.allows("shop_x", "orders")
    assert f.allows("crm", "customers") and not f.allows("crm", "leads")
    assert not f.allows("shop_1", "orders_tmp")
    assert f.allows_db("anything")  # a do-table regex may match a table of any database


def test_ddl_is_judged_by_its_table_and_a_rename_by_the_new_name() -> None:
    f = TableFilter(do_table=["shop.orders"])
    rename = Change(
        kind=Change.RENAME_TABLE, db="shop", table="orders", old_db="shop", old_table="orders_new"
    )
    assert f.allows_change(rename)
    assert not f.allows_change(Change(kind=Change.DROP_TABLE, db="shop", table="users"))
    assert f.allows_change(Change(kind=Change.CREATE_DATABASE, db="shop"))
    assert not f.allows_change(Change(kind=Change.DROP_DATABASE, db="hr"))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"do-table": ["orders"]}, 'filter.do-table: expected "db.table"'),
        ({"do-db": ["shop.orders"]}, "filter.do-db: expected a database name"),
        ({"ignore-table": ["~(unclosed"]}, "filter.ignore-table: invalid regular expression"),
        ({"ignore-txn-commit-ts": [0]}, r"filter.ignore-txn-commit-ts\[0\]: expected a positive"),
        ({"ignore-txn-commit-ts": ["12"]}, r"filter.ignore-txn-commit-ts\[0\]: expected an integer"),
    ],
)
def test_bad_rules_name_their_key(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        build(FilterConfig, data, prefix="filter.")


def test_config_builds_the_filter_and_the_skip_list() -> None:
    config = build(FilterConfig, {"do-db": ["shop"], "ignore-txn-commit-ts": [42, 43]}, prefix="filter.")
    assert config.table_filter().allows("shop", "t") and not config.table_filter().allows("hr", "t")
    assert config.ignore_txn_commit_ts == [42, 43]
    assert "add 42 to [filter] ignore-txn-commit-ts" in skip_hint(42)
