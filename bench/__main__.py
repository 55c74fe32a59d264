"""Run every benchmark in turn: ``python -m bench``."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from pathlib import Path


def main() -> int:
    names = sorted(info.name for info in pkgutil.iter_modules([str(Path(__file__).parent)])
                   if info.name.startswith("bench_"))
    for name in names:
        print(f"\n=== bench.{name} ===", flush=True)
        importlib.import_module(f"bench.{name}").main()
    return 0


if __name__ == "__main__":
    sys.exit(main())
