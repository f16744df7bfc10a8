"""Crafted bad inputs through the command line (BENCHMARKS.md "Crash safety and hostile files", rounds 3 and 4).

    python benchmarks/crafted_inputs.py [--code PATH] [--timeout 60] [--memory 4096] [--markdown] [--json F]

A thin driver: the cases, their verdicts and the runner live in `tests/crafted.py`, which the test suite imports as
a plain module (`from tests.crafted import ...`) for its seconds-long slice of them.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the checkout's `tests` package

from tests.crafted import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
