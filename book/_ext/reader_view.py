"""What a reader sees: the book's own Sphinx extension (registered in _config.yml).

The notebooks are also the package's source and its tests, so their cells carry machinery a reader
does not need. This extension removes it when the page is rendered, never from the notebooks:

* code cells: nbdev directives (`#| export`, `#| default_exp ...`) and nbval markers
  (`# NBVAL_IGNORE_OUTPUT` with the parenthesised comment under it) are dropped; a cell left with no
  code and no output disappears;
* outputs: the `<torch._C.Generator ...>` repr that `torch.manual_seed(0)` leaves as a cell's
  value is dropped; progress bars (tqdm) are dropped from stderr, other stderr (real warnings)
  stays; an image whose alt text is a file name gets the paragraph that introduces it;
* pages: MathJax only on pages with math, the vega bundle only on pages with an altair chart,
  no sphinx-thebe (the book has no live code, and its script was included twice: a console error);
* the built site: no source maps, and the theme's 1.5 MB icon script replaced by the few icons
  the pages use (tools/icon_subset.py);
* results: the landing page's numbers are substitutions computed here from results/*.json and
  from the model itself (parameter counts), so they cannot go stale;
* the rendered page: long code names break only after ".", "_" or "::"; wide tables and the
  graders' reports are labelled for their phone and dark-mode layout (book/_static/custom.css);
  a printed output longer than 40 lines starts folded;
* citations: one author-year style in the text and in the reference list.
"""

from __future__ import annotations

import html
import json
import re
import sys
from pathlib import Path

from docutils import nodes
from pybtex.plugin import register_plugin
from pybtex.style.formatting.unsrt import Style as UnsrtStyle
from pybtex.style.labels import BaseLabelStyle

BOOK = Path(__file__).resolve().parents[1]
ROOT = BOOK.parent
RESULTS = ROOT / "results"

DIRECTIVE = re.compile(r"^\s*#\|")  # nbdev: #| export, #| default_exp NAME, #| hide ...
NBVAL = re.compile(r"^\s*#\s*NBVAL_\w+")
# Colab's form title, "#@title Solution { display-mode: "form" }": Colab hides the cell's code; the
# book shows the title as a plain comment ("# Solution")
COLAB_TITLE = re.compile(r"^(\s*)#\s*@title\s+(.*?)\s*(\{.*\})?\s*$")
GENERATOR_REPR = re.compile(r"^<torch\._C\.Generator (object )?at 0x[0-9a-f]+>$")
# One tqdm line: "  0%|     | 0/150 [00:00<?, ?update/s]", "100%|█████| 150/150 [00:03<00:00, 41.2it/s]"
PROGRESS = re.compile(r"^.*\d+%\|.*\|\s*[\d.]+[kMG]?/[\d.?]+[kMG]?\s*\[.*\]\s*$")


# --- code cells -------------------------------------------------------------------------------


def clean_source(text: str) -> str:
    """Drop nbdev directive lines and nbval marker lines (with their parenthesised comment)."""
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if DIRECTIVE.match(line):
            i += 1
            continue
        if title := COLAB_TITLE.match(line):
            out.append(f"{title.group(1)}# {title.group(2)}")
            i += 1
            continue
        if NBVAL.match(line):
            i += 1
            # The marker's explanation: "# (differences ... vary between CPUs; ...)" on 1+ lines.
            if i < len(lines) and re.match(r"^\s*#\s*\(", lines[i]):
                while i < len(lines) and lines[i].lstrip().startswith("#"):
                    closed = lines[i].rstrip().endswith(")")
                    i += 1
                    if closed:
                        break
            continue
        out.append(line)
        i += 1
    while out and not out[0].strip():
        out.pop(0)
    return "\n".join(out).rstrip()


def clean_stderr(text: str) -> str:
    """Keep what a terminal would show of stderr, minus progress bars."""
    kept = []
    for line in text.split("\n"):
        line = line.split("\r")[-1] if "\r" in line.rstrip("\r") else line.rstrip("\r")
        if line.strip() and not PROGRESS.match(line):
            kept.append(line)
    return "\n".join(kept)


def _set_text(block: nodes.literal_block, text: str) -> None:
    block.children = []
    block += nodes.Text(text)
    block.rawsource = text


