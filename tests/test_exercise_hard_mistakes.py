"""The exercises on the hard parts (issue 40, item 5) can fail: each solution, changed into at least
two plausible wrong answers, is graded by the chapter's own check cell, which must fail.

Each chapter runs once, cell by cell as a reader runs it, up to the exercise's starter cell; then the
solution (without its decorator) or a wrong answer takes the starter's place and the check cell runs.
The unedited solution must pass first, so an edit that stops matching the solution fails loudly."""

import json
import os
import re
from functools import cache
from pathlib import Path

import matplotlib
import pytest
import torch
from IPython.core.inputtransformer2 import TransformerManager

from annotated.data import MULTI30K_ENV

NOTEBOOKS = Path(__file__).parent.parent / "notebooks"
SOLUTION = '#@title Solution { display-mode: "form" }'  # a solution cell's first line

# (notebook, name): [(what the learner got wrong, the text replaced, its replacement), ...]
MISTAKES = {
    ("03_masks", "my_packed_mask"): [
        ("the future visible", "same & real & causal_mask(segments.size(1))[0]", "same & real"),
        ("sentences see each other", "same & real & causal_mask", "real & causal_mask"),
        ("padding attends to padding", "same & real & causal_mask", "same & causal_mask"),
    ],
    ("06_embeddings", "my_tie_all"): [
        (
            "a copy",
            "model.generator.weight = table  #",
            "model.generator.weight = nn.Parameter(table.detach().clone())  #",
        ),
        ("the source table left apart", "model.src_embed.lut.weight = table  #", "pass  #"),
        (
            "the output weight transposed",
            "model.generator.weight = table  #",
            "model.generator.weight = nn.Parameter(table.T)  #",
        ),
    ],
    ("10_decoder", "my_alignment"): [
        ("no 1/sqrt(d_k)", "Q @ K.T / 2", "Q @ K.T"),
        ("softmax over the targets", "scores.softmax(-1)", "scores.softmax(0)"),
        ("the pad not hidden", 'scores[:, SOURCE.index("<pad>")] = -torch.inf', "pass"),
    ],
    ("14_decoding", "my_follow_beams"): [
        (
            "no sentence offset",
            "torch.arange(B)[:, None] * n_beam + picked // n_vocab",
            "picked // n_vocab",
        ),
        (
            "parent from dividing by n_beam",
            "n_beam + picked // n_vocab",
            "n_beam + picked // n_beam",
        ),
        (
            "keys moved, values left",
            "kv.k, kv.v = kv.k.index_select(0, rows), kv.v.index_select(0, rows)",
            "kv.k = kv.k.index_select(0, rows)",
        ),
        (
            "only the first layer moved",
            "for layer in cache.layers:",
            "for layer in cache.layers[:1]:",
        ),
    ],
    ("15_beam_search", "my_beam_step"): [
        (
            "the parent's log P not added",
            "log_p + float(log_probs[i, token])",
            "float(log_probs[i, token])",
        ),
        ("no length penalty", "log_p / float(length_penalty(len(tokens), alpha))", "log_p"),
        (
            "the penalty of the parent's length",
            "length_penalty(len(tokens), alpha)",
            "length_penalty(len(tokens) - 1, alpha)",
        ),
    ],
    ("16_translation", "my_length_batches"): [
        (
            "the newcomer's length only",
            "* max(grown) > max_tokens",
            "* max(lengths[i]) > max_tokens",
        ),
        (
            "the batch's size before adding",
            "(len(batch) + 1) * max(grown)",
            "len(batch) * max(grown)",
        ),
        (
            "the last batch forgotten",
            "return batches + [batch] if batch else batches",
            "return batches",
        ),
        (
            "tokens counted, not the padded rectangle",
            "(len(batch) + 1) * max(grown)",
            "sum(max(lengths[j]) for j in batch + [i])",
        ),
    ],
    ("18_ablations", "my_bleu_directions"): [
        ("dropout helps even here", '"D-dropout-0": +1', '"D-dropout-0": -1'),
        ("learned positions level, as in the paper", '"E-learned": +1', '"E-learned": 0'),
        ("label smoothing costs BLEU", '"D-smoothing-0": 0', '"D-smoothing-0": -1'),
    ],
    ("18_ablations", "my_perplexity_order"): [
        (
            "the paper's base first",
            '["pre-LN", "C-layers-1", "base"',
            '["base", "pre-LN", "C-layers-1"',
        ),
        ("one head below no scale", '"A-heads-1", "no-scale"]', '"no-scale", "A-heads-1"]'),
    ],
}


