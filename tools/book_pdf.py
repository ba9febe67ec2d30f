"""Print the built book as one PDF (`make pdf`): every page of book/_toc.yml, in its order.

The HTML build (`make html`) is served on 127.0.0.1, so the book's own MathJax and vega load
as they do on the site; nothing is requested from another host. Debian's Chromium, driven by
Playwright, opens each page, waits until MathJax has typeset every equation and vega has drawn every
chart, opens the long outputs the site folds, and prints the page with the book's print style
(book/_static/custom.css, `@media print`: no sidebars, header or buttons). pypdf then joins the pages
behind a contents page and gives the file:

* an outline (bookmarks): each part, its chapters, each chapter's sections;
* a contents page whose page numbers are counted in the joined file, not guessed;
* a page number at the foot of every page after the contents;
* links between chapters that jump inside the PDF (to the chapter's first page) instead of pointing
  at the local server; links to the site's other files point at the published book.

One page at a time rather than the single-page HTML build: it needs no second Sphinx build, each
page typesets only its own equations, and two tabs print at once.

    python tools/book_pdf.py [--out book/_build/pdf/annotated.pdf]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import html
import http.server
import re
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import yaml

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
HTML = BOOK / "_build" / "html"
OUT = BOOK / "_build" / "pdf" / "annotated.pdf"
CHROMIUM = Path("/usr/bin/chromium")
LOCAL_HOST = "127.0.0.1"
TABS = 2  # pages printed at once (two cores)
RENDER_TIMEOUT_MS = 60_000
PAPER = {
    "format": "A4",
    "margin": {"top": "16mm", "bottom": "18mm", "left": "14mm", "right": "14mm"},
}

sys.path.insert(0, str(ROOT / "tools"))
from repo_url import configured_url, pages_url, slug_of  # noqa: E402


@dataclass
class Entry:
    """One page of the book in reading order."""

    docname: str  # "notebooks/04_multi_head_attention"
    title: str  # the table of contents' title, or the page's own heading
    part: str | None  # the part's caption ("The model"); None for the landing page


def toc_entries(toc: Path = BOOK / "_toc.yml") -> list[Entry]:
    """The pages of _toc.yml in reading order, each with its title and part."""
    data = yaml.safe_load(toc.read_text(encoding="utf-8"))
    entries = [Entry(data["root"], "", None)]

    def walk(items: list[dict], part: str | None) -> None:
        for item in items:
            if "file" in item:
                name = re.sub(r"\.(md|ipynb)$", "", item["file"])
                entries.append(Entry(name, item.get("title", ""), part))
            for key in ("chapters", "sections"):
                walk(item.get(key, []), part)

    for part in data.get("parts", []):
        walk(part.get("chapters", []), part.get("caption"))
    walk(data.get("chapters", []), None)
    return entries


# --- serving and printing ---------------------------------------------------------------------


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


def serve(folder: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    handler = functools.partial(_Quiet, directory=str(folder))
    server = http.server.ThreadingHTTPServer((LOCAL_HOST, 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://{LOCAL_HOST}:{server.server_address[1]}"


# Every equation typeset (MathJax turns each .math element, and TeX in outputs, into an
# mjx-container) and every altair chart drawn (one vegaEmbed call per chart).
RENDERED = """() => {
  const scripts = [...document.scripts];
  const math = scripts.some(s => /mathjax/i.test(s.src));
  if (math) {
    if (!(window.MathJax && MathJax.startup && MathJax.startup.promise)) return false;
    if (!window.__typeset) {
      window.__typeset = 'pending';
      MathJax.startup.promise.then(() => { window.__typeset = 'done'; });
    }
    if (window.__typeset !== 'done') return false;
    if (document.querySelectorAll('mjx-container').length
        < document.querySelectorAll('.math').length) return false;
  }
  const charts = scripts.filter(s => !s.src && s.textContent.includes('vegaEmbed(')).length;
  const drawn = document.querySelectorAll(
    '.vega-embed svg.marks, .vega-embed canvas.marks').length;
  return drawn >= charts && document.fonts.status === 'loaded';
}"""

# What the site folds for a screen is opened for paper: a folded output cannot be opened in a PDF.
UNFOLD = "() => document.querySelectorAll('details.long-output').forEach(d => { d.open = true; })"
# The page's own first heading (the landing page and the translator have no title in _toc.yml).
HEADING = "() => (document.querySelector('main h1') || {}).textContent || document.title"


@dataclass
class Printed:
    """What printing one page gave."""

    heading: str  # the page's first heading
    pages: int  # its number of pages
    anchors: dict[str, str]  # the id of each section -> its heading, for links to a section


# Each section's id (the target of a link "page.html#id") with its heading's text.
ANCHORS = """() => Object.fromEntries([...document.querySelectorAll('main section[id]')]
  .map(s => [s.id, (s.querySelector('h1, h2, h3, h4, h5, h6') || {}).textContent || ''])
  .filter(([, h]) => h))"""


async def print_page(context, url: str, entry: Entry, out: Path) -> Printed:
    """Print one page of the book to `out`."""
    page = await context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        await page.goto(f"{url}/{entry.docname}.html", wait_until="load")
        try:
            await page.wait_for_function(RENDERED, timeout=RENDER_TIMEOUT_MS, polling=100)
        except Exception as error:
            raise SystemExit(
                f"{entry.docname}: equations or charts did not render within "
                f"{RENDER_TIMEOUT_MS / 1000:.0f} s ({error}); page errors: {errors}"
            ) from None
        await page.evaluate(UNFOLD)
        heading = " ".join((await page.evaluate(HEADING)).replace("#", "").split())
        anchors = {
            k: " ".join(v.replace("#", "").split())
            for k, v in (await page.evaluate(ANCHORS)).items()
        }
        await page.pdf(path=str(out), print_background=True, outline=True, **PAPER)
        return Printed(heading, count_pages(out), anchors)
    finally:
        await page.close()


def launch_args() -> dict:
    if not CHROMIUM.exists():
        raise SystemExit(f"{CHROMIUM} is missing: apt-get install chromium")
    return {
        "executable_path": str(CHROMIUM),
        "args": [
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            # nothing may leave the machine: every other host fails to resolve
            f"--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE {LOCAL_HOST}",
        ],
    }


async def print_book(entries: list[Entry], url: str, folder: Path) -> list[Printed]:
    """Print every page into folder/NNN.pdf, TABS at a time, then the contents and the numbers."""
    from playwright.async_api import async_playwright

    async with async_playwright() as p:
        browser = await p.chromium.launch(**launch_args())
        context = await browser.new_context(viewport={"width": 1000, "height": 1400})
        context.set_default_timeout(RENDER_TIMEOUT_MS)
        limit = asyncio.Semaphore(TABS)

        async def one(i: int, entry: Entry) -> Printed:
            async with limit:
                start = time.monotonic()
                printed = await print_page(context, url, entry, folder / f"{i:03d}.pdf")
                seconds = time.monotonic() - start
                print(f"  {entry.docname}: {printed.pages} pages, {seconds:.1f} s", flush=True)
                return printed

        printed = list(await asyncio.gather(*(one(i, e) for i, e in enumerate(entries))))
        for entry, page in zip(entries, printed, strict=True):
            entry.title = entry.title or page.heading
        # The contents' own length shifts every number after it: print it until its length holds.
        contents, starts = folder / "contents.pdf", None
        for _ in range(3):
            length = await print_html(context, contents_html(entries, starts, url), contents)
            new = page_starts(printed, length)
            if new == starts:
                break
            starts = new
        else:
            raise SystemExit("the contents page did not settle on a length")
        total = starts[-1] + printed[-1].pages
        await print_html(context, numbers_html(length, total), folder / "numbers.pdf", margin=False)
        await browser.close()
        return printed


async def print_html(context, markup: str, out: Path, margin: bool = True) -> int:
    """Print a page of generated HTML to `out`; return its number of pages."""
    page = await context.new_page()
    await page.set_content(markup, wait_until="load")
    paper = PAPER if margin else {"format": PAPER["format"]}
    await page.pdf(path=str(out), print_background=True, **paper)
    await page.close()
    return count_pages(out)


def count_pages(path: Path) -> int:
    from pypdf import PdfReader

    return len(PdfReader(path).pages)


# --- the contents page and the page numbers ---------------------------------------------------

STYLE = """
body { font-family: "DejaVu Sans", sans-serif; font-size: 10pt; color: #111; margin: 0; }
h1 { font-size: 16pt; margin: 0 0 2pt; } .subtitle { margin: 0 0 8pt; color: #444; }
h2 { font-size: 11pt; margin: 8pt 0 2pt; }
ol { list-style: none; margin: 0; padding: 0; }
li { display: flex; gap: 6pt; margin: 0.5pt 0; break-inside: avoid; }
li a { color: inherit; text-decoration: none; }
li .dots { flex: 1 0 2em; border-bottom: 1px dotted #999; margin-bottom: 4pt; }
li .page { flex: 0 0 auto; font-variant-numeric: tabular-nums; }
"""


def contents_html(entries: list[Entry], starts: list[int] | None, url: str) -> str:
    """The contents page: each part's pages with the page each starts on (1-based), as links.

    A link points at the page's address on the local server; `join` turns it into a jump inside
    the PDF, as it does for the links between chapters.
    """
    rows, part = [], object()
    for i, entry in enumerate(entries):
        if entry.part != part:
            if rows:
                rows.append("</ol>")
            part = entry.part
            if part:
                rows.append(f"<h2>{html.escape(part)}</h2>")
            rows.append("<ol>")
        number = str(starts[i] + 1) if starts else "0" * 3
        href = html.escape(f"{url}/{entry.docname}.html", quote=True)
        rows.append(
            f'<li><a href="{href}">{html.escape(entry.title)}</a><span class="dots"></span>'
            f'<span class="page">{number}</span></li>'
        )
    rows.append("</ol>")
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<style>{STYLE}</style></head><body><h1>{html.escape(book_title())}</h1>"
        f"<p class='subtitle'>Contents</p>{''.join(rows)}</body></html>"
    )


def numbers_html(first: int, last: int) -> str:
    """One A4 sheet per page first..last-1 (0-based), blank but for its number (1-based) at the foot."""
    sheets = "".join(f"<section><span>{n + 1}</span></section>" for n in range(first, last))
    return (
        "<!DOCTYPE html><html><head><meta charset='utf-8'><style>"
        "@page { size: A4; margin: 0; } html, body { margin: 0; }"
        "section { height: 297mm; position: relative; break-after: page; overflow: hidden; }"
        "section span { position: absolute; bottom: 8mm; right: 14mm;"
        " font: 8.5pt 'DejaVu Sans', sans-serif; color: #555; }"
        f"</style></head><body>{sheets}</body></html>"
    )


def book_title() -> str:
    return yaml.safe_load((BOOK / "_config.yml").read_text(encoding="utf-8"))["title"]


def page_starts(printed: list[Printed], contents_pages: int) -> list[int]:
    """The 0-based page on which each printed page starts once joined behind the contents."""
    starts, at = [], contents_pages
    for one in printed:
        starts.append(at)
        at += one.pages
    return starts


# --- joining ----------------------------------------------------------------------------------


def explicit_destinations(reader) -> None:
    """Turn the named destinations of one page's links into explicit ones (in place).

    Chromium names each in-page link target after the element's id; the chapters share ids
    ("summary", "exercises"), so the names would collide once the chapters are joined.
    """
    from pypdf.generic import ArrayObject, FloatObject, NameObject, NullObject

    named = reader.named_destinations
    for page in reader.pages:
        for annot in page.get("/Annots", None) or []:
            annot = annot.get_object()
            target = annot.get("/Dest")
            action = annot.get("/A")
            if target is None and action is not None and action.get("/S") == "/GoTo":
                target = action.get("/D")
            if not isinstance(target, str):
                continue
            dest = named.get(str(target))
            if dest is None:
                continue
            top = FloatObject(dest.top) if dest.top is not None else NullObject()
            annot[NameObject("/Dest")] = ArrayObject(
                [dest.page, NameObject("/XYZ"), NullObject(), top, NullObject()]
            )
            if "/A" in annot:
                del annot["/A"]


def join(entries: list[Entry], printed: list[Printed], folder: Path, url: str, out: Path) -> int:
    """Join the contents and every printed page into `out`; return its number of pages."""
    from pypdf import PdfReader, PdfWriter
    from pypdf.generic import ArrayObject, DictionaryObject, NameObject, TextStringObject

    writer = PdfWriter()
    writer.append(PdfReader(folder / "contents.pdf"), import_outline=False)
    starts = page_starts(printed, len(writer.pages))
    readers = []
    for i in range(len(entries)):
        reader = PdfReader(folder / f"{i:03d}.pdf")
        explicit_destinations(reader)
        writer.append(reader, import_outline=False)
        readers.append(reader)

    # The outline: part > page > its sections (the page's own outline, below its first heading).
    parts: dict[str | None, object] = {}
    sections: dict[str, dict[str, int]] = {}  # docname -> {heading text: 0-based page}
    for entry, reader, start in zip(entries, readers, starts, strict=True):
        parent = None
        if entry.part is not None:
            if entry.part not in parts:
                parts[entry.part] = writer.add_outline_item(
                    title=entry.part, page_number=start, bold=True
                )
            parent = parts[entry.part]
        item = writer.add_outline_item(title=entry.title, page_number=start, parent=parent)
        found = sections[entry.docname] = {}

        add_sections(writer, reader, start, reader.outline, item, found, 0)

    # Links to the local server: jumps inside the PDF, or the published book for other files.
    site = pages_url(slug_of(configured_url()))
    anchors = {e.docname: p.anchors for e, p in zip(entries, printed, strict=True)}
    start_of = {e.docname: s for e, s in zip(entries, starts, strict=True)}
    for page in writer.pages:
        for annot in page.get("/Annots", None) or []:
            annot = annot.get_object()
            action = annot.get("/A")
            if action is None or action.get("/S") != "/URI":
                continue
            uri = str(action["/URI"])
            if not uri.startswith(url):
                continue
            parts_of = urlsplit(uri)
            docname = re.sub(r"\.html$", "", parts_of.path.lstrip("/"))
            if docname in start_of:
                target = start_of[docname]
                heading = anchors[docname].get(parts_of.fragment)
                if heading is not None:
                    target = sections[docname].get(norm(heading), target)
                annot[NameObject("/Dest")] = ArrayObject(
                    [writer.pages[target].indirect_reference, NameObject("/Fit")]
                )
                del annot["/A"]
            else:
                rest = uri[len(url) :].lstrip("/")
                annot[NameObject("/A")] = DictionaryObject(
                    {
                        NameObject("/S"): NameObject("/URI"),
                        NameObject("/URI"): TextStringObject(site + rest),
                    }
                )

    # A page number at the foot of every page after the contents.
    numbers = PdfReader(folder / "numbers.pdf")
    for sheet, page in zip(numbers.pages, writer.pages[starts[0] :], strict=True):
        page.merge_page(sheet, over=True)
        page.compress_content_streams()  # merging leaves the page's drawing uncompressed

    writer.add_metadata({"/Title": book_title(), "/Author": "The annotated contributors"})
    writer.page_mode = "/UseOutlines"
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "wb") as f:
        writer.write(f)
    return len(writer.pages)


def add_sections(writer, reader, start, items, parent, found: dict, depth: int) -> None:
    """Copy a printed page's outline below its entry: the page's first heading is the entry
    itself, its sections and their subsections go below it; `found` gets each heading's page."""
    last = None
    for node in items:
        if isinstance(node, list):
            if depth < 2:
                add_sections(
                    writer, reader, start, node, parent if last is None else last, found, depth + 1
                )
            continue
        page = start + reader.get_destination_page_number(node)
        found.setdefault(norm(node.title), page)
        last = (
            parent
            if depth == 0
            else writer.add_outline_item(title=node.title, page_number=page, parent=parent)
        )


def norm(text: str) -> str:
    return " ".join(text.replace("#", "").split()).lower()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out", type=Path, default=OUT, help=f"the PDF to write (default {OUT.relative_to(ROOT)})"
    )
    parser.add_argument(
        "--only", metavar="REGEX", help="print only the pages whose name matches (to try a change)"
    )
    args = parser.parse_args()
    if not (HTML / "index.html").exists():
        raise SystemExit(f"{HTML.relative_to(ROOT)} is not built: run `make html` first")
    entries = [e for e in toc_entries() if not args.only or re.search(args.only, e.docname)]
    start = time.monotonic()
    server, url = serve(HTML)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            printed = asyncio.run(print_book(entries, url, folder))
            pages = join(entries, printed, folder, url, args.out)
    finally:
        server.shutdown()
        server.server_close()
    size = args.out.stat().st_size / 1e6
    print(f"wrote {args.out} ({pages} pages, {size:.1f} MB) in {time.monotonic() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
