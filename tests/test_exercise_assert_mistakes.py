"""Every exercise checked by asserts can fail (issue 40, item 4): each solution, changed into at least two
plausible wrong answers, is run through the chapter's own check cell, which must fail.

The chapter's code cells run once, in order, in one namespace, as a reader runs them; at each exercise the
namespace is copied, the wrong answer (the solution's source with one edit, the way a learner gets it
wrong) replaces the solution, and the check cell that follows runs on it. The unedited solution goes
through the same steps first and must pass, so an edit that stops matching the chapter fails loudly.
A check fails when it raises, or when a `Report` it makes is falsy (a grader after the asserts).

Chapters 16 and 17 would take minutes per answer (tokenizers trained on Multi30k for each, the test
set translated, figures over every run): for those, LIGHTER lists a few substitutions in the cells
before the exercise, each with why the check stays what the reader runs. The solution and check cells
themselves always run unedited, and so does every cell of the other chapters."""

import ast
import functools
import json
import os
import re
from pathlib import Path

import matplotlib
import pytest
import torch
from IPython.core.inputtransformer2 import TransformerManager

from annotated.check import Report
from annotated.data import MULTI30K_ENV

NOTEBOOKS = Path(__file__).parent.parent / "notebooks"
SOLUTION = (
    '#@title Solution { display-mode: "form" }'  # a solution cell's first line (Colab's form)
)

