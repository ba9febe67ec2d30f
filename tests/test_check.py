"""annotated.check: correct implementations (this package's pieces, thin wrappers around PyTorch's
modules) pass every check; the report, the checker itself and the command line. The gallery of wrong
implementations, each failing exactly the properties it names, is tests/test_check_gallery.py."""

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from test_check_gallery import (
    PerHeadMultiHead,
    SeedLayerNorm,
    TorchDecoderLayer,
    TorchEncoderLayer,
    greedy,
    unscaled,
)
from torch import nn

import annotated
from annotated import (
    DecoderLayer,
    Embeddings,
    EncoderLayer,
    LabelSmoothingLoss,
    LayerNorm,
    MultiHeadAttention,
    PositionwiseFeedForward,
    causal_mask,
    check,
    greedy_decode,
    make_model,
    noam_lr,
    padding_mask,
    sinusoidal_encoding,
)
from annotated.app import main
from annotated.check import framework as grading

from torch_reference import torch_attn_mask

ROOT = Path(__file__).resolve().parents[1]
SMALL = dict(d_model=32, n_layers=2, d_ff=64, n_heads=4)

# ---- Correct implementations pass every check ----------------------------------------------------


class TorchMultiHead(nn.Module):
    """nn.MultiheadAttention behind our call: its bool masks mean True = hide, one per head."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.mha = nn.MultiheadAttention(d_model, n_heads, batch_first=True)

    def forward(self, query, key, value, mask=None):
        if mask is not None:
            mask = torch_attn_mask(mask, query, key, self.mha.num_heads)
        return self.mha(query, key, value, attn_mask=mask, need_weights=False)[0]


class TorchTransformer(nn.Module):
    """nn.Transformer with the paper's embeddings: sqrt(d_model) * E + PE, and an output layer."""

    def __init__(self, src_vocab, tgt_vocab, d_model=32):
        super().__init__()
        self.d_model = d_model
        self.src_embed, self.tgt_embed = (
            nn.Embedding(src_vocab, d_model),
            nn.Embedding(tgt_vocab, d_model),
        )
        self.register_buffer("pe", sinusoidal_encoding(64, d_model))
        self.transformer = nn.Transformer(d_model, 4, 2, 2, 64, batch_first=True)
        self.generator = nn.Linear(d_model, tgt_vocab)

    def embed(self, table, tokens):
        return table(tokens) * math.sqrt(self.d_model) + self.pe[: tokens.size(1)]

    def forward(self, src, tgt, src_mask, tgt_mask):
        pad = ~src_mask[:, 0, 0]
        out = self.transformer(
            self.embed(self.src_embed, src),
            self.embed(self.tgt_embed, tgt),
            tgt_mask=~tgt_mask[0, 0],
            src_key_padding_mask=pad,
            memory_key_padding_mask=pad,
        )
        return self.generator(out)


class TorchEmbeddings(nn.Module):
    """A bare nn.Embedding table, scaled in forward."""

    def __init__(self, vocab, d_model):
        super().__init__()
        self.table, self.scale = nn.Embedding(vocab, d_model), math.sqrt(d_model)

    def forward(self, tokens):
        return self.table(tokens) * self.scale


def ExplicitSmoothing(vocab_size, pad_id, smoothing):  # noqa: N802  (a factory named like a class)
    """The smoothed target q built in full, then -sum q log p: the definition of chapter 12."""
    reference = LabelSmoothingLoss(vocab_size, pad_id, smoothing)

    def loss(logits, target):
        q = reference.target_distribution(target, logits.dtype).view(*target.shape, vocab_size)
        return -(q * logits.log_softmax(-1)).sum()

    return loss


def greedy_without_cache(model, src, src_mask, max_len, bos_id, eos_id, pad_id):
    return greedy_decode(model, src, src_mask, max_len, bos_id, eos_id, pad_id, use_cache=False)


