"""Pin every way into a notebook to the release in pyproject.toml, or check that all are pinned.

A reader who opens a chapter in Colab or Binder, or whose runtime installs the package, gets the
notebook and the package of one release: the version `[project] version` names, tagged `vVERSION`.
Pinned here: each notebook's setup cell (the package spec and the version it checks), each notebook's
Colab and Binder links, the README's Colab link and the book's launch buttons (book/_config.yml).
The package itself downloads the book's recorded files from the same tag (appendix 37).

    python tools/pin_release.py           # rewrite all of them for the version in pyproject.toml
    python tools/pin_release.py --check   # exit 1 listing any that names another version

Releasing: set the version, run this, commit, tag vVERSION on that commit and push the tag.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SETUP = """\
# Setup: where the package is missing (Colab, a fresh runtime), install the release this book was built from.
import importlib.metadata

try:
    installed = importlib.metadata.version("annotated-transformer")
except importlib.metadata.PackageNotFoundError:
    installed = None
if installed != "{version}":
    %pip install -q "annotated-transformer @ git+{repository}@v{version}\""""
# Colab's .../blob/REF/notebooks/ and Binder's .../gh/OWNER/NAME/REF?labpath=
LINKS = [
    (r"(colab\.research\.google\.com/github/[\w.-]+/[\w.-]+/blob/)([\w.-]+)(/notebooks/)", 2),
    (r"(mybinder\.org/v2/gh/[\w.-]+/[\w.-]+/)([\w.-]+)(\?labpath=)", 2),
]
BRANCH = r"(\n  branch: )(\S+)(\n)"  # book/_config.yml, under repository:


def project() -> tuple[str, str]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    return data["project"]["version"], data["project"]["urls"]["Repository"].rstrip("/")


def setup_cell(version: str, repository: str) -> str:
    return SETUP.format(version=version, repository=repository)


def pin_links(text: str, ref: str) -> str:
    for pattern, _ in LINKS:
        text = re.sub(pattern, lambda m: m.group(1) + ref + m.group(3), text)
    return text


def pinned_notebook(text: str, version: str, repository: str) -> str:
    nb = json.loads(text)
    first = next(c for c in nb["cells"] if c["cell_type"] == "code")
    source = "".join(first["source"])
    start = source.index("# Setup: ")
    end = source.index('"', source.index("%pip install -q ")) + 1
    end = source.index('"', end) + 1  # the spec's closing quote
    source = source[:start] + setup_cell(version, repository) + source[end:]
    first["source"] = source.splitlines(keepends=True)  # by line, as Jupyter stores a cell
    title = nb["cells"][0]
    title["source"] = pin_links("".join(title["source"]), f"v{version}").splitlines(keepends=True)
    return json.dumps(nb, indent=1, ensure_ascii=False, sort_keys=True) + "\n"


def pinned() -> dict[Path, str]:
    """Every pinned file as it should read."""
    version, repository = project()
    out = {}
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        out[path] = pinned_notebook(path.read_text(encoding="utf-8"), version, repository)
    readme = ROOT / "README.md"
    out[readme] = pin_links(readme.read_text(encoding="utf-8"), f"v{version}")
    config = ROOT / "book" / "_config.yml"
    out[config] = re.sub(
        BRANCH,
        lambda m: m.group(1) + f"v{version}" + m.group(3),
        config.read_text(encoding="utf-8"),
    )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only list files not pinned")
    args = parser.parse_args()
    stale = [p for p, text in pinned().items() if p.read_text(encoding="utf-8") != text]
    if args.check:
        for path in stale:
            print(
                f"{path.relative_to(ROOT)} is not pinned to the release: run tools/pin_release.py"
            )
        return 1 if stale else 0
    for path, text in pinned().items():
        path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
