"""The book as one PDF (`make pdf`, tools/book_pdf.py): complete, in order, and typeset.

Opens book/_build/pdf/annotated.pdf (`make test-pdf` builds it first) with pypdf and checks:

* its length: at least one page per page of book/_toc.yml, and no more than a book of this many
  pages could honestly fill;
* its outline: one bookmark per page of _toc.yml, in the table of contents' order, under its part,
  each on the page where that page's own first heading is printed;
* its contents page: every entry's page number is a page on which that heading is printed;
* no page's text holds raw LaTeX (an equation MathJax did not typeset), outside the code the book
  shows on purpose;
* no link points at the local server the pages were printed from.
"""

from __future__ import annotations

import concurrent.futures
import functools
import json
import os
import re
import sys
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
PDF = BOOK / "_build" / "pdf" / "annotated.pdf"
sys.path.insert(0, str(ROOT / "tools"))
from book_pdf import LOCAL_HOST, toc_entries  # noqa: E402

pytestmark = pytest.mark.pdf

ENTRIES = toc_entries()
# TeX that MathJax would have turned into an equation: a command of the book's formulas, or a
# display-math fence.
RAW_TEX = re.compile(
    r"\\(frac|sqrt|text|mathrm|mathbf|mathcal|operatorname|begin|end|left|right|cdot|times|sum"
    r"|prod|log|exp|max|softmax|top|in|le|ge|ldots|dots|alpha|beta|epsilon|theta|lambda|sigma)"
    r"(?![A-Za-z])|\$\$"
)


@functools.cache
def reader():
    from pypdf import PdfReader

    if not PDF.exists():
        pytest.fail(f"{PDF.relative_to(ROOT)} is missing: build it with `make pdf`")
    return PdfReader(PDF)


QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})


def flat(text: str) -> str:
    """Text with its whitespace collapsed (a heading may wrap onto two lines, after a hyphen too)
    its ligatures taken apart (the fonts print "fi" as one glyph) and its quotes straight (the book
    prints typographic ones)."""
    text = unicodedata.normalize("NFKC", text).translate(QUOTES)
    text = " ".join(text.split())
    return re.sub(r"(?<=\w-) (?=\w)", "", text)


def _texts(pages: range) -> list[str]:
    from pypdf import PdfReader

    r = PdfReader(PDF)
    return [flat(r.pages[i].extract_text()) for i in pages]


@functools.cache
def page_text(i: int) -> str:
    """One page's text, flattened (0-based)."""
    return flat(reader().pages[i].extract_text())


@functools.cache
def page_texts() -> list[str]:
    """Each page's text, flattened. pypdf reads a page's drawing in pure Python (about 0.3 s a
    page here), so the pages are shared out among the cores."""
    n, workers = len(reader().pages), max(1, os.cpu_count() or 1)
    chunks = [range(i, min(n, i + 25)) for i in range(0, n, 25)]
    with concurrent.futures.ProcessPoolExecutor(workers) as pool:
        return [text for texts in pool.map(_texts, chunks) for text in texts]


def first_heading(docname: str) -> str:
    """A page's own title: the first level-1 heading of its source (.md or .ipynb)."""
    md, nb = BOOK / f"{docname}.md", BOOK / f"{docname}.ipynb"
    if md.exists():
        text = md.read_text(encoding="utf-8")
    else:
        cells = json.loads(nb.read_text(encoding="utf-8"))["cells"]
        text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    match = re.search(r"^# (.+)$", text, re.M)
    assert match, f"{docname} has no level-1 heading"
    return flat(re.sub(r"[`*]", "", match.group(1)))