CORRECT = [
    ("attention", (annotated.attention,)),
    ("attention", (F.scaled_dot_product_attention,)),
    ("masks", (padding_mask, causal_mask)),
    ("multi_head", (MultiHeadAttention,)),
    ("multi_head", (TorchMultiHead,)),
    ("layer_norm", (LayerNorm,)),
    ("layer_norm", (nn.LayerNorm,)),
    ("positional_encoding", (sinusoidal_encoding,)),
    ("feed_forward", (PositionwiseFeedForward,)),
    (
        "feed_forward",
        (lambda d, f: nn.Sequential(nn.Linear(d, f), nn.ReLU(), nn.Dropout(0.1), nn.Linear(f, d)),),
    ),
    ("encoder_layer", (EncoderLayer,)),
    ("encoder_layer", (TorchEncoderLayer,)),
    ("decoder_layer", (DecoderLayer,)),
    ("decoder_layer", (TorchDecoderLayer,)),
    ("model", (lambda s, t: make_model(s, t, **SMALL),)),
    ("model", (TorchTransformer,)),
    ("embeddings", (Embeddings,)),
    ("embeddings", (TorchEmbeddings,)),
    ("label_smoothing", (LabelSmoothingLoss,)),
    ("label_smoothing", (ExplicitSmoothing,)),
    ("learning_rate", (noam_lr,)),
    ("greedy_decode", (greedy_decode,)),
    ("greedy_decode", (greedy_without_cache,)),
    ("greedy_decode", (greedy,)),
]


@pytest.mark.parametrize(
    "piece, implementation",
    CORRECT,
    ids=[f"{p}-{getattr(i[0], '__name__', 'sequential')}" for p, i in CORRECT],
)
def test_correct_implementations_pass_every_check(piece, implementation):
    report = getattr(check, piece)(*implementation)
    assert report, str(report)
    assert all(r.passed for r in report.results if r.applies)
    # nn.MultiheadAttention keeps W_q, W_k, W_v in one fused tensor: no four nn.Linear to compare with
    expected = ["matches_reference"] if implementation[0] is TorchMultiHead else []
    assert report.not_applicable == expected, str(report)


@pytest.mark.slow
def test_the_paper_sized_model_passes():
    assert check.model(make_model)  # d_model 512, six layers each side: still a few seconds


# ---- The checker itself --------------------------------------------------------------------------


def test_a_report_is_a_table_of_named_results():
    report = check.attention(unscaled)
    assert all(
        isinstance(name, str) and isinstance(passed, bool) and message and applies
        for name, passed, message, applies in report.results
    )
    text, page = str(report), report._repr_html_()
    assert text.splitlines()[0].startswith("check.attention:") and "FAIL" in text
    assert all(r.name in text and f"<code>{r.name}</code>" in page for r in report.results)
    assert page.startswith("<div") and "<table>" in page and "scaled_by_sqrt_dk" in report.failed


def test_an_implementation_that_raises_is_reported_not_raised():
    def broken(q, k, v, mask=None):
        raise RuntimeError("not written yet")

    report = check.attention(broken)
    assert not report and all("not written yet" in r.message for r in report.results)
    failing_factory = check.multi_head(lambda d, h: 1 / 0)
    assert [r.name for r in failing_factory.results] == ["builds"]
    assert "ZeroDivisionError" in failing_factory.results[0].message
    not_a_module = check.layer_norm(lambda d: lambda x: x)
    assert not not_a_module and "expected an nn.Module" in not_a_module.results[0].message