# (notebook, name): [(what the learner got wrong, the text replaced, its replacement), ...]
MISTAKES = {
    ("01_attention_intuition", "my_self_attention"): [
        ("softmax over the queries", "dim=-1", "dim=0"),
        ("keys made with W_q", "X @ W_k", "X @ W_q"),
        (
            "scaled by sqrt(d_k), not asked yet",
            "queries @ keys.T",
            "queries @ keys.T / keys.size(-1) ** 0.5",
        ),
    ],
    ("01_attention_intuition", "my_softmax"): [
        (
            "the maximum not subtracted",
            "scores - scores.max(dim=-1, keepdim=True).values",
            "scores",
        ),
        ("summed over the rows", "exps.sum(dim=-1, keepdim=True)", "exps.sum(dim=0, keepdim=True)"),
    ],
    ("01_attention_intuition", "my_hard_lookup"): [
        (
            "argmax keeps the first best key only",
            "scores == scores.max(dim=-1, keepdim=True).values",
            "torch.nn.functional.one_hot(scores.argmax(-1), scores.size(-1)).bool()",
        ),
        (
            "tied values summed, not averaged",
            "best.float() / best.sum(dim=-1, keepdim=True)",
            "best.float()",
        ),
        (
            "best over the queries",
            "scores.max(dim=-1, keepdim=True)",
            "scores.max(dim=0, keepdim=True)",
        ),
    ],
    ("04_multi_head_attention", "my_head_outputs"): [
        (
            "W^O's blocks cut from its rows",
            "mha.W_o.weight.T.unflatten",
            "mha.W_o.weight.unflatten",
        ),
        ("the mask not passed on", "attention(q, k, v, mask)", "attention(q, k, v)"),
        ("keys projected with W_q", "mha.W_k(key)", "mha.W_q(key)"),
    ],
    ("04_multi_head_attention", "my_head_weights"): [
        ("scaled by sqrt(d_model)", "/ mha.d_k**0.5", "/ mha.d_model**0.5"),
        (
            "the mask forgotten",
            "scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)",
            "pass",
        ),
        ("softmax over the queries", "scores.softmax(dim=-1)", "scores.softmax(dim=-2)"),
    ],
    ("05_positional_encoding", "my_shift_matrix"): [
        ("turned the other way", "theta = delta * angular", "theta = -delta * angular"),
        ("turned by delta + 1", "theta = delta * angular", "theta = (delta + 1) * angular"),
        (
            "sine and cosine columns swapped",
            "torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)",
            "torch.arange(1, d_model, 2), torch.arange(0, d_model, 2)",
        ),
    ],
    ("05_positional_encoding", "my_shift"): [
        (
            "turned the other way",
            "s * cos + c * sin, c * cos - s * sin",
            "s * cos - c * sin, c * cos + s * sin",
        ),
        ("halves, not pairs, put back", "], dim=-1)", "], dim=-2)"),
        ("pairs taken as the two halves", "x[..., 0::2], x[..., 1::2]", "x.chunk(2, dim=-1)"),
    ],
    ("06_embeddings", "my_init_"): [
        ("PyTorch's N(0, 1)", "std=table.embedding_dim**-0.5", "std=1.0"),
        (
            "the variance 1/D given as the std",
            "std=table.embedding_dim**-0.5",
            "std=1 / table.embedding_dim",
        ),
        ("scaled by the vocabulary", "table.embedding_dim**-0.5", "table.num_embeddings**-0.5"),
    ],
    ("07_add_and_norm", "MyRMSNorm"): [
        (
            "the mean subtracted",
            "mean_square = x.pow(2)",
            "x = x - x.mean(-1, keepdim=True)\n        mean_square = x.pow(2)",
        ),
        (
            "divided by the norm",
            "x.pow(2).mean(-1, keepdim=True)",
            "x.pow(2).sum(-1, keepdim=True)",
        ),
        (
            "a bias added",
            "self.weight = nn.Parameter(torch.ones(d_model))",
            "self.weight = nn.Parameter(torch.ones(d_model))\n        self.bias = nn.Parameter(torch.zeros(d_model))",
        ),
    ],
    ("07_add_and_norm", "MySublayerConnection"): [
        (
            "dropout on the sum",
            "total = x + self.drop(sublayer(inner))",
            "total = self.drop(x + sublayer(inner))",
        ),
        (
            "pre-LN normalises the sum too",
            "return total if self.norm_first else self.norm(total)",
            "return self.norm(total)",
        ),
        (
            "the residual from the normalised input",
            "total = x + self.drop",
            "total = inner + self.drop",
        ),
    ],
    ("07_add_and_norm", "MyStdPlusEps"): [  # the check: the prediction holds for the module written
        (
            "eps inside the root",
            "centred / (sigma + self.eps)",
            "centred / (sigma**2 + self.eps).sqrt()",
        ),
        (
            "the unbiased std",
            "centred.pow(2).mean(-1, keepdim=True).sqrt()",
            "x.std(-1, keepdim=True)",
        ),
    ],
    ("08_feed_forward", "my_unit_outputs"): [
        ("no ReLU", "torch.relu(ffn.w_1(x))", "ffn.w_1(x)"),
        ("W_2 not transposed", "ffn.w_2.weight.T", "ffn.w_2.weight"),
        ("b_1 left out", "torch.relu(ffn.w_1(x))", "torch.relu(x @ ffn.w_1.weight.T)"),
    ],
    ("08_feed_forward", "MyFunctionalFeedForward"): [
        ("the mode forgotten", ", training=self.training", ""),
        (
            "the keep probability as the rate",
            "dropout(hidden, self.p,",
            "dropout(hidden, 1 - self.p,",
        ),
    ],
    ("08_feed_forward", "MyConvFeedForward"): [
        ("a kernel of 3", "kernel_size=1)  # weight (d_ff, D, 1)", "kernel_size=3, padding=1)"),
        ("no ReLU", "torch.relu(self.conv_1(x.transpose(1, 2)))", "self.conv_1(x.transpose(1, 2))"),
        (
            "no transpose on the way out",
            "return self.conv_2(hidden).transpose(1, 2)",
            "return self.conv_2(hidden)",
        ),
    ],
    ("09_encoder", "my_copy_from_torch"): [
        ("W_q and W_k swapped", "(attn.W_q, attn.W_k, attn.W_v)", "(attn.W_k, attn.W_q, attn.W_v)"),
        ("the blocks transposed", "linear.weight.copy_(weight)", "linear.weight.copy_(weight.T)"),
        (
            "norm2 into the first sub-layer",
            "sublayers[0].norm.load_state_dict(theirs.norm1",
            "sublayers[0].norm.load_state_dict(theirs.norm2",
        ),
    ],
    ("09_encoder", "MyPreLNEncoder"): [
        ("no final LayerNorm", "return self.norm(x)", "return x"),
        ("post-LN layers", "dropout, norm_first=True)", "dropout)"),
        ("the mask not passed on", "x = layer(x, mask)", "x = layer(x)"),
    ],
    ("10_decoder", "my_context_weights"): [
        ("queries from x, before the self-attention", "attn.W_q(state)", "attn.W_q(x)"),
        ("scaled by sqrt(d_model)", "/ attn.d_k**0.5", "/ attn.d_model**0.5"),
        (
            "the source pads not hidden",
            "scores = scores.masked_fill(~src_mask, torch.finfo(scores.dtype).min)",
            "pass",
        ),
    ],
    ("10_decoder", "my_decode_one_at_a_time"): [
        ("the prefix one short", "prefix = y[:, : t + 1]", "prefix = y[:, :t]"),
        ("the first position kept", "[:, -1])  # (B, D)", "[:, 0])  # (B, D)"),
        ("no causal mask on the prefix", "causal_mask(t + 1)", "None"),
    ],
    ("11_model", "MySharedTransformer"): [
        (
            "the look-ahead mask not passed on",
            "memory, src_mask, tgt_mask)",
            "memory, src_mask, None)",
        ),
        (
            "the encoder layer applied once",
            "for _ in range(self.n_layers):\n            memory",
            "for _ in range(1):\n            memory",
        ),
        (
            "no source mask in the encoder",
            "self.encoder_layer(memory, src_mask)",
            "self.encoder_layer(memory, None)",
        ),
    ],
    ("11_model", "my_parameter_count"): [
        ("one LayerNorm per encoder layer", "feed_forward + 2 * norm", "feed_forward + norm"),
        (
            "one attention per decoder layer",
            "decoder_layer = 2 * attention",
            "decoder_layer = attention",
        ),
        (
            "the generator's bias forgotten",
            "(encoder_layer + decoder_layer) + vocab",
            "(encoder_layer + decoder_layer)",
        ),
        ("the shared table counted three times", "return vocab * d", "return 3 * vocab * d"),
    ],
    ("11_model", "my_tie_weights"): [
        (
            "a copy of the table",
            "model.src_embed.lut.weight = shared",
            "model.src_embed.lut.weight = nn.Parameter(shared.clone())",
        ),
        ("the generator left untied", "model.generator.weight = shared", "pass"),
    ],
    ("12_training", "my_peak_lr"): [
        ("warm-up off by one", "step / warmup", "(step - 1) / warmup"),
        (
            "1/step after the warm-up, not its square root",
            "(warmup / step) ** 0.5",
            "warmup / step",
        ),
        ("max for min", "peak * min(", "peak * max("),
    ],
    ("13_copy_task", "my_copy_target"): [
        ("EOS one late", "lengths + 1] = eos_id", "lengths + 2] = eos_id"),
        (
            "EOS at the end of the row",
            "tgt[torch.arange(B), lengths + 1] = eos_id",
            "tgt[:, -1] = eos_id",
        ),
        ("no BOS", "tgt[:, 0] = bos_id", "pass"),
    ],
    ("13_copy_task", "my_average_weights"): [
        (
            "the last snapshot only",
            "torch.stack([s[name] for s in states]).mean(0)",
            "states[-1][name]",
        ),
        ("summed, not averaged", ".mean(0)", ".sum(0)"),
    ],
    ("14_decoding", "my_next_token_logits"): [
        ("the first position read", "states[:, -1]", "states[:, 0]"),
        (
            "log-probabilities, not logits",
            "return model.generator(states[:, -1])",
            "return model.generator(states[:, -1]).log_softmax(-1)",
        ),
    ],
    ("15_beam_search", "my_length_penalty"): [
        ("divided by 5", "(5 + length.float()) / 6", "(5 + length.float()) / 5"),
        ("alpha as a factor", "6) ** alpha\n", "6) * alpha\n"),
        ("the length off by one", "(5 + length.float())", "(6 + length.float())"),
    ],
    ("15_beam_search", "my_score"): [
        ("padding scored", "(token_log_p * real).sum(-1)", "token_log_p.sum(-1)"),
        ("the labels not shifted", "ys[:, 1:, None]", "ys[:, :-1, None]"),
        ("no length penalty", " / length_penalty(real.sum(-1), alpha)", ""),
    ],
    ("19_look_ahead_experiment", "my_peek_mask"): [
        ("one further ahead", "tril(diagonal=delta)", "tril(diagonal=delta + 1)"),
        (
            "the padding forgotten",
            "padding_mask(tgt_in, pad_id) & up_to_delta_ahead",
            "up_to_delta_ahead.expand(tgt_in.size(0), 1, T, T)",
        ),
        ("the upper triangle", ".tril(diagonal=delta)", ".triu(diagonal=-delta)"),
    ],
    ("16_translation", "my_tokens_per_word"): [
        (
            "the vocabulary size not passed on",
            "train_tokenizer(train, vocab_size=vocab_size)",
            "train_tokenizer(train)",
        ),
        (
            "trained on the validation split",
            "train_tokenizer(train,",
            'train_tokenizer(splits["val"],',
        ),
        (
            "the words of the German side only",
            "len(p.src.split()) + len(p.tgt.split())",
            "len(p.src.split())",
        ),
        ("words per token", "return n_tokens / n_words", "return n_words / n_tokens"),
    ],
    ("17_reading_the_model", "my_translate_without_penalty"): [
        ("alpha left at 0.6", "4, 0.0, torch", "4, 0.6, torch"),
        ("greedy, not 4 beams", "4, 0.0, torch", "1, 0.0, torch"),
        (
            "the text, not the ids",
            'return translate_ids(model, sources, 4, 0.0, torch.device("cpu"))',
            'return [decode(run_tok, ids) for ids in translate_ids(model, sources, 4, 0.0, torch.device("cpu"))]',
        ),
    ],
    ("20_norm_placement_experiment", "my_train"): [
        (
            "the chapter's FACTOR kept, so the peak is ignored",
            "factor = peak / noam_lr(WARMUP, D_MODEL, WARMUP)",
            "factor = FACTOR",
        ),
        (
            "the peak given as the factor",
            "factor = peak / noam_lr(WARMUP, D_MODEL, WARMUP)",
            "factor = peak",
        ),
        (
            "the schedule without warm-up",
            "noam_scheduler(optimizer, D_MODEL, WARMUP, factor)",
            "noam_scheduler(optimizer, D_MODEL, WARMUP, factor, hold_peak=True)",
        ),
        ("the data's seed not offset", "seed=100 + seed", "seed=seed"),
    ],
}
FAILED_WHEN = {  # a check that prints its verdict rather than raising: the verdict, read after the cell
    ("07_add_and_norm", "MyStdPlusEps"): "not held",
}


