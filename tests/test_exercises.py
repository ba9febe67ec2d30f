"""The chapters' exercises grade the reader's code: a solution stands in only for an unwritten starter.

Each exercise is a starter (raising NotImplementedError("your code here")), a solution decorated with
`check.solution`, and a check. Run in order, as a reader runs a notebook in Jupyter or Colab, the check
must grade the reader's version once it is written, and the solution while it is not (the book's case),
saying then that the result is the solution's and the reader's answer is not graded yet.
"""

import ast
import importlib
import json
import re
from pathlib import Path

import pytest
import torch
from IPython.core.inputtransformer2 import TransformerManager
from torch import nn

from annotated import check
from annotated.check.framework import STARTER, is_starter
from annotated.check.stand_ins import stood_in_for

# A solution cell's first line: Colab shows the cell as a form with its code hidden (the book hides it too)
SOLUTION = '#@title Solution { display-mode: "form" }'
NOTEBOOKS = sorted(Path(__file__).parent.parent.joinpath("notebooks").glob("*.ipynb"))


def code_cells(path: Path) -> list[str]:
    """The code cells' sources as plain Python (IPython's `%` magics left out, each as a `pass`)."""
    cells = json.loads(path.read_text())["cells"]
    sources = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    python = [TransformerManager().transform_cell(s) for s in sources]  # `%x` -> get_ipython()...
    return [re.sub(r"get_ipython\(\)\.run_line_magic\(.*\)", "pass", s) for s in python]


def exercises() -> list[tuple[str, int, list[str]]]:
    """(notebook, index of its solution cell among the code cells, the code cells)."""
    found = []
    for path in NOTEBOOKS:
        cells = code_cells(path)
        found += [
            (path.name, i, cells) for i, cell in enumerate(cells) if cell.startswith(SOLUTION)
        ]
    return found


def definitions(source: str) -> list[ast.FunctionDef | ast.ClassDef]:
    kinds = ast.FunctionDef | ast.ClassDef
    return [node for node in ast.parse(source).body if isinstance(node, kinds)]


def test_there_are_exercises():
    assert len(exercises()) >= 40


def test_every_solution_is_hidden_in_colab_too():
    for path in NOTEBOOKS:
        for i, cell in enumerate(code_cells(path)):
            if "@check.solution" in cell:
                assert cell.startswith(SOLUTION + "\n"), f"{path.name} code cell {i}: {cell[:40]!r}"


@pytest.mark.parametrize(
    ("notebook", "index", "cells"), exercises(), ids=[f"{n}:{i}" for n, i, _ in exercises()]
)
def test_every_solution_stands_in_only_for_its_starter(notebook, index, cells):
    defined = definitions(cells[index])
    assert defined, f"{notebook}: the solution cell defines nothing"
    for node in defined:
        first = ast.unparse(node.decorator_list[0]) if node.decorator_list else None
        assert first == "check.solution", (
            f"{notebook}: {node.name} is not decorated with @check.solution"
        )
        starters = [
            d for cell in cells[:index] for d in definitions(cell) if d.name == node.name
        ]  # the reader's version comes before the solution
        assert starters, f"{notebook}: {node.name} has no starter before its solution"
        assert STARTER in ast.unparse(starters[-1]), (
            f"{notebook}: {node.name}'s starter does not raise"
        )


@pytest.mark.parametrize(
    ("notebook", "index", "cells"), exercises(), ids=[f"{n}:{i}" for n, i, _ in exercises()]
)
def test_no_solution_leans_on_the_readers_other_exercises(notebook, index, cells):
    """A solution that called the reader's my_split_heads would fail with the reader's bug."""
    tree = ast.parse(cells[index])
    own = {n.name for n in definitions(cells[index])}
    own |= {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)
    }
    readers = {
        n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id.startswith(("my_", "My"))
    }
    assert readers <= own, f"{notebook}: the solution uses the reader's {sorted(readers - own)}"


def define(source: str, namespace: dict) -> dict:
    exec(compile(source, "<cell>", "exec"), namespace)
    return namespace


STARTER_CELL = '''
def my_double(x):
    """Twice x."""
    raise NotImplementedError("your code here")
'''
SOLUTION_CELL = """
@check.solution
def my_double(x):
    return 2 * x
"""


def test_the_solution_stands_in_for_an_unwritten_or_missing_starter(capsys):
    for before in (STARTER_CELL, ""):
        namespace = define(SOLUTION_CELL, define(before, {"check": check}))
        assert namespace["my_double"](3) == 6
        assert (
            capsys.readouterr().out
            == "my_double: yours is not written yet, so this solution stands in for it\n"
        )


