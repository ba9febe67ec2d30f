"""Every chapter reference in the book's prose is a link, and every link to a chapter lands.

The notebooks' markdown cells and the pages in book/ refer to each other ("chapter 16", "appendix 29").
Written as plain text, such a number goes stale without anyone noticing; written as a link, this file
checks it: the file exists, the section it names (``#anchor``) exists, and the number in the link's
text is the number of the notebook it points at. The markdown is read with MyST's own parser, the one
Jupyter Book builds with, and anchors are MyST's heading slugs (``myst_heading_anchors`` in
book/_config.yml), which are also GitHub's.
"""

import json
import posixpath
import re
from pathlib import Path

import pytest
import yaml
from docutils.nodes import make_id
from markdown_it.renderer import RendererHTML
from myst_parser.config.main import MdParserConfig
from myst_parser.mdit_to_docutils.base import default_slugify
from myst_parser.parsers.mdit import create_md_parser

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
CONFIG = yaml.safe_load((BOOK / "_config.yml").read_text(encoding="utf-8"))
MD = create_md_parser(
    MdParserConfig(enable_extensions=set(CONFIG["parse"]["myst_enable_extensions"])), RendererHTML
)
# Heading levels that get a slug; 0 (MyST's default) means none, and every #anchor fails the build.
ANCHOR_LEVELS = CONFIG["sphinx"]["config"].get("myst_heading_anchors", 0)

# "chapter 16", "Notebook 21", "appendices 24", "chapters 05-11": a chapter named by its number.
PLAIN = re.compile(r"\b(?:notebooks?|chapters?|appendix|appendices)\s+\d\d[a-z]?\b", re.IGNORECASE)
NUMBER = re.compile(r"\b(\d\d[a-z]?)\b")
LINKED = "\x00"  # stands in for linked text and code when looking for plain references


def markdown_sources() -> list[tuple[str, str, str]]:
    """(where, the document's path as the book sees it, markdown) for every markdown cell and page."""
    found = []
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        for i, cell in enumerate(cells):
            if cell["cell_type"] == "markdown":
                found.append(
                    (f"{path.name} cell {i}", f"notebooks/{path.name}", "".join(cell["source"]))
                )
    for path in sorted(BOOK.glob("*.md")):
        found.append((f"book/{path.name}", path.name, path.read_text(encoding="utf-8")))
    return found


def inline_tokens(markdown: str):
    """The inline tokens of a document, directives' bodies included."""
    for token in MD.parse(markdown):
        if token.type == "inline":
            yield token
        elif token.type in ("fence", "colon_fence") and token.info.startswith("{"):
            body = "\n".join(
                line for line in token.content.splitlines() if not line.startswith(":")
            )
            yield from inline_tokens(body)


def links(markdown: str) -> list[tuple[str, str]]:
    """(text, target) of every markdown link, {doc} role and <a href> in the document."""
    found = []
    for token in inline_tokens(markdown):
        children = token.children or []
        for i, child in enumerate(children):
            if child.type == "link_open":
                text = []
                for inner in children[i + 1 :]:
                    if inner.type == "link_close":
                        break
                    text.append(" " if inner.type in ("softbreak", "hardbreak") else inner.content)
                found.append(("".join(text), child.attrs["href"]))
            elif child.type == "myst_role" and child.meta["name"] == "doc":
                role = re.fullmatch(r"(?:(.*?)\s*<(.+)>|(.+))", child.content.strip(), re.DOTALL)
                found.append((role[1] or "", role[2] or role[3]))
            elif child.type == "html_inline" and (
                href := re.match(r'<a\s+href="([^"]+)"', child.content)
            ):
                closing = next(
                    (j for j in range(i + 1, len(children)) if children[j].content == "</a>"), i + 1
                )
                found.append(("".join(c.content for c in children[i + 1 : closing]), href[1]))
    return found


def unlinked_text(markdown: str) -> list[str]:
    """Each paragraph's (or heading's) text outside links and code, lines joined by spaces."""
    texts = []
    for token in inline_tokens(markdown):
        parts, depth = [], 0
        for child in token.children or []:
            if child.type == "link_open" or (
                child.type == "html_inline" and child.content.startswith("<a ")
            ):
                depth += 1
            elif child.type == "link_close" or (
                child.type == "html_inline" and child.content == "</a>"
            ):
                depth -= 1
                parts.append(LINKED)
            elif child.type in ("softbreak", "hardbreak"):
                parts.append(" ")
            elif child.type == "text" and depth == 0:
                parts.append(child.content)
            else:
                parts.append(LINKED)
        texts.append("".join(parts))
    return texts