def skip(cell: str) -> str:
    return "pass"


def up_to(line: str):
    """Keep the cell up to (not including) the line that starts with `line`."""
    return lambda cell: cell[: cell.index("\n" + line) + 1]


def then(code: str):
    """Run `code` after the cell."""
    return lambda cell: cell + "\n" + code


# Chapter 16's check trains three tokenizers on Multi30k (1,000, 8,000 and 32,000 tokens) for every
# answer it grades. BPE training is deterministic (the same pairs and size give the same tokenizer, as
# the check's first assert relies on), so each (pairs, size) is trained once and every later call gets
# a fresh copy of that tokenizer: the learner's function still calls train_tokenizer, with its own
# arguments, and gets what training would give it.
TRAINED_ONCE = """
_trained, _train_tokenizer = {}, train_tokenizer


def train_tokenizer(pairs, vocab_size=8000):
    pairs = tuple(pairs)
    if (pairs, vocab_size) not in _trained:
        _trained[pairs, vocab_size] = _train_tokenizer(pairs, vocab_size).to_str()
    return Tokenizer.from_str(_trained[pairs, vocab_size])
"""

# Chapter 17's check translates its 40 test sentences three times with beam search (alpha 0.6, alpha 0
# and the learner's way). translate_ids is deterministic (the model in eval mode, no sampling), so each
# (model, sources, beam, alpha) is translated once and every later call gets a copy of the same ids:
# the learner's function still calls translate_ids with its own arguments and gets what it would give.
TRANSLATED_ONCE = """
_translated, _translate_ids = {}, translate_ids


def translate_ids(model, sources, beam, alpha, device, batch_size=64):
    key = (id(model), tuple(map(tuple, sources)), beam, alpha, str(device), batch_size)
    if key not in _translated:
        _translated[key] = _translate_ids(model, sources, beam, alpha, device, batch_size)
    return [list(ids) for ids in _translated[key]]
"""

