"""One planner per transaction kind of the mix (see :mod:`bridge.apps.load.options`).

A planner draws every value up front from the worker's generator and returns
a :class:`~bridge.apps.load.workload.Plan` whose steps only replay them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from bridge.apps.load.workload import OWNED, Plan, Step, Worker
from bridge.producer.writer import Transaction

Planner = Callable[[Worker, int, int], Plan]  # (worker, txn_size, large_size)


def _insert(table: str, row: Mapping[str, object]) -> Step:
    def step(txn: Transaction) -> None:
        txn.insert(table, row)

    return step


def _update(table: str, where: Mapping[str, object], changes: Mapping[str, object]) -> Step:
    def step(txn: Transaction) -> None:
        txn.update(table, where, changes)

    return step


def _delete(table: str, where: Mapping[str, object]) -> Step:
    def step(txn: Transaction) -> None:
        txn.delete(table, where)

    return step


def _new_order(w: Worker, plan: Plan, event_kind: str) -> int:
    key = w.keys["load_orders"].allocate()
    plan.steps.append(_insert("load_orders", w.order_row(key)))
    plan.steps.append(_insert("load_events", w.event_row(event_kind, key)))
    plan.added.append(("load_orders", key))
    return key


def transfer(w: Worker, txn_size: int, large_size: int) -> Plan:
    """Two shared accounts (locked in id order, so transfers rarely deadlock), an order, an event."""
    plan = Plan("transfer")
    for account in sorted(w.rng.sample(range(1, w.accounts + 1), 2)):
        changes = {"balance": w.account_row(account)["balance"], "version": w.rng.randrange(10**6)}
        changes["updated"] = w.account_row(account)["updated"]
        plan.steps.append(_update("load_accounts", {"id": account}, changes))
    _new_order(w, plan, "transfer")
    return plan


def order(w: Worker, txn_size: int, large_size: int) -> Plan:
    plan = Plan("order")
    for _ in range(w.rng.randint(1, txn_size)):
        _new_order(w, plan, "order")
    return plan


def _edit_one(w: Worker, plan: Plan, table: str, key: int) -> None:
    rng = w.rng
    if table == "load_orders":
        row = w.order_row(key)
        changes = {name: row[name] for name in rng.sample(["amount", "status", "note", "placed", "slot"], 2)}
        plan.steps.append(_update(table, {"id": key}, changes))
        plan.steps.append(_update("load_events", {"ref": key}, {"score": rng.random() * 100}))
    elif table == "load_docs":
        row = w.doc_row(key)
        plan.steps.append(
            _update(table, {"id": key}, {"tags": row["tags"], "lang": row["lang"], "meta": row["meta"]})
        )
    else:
        row = w.wide_row(key)
        plan.steps.append(
            _update(table, {"id": key}, {name: row[name] for name in rng.sample(["a", "b", "c"], 2)})
        )


def edit(w: Worker, txn_size: int, large_size: int) -> Plan:
    owned = [t for t in OWNED if w.keys[t].live]
    if not owned:
        return order(w, txn_size, large_size)
    plan = Plan("edit")
    for _ in range(w.rng.randint(1, txn_size)):
        table = w.rng.choice(owned)
        _edit_one(w, plan, table, w.rng.choice(w.keys[table].live))
    return plan


def remove(w: Worker, txn_size: int, large_size: int) -> Plan:
    live = w.keys["load_orders"].live
    if not live:
        return order(w, txn_size, large_size)
    plan = Plan("remove")
    for key in w.rng.sample(live, min(len(live), w.rng.randint(1, txn_size))):
        plan.steps.append(_delete("load_orders", {"id": key}))
        plan.steps.append(_delete("load_events", {"ref": key}))
        plan.removed.append(("load_orders", key))
    for table in ("load_docs", "load_wide"):
        if w.keys[table].live and w.rng.random() < 0.3:
            key = w.rng.choice(w.keys[table].live)
            plan.steps.append(_delete(table, {"id": key}))
            plan.removed.append((table, key))
    return plan


def rekey(w: Worker, txn_size: int, large_size: int) -> Plan:
    owned = [t for t in OWNED if w.keys[t].live]
    if not owned:
        return order(w, txn_size, large_size)
    plan = Plan("rekey")
    table = w.rng.choice(owned)
    old, new = w.rng.choice(w.keys[table].live), w.keys[table].allocate()
    plan.steps.append(_update(table, {"id": old}, {"id": new}))
    if table == "load_orders":
        plan.steps.append(_update("load_events", {"ref": old}, {"ref": new}))
    plan.removed.append((table, old))
    plan.added.append((table, new))
    return plan


def doc(w: Worker, txn_size: int, large_size: int) -> Plan:
    plan = Plan("doc")
    docs = w.keys["load_docs"]
    if docs.live and w.rng.random() < 0.3:
        key = w.rng.choice(docs.live)
        row = w.doc_row(key)
        plan.steps.append(_update("load_docs", {"id": key}, {"title": row["title"], "body": row["body"]}))
    else:
        key = docs.allocate()
        plan.steps.append(_insert("load_docs", w.doc_row(key)))
        plan.added.append(("load_docs", key))
    wide = w.keys["load_wide"].allocate()
    plan.steps.append(_insert("load_wide", w.wide_row(wide)))
    plan.added.append(("load_wide", wide))
    return plan


def _insert_many(table: str, rows: list[dict[str, object]]) -> Step:
    def step(txn: Transaction) -> None:
        txn.insert_many(table, rows)

    return step


def large(w: Worker, txn_size: int, large_size: int) -> Plan:
    """``large_size`` row changes: orders and events inserted in bulk, a tenth of the orders updated."""
    plan = Plan("large")
    keys = [w.keys["load_orders"].allocate() for _ in range(max(1, large_size * 9 // 20))]
    plan.steps.append(_insert_many("load_orders", [w.order_row(key) for key in keys]))
    plan.steps.append(_insert_many("load_events", [w.event_row("bulk", key) for key in keys]))
    plan.added.extend(("load_orders", key) for key in keys)
    for key in keys[: max(1, large_size // 10)]:
        plan.steps.append(_update("load_orders", {"id": key}, {"status": "bulk"}))
    return plan


def swap(w: Worker, txn_size: int, large_size: int) -> Plan:
    """Swaps the unique ``slot`` of two of the worker's load_slots rows (or rotates three) in one
    transaction, through a temporary value (minus the first row's id: unique, never a real slot)
    because the upstream checks the unique key after every statement. A worker with fewer than
    three rows inserts two new ones instead."""
    live = w.keys["load_slots"].live
    plan = Plan("swap")
    if len(live) < 3 or w.rng.random() < 0.1:
        for _ in range(2):
            key = w.keys["load_slots"].allocate()
            row = w.slot_row(key)
            plan.steps.append(_insert("load_slots", row))
            plan.added.append(("load_slots", key))
            plan.slots[key] = key
        return plan
    keys = w.rng.sample(live, 3 if w.rng.random() < 0.3 else 2)
    slots = [w.slots[key] for key in keys]
    moved = w.when()
    # park the first row, give each next row the slot of the one before, then the first the last's
    plan.steps.append(_update("load_slots", {"id": keys[0]}, {"slot": -keys[0]}))
    for key, slot in zip(keys[1:], slots, strict=False):
        plan.steps.append(_update("load_slots", {"id": key}, {"slot": slot, "moved": moved}))
    plan.steps.append(_update("load_slots", {"id": keys[0]}, {"slot": slots[-1], "moved": moved}))
    plan.slots.update(zip(keys, slots[-1:] + slots[:-1], strict=True))
    return plan


PLANNERS: dict[str, Planner] = {
    "transfer": transfer,
    "order": order,
    "edit": edit,
    "remove": remove,
    "rekey": rekey,
    "doc": doc,
    "large": large,
    "swap": swap,
}
