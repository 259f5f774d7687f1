"""Check a built wheel: graphsafe is its only top-level package (no stray `strategies` or `tests` that
would shadow other projects' modules), and graphsafe/py.typed ships (PEP 561).

    python .ci/wheel_contents.py dist/graphsafe-*.whl     # exit 0, or 1 with what is wrong
"""

import sys
import zipfile


def problems(wheel: str) -> list[str]:
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    found = [f"top-level entry {t!r}" for t in sorted(top) if t != "graphsafe" and not t.endswith(".dist-info")]
    if "graphsafe/py.typed" not in names:
        found.append("no graphsafe/py.typed")
    return found


if __name__ == "__main__":
    [wheel] = sys.argv[1:]
    wrong = problems(wheel)
    print(f"wheel {wheel}: " + ("; ".join(wrong) if wrong else "graphsafe and its dist-info only, py.typed included"))
    sys.exit(1 if wrong else 0)
