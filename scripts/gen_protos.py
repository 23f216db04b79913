#!/usr/bin/env python3
"""Generate bridge/proto/*_pb2*.py from schemas/*.proto.

Usage: python scripts/gen_protos.py [--check]

The .proto files are staged under a temporary ``bridge/proto/`` tree so that
generated imports read ``from bridge.proto import x_pb2``. The generator is
the pinned ``grpcio-tools`` of the dev extra, so the output is repeatable;
``--check`` regenerates into a temporary directory and exits 1 when the
committed files differ (a test runs it).
"""

from __future__ import annotations

import argparse
import filecmp
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCHEMAS = ROOT / "schemas"
TARGET = ROOT / "bridge" / "proto"
PACKAGE_DIR = Path("bridge") / "proto"
HEADER = '"""Generated from schemas/*.proto by scripts/gen_protos.py. Do not edit."""\n'


def generate(out_root: Path) -> list[Path]:
    from grpc_tools import protoc  # the dev extra pins grpcio-tools

    with tempfile.TemporaryDirectory() as staging:
        staged = Path(staging) / PACKAGE_DIR
        staged.mkdir(parents=True)
        protos = sorted(SCHEMAS.glob("*.proto"))
        for proto in protos:
            shutil.copy(proto, staged / proto.name)
        args = [
            "protoc",
            f"-I{staging}",
            f"-I{Path(protoc.__file__).parent / '_proto'}",
            f"--python_out={out_root}",
            f"--pyi_out={out_root}",
            f"--grpc_python_out={out_root}",
            *[str(PACKAGE_DIR / p.name) for p in protos],
        ]
        # protoc resolves the listed files against -I, so run from staging.
        import os

        cwd = os.getcwd()
        os.chdir(staging)
        try:
            if protoc.main(args) != 0:
                raise SystemExit("protoc failed")
        finally:
            os.chdir(cwd)
    generated = out_root / PACKAGE_DIR
    (generated / "__init__.py").write_text(HEADER)
    return sorted(generated.iterdir())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if bridge/proto is stale")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = generate(Path(tmp))
        names = [f.name for f in files if f.is_file()]
        if args.check:
            committed = sorted(p.name for p in TARGET.glob("*") if p.is_file())
            _, mismatch, errors = filecmp.cmpfiles(Path(tmp) / PACKAGE_DIR, TARGET, names, shallow=False)
            extra = sorted(set(committed) - set(names))
            stale = mismatch + errors + extra
            if stale:
                print("bridge/proto is stale; run: python scripts/gen_protos.py", file=sys.stderr)
                print("differing files: " + ", ".join(stale), file=sys.stderr)
                return 1
            print("bridge/proto is up to date")
            return 0
        TARGET.mkdir(parents=True, exist_ok=True)
        for old in TARGET.glob("*"):
            if old.is_file():
                old.unlink()
        for name in names:
            shutil.copy(Path(tmp) / PACKAGE_DIR / name, TARGET / name)
        print(f"wrote {len(names)} files to {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
