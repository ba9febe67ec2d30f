"""The chapters' exercises grade the reader's code: a solution stands in only for an unwritten starter.

Each exercise is a starter (raising NotImplementedError("your code here")), a solution decorated with
`check.solution`, and a check. Run in order, as a reader runs a notebook in Jupyter or Colab, the check
must grade the reader's version once it is written, and the solution while it is not (the book's case).
"""

import ast
import json
import re
from pathlib import Path

import pytest
import torch
from IPython.core.inputtransformer2 import TransformerManager
from torch import nn

from annotated import check
from annotated.check.framework import STARTER, is_starter

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
    # unwritten, as the book runs it: the solution stands in and the check passes
    define(cells[starter], namespace)
    for cell in cells[starter + 1 : graded]:
        define(cell, namespace)
    assert eval(cells[graded], namespace)


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