def _prose_before(node: nodes.Node) -> str:
    """The paragraph just before `node` in document order (the alt text of its figure)."""
    paragraph = None
    # findall walks in document order: the last paragraph that precedes the node wins
    for other in node.document.findall(nodes.paragraph):
        if _precedes(other, node):
            paragraph = other
        else:
            break
    if paragraph is None:
        return ""
    text = " ".join(paragraph.astext().split()).rstrip(":")
    return text if len(text) <= 250 else text[:247].rsplit(" ", 1)[0] + "…"


def _precedes(a: nodes.Node, b: nodes.Node) -> bool:
    """True when a comes before b in document order."""

    def path(n: nodes.Node) -> list[int]:
        steps = []
        while n.parent is not None:
            steps.append(n.parent.index(n))
            n = n.parent
        return steps[::-1]

    return path(a) < path(b)


def _is_empty(container: nodes.Element) -> bool:
    return not any(
        isinstance(n, (nodes.Text, nodes.image, nodes.raw))
        and (not isinstance(n, nodes.Text) or n.astext().strip())
        for n in container.findall()
        if n is not container
    )


def clean_cells(app, doctree: nodes.document) -> None:
    """doctree-read: remove test and export machinery from notebook cells."""
    for cell in list(doctree.findall(nodes.container)):
        if cell.get("nb_element") != "cell_code":
            continue
        for source in [c for c in cell.children if c.get("nb_element") == "cell_code_source"]:
            for block in source.findall(nodes.literal_block):
                cleaned = clean_source(block.astext())
                if cleaned != block.astext():
                    _set_text(block, cleaned)
            if not source.astext().strip():
                cell.remove(source)
        for output in [c for c in cell.children if c.get("nb_element") == "cell_code_output"]:
            for block in list(output.findall(nodes.literal_block)):
                classes = block.get("classes", [])
                text = block.astext()
                drop = False
                if "text_plain" in classes and GENERATOR_REPR.match(text.strip()):
                    drop = True
                elif "stderr" in classes:
                    cleaned = clean_stderr(text)
                    drop = not cleaned.strip()
                    if not drop and cleaned != text:
                        _set_text(block, cleaned)
                if drop:
                    # the repr sits in mime_bundle > container[mime_type] > literal_block
                    target = block
                    while target.parent is not output and _is_empty_without(target.parent, target):
                        target = target.parent
                    target.parent.remove(target)
            for image in output.findall(nodes.image):
                alt = image.get("alt", "")
                if not alt or re.search(r"\.(png|jpe?g|svg|gif)$|^\S*/\S*$", alt):
                    image["alt"] = _prose_before(cell) or "Figure drawn by the cell above"
            if _is_empty(output):
                cell.remove(output)
        if not any(
            c.get("nb_element") in ("cell_code_source", "cell_code_output") for c in cell.children
        ):
            cell.parent.remove(cell)


def _is_empty_without(parent: nodes.Element, child: nodes.Node) -> bool:
    return all(c is child for c in parent.children)


# --- the rendered page ------------------------------------------------------------------------

# Inline code: <code class="docutils literal notranslate">, or a bare <code> from raw HTML (the
# paper-to-code page, the graders' reports). Code blocks are <pre> without <code>.
INLINE_CODE = re.compile(r"(?<!<pre>)(<code\b[^>]*>)(.*?)(</code>)", re.S)
# Where a long name may break: after ".", "_" or "::" between two name characters (not inside
# "__init__", not in "0.5").
NAME_BREAK = re.compile(r"(?<=[A-Za-z0-9)\]])(\.|::|_)(?=[A-Za-z0-9])")
DOCUTILS_TABLE = re.compile(r'<table class="table">(.*?)</table>', re.S)
REPORT_TABLE = re.compile(r"<table>(<caption>check\.[^<]*</caption>.*?)</table>", re.S)
# A report row's result (Report.SHOWN, annotated/check/framework.py) and the class the row gets.
REPORT_ROW_CLASS = {"✓ pass": "check-pass", "✗ FAIL": "check-fail", "– not applicable": "check-na"}
REPORT_ROW = re.compile(rf"<tr>(<td>.*?</td>)<td>({'|'.join(REPORT_ROW_CLASS)})</td>")
STACK_MIN_COLUMNS = 3  # tables this wide become one block per row on a phone (custom.css)


