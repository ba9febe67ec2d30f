"""Write or check annotated/book_files.json: every file under results/ with its size and SHA-256.

The package ships the list; `annotated.book_files.book_path` checks a downloaded file against it.

    python tools/book_files.py           # write the list from results/
    python tools/book_files.py --check   # exit 1 if the list and results/ disagree
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIST = ROOT / "annotated" / "book_files.json"


def listing() -> str:
    files = {}
    for path in sorted((ROOT / "results").rglob("*")):
        if path.is_file() and not path.name.startswith("."):
            data = path.read_bytes()
            name = path.relative_to(ROOT).as_posix()
            files[name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
    return json.dumps({"files": files}, indent=1, sort_keys=True) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only report a list out of date")
    args = parser.parse_args()
    text = listing()
    if args.check:
        if not LIST.is_file() or LIST.read_text(encoding="utf-8") != text:
            print(f"{LIST.relative_to(ROOT)} does not list results/ as it is: run 'make export'")
            return 1
        return 0
    LIST.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