def test_a_property_that_does_not_apply_is_neither_a_pass_nor_a_failure():
    def holds(fn):
        return "held"

    def does_not_apply(fn):
        raise grading.NotApplicable("no such layout here")

    def fails(fn):
        raise grading.Failure("wrong")

    properties = {"holds": holds, "layout": does_not_apply}
    report = grading.run_properties("demo", lambda: None, properties)
    assert report and report.failed == [] and report.not_applicable == ["layout"], str(report)
    assert report.results[1] == ("layout", False, "no such layout here", False)
    text, page = str(report), report._repr_html_()
    assert text.splitlines() == [
        "check.demo: 1 of 1 properties hold, 1 not applicable",
        "  pass  holds   held",
        "  n/a   layout  no such layout here",
    ]
    assert "<td>– not applicable</td>" in page and page.count("✓ pass") == 1
    beside_a_failure = grading.run_properties("demo", lambda: None, {**properties, "fails": fails})
    assert not beside_a_failure and beside_a_failure.failed == ["fails"]


class FusedMultiHead(nn.Module):
    """Correct multi-head attention that keeps W_q, W_k, W_v in one fused nn.Linear(D, 3D)."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.W_qkv = nn.Linear(d_model, 3 * d_model)  # W_q, W_k, W_v stacked
        self.W_o = nn.Linear(d_model, d_model)

    blocks = (0, 1, 2)  # which block of W_qkv's weight projects the queries, the keys, the values

    def forward(self, query, key, value, mask=None):
        weights, biases = self.W_qkv.weight.chunk(3), self.W_qkv.bias.chunk(3)
        q, k, v = (
            F.linear(x, weights[i], biases[i])
            .unflatten(-1, (self.h, -1))
            .transpose(1, 2)  # (B, H, len, Dk)
            for x, i in zip((query, key, value), self.blocks, strict=True)
        )
        out, _ = annotated.attention(q, k, v, mask)  # (B, H, T, Dk)
        return self.W_o(out.transpose(1, 2).flatten(2))  # (B, T, D)


class KeysFromQueries(FusedMultiHead):
    """A planted bug: the keys are projected with the queries' block of W_qkv."""

    blocks = (0, 0, 2)


class QueriesFromSecondBlock(FusedMultiHead):
    """W_qkv's blocks in another order than nn.MultiheadAttention's in_proj_weight (W_q, W_k, W_v)."""

    blocks = (1, 0, 2)


def test_a_fused_projection_is_cut_into_queries_keys_values():
    report = check.multi_head(FusedMultiHead)
    assert report and report.not_applicable == [], str(report)
    for planted in (KeysFromQueries, QueriesFromSecondBlock):
        report = check.multi_head(planted)
        assert report.failed == ["matches_reference"], str(report)


def test_per_head_projections_are_read_by_what_each_one_reads():
    report = check.multi_head(PerHeadMultiHead)
    assert report and report.not_applicable == [], str(report)


def test_a_parameter_whose_true_gradient_is_zero_still_counts_as_used():
    """The key bias b_K adds q . b_K to every score of a query, and softmax ignores such a shift: its
    gradient is 0 in exact arithmetic. Over a single key the softmax is exactly 1 and the zero exact."""

    class OneKey(nn.Module):
        def __init__(self):
            super().__init__()
            self.W_q, self.W_k, self.W_v = (nn.Linear(4, 4) for _ in range(3))

        def forward(self, x):  # x (B, T, 4): each position attends to itself alone
            scores = (self.W_q(x) * self.W_k(x)).sum(-1, keepdim=True)  # (B, T, 1)
            return scores.softmax(-1) * self.W_v(x)  # (B, T, 4)

    m, x = OneKey(), torch.randn(2, 3, 4)
    grads = torch.autograd.grad((m(x) * torch.randn(2, 3, 4)).sum(), list(m.W_k.parameters()))
    assert all(bool((g == 0).all()) for g in grads)  # used, yet exactly no gradient
    assert "all 6 parameter tensors" in grading.every_parameter_learns(m, lambda: m(x))


