"""Print the tables of benchmarks/results/*.json as Markdown (the documentation's Benchmarks page shows the same).

python benchmarks/tables.py [FILE ...]
"""

from __future__ import annotations

import sys
from pathlib import Path

from results_tables import markdown, result_files


def main(argv: list[str]) -> None:
    for path in [Path(a) for a in argv] or result_files():
        print(f"\n{markdown(path)}")


if __name__ == "__main__":
    main(sys.argv[1:])