# notebook: [(a text that one code cell holds, how that cell changes, why the check stays meaningful)]
LIGHTER = {
    "16_translation": [
        (
            "def train_tokenizer(",
            then(TRAINED_ONCE),
            "each tokenizer is trained once; the check's sizes, data and thresholds are the chapter's",
        ),
        ("ax.hist(counts, bins=bins", skip, "a figure of sentence lengths"),
        ("smalls = list(token_batches(", skip, "a look at small batches"),
        ("bucketed = list(token_batches(", skip, "padding, batched by length or not"),
        ("for row, (name, batches) in enumerate(", skip, "its picture"),
    ],
    "17_reading_the_model": [
        (
            "def translate_ids(",
            then(TRANSLATED_ONCE),
            "each translation is computed once; the check's sentences, beams and alphas are the chapter's",
        ),
        (
            'model = load_checkpoint(RUN / "model_fp16.pt"',
            up_to("greedy = ["),
            "the model, its tokenizer and the test sources the check reads, without translating "
            "the test set greedily (the check translates its 40 sentences itself)",
        ),
        *[
            (marker, skip, "figures and tables of the trained models that the check does not read")
            for marker in (
                "example = test_pairs[3]",
                "def head_selector(",
                "def head_statistics(",
                'snow = "Schneemobilen"',
            )
        ],
    ],
    # chapter 20 runs as it is: its eight training runs take seconds, and the check reads their curves
}


