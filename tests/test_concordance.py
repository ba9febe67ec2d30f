"""Every function, section and test that the paper-to-code page (book/concordance.md) names exists.

A rename in the package, a notebook or the tests then fails here instead of leaving the page wrong.
"""

import ast
import json
import re
import sys
from pathlib import Path

import pytest
from docutils.nodes import make_id

import annotated

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "book" / "concordance.md").read_text(encoding="utf-8")
sys.path.insert(0, str(ROOT / "tools"))
from repo_url import configured_url  # noqa: E402

CODE = re.compile(r'<a href="notebooks/(\w+)\.html#([\w-]+)"><code>([\w.]+)</code></a>')
TEST = re.compile(r"\[`(test_\w+\.py)::(test_\w+)`\]\(([^)\s]+)\)")
ROWS = [line for line in PAGE.splitlines() if line.startswith("| ") and "---" not in line]


def test_every_row_names_code_and_a_test():
    body = [row for row in ROWS if not row.startswith("| Paper |")]
    assert len(body) >= 35, "the page lost rows"
    for row in body:
        assert CODE.search(row) or "chapter 00" in row, f"no code link in {row}"
        assert TEST.search(row) or "chapter's own checks" in row, f"no test link in {row}"


@pytest.mark.parametrize("name", sorted({m[2] for m in CODE.findall(PAGE)}))
def test_named_code_exists_in_the_package(name):
    obj = annotated
    for part in name.split("."):
        assert hasattr(obj, part), f"concordance names {name}, but annotated has no {part}"
        obj = getattr(obj, part)


def headings(notebook: str) -> set[str]:
    cells = json.loads((ROOT / "notebooks" / f"{notebook}.ipynb").read_text(encoding="utf-8"))
    found = set()
    for cell in cells["cells"]:
        if cell["cell_type"] == "markdown":
            for line in "".join(cell["source"]).splitlines():
                if line.startswith("#"):
                    found.add(make_id(line.lstrip("#").replace("`", "").strip()))
    return found


@pytest.mark.parametrize(
    ("notebook", "anchor"),
    sorted(
        {(m[0], m[1]) for m in CODE.findall(PAGE)}
        | set(re.findall(r'href="notebooks/(\w+)\.html#([\w-]+)"', PAGE))
    ),
)
def test_linked_sections_exist(notebook, anchor):
    assert (ROOT / "notebooks" / f"{notebook}.ipynb").exists(), f"no notebook {notebook}"
    assert anchor in headings(notebook), f"{notebook} has no section #{anchor}"


def function_names(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}


@pytest.mark.parametrize(("file", "name", "url"), sorted(set(TEST.findall(PAGE))))
def test_named_tests_exist_and_links_point_at_them(file, name, url):
    path = ROOT / "tests" / file
    assert path.exists(), f"concordance names {file}, which does not exist"
    assert name in function_names(path), f"{file} has no {name}"
    assert url == f"{configured_url()}/blob/main/tests/{file}", (
        f"{url} is not this repository's {file}"
    )


def test_decoding_and_averaging_defaults_are_the_papers():
    """§6.1's settings, as the page's rows state them, are the package's defaults."""
    import inspect

    import torch

    from annotated import decoding

    beam = inspect.signature(annotated.beam_search).parameters
    assert beam["beam_size"].default == 4 and beam["alpha"].default == 0.6
    # The decoding limit without an explicit one: the source length + 50 (the padding not counted).
    limits = [getattr(decoding, n) for n in decoding.__all__ if n.endswith("_from_source")]
    assert limits, "a function should give the default decoding limit"
    src = torch.tensor([[5, 6, 7, 0], [5, 6, 7, 8]])
    for limit in limits:
        assert limit(src, annotated.padding_mask(src, pad_id=0)).tolist() == [53, 54]
    # Averaging: the last 5 snapshots, unless a run asks otherwise.
    assert annotated.RunConfig().run_options.average == 5
    for row in (
        "$n_\\text{beam} = 4$",
        "$\\alpha = 0.6$",
        "input length + 50",
        "last 5 checkpoints",
    ):
        assert row in PAGE, f"the page no longer states {row}"


def test_adam_warm_up_and_smoothing_defaults_are_the_papers():
    """§5.3's Adam settings, 4,000 warm-up updates (the Multi30k task's default) and §5.4's label
    smoothing, as the page states them."""
    import inspect

    from annotated.app.multi30k_training import Multi30kTraining

    adam = inspect.signature(annotated.make_optimizer).parameters
    assert adam["betas"].default == (0.9, 0.98) and adam["eps"].default == 1e-9
    assert Multi30kTraining.defaults.warmup == 4000
    smoothing = inspect.signature(annotated.LabelSmoothingLoss).parameters["smoothing"].default
    assert (
        smoothing == annotated.RunConfig().run_options.label_smoothing == 0.1
    )  # §5.4's epsilon_ls
    for said in ("$\\beta_1 = 0.9$", "$\\beta_2 = 0.98$", "$\\epsilon_\\text{Adam} = 10^{-9}$"):
        assert said in PAGE
    assert "$warmup\\_steps = 4000$" in PAGE and "$\\epsilon_{ls} = 0.1$" in PAGE