def code_cells(notebook: str) -> list[str]:
    """The notebook's code cells as plain Python (IPython's `%` magics left out, each as a `pass`)."""
    cells = json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text())["cells"]
    sources = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    python = [TransformerManager().transform_cell(s) for s in sources]  # `%x` -> get_ipython()...
    return [re.sub(r"get_ipython\(\)\.run_line_magic\(.*\)", "pass", s) for s in python]


def solution_index(cells: list[str], name: str) -> int:
    return next(
        i
        for i, s in enumerate(cells)
        if s.startswith(SOLUTION) and (f"def {name}(" in s or f"class {name}(" in s)
    )


@cache
def chapter(notebook: str) -> dict[str, dict]:
    """Per exercise here, the namespace of the chapter run in order up to its starter cell, included."""
    matplotlib.use("Agg")
    cells, names = code_cells(notebook), [n for nb, n in MISTAKES if nb == notebook]
    starters = {solution_index(cells, n) - 1: n for n in names}
    namespace, before = {"__name__": "__main__"}, {}
    for i, cell in enumerate(cells[: max(starters) + 1]):
        exec(compile(cell, f"<{notebook} cell {i}>", "exec"), namespace)
        if i in starters:  # the starter cell may define the exercise's data too
            before[starters[i]] = dict(namespace)
    return before


def exercise(notebook: str, name: str) -> tuple[str, str]:
    """The solution's source (without its title line and decorator) and the check cell after it."""
    cells = code_cells(notebook)
    i = solution_index(cells, name)
    lines = [ln for ln in cells[i].splitlines() if ln not in (SOLUTION, "@check.solution")]
    return "\n".join(lines) + "\n", cells[i + 1]


def graded(notebook: str, name: str, source: str) -> None:
    """Run the check cell on `source` in the chapter's namespace; it raises when the answer is wrong."""
    namespace = dict(chapter(notebook)[name])
    exec(compile(source, "<answer>", "exec"), namespace)
    torch.manual_seed(0)
    exec(compile(exercise(notebook, name)[1], "<check>", "exec"), namespace)


@pytest.fixture(autouse=True)
def multi30k(request):
    """Chapter 16 reads Multi30k: the folder conftest finds (skipped where there is none)."""
    callspec = getattr(request.node, "callspec", None)  # None: a test of no one notebook
    if callspec and callspec.params["notebook"].startswith("16_"):
        folder = request.getfixturevalue("data_dir")
        os.environ.setdefault(MULTI30K_ENV, str(folder))


CASES = [(nb, name, *m) for (nb, name), ms in MISTAKES.items() for m in ms]


def test_each_exercise_here_has_at_least_two_mistakes():
    assert all(len(ms) >= 2 for ms in MISTAKES.values())


@pytest.mark.parametrize("notebook, name", list(MISTAKES), ids=[n for _, n in MISTAKES])
def test_the_solution_itself_passes(notebook, name):
    graded(notebook, name, exercise(notebook, name)[0])


@pytest.mark.parametrize(
    "notebook, name, mistake, old, new", CASES, ids=[f"{c[1]}-{c[2]}" for c in CASES]
)
def test_a_wrong_answer_fails_the_check(notebook, name, mistake, old, new):
    source = exercise(notebook, name)[0]
    assert source.count(old) == 1, f"{name}: the edit '{mistake}' no longer matches the solution"
    with pytest.raises((AssertionError, IndexError, RuntimeError)):
        graded(notebook, name, source.replace(old, new))