def lighter(notebook: str, cells: list[str]) -> list[str]:
    """The chapter's code cells with LIGHTER's changes; each text names exactly one cell."""
    cells = list(cells)
    for marker, change, _ in LIGHTER.get(notebook, []):
        hits = [i for i, cell in enumerate(cells) if marker in cell]
        assert len(hits) == 1, f"{notebook}: {len(hits)} cells hold {marker!r}"
        cells[hits[0]] = change(cells[hits[0]])
    return cells


def code_cells(path: Path) -> list[str]:
    """The code cells' sources as plain Python (IPython's `%` magics left out, each as a `pass`)."""
    cells = json.loads(path.read_text())["cells"]
    sources = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
    python = [TransformerManager().transform_cell(s) for s in sources]
    return [re.sub(r"get_ipython\(\)\.run_line_magic\(.*\)", "pass", s) for s in python]


def name_of(solution_cell: str) -> str:
    return re.search(r"^(?:def|class) (\w+)", solution_cell, re.M).group(1)


@functools.cache
def chapter(notebook: str) -> dict[str, tuple[dict, str, str]]:
    """Run the chapter's cells in order up to its last graded exercise; for each exercise, the
    namespace just after its solution cell, the solution's source, and its check cell."""
    matplotlib.use("Agg")
    wanted = {name for nb, name in MISTAKES if nb == notebook}
    cells = lighter(notebook, code_cells(NOTEBOOKS / f"{notebook}.ipynb"))
    namespace: dict = {"__name__": "__main__"}
    found = {}
    torch.manual_seed(0)
    for i, cell in enumerate(cells):
        exec(compile(cell, f"<{notebook} cell {i}>", "exec"), namespace)
        if cell.startswith(SOLUTION) and name_of(cell) in wanted:
            source = "\n".join(
                ln for ln in cell.splitlines() if ln not in (SOLUTION, "@check.solution")
            )
            found[name_of(cell)] = (dict(namespace), source + "\n", cells[i + 1])
            if found.keys() == wanted:
                return found
    raise AssertionError(f"{notebook}: no solution cell for {sorted(wanted - found.keys())}")


