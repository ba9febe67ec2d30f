"""Every exercise whose check is a grader can fail (issue 40, item 4): each solution, changed into at
least two plausible wrong answers, is graded by the chapter's own check cell, which must fail.

A wrong answer is the solution's source with one edit, the way a learner gets it wrong; the test
first grades the unedited solution, so an edit that stops matching the chapter fails loudly."""

import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

import annotated
from annotated import check
from annotated.decoding.greedy import next_token_logits
from annotated.model import (
    LayerNorm,
    MultiHeadAttention,
    PositionwiseFeedForward,
    Transformer,
    attention,
    causal_mask,
    padding_mask,
)
from annotated.model.cache import DecoderCache

# what the chapters' import cells give the solutions
NAMES = dict(math=math, torch=torch, F=F, Tensor=Tensor, nn=nn, check=check, attention=attention)
NAMES.update(Transformer=Transformer, causal_mask=causal_mask, padding_mask=padding_mask)
NAMES.update(LayerNorm=LayerNorm, MultiHeadAttention=MultiHeadAttention)
NAMES.update(PositionwiseFeedForward=PositionwiseFeedForward)
NAMES.update(DecoderCache=DecoderCache, next_token_logits=next_token_logits)

NOTEBOOKS = Path(__file__).parent.parent / "notebooks"
SOLUTION = (
    '#@title Solution { display-mode: "form" }'  # a solution cell's first line (Colab's form)
)

# (notebook, name): [(what the learner got wrong, the text replaced, its replacement), ...]
MISTAKES = {
    ("02_scaled_dot_product", "my_attention"): [
        ("no 1/sqrt(d_k)", " / math.sqrt(d_k)", ""),
        ("softmax over the queries", "scores.softmax(dim=-1)", "scores.softmax(dim=-2)"),
        ("mask polarity reversed", "torch.where(mask, scores,", "torch.where(~mask, scores,"),
        ("fully hidden rows left uniform", "weights = weights.masked_fill(~mask, 0.0)", "pass"),
    ],
    ("02_scaled_dot_product", "my_bias_attention"): [
        (
            "fully hidden rows left uniform",
            "weights = weights.masked_fill(~mask, 0.0)  # so its weights are set to zero",
            "pass",
        ),
        ("the bias subtracted", "scores = scores + bias", "scores = scores - bias"),
        ("sqrt(d_v) as the scale", "math.sqrt(query.size(-1))", "math.sqrt(value.size(-1))"),
    ],
    ("03_masks", "my_causal_mask"): [
        (
            "the future visible",
            "position[None, :] <= position[:, None]",
            "position[None, :] >= position[:, None]",
        ),
        (
            "the diagonal hidden",
            "position[None, :] <= position[:, None]",
            "position[None, :] < position[:, None]",
        ),
    ],
    ("03_masks", "my_padding_mask"): [
        ("pads marked True", "tokens.ne(pad_id)", "tokens.eq(pad_id)"),
        ("the pad id fixed at 0", "tokens.ne(pad_id)", "tokens.ne(0)"),
        (
            "a float mask",
            "return is_real.unsqueeze(1).unsqueeze(2)",
            "return is_real.unsqueeze(1).unsqueeze(2).float()",
        ),
    ],
    ("04_multi_head_attention", "MyMultiHeadAttention"): [
        (
            "heads split across positions",
            "x.unflatten(-1, (self.n_heads, -1)).transpose(1, 2)",
            "x.reshape(x.size(0), self.n_heads, x.size(1), -1)",
        ),
        ("keys projected with W_q", "project(key, 1)", "project(key, 0)"),
        (
            "heads merged without transposing back",
            "heads.transpose(1, 2).flatten(2)",
            "heads.flatten(2).reshape(heads.size(0), heads.size(2), -1)",
        ),
    ],
    ("05_positional_encoding", "my_encoding"): [
        ("sin and cos swapped", "[angle.sin(), angle.cos()]", "[angle.cos(), angle.sin()]"),
        ("frequency from the column index", "-two_i * math.log", "-two_i * 2 * math.log"),
    ],
    ("06_embeddings", "MyEmbeddings"): [
        ("not scaled", "return self.table(tokens) * self.scale", "return self.table(tokens)"),
        ("scaled by d_model", "self.scale = math.sqrt(d_model)", "self.scale = d_model"),
    ],
    ("09_encoder", "MyEncoderLayer"): [
        (
            "no residual around the attention",
            "self.norm_1(x + self.dropout(",
            "self.norm_1(0 + self.dropout(",
        ),
        ("the mask not passed on", "self.self_attn(x, x, x, mask)", "self.self_attn(x, x, x)"),
        (
            "pre-LN",
            "x = self.norm_1(x + self.dropout(self.self_attn(x, x, x, mask)))",
            "x = x + self.self_attn(*[self.norm_1(x)] * 3, mask)",
        ),
    ],
    ("10_decoder", "MyDecoderLayer"): [
        (
            "encoder-decoder attention reads x",
            "self.cross_attn(x, memory, memory, src_mask)",
            "self.cross_attn(x, x, x, tgt_mask)",
        ),
        (
            "no residual connections",
            "x = norm(x + self.dropout(sublayer(x)))",
            "x = norm(self.dropout(sublayer(x)))",
        ),
        (
            "the two attentions swapped",
            "lambda x: self.self_attn(x, x, x, tgt_mask),  # the target prefix",
            "lambda x: self.cross_attn(x, memory, memory, src_mask),",
        ),
    ],
    ("12_training", "MyLabelSmoothing"): [
        ("the pad column kept", " - log_p[..., self.pad_id]", ""),
        ("epsilon over all classes", "(self.vocab_size - 2)", "(self.vocab_size)"),
        ("padded positions scored", ".masked_fill(target == self.pad_id, 0.0)", ""),
    ],
    ("13_copy_task", "my_greedy_decode"): [
        ("pad allowed as an answer", 'logits[:, pad_id] = float("-inf")', "pass"),
        ("finished sentences keep writing", ".masked_fill(done, pad_id)", ""),
    ],
    ("14_decoding", "my_cached_greedy"): [
        ("pad allowed as an answer", 'logits[:, pad_id] = float("-inf")', "pass"),
        ("finished sentences keep writing", ".masked_fill(done, pad_id)", ""),
    ],
}