class ConvFeedForward(nn.Module):
    """Eq. 2 as two 1x1 convolutions (appendix 08's exercise): no nn.Linear to build Eq. 2 from."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.conv_1, self.conv_2 = nn.Conv1d(d_model, d_ff, 1), nn.Conv1d(d_ff, d_model, 1)

    def forward(self, x):  # x (B, T, D); nn.Conv1d wants (B, D, T)
        return self.conv_2(torch.relu(self.conv_1(x.transpose(1, 2)))).transpose(1, 2)


class TablesAsParameters(TorchTransformer):
    """TorchTransformer with its embedding tables kept as bare parameters, not nn.Embedding."""

    def __init__(self, src_vocab, tgt_vocab):
        super().__init__(src_vocab, tgt_vocab)
        self.src_embed = nn.Parameter(self.src_embed.weight.detach().clone())
        self.tgt_embed = nn.Parameter(self.tgt_embed.weight.detach().clone())

    def embed(self, table, tokens):
        return F.embedding(tokens, table) * math.sqrt(self.d_model) + self.pe[: tokens.size(1)]


@pytest.mark.parametrize(
    "piece, implementation, inapplicable",
    [
        ("multi_head", TorchMultiHead, "matches_reference"),
        ("feed_forward", ConvFeedForward, "matches_reference"),
        ("model", TablesAsParameters, "embeddings_scaled_then_positions_added"),
    ],
    ids=["multi_head", "feed_forward", "model"],
)
def test_a_property_that_cannot_read_the_layout_reports_not_applicable(
    piece, implementation, inapplicable
):
    report = getattr(check, piece)(implementation)
    assert report and report.not_applicable == [inapplicable], str(report)
    row = next(r for r in report.results if r.name == inapplicable)
    assert not row.passed and "not applicable" in report._repr_html_()
    assert [line.split()[0] for line in str(report).splitlines() if inapplicable in line] == ["n/a"]


@pytest.mark.parametrize(
    "piece, argument", [("attention", "fn"), ("multi_head", "factory"), ("model", "factory")]
)
def test_a_non_callable_raises_a_type_error_naming_the_argument(piece, argument):
    with pytest.raises(TypeError, match=f"{argument} must be callable"):
        getattr(check, piece)(42)
    with pytest.raises(TypeError, match="causal_fn must be callable"):
        check.masks(padding_mask, "tril")


def test_checking_leaves_the_global_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check.multi_head(MultiHeadAttention)
    assert torch.rand(3).equal(expected)


def test_a_report_is_reproducible():
    first, second = check.layer_norm(SeedLayerNorm), check.layer_norm(SeedLayerNorm)
    assert first.results == second.results


# ---- The command line ----------------------------------------------------------------------------

GOOD = """
import torch.nn.functional as F

def my_attention(query, key, value, mask=None):
    return F.scaled_dot_product_attention(query, key, value, mask)
"""
BUGGY = """
def my_attention(query, key, value, mask=None):
    scores = query @ key.transpose(-2, -1)  # no 1/sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, -1e9)
    return scores.softmax(-1) @ value
"""
MASKS = """
import torch

def padding(tokens, pad_id):
    return (tokens != pad_id)[:, None, None, :]

def causal(size):
    return torch.ones(size, size, dtype=torch.bool).tril()[None, None]
