"""What the book's renderer writes for assistive technology (book/_ext/reader_view.py).

The browser test (tests/test_book_browser.py) audits every built page with axe-core; these tests pin
the markup fixes it relies on, on small pieces of HTML, without a browser.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "book" / "_ext"))

import reader_view  # noqa: E402

# DataFrame.to_html of a frame with a named index (chapter 18's ablation table, shortened).
NAMED_INDEX = """<table border="1" class="dataframe">
  <thead>
    <tr style="text-align: right;">
      <th></th>
      <th>change</th>
      <th>val perplexity</th>
    </tr>
    <tr>
      <th>run</th>
      <th></th>
      <th></th>
    </tr>
  </thead>
  <tbody>
    <tr>
      <th>base</th>
      <td>8 heads</td>
      <td>21.603</td>
    </tr>
  </tbody>
</table>"""

# Two levels of column names (a span): the rows cannot be merged.
TWO_LEVELS = """<table border="1" class="dataframe">
  <thead>
    <tr>
      <th></th>
      <th colspan="2" halign="left">BLEU</th>
    </tr>
    <tr>
      <th></th>
      <th>greedy</th>
      <th>beam</th>
    </tr>
  </thead>
  <tbody>
    <tr>
      <th>val</th>
      <td>41.0</td>
      <td>41.5</td>
    </tr>
  </tbody>
</table>"""


def header_rows(table: str) -> list[list[str]]:
    head = table.split("</thead>")[0]
    return [re.findall(r"<th\b[^>]*>(.*?)</th>", row, re.S) for row in head.split("</tr>")[:-1]]


def test_a_named_index_becomes_one_row_of_named_headers() -> None:
    out = reader_view.accessible_markup(NAMED_INDEX)
    assert header_rows(out) == [["run", "change", "val perplexity"]]
    assert not re.search(r"<th\b[^>]*>\s*</th>", out), "an empty header cell is left"
    assert out.count('scope="col"') == 3
    assert '<th scope="row">base</th>' in out


def test_an_empty_header_over_spans_becomes_a_plain_cell() -> None:
    out = reader_view.accessible_markup(TWO_LEVELS)
    assert header_rows(out) == [["BLEU"], ["greedy", "beam"]]
    assert not re.search(r"<th\b[^>]*>\s*</th>", out)
    assert out.count("<td></td>") == 2, (
        "each empty corner is a plain cell, so columns still line up"
    )
    assert '<th colspan="2" halign="left" scope="col">BLEU</th>' in out


def test_tables_that_are_not_pandas_frames_are_left_alone() -> None:
    table = "<table><thead><tr><th></th><th>a</th></tr></thead></table>"
    assert reader_view.accessible_markup(table) == table


def test_hidden_cell_toggles_are_named_by_what_they_show() -> None:
    summary = (
        '<summary aria-label="Toggle hidden content">\n'
        '<p class="collapsed admonition-title">Show code cell source</p>'
    )
    out = reader_view.accessible_markup(summary)
    assert "aria-label" not in out and out.startswith("<summary>")


def test_reference_list_entries_are_list_items() -> None:
    refs = (
        '<div role="list" class="citation-list">'
        '<div class="citation" id="id4" role="doc-biblioentry"><span class="label">[A, 2016]</span>'
        "</div></div>"
    )
    out = reader_view.accessible_markup(refs)
    assert 'role="listitem"' in out and "doc-biblioentry" not in out