def test_a_solution_run_again_still_stands_in(capsys):
    namespace = define(SOLUTION_CELL, define(STARTER_CELL, {"check": check}))
    define(SOLUTION_CELL, namespace)  # the reader runs the solution cell a second time
    assert capsys.readouterr().out.count("yours is not written yet") == 2


def test_the_readers_own_version_is_kept_and_graded(capsys):
    namespace = define("def my_double(x):\n    return x + x\n", {"check": check})
    yours = namespace["my_double"]
    define(SOLUTION_CELL, namespace)
    assert namespace["my_double"] is yours
    assert "my_double: yours is kept" in capsys.readouterr().out


def test_a_starter_is_recognised_through_decorators_and_in_classes():
    namespace = define(
        """
import torch
from torch import nn


@torch.no_grad()
def my_decode(x):
    raise NotImplementedError("your code here")


class MyLayer(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        raise NotImplementedError("your code here")


class MyWrittenLayer(MyLayer):
    def forward(self, x):
        return x
""",
        {},
    )
    assert is_starter(namespace["my_decode"]) and is_starter(namespace["MyLayer"])
    assert not is_starter(namespace["MyWrittenLayer"])  # its own methods are written
    assert not is_starter(torch.nn.Linear) and not is_starter(len)


def test_a_chapter_run_in_order_grades_the_readers_code():
    """Chapter 03 run cell by cell, with a reader's wrong look-ahead mask (the future marked True)."""
    cells = code_cells(next(p for p in NOTEBOOKS if p.name.startswith("03_")))
    starter = next(i for i, cell in enumerate(cells) if cell.startswith("def my_causal_mask"))
    graded = next(
        i
        for i, cell in enumerate(cells)
        if cell.startswith("check.masks(padding_mask, my_causal_mask)")
    )
    wrong = (
        "def my_causal_mask(size):\n    return torch.ones(size, size).triu(1).bool()[None, None]\n"
    )
    namespace: dict = {"__name__": "__main__"}
    torch.manual_seed(0)
    import matplotlib

    matplotlib.use("Agg")
    for cell in cells[:starter]:
        define(cell, namespace)
    define(wrong, namespace)
    yours = namespace["my_causal_mask"]
    for cell in cells[starter + 1 : graded]:
        define(cell, namespace)
    assert namespace["my_causal_mask"] is yours
    report = eval(cells[graded], namespace)
    assert not report and "causal_hides_future" in report.failed
    assert report.stood_in == () and "not graded" not in str(report)
    # unwritten, as the book runs it: the solution stands in, passes, and says it is the solution's
    define(cells[starter], namespace)
    for cell in cells[starter + 1 : graded]:
        define(cell, namespace)
    report = eval(cells[graded], namespace)
    assert report and report.stood_in == ("my_causal_mask",)


def test_an_exercise_class_starter_is_replaced_by_its_solution():
    namespace = define(
        "class MyNorm(nn.Module):\n    def forward(self, x):\n        raise NotImplementedError('your code here')\n",
        {"nn": nn, "check": check},
    )
    define(
        "@check.solution\nclass MyNorm(nn.Module):\n    def forward(self, x):\n        return x\n",
        namespace,
    )
    assert namespace["MyNorm"]().forward(1) == 1


# "Not graded" (issue 40, item 3): a check after a stand-in says the result is the solution's.

ATTENTION_STARTER = """
def my_attention(query, key, value, mask=None):
    raise NotImplementedError("your code here")
"""
ATTENTION = """
def my_attention(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1) / query.size(-1) ** 0.5
    if mask is not None:
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ value, weights
"""
NOT_GRADED = "not graded, your my_attention is not written yet; the solution's result: "


def test_a_report_on_a_stand_in_says_it_is_not_graded(capsys):
    namespace = define(ATTENTION_STARTER, {"check": check, "torch": torch})
    define("@check.solution" + ATTENTION, namespace)
    report = check.attention(namespace["my_attention"])
    assert report and report.stood_in == ("my_attention",)
    assert str(report).startswith(f"check.attention: {NOT_GRADED}11 of 11 properties hold\n")
    assert f"<caption>check.attention: {NOT_GRADED}11 of 11" in report._repr_html_()


def test_a_report_on_the_readers_code_reads_as_before(capsys):
    namespace = define(ATTENTION, {"check": check, "torch": torch})
    define(
        "@check.solution" + ATTENTION.replace("0.5", "0.5 + 0"), namespace
    )  # the reader's is kept
    report = check.attention(namespace["my_attention"])
    assert report.stood_in == ()
    assert str(report).startswith("check.attention: 11 of 11 properties hold\n")
    assert "not graded" not in str(report) + report._repr_html_()