def check_fails(notebook: str, name: str, source: str) -> str | None:
    """Run the check cell on `source` in a copy of the chapter's namespace: why it failed, or None."""
    before, _, check_cell = chapter(notebook)[name]
    namespace = dict(before)
    exec(compile(source, "<answer>", "exec"), namespace)
    torch.manual_seed(0)
    tree = ast.parse(check_cell)
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    try:
        exec(compile(tree, "<check>", "exec"), namespace)
        value = (
            eval(compile(ast.Expression(last.value), "<check>", "eval"), namespace)
            if last
            else None
        )
    except Exception as err:  # an assert, or the answer breaking the check's computation
        return f"{type(err).__name__}: {err}"
    verdict = FAILED_WHEN.get((notebook, name))
    if verdict:  # its report fails a property by design; the verdict is the check
        return verdict if eval(verdict, namespace) else None
    made = [v for k, v in namespace.items() if isinstance(v, Report) and before.get(k) is not v]
    falsy = [r for r in [*made, value] if isinstance(r, Report) and not r]
    if falsy:
        return f"the report fails {falsy[0].failed}"
    return None


CASES = [(nb, name, *m) for (nb, name), ms in MISTAKES.items() for m in ms]


@pytest.fixture(autouse=True)
def multi30k(request):
    """Chapters 16 and 17 read Multi30k: the folder conftest finds (skipped where there is none).
    Chapter 17 translates with a trained model, on one thread (as chapter 20 trains)."""
    callspec = getattr(request.node, "callspec", None)  # None: a test of no one notebook
    if callspec and callspec.params["notebook"].startswith(("16_", "17_")):
        os.environ.setdefault(MULTI30K_ENV, str(request.getfixturevalue("data_dir")))
    if callspec and callspec.params["notebook"].startswith("17_"):
        request.getfixturevalue("one_thread")


def test_each_exercise_here_has_at_least_two_mistakes():
    assert all(len(ms) >= 2 for ms in MISTAKES.values())


@pytest.mark.slow
@pytest.mark.parametrize("notebook, name", list(MISTAKES), ids=[n for _, n in MISTAKES])
def test_the_solution_itself_passes(notebook, name):
    _, source, _ = chapter(notebook)[name]
    assert check_fails(notebook, name, source) is None


@pytest.mark.slow
@pytest.mark.parametrize(
    "notebook, name, mistake, old, new", CASES, ids=[f"{c[1]}-{c[2]}" for c in CASES]
)
def test_a_wrong_answer_fails_the_check(notebook, name, mistake, old, new):
    _, source, _ = chapter(notebook)[name]
    assert source.count(old) == 1, f"{name}: the edit '{mistake}' no longer matches the solution"
    assert check_fails(notebook, name, source.replace(old, new)), f"{name} with {mistake} passes"


def test_every_exercise_is_fed_wrong_answers_here_or_with_the_graders():
    from test_exercise_hard_mistakes import MISTAKES as HARD
    from test_exercise_mistakes import MISTAKES as GRADED

    exercises = set()
    for path in sorted(NOTEBOOKS.glob("*.ipynb")):
        exercises |= {(path.stem, name_of(c)) for c in code_cells(path) if c.startswith(SOLUTION)}
    covered = set(MISTAKES) | set(GRADED) | set(HARD)
    assert not covered - exercises, f"no such exercise: {sorted(covered - exercises)}"
    assert not exercises - covered, f"no wrong answers for {sorted(exercises - covered)}"
