"""Keep every link to the project's repository in step with one setting.

The setting is `[project.urls] Repository` in pyproject.toml. It appears in the book's launch buttons
(book/_config.yml), in every notebook's install cell and Colab/Binder links, in environment.yml and in
README.md. `--check` lists any place that names another GitHub repository; `--set URL` rewrites them
all (and the setting) for a fork.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# owner/name as it appears after github.com/ (a pip spec's ...@vVERSION too), raw.githubusercontent.com/
# (the book's files, appendix 37), colab's .../github/ and binder's .../gh/
SLUG = r"(?:github\.com/|raw\.githubusercontent\.com/|colab\.research\.google\.com/github/|mybinder\.org/v2/gh/)([\w.-]+/[\w.-]+?)(?=[/\"'\s)#?@]|\.git|$)"

# The book's GitHub Pages address, OWNER.github.io/NAME, is derived from the same setting.
PAGES = r"https://([\w-]+)\.github\.io/([\w.-]+?)(?=[/\"'\s)>#?]|$)"


def pages_url(slug: str) -> str:
    owner, name = slug.split("/")
    return f"https://{owner}.github.io/{name}/"


def configured_url() -> str:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return data["project"]["urls"]["Repository"].rstrip("/")


def slug_of(url: str) -> str:
    match = re.fullmatch(r"https://github\.com/([\w.-]+/[\w.-]+)", url.rstrip("/"))
    if match is None:
        raise SystemExit(f"URL must look like https://github.com/OWNER/NAME, got {url!r}")
    return match.group(1)


# Other projects' repositories that pages link to on purpose; every other github.com link must be ours.
# Multi30k's own files; the tutorial the README compares with; PyTorch's issues and pull requests
# (chapters 02 and 03); the harvardnlp copy task and tensor2tensor's code (chapters 13, 15, the concordance)
EXTERNAL = {
    "bentrevett/pytorch-seq2seq",
    "multi30k/dataset",
    "pytorch/pytorch",
    "harvardnlp/annotated-transformer",
    "tensorflow/tensor2tensor",
}


def files() -> list[Path]:
    found = [
        ROOT / "README.md",
        ROOT / "CONTRIBUTING.md",
        ROOT / "environment.yml",
        ROOT / "book" / "_config.yml",
    ]
    found += [ROOT / "book" / "intro.md", ROOT / "book" / "concordance.md"]
    found += sorted((ROOT / "notebooks").glob("*.ipynb"))
    return [p for p in found if p.exists()]


def mismatches(slug: str) -> list[str]:
    bad = []
    for path in files():
        for found in re.findall(SLUG, path.read_text(encoding="utf-8")):
            if found not in (slug, *EXTERNAL) and not found.startswith(("colab", "assets")):
                bad.append(f"{path.relative_to(ROOT)}: names {found}, the setting is {slug}")
        if path.suffix == ".ipynb":
            continue  # chart outputs name vega.github.io/schema; the book's address is not in them
        for owner, name in re.findall(PAGES, path.read_text(encoding="utf-8")):
            if f"{owner}/{name}" != slug:
                bad.append(
                    f"{path.relative_to(ROOT)}: site of {owner}/{name}, the setting is {slug}"
                )
    return bad


def set_url(new_url: str) -> None:
    old, new = slug_of(configured_url()), slug_of(new_url)
    for path in [ROOT / "pyproject.toml", *files()]:
        text = path.read_text(encoding="utf-8")
        path.write_text(
            text.replace(f"github.com/{old}", f"github.com/{new}")
            .replace(f"github/{old}/", f"github/{new}/")
            .replace(f"gh/{old}/", f"gh/{new}/")
            .replace(f"githubusercontent.com/{old}/", f"githubusercontent.com/{new}/")
            .replace(pages_url(old), pages_url(new)),
            encoding="utf-8",
        )
    print(f"repository links now point at https://github.com/{new}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument(
        "--check", action="store_true", help="list links that disagree with the setting"
    )
    group.add_argument(
        "--set", metavar="URL", help="point every link at https://github.com/OWNER/NAME"
    )
    args = parser.parse_args()
    if args.set:
        set_url(args.set)
        return 0
    bad = mismatches(slug_of(configured_url()))
    print("\n".join(bad) or "all repository links agree with pyproject.toml")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