def resolve(document: str, target: str) -> tuple[Path, str] | None:
    """The file a local link points at, as the book resolves it, and its #anchor; None if not local."""
    if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
        return None
    path, _, anchor = target.partition("#")
    relative = posixpath.normpath(posixpath.join(posixpath.dirname(document), path))
    if relative.endswith(".html"):
        relative = relative.removesuffix(".html")
    candidates = (
        [relative]
        if Path(relative).suffix in (".ipynb", ".md")
        else [
            relative + ".ipynb",
            relative + ".md",
        ]
    )
    for candidate in candidates:
        if (BOOK / candidate).exists():
            return BOOK / candidate, anchor
    return BOOK / candidates[0], anchor


def anchors(path: Path, html: bool) -> set[str]:
    """A notebook's or page's heading anchors: for an .html address the page's HTML ids (docutils'
    make_id of the title), for a markdown link MyST's slugs (of the title's text and inline code, as
    MyST takes them, for the levels book/_config.yml gives slugs)."""
    if path.suffix == ".ipynb":
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
        markdown = "\n\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    else:
        markdown = path.read_text(encoding="utf-8")
    found: set[str] = set()
    tokens = MD.parse(markdown)
    for heading, inline in zip(tokens, tokens[1:], strict=False):
        if heading.type != "heading_open":
            continue
        children = inline.children or []
        if html:
            found.add(make_id("".join(c.content for c in children if not c.children)))
        elif int(heading.tag[1]) <= ANCHOR_LEVELS:
            title = "".join(c.content for c in children if c.type in ("text", "code_inline"))
            slug, n = default_slugify(title), 1
            while slug in found:
                slug, n = f"{default_slugify(title)}-{n}", n + 1
            found.add(slug)
    return found


SOURCES = markdown_sources()
LINKS = [
    (where, text, target, resolved)
    for where, document, markdown in SOURCES
    for text, target in links(markdown)
    if (resolved := resolve(document, target))
]
IDS = [f"{where} -> {target}" for where, _, target, _ in LINKS]


def test_the_parser_sees_every_kind_of_link_and_reference():
    """The helpers find links in all three forms and a reference broken over two lines."""
    sample = (
        "See [chapter 16](16_translation.ipynb#batches), {doc}`02 <notebooks/02_x>` and\n"
        '<a href="notebooks/00_overview.html#roadmap">chapter 00</a>; `notebook 13` is code,\n'
        "appendix\n27 is plain, [appendix\n34](34_charts.ipynb) is not."
    )
    assert links(sample) == [
        ("chapter 16", "16_translation.ipynb#batches"),
        ("02", "notebooks/02_x"),
        ("chapter 00", "notebooks/00_overview.html#roadmap"),
        ("appendix 34", "34_charts.ipynb"),
    ]
    assert [m.group(0) for t in unlinked_text(sample) for m in PLAIN.finditer(t)] == ["appendix 27"]
    assert resolve("notebooks/01_x.ipynb", "16_translation.ipynb#batches") == (
        BOOK / "notebooks" / "16_translation.ipynb",
        "batches",
    )
    assert resolve("notebooks/01_x.ipynb", "https://example.org/a.md") is None
    assert "batches-by-token-count-51" in anchors(
        BOOK / "notebooks" / "16_translation.ipynb", False
    )


@pytest.mark.parametrize(("where", "text", "target", "resolved"), LINKS, ids=IDS)
def test_link_lands(where, text, target, resolved):
    path, anchor = resolved
    assert path.exists(), (
        f"{where}: [{text}]({target}) points at {path.relative_to(BOOK)}, which does not exist"
    )
    if anchor:
        known = anchors(path, html=target.split("#")[0].endswith(".html"))
        assert anchor in known, (
            f"{where}: [{text}]({target}): {path.name} has no heading #{anchor}"
            f" (it has: {', '.join(sorted(known))})"
        )


@pytest.mark.parametrize(("where", "text", "target", "resolved"), LINKS, ids=IDS)
def test_link_text_names_the_chapter_it_points_at(where, text, target, resolved):
    path, _ = resolved
    prefix = re.match(r"(\d\d[a-z]?)_", path.name)
    named = PLAIN.search(text) or re.fullmatch(r"\s*\d\d[a-z]?\s*", text)
    if prefix and named:
        number = NUMBER.search(named.group(0))[1]
        assert number == prefix[1], (
            f"{where}: [{text}]({target}) names {number} but opens {path.name}"
        )


def test_no_chapter_reference_is_plain_text():
    plain = [
        f"{where}: {match.group(0)!r}"
        for where, _, markdown in SOURCES
        for text in unlinked_text(markdown)
        for match in PLAIN.finditer(text)
    ]
    assert not plain, f"{len(plain)} chapter references are not links:\n" + "\n".join(plain)
