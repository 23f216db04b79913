"""docs/architecture.md's package table names every module and sub-package of the kernel
(``bridge/``), and the files pyproject.toml's comments cite exist: the inventory cannot fall
behind the tree unnoticed."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def package_table() -> str:
    text = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Packages", 1)[1].split("\n## ", 1)[0]
    return "\n".join(line for line in section.splitlines() if line.startswith("|"))


def named(table: str, entry: Path) -> bool:
    """``bridge/x.py`` is named as `x.py` in the bridge/ row; ``bridge/x/`` as `x/` there or as
    `bridge/x/` in a row of its own."""
    (kernel_row,) = [line for line in table.splitlines() if line.startswith("| `bridge/` |")]
    if entry.is_dir():
        return f"`{entry.name}/`" in kernel_row or f"`bridge/{entry.name}/`" in table
    return f"`{entry.name}`" in kernel_row


def test_every_kernel_module_and_package_is_in_the_architecture_table() -> None:
    table = package_table()
    entries = [
        p
        for p in sorted((ROOT / "bridge").iterdir())
        if (p.suffix == ".py" and p.name != "__init__.py") or (p.is_dir() and (p / "__init__.py").exists())
    ]
    assert len(entries) > 20  # the reader sees the tree
    missing = [str(p.relative_to(ROOT)) for p in entries if not named(table, p)]
    assert not missing, f"docs/architecture.md (## Packages) does not name: {', '.join(missing)}"


def test_the_files_pyproject_cites_exist() -> None:
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    comments = "\n".join(line.split("#", 1)[1] for line in text.splitlines() if "#" in line)
    cited = set(re.findall(r"[\w./-]+\.(?:py|md|toml|proto)\b", comments))
    assert cited, "the reader found no cited file"
    absent = sorted(
        name for name in cited if not (ROOT / name).exists() and not (ROOT / "docs" / name).exists()
    )
    assert not absent, f"pyproject.toml cites files the repository lacks: {absent}"