def break_names(body: str) -> str:
    """Let long code names wrap only after ".", "_" or "::": a <wbr> there, none elsewhere.

    With `overflow-wrap: anywhere` a name broke at any letter ("Tran|sfor|merC...") and a table
    column holding names shrank to a few characters; custom.css now breaks only at these points.
    """

    def name_breaks(text: str) -> str:
        parts = re.split(r"(<[^>]+>|&[#\w]+;)", text)  # leave tags and entities alone
        return "".join(
            p if p.startswith(("<", "&")) else NAME_BREAK.sub(r"\1<wbr>", p) for p in parts
        )

    def one(match: re.Match) -> str:
        opening, text, closing = match.groups()
        if "\n" in text or "<wbr>" in text:
            return match.group(0)
        if re.fullmatch(r"\d+(\.\d+)+", re.sub(r"<[^>]+>", "", text)):  # a version or a number
            return match.group(0)
        return opening + name_breaks(text) + closing

    return INLINE_CODE.sub(one, body)


def _text(html_fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", html_fragment)).split())


def label_tables(body: str) -> str:
    """Mark wide tables and the graders' reports so custom.css can lay them out (phone, dark).

    * a Markdown table of 3+ columns gets class "stack-on-phone" and each body cell its column's
      name in data-label: on a phone each row becomes one block;
    * a report of `check.*` (Report._repr_html_ in annotated/check/framework.py, stored in the
      notebooks' outputs) gets class "check-report", each row "check-pass", "check-fail" or
      "check-na" (not applicable) and its result cell "check-result", so a FAIL looks different
      from a pass and a property that does not apply looks like neither.
    """

    def docutils_table(match: re.Match) -> str:
        inner = match.group(1)
        labels = [_text(h) for h in re.findall(r"<th\b[^>]*>(.*?)</th>", inner, re.S)]
        if len(labels) < STACK_MIN_COLUMNS or "<tbody>" not in inner:
            return match.group(0)
        head, tbody = inner.split("<tbody>", 1)

        def row(r: re.Match) -> str:
            cells = iter(labels)

            def cell(c: re.Match) -> str:
                label = html.escape(next(cells, ""), quote=True)
                if not _text(c.group(2)) and "<img" not in c.group(2):
                    return f'<td class="empty-cell"{c.group(1)}>{c.group(2)}</td>'  # no "Label:"
                return f'<td data-label="{label}"{c.group(1)}>{c.group(2)}</td>'

            return re.sub(r"<td\b([^>]*)>(.*?)</td>", cell, r.group(0), flags=re.S)

        tbody = re.sub(r"<tr\b.*?</tr>", row, tbody, flags=re.S)
        return f'<table class="table stack-on-phone">{head}<tbody>{tbody}</table>'

    def report_table(match: re.Match) -> str:
        inner = match.group(1).replace("<tr><th>", '<tr class="check-head"><th>', 1)
        inner = REPORT_ROW.sub(
            lambda r: (
                f'<tr class="{REPORT_ROW_CLASS[r.group(2)]}">'
                f'{r.group(1)}<td class="check-result">{r.group(2)}</td>'
            ),
            inner,
        )
        return f'<table class="check-report">{inner}</table>'

    body = DOCUTILS_TABLE.sub(docutils_table, body)
    return REPORT_TABLE.sub(report_table, body)


TEXT_OUTPUT = re.compile(
    r'<div class="output [^"]*"><div class="highlight"><pre>(?P<text>.*?)</pre></div>\s*</div>',
    re.S,
)
FOLD_LINES = 40  # a printed output longer than this starts folded (chapter 22's --help: 125 lines)


def fold_long_outputs(body: str) -> str:
    """Fold a long printed output into a <details> the reader opens, its length in the summary."""

    def fold(match: re.Match) -> str:
        lines = match.group("text").rstrip("\n").count("\n") + 1
        if lines <= FOLD_LINES:
            return match.group(0)
        return (
            f'<details class="long-output"><summary>Show the output ({lines} lines)</summary>'
            f"{match.group(0)}</details>"
        )

    return TEXT_OUTPUT.sub(fold, body)


# --- accessible markup ------------------------------------------------------------------------

# sphinx-togglebutton names every hidden cell's summary "Toggle hidden content", a name that does not
# contain the words a reader sees ("Show code cell source"): speech-input users cannot say them.
TOGGLE_SUMMARY = '<summary aria-label="Toggle hidden content">'
# sphinxcontrib-bibtex's reference list: role="list" whose entries carry role="doc-biblioentry"
# (deprecated in DPUB-ARIA 1.1 and not allowed on a div), so the list has no list items.
BIBLIOENTRY = 'role="doc-biblioentry"'
PANDAS_TABLE = re.compile(r'(<table\b[^>]*class="dataframe"[^>]*>)(.*?)(</table>)', re.S)
HEAD_ROW = re.compile(r"<tr\b[^>]*>(.*?)</tr>", re.S)
HEAD_CELL = re.compile(r"<th\b([^>]*)>(.*?)</th>", re.S)


def _column_header(cell: re.Match) -> str:
    """A header cell of a pandas table's head: scope="col", or a plain cell when it is empty."""
    attrs, text = cell.groups()
    if not text.strip():
        return f"<td{attrs}></td>"
    scope = "" if "scope=" in attrs else ' scope="col"'
    return f"<th{attrs}{scope}>{text}</th>"


def pandas_headers(table: str) -> str:
    """Give a pandas table (DataFrame.to_html) real header cells.

    A frame with a named index prints two header rows: the column names over an empty corner, then
    the index's name over empty cells. Where the two rows complement each other (no spans, every
    position named in exactly one of them) they become one row of named headers; otherwise an empty
    header cell becomes a plain cell. Column headers get scope="col", row headers scope="row".
    """
    opening, inner, closing = PANDAS_TABLE.match(table).groups()
    if "<thead>" in inner:
        head, rest = inner.split("</thead>", 1)
        rows = [HEAD_CELL.findall(r) for r in HEAD_ROW.findall(head)]
        spans = any("span" in attrs for row in rows for attrs, _ in row)
        if len(rows) == 2 and not spans and len(rows[0]) == len(rows[1]):
            names = [a.strip() or b.strip() for (_, a), (_, b) in zip(*rows, strict=True)]
            complementary = all(
                bool(a.strip()) != bool(b.strip()) for (_, a), (_, b) in zip(*rows, strict=True)
            )
            if complementary:
                cells = "".join(f'<th scope="col">{n}</th>' for n in names)
                head = f'<thead><tr style="text-align: right;">{cells}</tr>'
        head = HEAD_CELL.sub(_column_header, head)
        inner = head + "</thead>" + rest
    inner = re.sub(
        r"<tbody>.*?</tbody>",
        lambda b: re.sub(r"<th\b(?![^>]*scope=)", '<th scope="row"', b.group(0)),
        inner,
        flags=re.S,
    )
    return opening + inner + closing


def accessible_markup(body: str) -> str:
    """Fix what the notebook renderer and the extensions write for assistive technology."""
    body = body.replace(TOGGLE_SUMMARY, "<summary>")
    body = body.replace(BIBLIOENTRY, 'role="listitem"')
    return PANDAS_TABLE.sub(lambda m: pandas_headers(m.group(0)), body)


def polish_page(app, pagename, templatename, context, doctree) -> None:
    """html-page-context: label tables for their phone and dark-mode styles; accessible names,
    roles and table headers; break long names; fold long printed outputs."""
    if "body" in context:
        body = accessible_markup(label_tables(context["body"]))
        context["body"] = fold_long_outputs(break_names(body))


# --- per-page assets --------------------------------------------------------------------------


def prune_assets(app, pagename, templatename, context, doctree) -> None:
    """html-page-context (late): keep MathJax, vega and thebe only where the page needs them."""
    body = context.get("body", "")
    has_math = 'class="math' in body or "\\(" in body or "\\[" in body or "$$" in body
    has_chart = "vegaEmbed(" in body

    def keep(script) -> bool:
        name = str(getattr(script, "filename", "") or "")
        inline = str(getattr(script, "attributes", {}).get("body", ""))
        if "thebe" in name or "thebe" in inline.lower():
            return False
        if "mathjax" in name.lower() or "MathJax" in inline:
            return has_math
        if "vega_" in name:
            return has_chart
        if "search_snippets" in name:
            return pagename == "search"
        return True

    scripts = context.get("script_files")
    if scripts is not None:
        scripts[:] = [s for s in scripts if keep(s)]
    styles = context.get("css_files")
    if styles is not None:
        styles[:] = [s for s in styles if "thebe" not in str(getattr(s, "filename", ""))]


def finish_site(app, exception) -> None:
    """build-finished: no source maps; the icon font script cut down to the icons in use."""
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir)
    for source_map in out.rglob("*.map"):
        source_map.unlink()
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from icon_subset import subset_site
    finally:
        sys.path.pop(0)
    subset_site(out)


