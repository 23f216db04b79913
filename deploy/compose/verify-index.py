"""verify's index check in docker-compose.yml: the search index holds the upstream, table by table.

    python /etc/bridge/verify-index.py --diff DIFF_OUTPUT --index INDEX [--seconds 180]

DIFF_OUTPUT is what ``binlog-bridge diff`` printed after finding the downstream
equal (``db.table: equal (N rows, ...)`` per table). The check asks
``python -m spark_consumers stats --index INDEX`` every two seconds until the
index holds exactly N documents for every one of those tables, and exits 0; it
prints the last difference and exits 1 when ``--seconds`` pass first.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time
from pathlib import Path

EQUAL_LINE = re.compile(r"^(\S+): equal \((\d+) rows")


def upstream_rows(diff_output: Path) -> dict[str, int]:
    rows = {
        m.group(1): int(m.group(2))
        for line in diff_output.read_text().splitlines()
        if (m := EQUAL_LINE.match(line))
    }
    if not rows:
        raise SystemExit(f"verify-index: {diff_output} holds no 'table: equal (N rows' line")
    return rows


def indexed(index: str) -> dict[str, int]:
    done = subprocess.run(
        [sys.executable, "-m", "spark_consumers", "stats", "--index", index],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        return {}
    return {str(table): int(count) for table, count in json.loads(done.stdout).get("tables", {}).items()}


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--diff", type=Path, required=True, help="binlog-bridge diff's output (equal)")
    parser.add_argument("--index", required=True, help="the index folder")
    parser.add_argument("--seconds", type=float, default=180.0, help="how long to wait for the index")
    args = parser.parse_args()
    want = upstream_rows(args.diff)
    deadline = time.monotonic() + args.seconds
    while True:
        have = indexed(args.index)
        missing = {t: (n, have.get(t, 0)) for t, n in want.items() if have.get(t, 0) != n}
        if not missing:
            total = sum(want.values())
            print(f"verify-index: the index holds every upstream row: {total} in {len(want)} tables")
            return 0
        if time.monotonic() > deadline:
            for table, (rows, documents) in sorted(missing.items()):
                print(f"verify-index: {table}: {rows} upstream rows, {documents} documents in the index")
            return 1
        time.sleep(2)


if __name__ == "__main__":
    sys.exit(main())