def exercise(notebook: str, name: str) -> tuple[str, str]:
    """The solution's source (without its title line and the decorator) and the check cell after it."""
    cells = json.loads((NOTEBOOKS / f"{notebook}.ipynb").read_text())["cells"]
    code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    i = next(
        i
        for i, s in enumerate(code)
        if s.startswith(SOLUTION) and (f"def {name}(" in s or f"class {name}(" in s)
    )
    lines = [ln for ln in code[i].splitlines() if ln not in (SOLUTION, "@check.solution")]
    return "\n".join(lines) + "\n", code[i + 1]


def graded(notebook: str, source: str, check_cell: str):
    """The check cell's report on `source`, beside the chapter's other solutions graded here."""
    namespace = {**vars(annotated), **NAMES, "__name__": "__exercise__"}
    for other in (name for nb, name in MISTAKES if nb == notebook):
        exec(compile(exercise(notebook, other)[0], "<solution>", "exec"), namespace)
    exec(compile(source, "<answer>", "exec"), namespace)
    torch.manual_seed(0)
    return eval(check_cell, namespace)


CASES = [(nb, name, *m) for (nb, name), ms in MISTAKES.items() for m in ms]


def test_each_exercise_here_has_at_least_two_mistakes():
    assert all(len(ms) >= 2 for ms in MISTAKES.values())


@pytest.mark.parametrize("notebook, name", list(MISTAKES), ids=[n for _, n in MISTAKES])
def test_the_solution_itself_passes(notebook, name):
    source, check_cell = exercise(notebook, name)
    assert check_cell.startswith("check.")
    assert graded(notebook, source, check_cell)


@pytest.mark.parametrize(
    "notebook, name, mistake, old, new", CASES, ids=[f"{c[1]}-{c[2]}" for c in CASES]
)
def test_a_wrong_answer_fails_the_check(notebook, name, mistake, old, new):
    source, check_cell = exercise(notebook, name)
    assert source.count(old) == 1, f"{name}: the edit '{mistake}' no longer matches the solution"
    report = graded(notebook, source.replace(old, new), check_cell)
    assert not report, f"{name} with {mistake} passes:\n{report}"