# --- results on the landing page --------------------------------------------------------------


def _millions(n: int) -> str:
    return f"{n / 1e6:.1f}M"


def result_substitutions() -> dict[str, str]:
    """Numbers for intro.md, read from the recorded run and counted on the model itself."""
    import torch

    from annotated.model import TransformerConfig, make_model

    path = RESULTS / "multi30k" / "results.json"
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing: the landing page shows its numbers; record a run with "
            "`python -m annotated train ... --results results/multi30k/results.json`"
        )
    run = json.loads(path.read_text())
    cfg = dict(run["config"])
    fields = set(TransformerConfig.__dataclass_fields__)
    cfg = {k: v for k, v in cfg.items() if k in fields}

    def count(**config) -> int:
        with torch.device("meta"):
            model = make_model(**config)
        return sum(p.numel() for p in model.parameters())

    base = count(src_vocab=37000, tgt_vocab=37000, shared_vocab=True)
    big = count(
        src_vocab=37000, tgt_vocab=37000, shared_vocab=True, d_model=1024, d_ff=4096, n_heads=16
    )
    trained = count(**cfg)
    test = run["test"]
    training = run["training"]
    en_de = RESULTS / "multi30k-en-de" / "results.json"
    if not en_de.exists():
        raise FileNotFoundError(
            f"{en_de} is missing: the landing page shows the English-to-German scores too"
        )
    test_en_de = json.loads(en_de.read_text())["test"]
    return {
        "bleu_greedy": f"{test['greedy']['bleu']:.1f}",
        "bleu_beam": f"{test['beam']['bleu']:.1f}",
        "bleu_greedy_en_de": f"{test_en_de['greedy']['bleu']:.1f}",
        "bleu_beam_en_de": f"{test_en_de['beam']['bleu']:.1f}",
        "beam_size": str(test["beam"]["beam"]),
        "test_split": test["split"],
        "val_ppl": f"{run['val']['perplexity']:.2f}",
        "train_minutes": f"{training['wall_seconds'] / 60:.0f}",
        "train_steps": f"{training['steps']:,}",
        "train_hardware": run["hardware"],
        "trained_params": _millions(trained),
        "trained_shape": (
            f"{cfg['n_layers']}+{cfg['n_layers']} layers, d_model {cfg['d_model']}, "
            f"{cfg['n_heads']} heads, d_ff {cfg['d_ff']}, a shared vocabulary of {cfg['src_vocab']:,}"
            + (", LayerNorm before each sublayer (pre-LN)" if cfg.get("norm_first") else "")
        ),
        "base_params": _millions(base),
        "big_params": _millions(big),
    }