def test_a_failing_stand_in_report_still_says_whose_it_is():
    namespace = define(ATTENTION.replace(" / query.size(-1) ** 0.5", ""), {"torch": torch})
    namespace["my_attention"]._stands_in = True  # as `check.solution` marks a stand-in
    report = check.attention(namespace["my_attention"])
    assert not report and str(report).startswith(f"check.attention: {NOT_GRADED}")


def test_check_passed_names_whose_result_it_is(capsys):
    namespace = define(SOLUTION_CELL, define(STARTER_CELL, {"check": check}))
    capsys.readouterr()
    check.passed(namespace["my_double"], "my_double(3) = 6")
    assert capsys.readouterr().out == (
        "not graded, your my_double is not written yet; the solution's result: my_double(3) = 6\n"
    )
    define(SOLUTION_CELL, define("def my_double(x):\n    return x + x\n", namespace))
    capsys.readouterr()
    check.passed(namespace["my_double"], "my_double(3) = 6")
    assert capsys.readouterr().out == "✓ my_double(3) = 6\n"


def test_a_stand_in_is_seen_behind_a_lambda_a_wrapper_or_a_closure(capsys):
    namespace = define(SOLUTION_CELL, define(STARTER_CELL, {"check": check}))
    define("def twice_of(x):\n    return my_double(x)\n", namespace)  # a wrapper naming it
    stand_in = namespace["my_double"]
    assert stood_in_for(namespace["twice_of"]) == ("my_double",)
    assert stood_in_for(lambda x: stand_in(x)) == ("my_double",)
    assert stood_in_for(namespace["twice_of"], stand_in) == ("my_double",)
    define("def my_double(x):\n    return x + x\n", namespace)  # written: the wrapper now calls it
    assert stood_in_for(namespace["twice_of"]) == ()
    assert stood_in_for(len, 3, None, torch.ones(1)) == ()


def test_every_grader_that_a_learner_calls_reports_stand_ins():
    graders = [
        name
        for name in check.__all__
        if callable(getattr(check, name))
        and getattr(getattr(check, name), "__module__", "").endswith("_checks")
    ]
    assert set(check.CHECKS) <= set(graders)
    unwrapped = [n for n in graders if not getattr(getattr(check, n), "reports_stand_ins", False)]
    assert not unwrapped, (
        f"define these with @reporting_stand_ins where their module does: {unwrapped}"
    )
    # one definition: the name a learner calls is the function its module defines, not a second wrapper
    for name in graders:
        grader = getattr(check, name)
        assert grader is getattr(importlib.import_module(grader.__module__), name), name
        assert grader is check.CHECKS.get(name, grader), name


def stored_text(cell: dict) -> str:
    """Everything a cell's stored outputs show: streams, plain text and HTML."""
    parts = []
    for output in cell.get("outputs", []):
        parts.append("".join(output.get("text", "")))
        for kind in ("text/plain", "text/html"):
            parts.append("".join(output.get("data", {}).get(kind, "")))
    return "\n".join(parts)


def exercise_cells() -> list[tuple[str, dict, dict]]:
    """(notebook, solution cell, check cell: the code cell after it), from the stored notebooks."""
    found = []
    for path in NOTEBOOKS:
        cells = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
        for i, cell in enumerate(cells):
            if "".join(cell["source"]).startswith(SOLUTION):
                found.append((path.name, cell, cells[i + 1]))
    return found


PASS_SUMMARY = re.compile(
    r"check\.\w+: \d+ of \d+ properties hold"
)  # a report on the reader's code


def test_no_stored_output_reads_as_a_pass_for_an_unwritten_answer():
    """The book runs every starter unwritten: each solution stands in, and no check may read as a pass."""
    assert len(exercise_cells()) >= 40
    for notebook, solution, checked in exercise_cells():
        name = re.search(r"^(?:def|class) (\w+)", "".join(solution["source"]), re.M).group(1)
        where = f"{notebook}, the check after {name}'s solution"
        assert "this solution stands in" in stored_text(solution), (
            f"{notebook}: {name} did not stand in"
        )
        shown = stored_text(checked)
        ticks = [ln for ln in shown.splitlines() if ln.lstrip().startswith("✓")]
        assert not ticks, f"{where} reads as a pass: {ticks[0]!r}"
        assert not PASS_SUMMARY.search(shown), f"{where} shows a report as if yours was graded"
        source = "".join(checked["source"])
        if "check.passed(" in source or re.search(r"\bcheck\.\w+\(", source):
            assert "not graded, your " in shown, f"{where} does not say that it is not graded"


def test_an_exercise_check_prints_its_success_through_check_passed():
    for notebook, _, checked in exercise_cells():
        source = "".join(checked["source"])
        assert not re.search(r"print\(f?[\"']✓", source), (
            f"{notebook}: use check.passed(answer, ...)"
        )
