"""The book's render-time clean-up (book/_ext/reader_view.py) and icon subsetting (tools/icon_subset.py)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "book" / "_ext"), str(ROOT / "tools")]

import icon_subset  # noqa: E402
import reader_view  # noqa: E402


def test_directives_and_markers_leave_the_code() -> None:
    source = (
        "#| export\n"
        "# NBVAL_IGNORE_OUTPUT\n"
        "# (differences at the level of float rounding vary between CPUs;\n"
        "#  the asserts check them)\n"
        "# Legend: B batch\n"
        "x = 1  # keep me\n"
        "#| hide\n"
        "# (a comment of the reader's own stays)\n"
        "y = x\n"
    )
    assert reader_view.clean_source(source) == (
        "# Legend: B batch\nx = 1  # keep me\n# (a comment of the reader's own stays)\ny = x"
    )


def test_colabs_form_title_reads_as_a_plain_comment() -> None:
    source = '#@title Solution { display-mode: "form" }\n@check.solution\ndef f():\n    pass\n'
    assert reader_view.clean_source(source) == "# Solution\n@check.solution\ndef f():\n    pass"


def test_a_cell_of_directives_only_becomes_empty() -> None:
    assert reader_view.clean_source("#| default_exp multi_head\n") == ""
    assert reader_view.clean_source("# NBVAL_SKIP\n\n") == ""


def test_progress_bars_leave_stderr_but_warnings_stay() -> None:
    bar = "\r  0%|          | 0/150 [00:00<?, ?update/s]\r 41%|████      | 62/150 [00:01<00:02, 41.2update/s]"
    done = "\r100%|██████████| 150/150 [00:03<00:00, 41.2it/s]\n"
    warning = "/x/y.py:3: UserWarning: enable_nested_tensor is True\n"
    assert reader_view.clean_stderr(bar + done) == ""
    assert reader_view.clean_stderr(bar + done + warning) == warning.rstrip("\n")
    assert reader_view.clean_stderr(warning) == warning.rstrip("\n")


def test_the_generator_repr_is_recognised() -> None:
    assert reader_view.GENERATOR_REPR.match("<torch._C.Generator at 0x7f9b8ff81bb0>")
    assert not reader_view.GENERATOR_REPR.match("tensor([1, 2])")


def test_landing_page_numbers_come_from_the_recorded_run() -> None:
    run = json.loads((ROOT / "results" / "multi30k" / "results.json").read_text())
    subs = reader_view.result_substitutions()
    assert subs["bleu_greedy"] == f"{run['test']['greedy']['bleu']:.1f}"
    assert subs["bleu_beam"] == f"{run['test']['beam']['bleu']:.1f}"
    en_de = json.loads((ROOT / "results" / "multi30k-en-de" / "results.json").read_text())
    assert subs["bleu_greedy_en_de"] == f"{en_de['test']['greedy']['bleu']:.1f}"
    assert subs["bleu_beam_en_de"] == f"{en_de['test']['beam']['bleu']:.1f}"
    # The meta-device count is the count of a real model with the run's configuration.
    from annotated.model import TransformerConfig, make_model

    fields = set(TransformerConfig.__dataclass_fields__)
    model = make_model(**{k: v for k, v in run["config"].items() if k in fields})
    assert subs["trained_params"] == f"{sum(p.numel() for p in model.parameters()) / 1e6:.1f}M"


def test_icon_table_reads_each_set() -> None:
    script = (
        'var a={bars:[448,512,[],"f0c9","M0 96Z"],"magnifying-glass":[512,512,[128269,"search"],'
        '"f002","M416 208Z"]};d("fas",a);var b={github:[496,512,[],"f09b","M165 397Z"]};d("fab",b);'
    )
    table = icon_subset.icon_table(script)
    assert table["fas"] == {
        "bars": (448, 512, "M0 96Z"),
        "magnifying-glass": (512, 512, "M416 208Z"),
    }
    assert table["fab"] == {"github": (496, 512, "M165 397Z")}


def test_used_icons_reads_classes_with_their_set(tmp_path: Path) -> None:
    (tmp_path / "_static").mkdir()
    (tmp_path / "page.html").write_text(
        '<i class="fa-brands fa-github"></i><i class="fa-solid fa-bars fa-lg"></i>'
    )
    used = icon_subset.used_icons(tmp_path)
    assert "github" in used["fab"] and "bars" in used["fas"] and "github" not in used["fas"]


def test_code_names_may_break_only_after_dots_underscores_and_double_colons() -> None:
    page = (
        '<p><code class="docutils literal notranslate"><span class="pre">'
        "F.scaled_dot_product_attention</span></code> and <code>test_x.py::test_y</code></p>"
    )
    assert reader_view.break_names(page) == (
        '<p><code class="docutils literal notranslate"><span class="pre">'
        "F.<wbr>scaled_<wbr>dot_<wbr>product_<wbr>attention</span></code> and "
        "<code>test_<wbr>x.<wbr>py::<wbr>test_<wbr>y</code></p>"
    )
    # Dunder names, numbers, tags and entities, and code blocks stay whole.
    for whole in ("<code>__init__</code>", "<code>0.5</code>", '<code a="x.y">&amp;</code>',
                  '<code><span class="n.m"></span></code>', "<pre><code>x.y</code></pre>",
                  "<p>model.encode</p>"):  # fmt: skip
        assert reader_view.break_names(whole) == whole, whole


def test_wide_tables_are_labelled_by_column_for_a_phone() -> None:
    table = (
        '<table class="table">\n<thead>\n<tr class="row-odd"><th class="head"><p>Paper</p></th>\n'
        '<th class="head"><p>Code</p></th>\n<th class="head"><p>Test &amp; more</p></th>\n</tr>\n'
        '</thead>\n<tbody>\n<tr class="row-even"><td><p>Eq. 1</p></td>\n<td><p>a</p></td>\n'
        "<td><p>b</p></td>\n</tr>\n</tbody>\n</table>"
    )
    labelled = reader_view.label_tables(table)
    assert labelled.startswith('<table class="table stack-on-phone">')
    assert re.findall(r'<td data-label="([^"]*)">', labelled) == [
        "Paper",
        "Code",
        "Test &amp; more",
    ]
    empty = reader_view.label_tables(table.replace("<td><p>a</p></td>", "<td><p></p></td>"))
    assert '<td class="empty-cell"><p></p></td>' in empty  # no "Code:" before nothing
    narrow = table.replace('<th class="head"><p>Code</p></th>\n', "").replace(
        "<td><p>a</p></td>\n", ""
    )
    assert reader_view.label_tables(narrow) == narrow  # two columns fit a phone as they are


def test_grader_reports_mark_each_row_pass_fail_or_not_applicable() -> None:
    from annotated.check.framework import Report, Result

    results = [Result("shape_ok", True, "(B, T, D)"), Result("masked", False, "off")]
    report = Report("demo", [*results, Result("reference", False, "fused", applies=False)])
    labelled = reader_view.label_tables(f"<div>{report._repr_html_()}</div>")
    assert '<table class="check-report">' in labelled
    assert '<tr class="check-head">' in labelled
    rows = re.findall(
        r'<tr class="check-(pass|fail|na)">.*?<td class="check-result">([^<]*)</td>', labelled
    )
    assert rows == [("pass", "✓ pass"), ("fail", "✗ FAIL"), ("na", "– not applicable")]


def test_long_printed_outputs_start_folded() -> None:
    def output(lines: int) -> str:
        text = "\n".join(f"line {i}" for i in range(lines))
        return (
            '<div class="output stream highlight-myst-ansi notranslate"><div class="highlight">'
            f"<pre><span></span>{text}\n</pre></div>\n</div>"
        )

    short, long = output(reader_view.FOLD_LINES), output(reader_view.FOLD_LINES + 1)
    assert reader_view.fold_long_outputs(short) == short
    folded = reader_view.fold_long_outputs(long)
    assert folded.startswith('<details class="long-output"><summary>Show the output (')
    assert f"({reader_view.FOLD_LINES + 1} lines)" in folded and long in folded