def add_substitutions(app, config) -> None:
    """config-inited: merge the computed numbers into myst_substitutions."""
    subs = dict(config.myst_substitutions or {})
    subs.update(result_substitutions())
    config.myst_substitutions = subs


# --- citations --------------------------------------------------------------------------------


class AuthorYearLabels(BaseLabelStyle):
    """Label reference-list entries as the text cites them: "Vaswani et al., 2017"."""

    def format_labels(self, sorted_entries):
        for entry in sorted_entries:
            people = entry.persons.get("author", [])
            names = [" ".join(p.last_names) for p in people]
            if len(names) > 2:
                who = f"{names[0]} et al."
            else:
                who = " and ".join(names)
            who = re.sub(r"[{}]", "", who)
            yield f"{who}, {entry.fields.get('year', 'n.d.')}"


class AuthorYearStyle(UnsrtStyle):
    default_label_style = "author_year_labels"
    default_sorting_style = "author_year_title"


register_plugin("pybtex.style.labels", "author_year_labels", AuthorYearLabels)
register_plugin("pybtex.style.formatting", "author_year", AuthorYearStyle)


def setup(app):
    app.connect("config-inited", add_substitutions)
    app.connect("doctree-read", clean_cells)
    app.connect("html-page-context", prune_assets, priority=900)
    app.connect("html-page-context", polish_page)
    app.connect("build-finished", finish_site)
    return {"parallel_read_safe": True, "parallel_write_safe": True, "version": "1"}
