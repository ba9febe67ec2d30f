"""Check that the committed notebooks are clean and that annotated/ is exactly what they export.

Works on a copy in a temporary folder: runs tools/clean_notebooks.py and nbdev-export there and
compares the results with the tree, which it never writes to. Exits 1 with the files that differ.
"""

from __future__ import annotations

import filecmp
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def differing(a: Path, b: Path, pattern: str) -> list[str]:
    names = sorted({p.name for p in a.glob(pattern)} | {p.name for p in b.glob(pattern)})
    return [n for n in names if not (a / n).exists() or not (b / n).exists()
            or not filecmp.cmp(a / n, b / n, shallow=False)]  # fmt: skip


def main() -> int:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        shutil.copy(ROOT / "pyproject.toml", work)
        for folder in ("notebooks", "annotated"):
            shutil.copytree(
                ROOT / folder, work / folder, ignore=shutil.ignore_patterns("__pycache__")
            )
        notebooks = sorted(str(p) for p in (work / "notebooks").glob("*.ipynb"))
        cleaner = [sys.executable, str(ROOT / "tools" / "clean_notebooks.py"), *notebooks]
        subprocess.run(cleaner, check=True)
        subprocess.run([str(BIN / "nbdev-export")], cwd=work, check=True, capture_output=True)
        unclean = differing(ROOT / "notebooks", work / "notebooks", "*.ipynb")
        stale = differing(ROOT / "annotated", work / "annotated", "*.py")
    for name in unclean:
        print(
            f"notebooks/{name} holds volatile metadata (execution counts, timestamps): run 'make export'"
        )
    for name in stale:
        print(
            f"annotated/{name} differs from what the notebooks export: edit notebooks/, run 'make export'"
        )
    return 1 if unclean or stale else 0


if __name__ == "__main__":
    sys.exit(main())