"""


@pytest.fixture
def solutions(tmp_path):
    for name, text in (("good.py", GOOD), ("buggy.py", BUGGY), ("masks.py", MASKS)):
        (tmp_path / name).write_text(textwrap.dedent(text))
    return tmp_path


@pytest.mark.slow
def test_cli_passes_a_correct_file(solutions, capsys):
    assert main(["check", "attention", f"{solutions / 'good.py'}:my_attention"]) == 0
    out = capsys.readouterr().out
    assert "check.attention: 11 of 11 properties hold" in out
    assert (
        main(
            [
                "check",
                "masks",
                f"{solutions / 'masks.py'}:padding",
                f"{solutions / 'masks.py'}:causal",
            ]
        )
        == 0
    )


@pytest.mark.slow
def test_cli_fails_a_buggy_file_and_names_the_property(solutions, capsys):
    assert main(["check", "attention", f"{solutions / 'buggy.py'}:my_attention"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  scaled_by_sqrt_dk" in out


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, says",
    [
        (["attention", "missing.py:f"], "error: no such file: missing.py"),
        (["attention", "{dir}/good.py:nope"], "defines no name 'nope'"),
        (["attention", "{dir}/good.py"], "expected FILE.py:NAME"),
        (["masks", "{dir}/masks.py:padding"], "check masks takes 2 FILE:NAME, got 1"),
    ],
)
def test_cli_explains_bad_targets_in_one_line(solutions, capsys, args, says):
    assert main(["check", *(a.format(dir=solutions) for a in args)]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1


def test_cli_rejects_an_unknown_piece_in_one_line(solutions, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["check", "atention", f"{solutions / 'good.py'}:my_attention"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "invalid choice: 'atention'" in err


@pytest.mark.slow
def test_python_dash_m_annotated_check_exits_non_zero_on_a_bug(solutions):
    buggy = subprocess.run(
        [
            sys.executable,
            "-m",
            "annotated",
            "check",
            "attention",
            f"{solutions / 'buggy.py'}:my_attention",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"},
    )
    assert buggy.returncode == 1, buggy.stdout + buggy.stderr
    assert "FAIL  scaled_by_sqrt_dk" in buggy.stdout


RATES = """
def noam(step, d_model, warmup):
    if step < 1:
        raise ValueError(f"updates count from 1, got step {step}")
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)

def clamped(step, d_model, warmup):
    step = max(step, 1)
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
"""


@pytest.mark.slow
def test_cli_grades_the_training_pieces(tmp_path, capsys):
    (tmp_path / "rates.py").write_text(textwrap.dedent(RATES))
    assert main(["check", "learning_rate", f"{tmp_path / 'rates.py'}:noam"]) == 0
    assert "check.learning_rate: 5 of 5 properties hold" in capsys.readouterr().out
    assert main(["check", "learning_rate", f"{tmp_path / 'rates.py'}:clamped"]) == 1
    assert "FAIL  step_zero_is_refused" in capsys.readouterr().out


def test_sys_exit_in_the_learners_code_is_a_failed_property_not_an_exit():
    """sys.exit raises SystemExit, a BaseException: the report catches it (Ctrl-C still stops a check)."""
    import sys

    def quits(q, k, v, mask=None):
        sys.exit(0)

    report = check.attention(quits)
    assert not report and "raised SystemExit: 0" in str(report), str(report)
    built = check.layer_norm(lambda d: sys.exit(3))
    assert built.failed == ["builds"] and "SystemExit: 3" in str(built), str(built)

    def interrupted(q, k, v, mask=None):
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        check.attention(interrupted)


def test_grading_a_float64_module_leaves_the_default_dtype_alone():
    assert check.layer_norm(lambda d: LayerNorm(d).double())
    assert torch.get_default_dtype() == torch.float32


def test_checking_restores_the_thread_count():
    before = torch.get_num_threads()
    torch.set_num_threads(3)
    try:
        check.feed_forward(PositionwiseFeedForward)
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(before)


def test_the_command_line_knows_every_check_and_only_checks():
    """check.command.CHECKS is written by hand; it must name exactly the checks `annotated.check` offers."""
    import inspect

    from annotated import check as checks
    from annotated.check import Report
    from annotated.check.command import CHECKED, check_named

    graders = {
        name
        for name, fn in vars(checks).items()
        if inspect.isfunction(fn)
        and fn.__module__.startswith("annotated.check")
        and inspect.signature(fn).return_annotation in (Report, "Report")
    }
    assert set(CHECKED) == graders and len(CHECKED) == len(graders)
    # the command line grades with the very function annotated.check hands out (one definition each)
    assert all(check_named(name) is getattr(checks, name) for name in CHECKED)