@functools.cache
def shown_code() -> str:
    """Every code cell's source and printed output, and every code block of the Markdown pages:
    what the book shows as code, where TeX may appear on purpose (a chart's axis label)."""
    parts = []
    for nb in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for cell in json.loads(nb.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] != "code":
                continue
            parts.append("".join(cell["source"]))
            for out in cell.get("outputs", []):
                parts.append("".join(out.get("text", "")))
                parts.append("".join(out.get("data", {}).get("text/plain", "")))
    for md in BOOK.glob("*.md"):
        parts += re.findall(r"^```.*?^```", md.read_text(encoding="utf-8"), re.M | re.S)
    return flat(" ".join(parts))


def outline_entries() -> list[tuple[str, int, str | None]]:
    """(title, 0-based page, part) of each bookmark at a page's level: below a part, or at the top
    where it belongs to no part (the landing page)."""
    r = reader()
    found, part_titles = [], {e.part for e in ENTRIES if e.part}
    outline = r.outline
    i = 0
    while i < len(outline):
        item = outline[i]
        children = (
            outline[i + 1] if i + 1 < len(outline) and isinstance(outline[i + 1], list) else []
        )
        if item.title in part_titles:
            for child in children:
                if not isinstance(child, list):
                    found.append((child.title, r.get_destination_page_number(child), item.title))
        else:
            found.append((item.title, r.get_destination_page_number(item), None))
        i += 2 if children else 1
    return found


def test_page_count_is_sane():
    pages = len(reader().pages)
    # at least a page for each page of the book and the contents; a chapter of this book runs to
    # a few dozen printed pages at most, so 40 a page is far beyond any honest print
    assert len(ENTRIES) + 1 <= pages <= 40 * len(ENTRIES), f"{pages} pages for {len(ENTRIES)}"


def test_outline_lists_every_page_in_book_order():
    outline = outline_entries()
    titles = [title for title, _, _ in outline]
    expected = [e.title or first_heading(e.docname) for e in ENTRIES]
    assert titles == expected
    assert [part for _, _, part in outline] == [e.part for e in ENTRIES]
    starts = [page for _, page, _ in outline]
    assert starts == sorted(starts) and len(set(starts)) == len(starts), starts


def test_each_bookmark_opens_the_page_of_its_heading():
    for entry, (title, page, _) in zip(ENTRIES, outline_entries(), strict=True):
        heading = first_heading(entry.docname)
        assert heading in page_text(page), (
            f"{title!r}: its heading {heading!r} is not on page {page + 1}"
        )


def test_contents_page_numbers_lead_to_each_heading():
    pages = len(reader().pages)
    first_page = outline_entries()[0][1]
    contents = " ".join(page_text(i) for i in range(first_page))
    for entry in ENTRIES:
        title = entry.title or first_heading(entry.docname)
        match = re.search(re.escape(title) + r"\s*(\d+)", contents)
        assert match, f"the contents do not list {title!r} with a page number"
        number = int(match.group(1))
        heading = first_heading(entry.docname)
        assert 1 <= number <= pages and heading in page_text(number - 1), (
            f"the contents send {title!r} to page {number}, where {heading!r} is not printed"
        )


def test_no_page_shows_raw_latex():
    code = shown_code()
    raw = []
    for number, text in enumerate(page_texts(), start=1):
        for match in RAW_TEX.finditer(text):
            # the run of characters the TeX sits in, as the page prints it
            start = text.rfind(" ", 0, match.start()) + 1
            end = text.find(" ", match.end())
            snippet = text[start : end if end != -1 else len(text)]
            if snippet in code:
                continue  # code the book shows on purpose
            raw.append(f"page {number}: …{snippet}…")
    assert not raw, "raw LaTeX (untypeset math) in the PDF:\n" + "\n".join(raw[:20])


def test_no_link_points_at_the_local_server():
    local = []
    for number, page in enumerate(reader().pages, start=1):
        for annot in page.get("/Annots", None) or []:
            action = annot.get_object().get("/A")
            if action is not None and LOCAL_HOST in str(action.get("/URI", "")):
                local.append(f"page {number}: {action['/URI']}")
    assert not local, local[:10]
