"""Strip volatile metadata from notebooks, keeping what nbval and the book need.

Removes execution timestamps and every cell, output and notebook metadata key except those listed
below, and numbers the code cells 1, 2, 3, ... as a top-to-bottom run in a fresh kernel does (nbval
needs a count on every cell whose stored output it compares; the count itself is never compared).

    python tools/clean_notebooks.py notebooks/*.ipynb           # clean in place
    python tools/clean_notebooks.py --check notebooks/*.ipynb   # exit 1 if any is not clean
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

NOTEBOOK_KEYS = {"kernelspec", "language_info"}
CELL_KEYS = {
    "tags",
    "mystnb",
    "jupyter",
}  # nbval and book tags; figure captions; collapsed solutions


def clean(nb: dict) -> dict:
    nb["metadata"] = {k: v for k, v in nb.get("metadata", {}).items() if k in NOTEBOOK_KEYS}
    count = 0
    for cell in nb["cells"]:
        cell["metadata"] = {k: v for k, v in cell.get("metadata", {}).items() if k in CELL_KEYS}
        if isinstance(
            cell["source"], str
        ):  # a script's edit: stored, as Jupyter stores it, by line
            cell["source"] = cell["source"].splitlines(keepends=True)
        if cell["cell_type"] != "code":
            continue
        count += 1
        cell["execution_count"] = count
        for out in cell.get("outputs", []):
            if "execution_count" in out:
                out["execution_count"] = count
            if "metadata" in out:  # keep only an image's display size (a retina PNG has 2x pixels)
                out["metadata"] = {
                    mime: {k: v for k, v in meta.items() if k in ("width", "height")}
                    for mime, meta in out["metadata"].items()
                    if mime.startswith("image/") and isinstance(meta, dict) and meta
                }
    return nb


def dumps(nb: dict) -> str:
    return json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report notebooks not clean")
    parser.add_argument("paths", nargs="+", type=Path)
    args = parser.parse_args()
    unclean = []
    for path in args.paths:
        text = path.read_text(encoding="utf-8")
        cleaned = dumps(clean(json.loads(text)))
        if cleaned != text:
            unclean.append(path)
            if not args.check:
                path.write_text(cleaned, encoding="utf-8")
    for path in unclean if args.check else []:
        print(
            f"{path} holds volatile metadata (timestamps, counts out of order): run 'make export'"
        )
    return 1 if args.check and unclean else 0


if __name__ == "__main__":
    sys.exit(main())
