"""annotated.check's gallery of wrong implementations: every property of every grader is failed by
at least one of them, and each fails exactly the properties it names, no more and no fewer.

A property that no wrong implementation fails cannot be shown to work (issue 32): turn it into a
no-op and the suite would not notice. The exact sets also keep a wrong implementation honest: one
that fails everything because it raises (a stale signature) catches nothing in particular."""

import inspect
import math
from functools import cache, partial
from typing import NamedTuple

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from annotated import (
    DecoderLayer,
    Embeddings,
    EncoderLayer,
    LabelSmoothingLoss,
    LayerNorm,
    MultiHeadAttention,
    PositionwiseFeedForward,
    Transformer,
    TransformerConfig,
    causal_mask,
    padding_mask,
    sinusoidal_encoding,
)
from annotated.check import CHECKS

from torch_reference import torch_attn_mask

SMALL = dict(d_model=32, n_layers=2, d_ff=64, n_heads=4)


class Wrong(NamedTuple):
    """A wrong implementation: the grader, its arguments, and the properties that must fail."""

    piece: str
    implementation: tuple
    caught_by: frozenset[str]
    name: str


def wrong(piece: str, implementation, *caught_by: str, name: str | None = None) -> Wrong:
    args = implementation if isinstance(implementation, tuple) else (implementation,)
    return Wrong(piece, args, frozenset(caught_by), name or args[-1].__name__)


@cache
def property_names(piece: str) -> list[str]:
    """The grader's properties, in order: any implementation that builds gets a row for each."""
    grader = CHECKS[piece]
    params = inspect.signature(grader).parameters.values()
    n_args = sum(p.default is inspect.Parameter.empty for p in params)  # the required ones
    report = grader(*[lambda *args: nn.Identity()] * n_args)  # builds; fails what it fails
    names = [r.name for r in report.results]
    assert names != ["builds"], f"check.{piece} did not build a stand-in: {report}"
    return names


def assert_caught(w: Wrong) -> None:
    report = CHECKS[w.piece](*w.implementation)
    assert [r.name for r in report.results] == property_names(w.piece), str(report)
    assert set(report.failed) == w.caught_by, str(report)


def name_of(w: Wrong) -> str:
    return w.name


# ---- Wrong attention functions ------------------------------------------------------------------


def scores_of(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))


def softmax_keys(s, mask=None, dim=-1):
    """The softmax, with chapter 02's rule: a query that sees no key gets zero weights."""
    weights = nn.Softmax()(s) if dim is None else s.softmax(dim)
    return weights if mask is None else weights * mask.any(-1, keepdim=True)


def fill_minus_1e_12(q, k, v, mask=None):  # the seed notes: a "very small" fill of -1e-12
    s = scores_of(q, k)
    if mask is not None:
        s = s.masked_fill(mask == 0, -1e-12)
    return softmax_keys(s, mask) @ v


def fill_discarded(q, k, v, mask=None):  # the seed notes: masked_fill's result is thrown away
    s = scores_of(q, k)
    if mask is not None:
        s.masked_fill(mask == 0, -1e9)
    return softmax_keys(s, mask) @ v


def unscaled(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1)
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    return softmax_keys(s, mask) @ v


def softmax_over_queries(q, k, v, mask=None):
    s = scores_of(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    return softmax_keys(s, mask, -2) @ v


def polarity_reversed(q, k, v, mask=None):  # True taken as "hide"
    s = scores_of(q, k)
    if mask is not None:
        s = s.masked_fill(mask, -1e9)
    return softmax_keys(s, mask) @ v


def fill_minus_inf(q, k, v, mask=None):  # a query with no visible key gets 0/0 = NaN
    s = scores_of(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return s.softmax(-1) @ v


def bias_minus_inf_zeroed(q, k, v, mask=None):
    """The mask as an additive -inf bias, the NaN row zeroed after the softmax: a clean output, NaN
    gradients to the queries and keys."""
    s = scores_of(q, k)
    if mask is not None:
        s = s + torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    weights = s.softmax(-1)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)
    return weights @ v


def key_view_not_transpose(q, k, v, mask=None):  # the seed notes: K^T by view
    B, H, S, Dk = k.shape
    s = q @ k.view(B, H, Dk, S) / math.sqrt(Dk)
    if mask is not None:
        s = s.masked_fill(mask == 0, -1e9)
    return softmax_keys(s, mask) @ v, s


def softmax_without_dim(q, k, v, mask=None):  # the seed notes: nn.Softmax() guesses dim=1 in 4-D
    s = scores_of(q, k)
    if mask is not None:
        s = s.masked_fill(mask == 0, -1e9)
    return softmax_keys(s, mask, None) @ v


def dropout_always_on(q, k, v, mask=None):
    s = scores_of(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    return F.dropout(softmax_keys(s, mask), 0.1) @ v


def weights_averaged_over_heads(q, k, v, mask=None):  # nn.MultiheadAttention's default weights
    s = scores_of(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    weights = softmax_keys(s, mask)  # (B, H, T, S)
    return weights @ v, weights.mean(1)  # weights (B, T, S): the head axis averaged away


def weights_detached(q, k, v, mask=None):  # kept for a plot, then used: no gradient to q and k
    s = scores_of(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    return softmax_keys(s, mask).detach() @ v


def uniform_rows(q, k, v, mask=None):
    """The lowest float as the fill, and nothing more: a fully hidden row averages the values."""
    s = scores_of(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, torch.finfo(s.dtype).min)
    weights = s.softmax(-1)
    return weights @ v, weights


# the masked reference compares the masked output, so every masking bug also fails it
MASKED = "matches_reference_masked"
WRONG_ATTENTION = [
    wrong("attention", fill_minus_1e_12, MASKED, "masked_keys_get_no_weight"),
    wrong("attention", fill_discarded, MASKED, "masked_keys_get_no_weight"),
    wrong("attention", unscaled, "matches_reference", MASKED, "scaled_by_sqrt_dk"),
    wrong(
        "attention",
        softmax_over_queries,
        "matches_reference",
        MASKED,
        "scaled_by_sqrt_dk",
        "rows_sum_to_one",
    ),
    wrong("attention", polarity_reversed, MASKED, "masked_keys_get_no_weight"),
    wrong("attention", fill_minus_inf, "fully_masked_row_is_zero"),
    wrong("attention", uniform_rows, "fully_masked_row_is_zero"),
    wrong("attention", bias_minus_inf_zeroed, "fully_masked_row_is_zero"),
    wrong("attention", key_view_not_transpose, "matches_reference", MASKED, "key_order_invariance"),
    wrong(
        "attention",
        softmax_without_dim,
        "matches_reference",
        MASKED,
        "scaled_by_sqrt_dk",
        "rows_sum_to_one",
        "masked_keys_get_no_weight",
    ),
    wrong(
        "attention",
        dropout_always_on,
        "matches_reference",
        MASKED,
        "scaled_by_sqrt_dk",
        "rows_sum_to_one",
        "batch_independence",
        "key_order_invariance",
        "deterministic",
    ),
    wrong("attention", weights_averaged_over_heads, "output_shape"),
    wrong("attention", weights_detached, "gradients_reach_inputs"),
]


@pytest.mark.parametrize("w", WRONG_ATTENTION, ids=name_of)
def test_wrong_attention_is_caught(w):
    assert_caught(w)


# ---- Wrong masks ---------------------------------------------------------------------------------


def padding_reversed(tokens, pad_id):
    return (tokens == pad_id)[:, None, None, :]


def padding_pad_is_zero(tokens, pad_id):  # the seed notes: seq_k.eq(0), whatever the pad id
    return (tokens != 0)[:, None, None, :]


def padding_float(tokens, pad_id):
    return (tokens != pad_id)[:, None, None, :].float()


def padding_unbroadcastable(tokens, pad_id):
    return tokens != pad_id  # (B, S): lines up with (T, S), not with (B, ..., S)


def causal_triu(size):  # the seed notes: triu(diagonal=1), the future marked True
    return torch.ones(size, size).triu(1).bool()[None, None]


def causal_hides_itself(size):
    return torch.ones(size, size, dtype=torch.bool).tril(-1)[None, None]


def causal_float(size):  # right values, but a float mask adds to the scores instead of hiding
    return torch.ones(size, size).tril()[None, None]


# a wrong padding mask fails with pad 1 as with pad 0; a causal mask's dtype fails its values too
BOTH_PADS = ("padding_hides_pads", "padding_uses_pad_id")
WRONG_MASKS = [
    wrong("masks", (padding_reversed, causal_mask), *BOTH_PADS, name="padding_reversed"),
    wrong("masks", (padding_pad_is_zero, causal_mask), "padding_uses_pad_id", name="pad_is_zero"),
    wrong(
        "masks",
        (padding_float, causal_mask),
        "padding_shape_and_dtype",
        *BOTH_PADS,
        name="padding_float",
    ),
    wrong(
        "masks",
        (padding_unbroadcastable, causal_mask),
        "padding_shape_and_dtype",
        *BOTH_PADS,
        name="padding_unbroadcastable",
    ),
    wrong("masks", (padding_mask, causal_triu), "causal_hides_future"),
    wrong("masks", (padding_mask, causal_hides_itself), "causal_hides_future"),
    wrong("masks", (padding_mask, causal_float), "causal_shape_and_dtype", "causal_hides_future"),
]


@pytest.mark.parametrize("w", WRONG_MASKS, ids=name_of)
def test_wrong_masks_are_caught(w):
    assert_caught(w)


# ---- Wrong multi-head attention ------------------------------------------------------------------


class SplitWithView(MultiHeadAttention):
    def split_heads(self, x):
        B, T, _ = x.shape
        return x.view(B, self.n_heads, T, self.d_k)  # no transpose: heads cut across positions


class MergeWithoutTranspose(MultiHeadAttention):
    def merge_heads(self, x):
        B, _, T, _ = x.shape
        return x.reshape(B, T, self.d_model)  # (B, H, T, Dk) read as (B, T, D)


class OwnForward(MultiHeadAttention):
    """Multi-head attention with the steps written out, so that one of them can go wrong."""

    value_projection = "W_v"
    scale_width = "d_k"
    fill = -1e9
    zero_hidden_rows = True  # the rule of chapter 02: a query that sees no key gets zero weights
    dropout_p = 0.0

    def forward(self, query, key, value, mask=None):
        W_v = getattr(self, self.value_projection)
        q, k, v = (
            self.split_heads(W(x)) for W, x in ((self.W_q, query), (self.W_k, key), (W_v, value))
        )  # (B, H, len, Dk)
        s = q @ k.transpose(-2, -1) / math.sqrt(getattr(self, self.scale_width))  # (B, H, T, S)
        if mask is not None:
            s = s.masked_fill(~mask, self.fill)
        weights = s.softmax(-1)  # (B, H, T, S)
        if mask is not None and self.zero_hidden_rows:
            weights = weights.masked_fill(~mask, 0.0)
        weights = F.dropout(weights, self.dropout_p)  # F.dropout: training=True by default
        return self.W_o(self.merge_heads(weights @ v))  # (B, T, D)


class ScaledByDModel(OwnForward):
    scale_width = "d_model"  # sqrt(d_model), not sqrt(d_k)


class MultiHeadMinusInf(OwnForward):
    fill = float("-inf")
    zero_hidden_rows = False  # 0/0: NaN


class MultiHeadBiasMinusInf(OwnForward):
    """The attention of bias_minus_inf_zeroed inside the layer: every parameter's gradient NaN."""

    def forward(self, query, key, value, mask=None):
        q, k, v = (
            self.split_heads(W(x))
            for W, x in ((self.W_q, query), (self.W_k, key), (self.W_v, value))
        )
        return self.W_o(self.merge_heads(bias_minus_inf_zeroed(q, k, v, mask)))  # (B, T, D)


class MultiHeadUniformRows(OwnForward):
    zero_hidden_rows = False  # a query that sees no key averages the values


class ValuesProjectedByWK(OwnForward):
    value_projection = "W_k"  # a copy-paste slip: W_v is built and never used


class MultiHeadDropoutAlwaysOn(OwnForward):
    dropout_p = 0.1


class ValuesFromKeyInput(OwnForward):
    """W_v applied to the key argument: right whenever key is value, as in every self-attention."""

    def forward(self, query, key, value, mask=None):
        return super().forward(query, key, key, mask)


class PerHeadMultiHead(nn.Module):
    """Correct multi-head attention with each head's own nn.Linear(D, Dk) projections, as §3.2.2 writes them."""

    scale_width = "d_k"

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.d_model, self.d_k = d_model, d_model // n_heads
        self.heads = nn.ModuleList(
            nn.ModuleList(nn.Linear(d_model, self.d_k) for _ in range(3)) for _ in range(n_heads)
        )
        self.W_o = nn.Linear(d_model, d_model)

    def forward(self, query, key, value, mask=None):
        mask = None if mask is None else mask[:, 0]  # (B, T, S): one head at a time
        scale = math.sqrt(getattr(self, self.scale_width))
        heads = []
        for W_q, W_k, W_v in self.heads:
            s = W_q(query) @ W_k(key).transpose(-2, -1) / scale  # (B, T, S)
            if mask is not None:
                s = s.masked_fill(~mask, -1e9)
            weights = softmax_keys(s, mask)
            heads.append(weights @ W_v(value))  # (B, T, Dk)
        return self.W_o(torch.cat(heads, dim=-1))  # (B, T, D)


class PerHeadScaledByDModel(PerHeadMultiHead):
    scale_width = "d_model"  # sqrt(d_model), not sqrt(d_k)


class SeedMultiHead(nn.Module):
    """The seed notes' layer: q.view(batch * h, -1, d_k), the mask repeated h times."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.d_k = n_heads, d_model // n_heads
        self.linear_q, self.linear_k, self.linear_v, self.linear_final = (
            nn.Linear(d_model, d_model) for _ in range(4)
        )

    def forward(self, query, key, value, mask=None):
        B = query.size(0)
        q = self.linear_q(query).view(B * self.h, -1, self.d_k)
        k = self.linear_k(key).view(B * self.h, -1, self.d_k)
        v = self.linear_v(value).view(B * self.h, -1, self.d_k)
        s = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            mask = mask.expand(B, 1, q.size(1), k.size(1))[:, 0].repeat(self.h, 1, 1)
            s = s.masked_fill(mask == 0, -1e9)
        context = s.softmax(-1) @ v
        return self.linear_final(context.contiguous().view(B, -1, self.d_k * self.h))


class TorchTuple(nn.Module):
    """nn.MultiheadAttention's result passed on as it comes: an (output, weights) tuple."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.mha = nn.MultiheadAttention(d_model, n_heads, batch_first=True)

    def forward(self, query, key, value, mask=None):
        if mask is not None:
            mask = torch_attn_mask(mask, query, key, self.mha.num_heads)
        return self.mha(query, key, value, attn_mask=mask)


class FusedWithoutOutputProjection(nn.Module):
    """One W_qkv sliced with F.linear, as chapter 04's exercise does, and no W^O after the heads."""

    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.W_qkv, self.d_model, self.n_heads = nn.Linear(d_model, 3 * d_model), d_model, n_heads

    def forward(self, query, key, value, mask=None):
        W, b, d = self.W_qkv.weight, self.W_qkv.bias, self.d_model
        q, k, v = (
            F.linear(x, W[i * d : (i + 1) * d], b[i * d : (i + 1) * d])
            for i, x in enumerate((query, key, value))
        )
        heads = [x.view(x.size(0), x.size(1), self.n_heads, -1).transpose(1, 2) for x in (q, k, v)]
        scores = (
            heads[0] @ heads[1].transpose(-2, -1) / math.sqrt(d // self.n_heads)
        )  # (B, H, T, S)
        if mask is not None:
            scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
        weights = scores.softmax(-1)
        if mask is not None:
            weights = weights.masked_fill(~mask, 0.0)
        out = weights @ heads[2]  # (B, H, T, Dv)
        return out.transpose(1, 2).reshape(query.size(0), query.size(1), d)  # no W^O


MIXES_POSITIONS = ("matches_reference", "permutation_equivariance", "key_order_invariance")
WRONG_MULTI_HEAD = [
    wrong("multi_head", SplitWithView, *MIXES_POSITIONS, "causality", "padding_invariance"),
    wrong(  # it also averages the values for a query that sees no key
        "multi_head",
        SeedMultiHead,
        *MIXES_POSITIONS,
        "padding_invariance",
        "fully_masked_row_reads_nothing",
        "batch_independence",
    ),
    wrong(
        "multi_head",
        MergeWithoutTranspose,
        "matches_reference",
        "permutation_equivariance",
        "causality",
        "fully_masked_row_reads_nothing",  # the zeros of one query spread over several positions
    ),
    wrong("multi_head", ScaledByDModel, "matches_reference"),
    wrong("multi_head", FusedWithoutOutputProjection, "parameter_count"),
    wrong("multi_head", PerHeadScaledByDModel, "matches_reference"),
    wrong("multi_head", ValuesFromKeyInput, "matches_reference"),
    wrong("multi_head", MultiHeadMinusInf, "fully_masked_row_reads_nothing"),
    wrong("multi_head", MultiHeadUniformRows, "fully_masked_row_reads_nothing"),
    wrong("multi_head", MultiHeadBiasMinusInf, "fully_masked_row_reads_nothing"),
    wrong(
        "multi_head", ValuesProjectedByWK, "matches_reference", "gradients_reach_every_parameter"
    ),
    wrong(
        "multi_head",
        MultiHeadDropoutAlwaysOn,
        *MIXES_POSITIONS,
        "causality",
        "padding_invariance",
        "batch_independence",
        "deterministic_in_eval",
    ),
    wrong(  # not a tensor: every property that reads the output fails; the reference does not apply
        "multi_head",
        TorchTuple,
        "output_shape",
        *MIXES_POSITIONS[1:],
        "causality",
        "padding_invariance",
        "fully_masked_row_reads_nothing",
        "batch_independence",
        "deterministic_in_eval",
        "gradients_reach_every_parameter",
    ),
]


@pytest.mark.parametrize("w", WRONG_MULTI_HEAD, ids=name_of)
def test_wrong_multi_head_is_caught(w):
    assert_caught(w)


# ---- Wrong LayerNorm, positional encoding, feed-forward ------------------------------------------


class SeedLayerNorm(nn.Module):
    """The seed notes' LayerNorm: unbiased std, eps added outside the root."""

    def __init__(self, d_model, eps=1e-12):
        super().__init__()
        self.gamma, self.beta, self.eps = (
            nn.Parameter(torch.ones(d_model)),
            nn.Parameter(torch.zeros(d_model)),
            eps,
        )

    def forward(self, x):
        return (
            self.gamma * (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + self.eps)
            + self.beta
        )


class StdPlusEps(SeedLayerNorm):
    """Biased std, but eps still outside the root: right for ordinary inputs, wrong for quiet ones."""

    def __init__(self, d_model):
        super().__init__(d_model, eps=1e-5)

    def forward(self, x):
        std = x.std(-1, correction=0, keepdim=True)
        return self.gamma * (x - x.mean(-1, keepdim=True)) / (std + self.eps) + self.beta


class StdPlusTinyEps(StdPlusEps):
    """Biased std + eps with the seed notes' eps = 1e-12: wrong only where sigma is near 1e-6."""

    def __init__(self, d_model):
        SeedLayerNorm.__init__(self, d_model, eps=1e-12)


class NormOverAxis(LayerNorm):
    """Statistics over another axis than the features."""

    axis = 1  # positions

    def forward(self, x):
        mean, var = x.mean(self.axis, keepdim=True), x.var(self.axis, correction=0, keepdim=True)
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


class NormOverPositions(NormOverAxis):
    axis = 1


class NormOverBatch(NormOverAxis):
    axis = 0  # the batch: BatchNorm's statistics where LayerNorm's belong


class CentredOnly(LayerNorm):
    """The mean subtracted, the variance never divided out."""

    def forward(self, x):
        return (x - x.mean(-1, keepdim=True)) * self.weight + self.bias


class FlatLayerNorm(LayerNorm):
    def forward(self, x):
        return super().forward(
            x.reshape(-1, self.weight.numel())
        )  # (B * T, D), never reshaped back


class LayerNormWithDropout(LayerNorm):
    def forward(self, x):
        return F.dropout(super().forward(x), 0.1)  # F.dropout: training=True whatever the mode


class GainZeroBiasOne(LayerNorm):
    """gain and bias started the wrong way round: the fresh module returns 1 for every input."""

    def __init__(self, d_model):
        super().__init__(d_model)
        nn.init.zeros_(self.weight)
        nn.init.ones_(self.bias)


class BiasForgotten(LayerNorm):
    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, None, self.eps)  # beta never added


def exponent_per_column(max_len, d_model):  # 10000^(j/d) with j the column, not 2i
    j = torch.arange(d_model)
    angle = torch.arange(max_len)[:, None] / 10000 ** (j / d_model)
    return torch.where(j % 2 == 0, angle.sin(), angle.cos())


def sin_cos_swapped(max_len, d_model):
    pe = sinusoidal_encoding(max_len, d_model)
    return torch.stack([pe[:, 1::2], pe[:, 0::2]], -1).flatten(1)


def positions_over_max_len(max_len, d_model):
    column = torch.arange(d_model)
    pos = torch.arange(max_len)[:, None] / max_len  # positions squeezed into [0, 1)
    angle = pos / 10000 ** (column // 2 * 2 / d_model)
    return torch.where(column % 2 == 0, angle.sin(), angle.cos())


def with_batch_axis(max_len, d_model):  # (1, max_len, d_model), ready to add to a batch
    return sinusoidal_encoding(max_len, d_model)[None]


class DropoutAlwaysOn(PositionwiseFeedForward):
    def forward(self, x):
        return self.w_2(F.dropout(torch.relu(self.w_1(x)), 0.1))  # training=True whatever the mode


class NoReLU(PositionwiseFeedForward):
    def forward(self, x):
        return self.w_2(self.w_1(x))


class SecondLayerForgotten(PositionwiseFeedForward):
    def forward(self, x):
        return torch.relu(self.w_1(x))  # (B, T, F): w_2 built, never applied


class FeedForwardNoBiases(PositionwiseFeedForward):
    """W_1 and W_2 built with bias=False: Eq. 2 has b_1 and b_2."""

    def __init__(self, d_model, d_ff):
        super().__init__(d_model, d_ff)
        self.w_1, self.w_2 = (
            nn.Linear(d_model, d_ff, bias=False),
            nn.Linear(d_ff, d_model, bias=False),
        )


class GateNeverUsed(PositionwiseFeedForward):
    """A GLU variant's gate, built and forgotten: its weights get no gradient."""

    def __init__(self, d_model, d_ff):
        super().__init__(d_model, d_ff)
        self.w_gate = nn.Linear(d_model, d_ff)


NORM = ("matches_reference", "small_variance_inputs")
FRESH = "normalised_when_fresh"  # a fresh module's positions: mean 0, variance 1
UNSTABLE = ("batch_independence", "deterministic_in_eval")  # dropout: no two calls agree
WRONG_PIECES = [
    wrong("layer_norm", SeedLayerNorm, FRESH, *NORM),  # unbiased std: variance 15/16
    wrong("layer_norm", StdPlusEps, "small_variance_inputs"),
    wrong("layer_norm", StdPlusTinyEps, "small_variance_inputs"),
    wrong("layer_norm", NormOverPositions, FRESH, *NORM),
    wrong("layer_norm", NormOverBatch, FRESH, *NORM, "batch_independence"),
    wrong("layer_norm", CentredOnly, FRESH, *NORM),
    wrong("layer_norm", FlatLayerNorm, "output_shape", FRESH, *NORM, "batch_independence"),
    wrong("layer_norm", LayerNormWithDropout, FRESH, *NORM, *UNSTABLE),
    wrong("layer_norm", GainZeroBiasOne, FRESH),
    wrong("layer_norm", BiasForgotten, "matches_reference", "gradients_reach_every_parameter"),
    wrong(
        "positional_encoding",
        exponent_per_column,
        "matches_closed_form",
        "relative_shift_is_rotation",
    ),
    wrong("positional_encoding", sin_cos_swapped, "matches_closed_form"),
    wrong(
        "positional_encoding",
        positions_over_max_len,
        "matches_closed_form",
        "independent_of_max_len",
    ),
    wrong(
        "positional_encoding",
        with_batch_axis,
        "output_shape",
        "matches_closed_form",
        "relative_shift_is_rotation",
        "independent_of_max_len",
    ),
    wrong("feed_forward", DropoutAlwaysOn, "matches_reference", "position_wise", *UNSTABLE),
    wrong("feed_forward", NoReLU, "matches_reference"),
    wrong(
        "feed_forward",
        SecondLayerForgotten,
        "output_shape",
        "matches_reference",
        "gradients_reach_every_parameter",
    ),
    wrong("feed_forward", GateNeverUsed, "parameter_count", "gradients_reach_every_parameter"),
    wrong("feed_forward", FeedForwardNoBiases, "parameter_count"),
]


@pytest.mark.parametrize("w", WRONG_PIECES, ids=lambda w: f"{w.piece}-{w.name}")
def test_wrong_pieces_are_caught(w):
    assert_caught(w)


# ---- Wrong layers and models ---------------------------------------------------------------------


def with_norm(layer_cls, norm_cls):
    """The layer built with another LayerNorm in each of its sub-layer connections."""

    def factory(d_model, n_heads, d_ff):
        layer = layer_cls(d_model, n_heads, d_ff)
        for sublayer in layer.sublayers:
            sublayer.norm = norm_cls(d_model)
        return layer

    factory.__name__ = f"{layer_cls.__name__}_with_{norm_cls.__name__}"
    return factory


def pre_ln(layer_cls):
    def factory(d_model, n_heads, d_ff):
        return layer_cls(d_model, n_heads, d_ff, norm_first=True)

    factory.__name__ = f"pre_ln_{layer_cls.__name__}"
    return factory


class SelfAttentionIgnoresMask(EncoderLayer):
    def forward(self, x, mask=None):
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x))  # mask never passed
        return self.sublayers[1](x, self.feed_forward)


class EncoderReturnsMask(EncoderLayer):
    def forward(self, x, mask=None):
        return super().forward(x, mask), mask  # (x, mask), to chain the layers in nn.Sequential


class EncoderAddsPositions(EncoderLayer):
    def forward(self, x, mask=None):  # positions added again in every layer
        return super().forward(x + sinusoidal_encoding(x.size(1), self.d_model), mask)


class EncoderDropoutAlwaysOn(EncoderLayer):
    def forward(self, x, mask=None):
        x = self.sublayers[0](x, lambda x: F.dropout(self.self_attn(x, x, x, mask), 0.1))
        return self.sublayers[1](x, self.feed_forward)


class EncoderSkipsFeedForward(EncoderLayer):
    def forward(self, x, mask=None):
        return self.sublayers[0](x, lambda x: self.self_attn(x, x, x, mask))


class ContextFromTarget(DecoderLayer):
    def forward(self, x, memory, src_mask, tgt_mask, *rest):
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, tgt_mask))
        x = self.sublayers[1](
            x, lambda x: self.cross_attn(x, x, x, tgt_mask)
        )  # keys: x, not memory
        return self.sublayers[2](x, self.feed_forward)


class NoTargetMask(DecoderLayer):
    def forward(self, x, memory, src_mask, tgt_mask):
        return super().forward(x, memory, src_mask, None)


class NoSourceMask(DecoderLayer):
    def forward(self, x, memory, src_mask, tgt_mask):
        return super().forward(x, memory, None, tgt_mask)


class DecoderReturnsLastPosition(DecoderLayer):
    def forward(self, x, memory, src_mask, tgt_mask):
        return super().forward(x, memory, src_mask, tgt_mask)[:, -1]  # (B, D): a step's output


class MemoryWithPositions(DecoderLayer):
    def forward(self, x, memory, src_mask, tgt_mask):  # the memory's positions added again
        memory = memory + sinusoidal_encoding(memory.size(1), self.d_model)
        return super().forward(x, memory, src_mask, tgt_mask)


class DecoderDropoutAlwaysOn(DecoderLayer):
    def forward(self, x, memory, src_mask, tgt_mask):
        return super().forward(F.dropout(x, 0.1), memory, src_mask, tgt_mask)


class DecoderSkipsFeedForward(DecoderLayer):
    def forward(self, x, memory, src_mask, tgt_mask):
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, tgt_mask))
        return self.sublayers[1](x, lambda x: self.cross_attn(x, memory, memory, src_mask))


class EncoderNoResidualDropout(EncoderLayer):
    """LayerNorm(x + Sublayer(x)): the dropout of §5.4 left out."""

    def forward(self, x, mask=None):
        norms = [s.norm for s in self.sublayers]
        x = norms[0](x + self.self_attn(x, x, x, mask))
        return norms[1](x + self.feed_forward(x))


class EncoderFixedRate(EncoderLayer):
    """Dropout at 0.5 whatever the dropout argument says."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__(d_model, n_heads, d_ff, dropout)
        for sublayer in self.sublayers:
            sublayer.dropout = nn.Dropout(0.5)


class DecoderNoResidualDropout(DecoderLayer):
    def forward(self, x, memory, src_mask, tgt_mask):
        norms = [s.norm for s in self.sublayers]
        x = norms[0](x + self.self_attn(x, x, x, tgt_mask))
        x = norms[1](x + self.cross_attn(x, memory, memory, src_mask))
        return norms[2](x + self.feed_forward(x))


class EncoderDropoutOnSum(EncoderLayer):
    """LayerNorm(Dropout(x + Sublayer(x))): §5.4 drops the sub-layer's output, before the sum."""

    def forward(self, x, mask=None):
        drop, norms = self.sublayers[0].dropout, [s.norm for s in self.sublayers]
        x = norms[0](drop(x + self.self_attn(x, x, x, mask)))
        return norms[1](drop(x + self.feed_forward(x)))


class DecoderDropoutOnSum(DecoderLayer):
    def forward(self, x, memory, src_mask, tgt_mask):
        drop, norms = self.sublayers[0].dropout, [s.norm for s in self.sublayers]
        x = norms[0](drop(x + self.self_attn(x, x, x, tgt_mask)))
        x = norms[1](drop(x + self.cross_attn(x, memory, memory, src_mask)))
        return norms[2](drop(x + self.feed_forward(x)))


def one_norm(layer_cls):
    """The layer with one LayerNorm shared by all its sub-layers' Add & Norm steps."""

    def factory(d_model, n_heads, d_ff):
        layer = layer_cls(d_model, n_heads, d_ff)
        for sublayer in layer.sublayers[1:]:
            sublayer.norm = layer.sublayers[0].norm
        return layer

    factory.__name__ = f"{layer_cls.__name__}_with_one_norm"
    return factory


class EncoderNoResiduals(EncoderLayer):
    """LayerNorm(Sublayer(x)): both residual connections left out."""

    def forward(self, x, mask=None):
        x = self.sublayers[0].norm(self.self_attn(x, x, x, mask))
        return self.sublayers[1].norm(self.feed_forward(x))


class EncoderFeedForwardFirst(EncoderLayer):
    def forward(self, x, mask=None):
        x = self.sublayers[0](x, self.feed_forward)
        return self.sublayers[1](x, lambda x: self.self_attn(x, x, x, mask))


class EncoderAttendsTwice(EncoderLayer):
    def forward(self, x, mask=None):
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, mask))
        return super().forward(x, mask)


class DecoderNoResiduals(DecoderLayer):
    def forward(self, x, memory, src_mask, tgt_mask, *rest):
        norms = [s.norm for s in self.sublayers]
        x = norms[0](self.self_attn(x, x, x, tgt_mask))
        x = norms[1](self.cross_attn(x, memory, memory, src_mask))
        return norms[2](self.feed_forward(x))


class DecoderCrossFirst(DecoderLayer):
    def forward(self, x, memory, src_mask, tgt_mask):
        x = self.sublayers[1](x, lambda x: self.cross_attn(x, memory, memory, src_mask))
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, tgt_mask))
        return self.sublayers[2](x, self.feed_forward)


class DecoderQueriesFromInput(DecoderLayer):
    """The encoder-decoder attention's queries from the layer's input, not the self-attention's."""

    def forward(self, x, memory, src_mask, tgt_mask):
        y = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, tgt_mask))
        y = self.sublayers[1].norm(y + self.cross_attn(x, memory, memory, src_mask))
        return self.sublayers[2](y, self.feed_forward)


class ScaleAfterPositions(Transformer):
    """sqrt(d_model) * (embedding + PE): the encodings are scaled with the embeddings."""

    def encode(self, src, src_mask=None):
        x = self.src_pos(self.src_embed.lut(src)) * math.sqrt(self.cfg.d_model)
        return self.encoder(x, src_mask)

    def decode(self, memory, src_mask, tgt, tgt_mask, cache=None, **_):
        x = self.tgt_pos(self.tgt_embed.lut(tgt)) * math.sqrt(self.cfg.d_model)
        return self.decoder(x, memory, src_mask, tgt_mask)


class DecoderIgnoresTargetMask(Transformer):
    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return super().forward(src, tgt, src_mask, None)


class EncoderIgnoresSourceMask(Transformer):
    def encode(self, src, src_mask=None):
        return super().encode(src, None)


class NoGenerator(Transformer):
    """The output layer left to the caller, as the Annotated Transformer's forward does."""

    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return self.decode(self.encode(src, src_mask), src_mask, tgt, tgt_mask)  # (B, T, D)


class ModelContextFromTarget(Transformer):
    def __init__(self, cfg):
        super().__init__(cfg)
        for layer in self.decoder.layers:
            layer.__class__ = ContextFromTarget


class ModelMemoryIsEmbedding(Transformer):
    """The decoder reads the embedded source: the encoder's output computed, then not used."""

    def decode(self, memory, src_mask, tgt, tgt_mask, cache=None, **_):
        return super().decode(self.embedded, src_mask, tgt, tgt_mask)

    def encode(self, src, src_mask=None):
        self.embedded = self.src_pos(self.src_embed(src))  # (B, S, D)
        return super().encode(src, src_mask)


class ModelNoResiduals(Transformer):
    def __init__(self, cfg):
        super().__init__(cfg)
        for layer in self.decoder.layers:
            layer.__class__ = DecoderNoResiduals


def pre_ln_model(src_vocab, tgt_vocab):
    return Transformer(TransformerConfig(src_vocab, tgt_vocab, **SMALL, norm_first=True))


class LogSoftmaxOverBatch(Transformer):
    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return super().forward(src, tgt, src_mask, tgt_mask).log_softmax(0)  # dim 0: the batch


class ModelDropoutAlwaysOn(Transformer):
    def encode(self, src, src_mask=None):
        return F.dropout(super().encode(src, src_mask), 0.1)  # training=True whatever the mode


def small(cls):
    def factory(src_vocab, tgt_vocab):
        return cls(TransformerConfig(src_vocab, tgt_vocab, **SMALL))

    factory.__name__ = cls.__name__
    return factory


# an output that is not a (B, len, D) tensor fails every property that reads it
NOT_A_TENSOR = (
    "output_shape",
    "padding_invariance",
    "permutation_equivariance",
    "output_is_layer_normalised",
    "batch_independence",
    "deterministic_in_eval",
    "gradients_reach_every_parameter",
)
RATE = "sublayer_outputs_dropped_at_rate"  # dropout on each sub-layer's output, at the layer's rate
MODEL_DROPOUT = ("sublayers_wired", "causality", "src_padding_invariance", *UNSTABLE)
WRONG_LAYERS = [
    wrong("encoder_layer", pre_ln(EncoderLayer), "sublayers_wired", "output_is_layer_normalised"),
    wrong("encoder_layer", SelfAttentionIgnoresMask, "padding_invariance"),
    wrong("encoder_layer", EncoderReturnsMask, *NOT_A_TENSOR),
    wrong("encoder_layer", EncoderAddsPositions, "sublayers_wired", "permutation_equivariance"),
    wrong(
        "encoder_layer",
        with_norm(EncoderLayer, CentredOnly),
        "sublayers_wired",
        "output_is_layer_normalised",
    ),
    wrong(
        "encoder_layer",
        with_norm(EncoderLayer, NormOverBatch),
        "sublayers_wired",
        "output_is_layer_normalised",
        "batch_independence",
    ),
    wrong(  # its second dropout on the attention's output drops 1 - 0.7 * 0.9 of it in training
        "encoder_layer",
        EncoderDropoutAlwaysOn,
        "sublayers_wired",
        RATE,
        "padding_invariance",
        "permutation_equivariance",
        *UNSTABLE,
    ),
    wrong(
        "encoder_layer",
        EncoderSkipsFeedForward,
        "sublayers_wired",
        "gradients_reach_every_parameter",
    ),
    wrong("decoder_layer", pre_ln(DecoderLayer), "sublayers_wired", "output_is_layer_normalised"),
    wrong("decoder_layer", ContextFromTarget, "sublayers_wired", "memory_is_attended"),
    wrong("decoder_layer", NoTargetMask, "causality"),
    wrong("decoder_layer", NoSourceMask, "src_padding_invariance"),
    wrong(
        "decoder_layer",
        DecoderReturnsLastPosition,
        "sublayers_wired",
        "output_shape",
        "causality",
    ),
    wrong("decoder_layer", MemoryWithPositions, "sublayers_wired", "memory_order_invariance"),
    wrong(
        "decoder_layer",
        with_norm(DecoderLayer, CentredOnly),
        "sublayers_wired",
        "output_is_layer_normalised",
    ),
    wrong(  # over a batch of two, every normalised entry is +-1: a change in the memory vanishes
        "decoder_layer",
        with_norm(DecoderLayer, NormOverBatch),
        "sublayers_wired",
        "memory_is_attended",
        "output_is_layer_normalised",
        "batch_independence",
    ),
    wrong(
        "decoder_layer",
        DecoderDropoutAlwaysOn,
        "sublayers_wired",
        "causality",
        "src_padding_invariance",
        "memory_order_invariance",
        *UNSTABLE,
    ),
    wrong(
        "decoder_layer",
        DecoderSkipsFeedForward,
        "sublayers_wired",
        "gradients_reach_every_parameter",
    ),
    wrong("encoder_layer", EncoderNoResiduals, "sublayers_wired", RATE),  # no dropout either
    wrong("encoder_layer", EncoderDropoutOnSum, "dropout_only_on_sublayer_outputs", RATE),
    wrong("decoder_layer", DecoderDropoutOnSum, "dropout_only_on_sublayer_outputs", RATE),
    wrong("encoder_layer", EncoderNoResidualDropout, RATE),
    wrong("encoder_layer", EncoderFixedRate, RATE),
    wrong("decoder_layer", DecoderNoResidualDropout, RATE),
    wrong("encoder_layer", one_norm(EncoderLayer), "each_sublayer_has_its_own_norm"),
    wrong("decoder_layer", one_norm(DecoderLayer), "each_sublayer_has_its_own_norm"),
    wrong("encoder_layer", EncoderFeedForwardFirst, "sublayers_wired"),
    wrong(  # its two self-attentions share the first sub-layer's LayerNorm
        "encoder_layer", EncoderAttendsTwice, "sublayers_wired", "each_sublayer_has_its_own_norm"
    ),
    wrong("decoder_layer", DecoderNoResiduals, "sublayers_wired", RATE),
    wrong("decoder_layer", DecoderCrossFirst, "sublayers_wired"),
    wrong(
        "decoder_layer", DecoderQueriesFromInput, "sublayers_wired", RATE
    ),  # no dropout on its output
    wrong(
        "model",
        small(ScaleAfterPositions),
        "sublayers_wired",
        "embeddings_scaled_then_positions_added",
    ),
    wrong("model", small(DecoderIgnoresTargetMask), "causality"),
    wrong("model", small(EncoderIgnoresSourceMask), "src_padding_invariance"),
    wrong("model", small(NoGenerator), "output_shape", "gradients_reach_every_parameter"),
    wrong(
        "model",
        small(ModelContextFromTarget),
        "sublayers_wired",
        "source_matters",
        "gradients_reach_every_parameter",
    ),
    wrong("model", small(LogSoftmaxOverBatch), "batch_independence"),
    wrong(  # the encoder's layers then feed nothing: no gradient reaches them
        "model",
        small(ModelMemoryIsEmbedding),
        "sublayers_wired",
        "gradients_reach_every_parameter",
    ),
    wrong("model", small(ModelNoResiduals), "sublayers_wired"),
    wrong("model", pre_ln_model, "sublayers_wired"),
    wrong("model", small(ModelDropoutAlwaysOn), *MODEL_DROPOUT),
]


@pytest.mark.parametrize("w", WRONG_LAYERS, ids=lambda w: f"{w.piece}-{w.name}")
def test_wrong_layers_and_models_are_caught(w):
    assert_caught(w)


# ---- Wrong embeddings, label smoothing, learning rates, greedy decoders ---------------------------


class EmbeddingsUnscaled(Embeddings):
    def forward(self, tokens):
        return self.lut(tokens)  # the sqrt(d_model) of §3.4 forgotten


class EmbeddingsScaledByDModel(Embeddings):
    def forward(self, tokens):
        return self.lut(tokens) * self.d_model


class EmbeddingsWithPositions(Embeddings):
    """Positions added inside the look-up: the encoding of §3.5 belongs after it."""

    def forward(self, tokens):
        return super().forward(tokens) + sinusoidal_encoding(tokens.size(1), self.d_model)


class EmbeddingsWithDropout(Embeddings):
    def forward(self, tokens):
        return F.dropout(super().forward(tokens), 0.1)  # training=True whatever the mode


class EmbeddingsArgumentsSwapped(Embeddings):
    def __init__(self, vocab_size, d_model):
        super().__init__(vocab_size, d_model)
        self.lut = nn.Embedding(d_model, vocab_size)  # (d_model, n_vocab): swapped


class EmbeddingsFrozen(Embeddings):
    def __init__(self, vocab_size, d_model):
        super().__init__(vocab_size, d_model)
        table = torch.randn(vocab_size, d_model)
        self.lut = nn.Embedding.from_pretrained(table)  # freeze=True by default: never learns


def smoothing_over_all_classes(vocab_size, pad_id, smoothing):
    """PyTorch's label_smoothing (Szegedy et al.'s): eps over all V classes, label and pad included."""

    def loss(logits, target):
        return F.cross_entropy(
            logits.reshape(-1, vocab_size),
            target.reshape(-1),
            ignore_index=pad_id,
            label_smoothing=smoothing,
            reduction="sum",
        )

    return loss


def smoothing_all_classes_pads_scored(vocab_size, pad_id, smoothing):
    """PyTorch's label_smoothing without ignore_index: positions whose label is pad are scored."""

    def loss(logits, target):
        flat = logits.reshape(-1, vocab_size), target.reshape(-1)
        return F.cross_entropy(*flat, label_smoothing=smoothing, reduction="sum")

    return loss


class SmoothingTensor2Tensor(nn.Module):
    """tensor2tensor's target: 1 - eps on the label, eps / (V - 1) on every other class, pad's too."""

    def __init__(self, vocab_size, pad_id, smoothing):
        super().__init__()
        self.vocab_size, self.pad_id, self.smoothing = vocab_size, pad_id, smoothing

    def forward(self, logits, target):
        labels = target.reshape(-1)
        log_p = logits.reshape(-1, self.vocab_size).log_softmax(-1)
        low = self.smoothing / (self.vocab_size - 1)
        q = torch.full_like(log_p, low).scatter(1, labels[:, None], 1 - self.smoothing)
        return -(q * log_p).sum(-1)[labels != self.pad_id].sum()


class SmoothingKL(LabelSmoothingLoss):
    """The book's target, but KL(q || p) = cross-entropy - H(q), as nn.KLDivLoss computes it."""

    def forward(self, logits, target):
        q = self.target_distribution(target)
        log_p = logits.reshape(-1, self.vocab_size).log_softmax(-1)
        return F.kl_div(log_p, q, reduction="sum")


class SmoothingPadScored(LabelSmoothingLoss):
    """The pad column is zeroed, but positions whose label is pad are still scored."""

    def forward(self, logits, target):
        q = self.target_distribution(target.clamp(min=0)).view(*target.shape, -1)
        q = torch.where(
            (target == self.pad_id)[..., None], self.smoothing / (self.vocab_size - 1), q
        )
        return -(q * logits.log_softmax(-1)).sum()


class SmoothingMean(LabelSmoothingLoss):
    def forward(self, logits, target):
        return super().forward(logits, target) / (target != self.pad_id).sum()


class SmoothingLogOfSoftmax(LabelSmoothingLoss):
    def forward(self, logits, target):
        q = self.target_distribution(target).view(*target.shape, -1)
        return -(q * logits.softmax(-1).log()).sum()  # log(0) = -inf where softmax underflows


class SmoothingWithoutGradients(LabelSmoothingLoss):
    def forward(self, logits, target):
        with torch.no_grad():  # "the loss is only a number": nothing to train on
            return super().forward(logits, target)


def lr_counted_from_zero(step, d_model, warmup):  # the first update gets the rate of step 2
    step += 1
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def lr_max_not_min(step, d_model, warmup):
    return d_model**-0.5 * max(step**-0.5, step * warmup**-1.5)


def lr_step_zero_clamped(step, d_model, warmup):  # step 0 silently gets step 1's rate
    step = max(step, 1)
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def lr_bare_formula(step, d_model, warmup):  # 0 ** -0.5 raises ZeroDivisionError: no check at all
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def lr_only_zero_refused(step, d_model, warmup):  # step -3 goes on to a complex number
    if step == 0:
        raise ValueError("no update 0")
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def lr_warmup_exponent(step, d_model, warmup):  # warmup^-0.5 where Eq. 3 has warmup^-1.5
    return d_model**-0.5 * min(step**-0.5, step * warmup**-0.5)


def greedy(
    model,
    src,
    src_mask,
    max_len,
    bos_id,
    eos_id,
    pad_id,
    start=None,
    position=-1,
    feed_back=True,
    extra_steps=0,
    mask_pad=True,
    pad_after_eos=True,
    stop_when_done=True,
    squeeze=False,
    encode_mask=True,
    decode_mask=True,
):
    """Greedy decoding with a switch for each classic mistake."""
    memory = model.encode(src, src_mask if encode_mask else None)
    src_mask = src_mask if decode_mask else None
    ys = torch.full((src.size(0), 1), bos_id if start is None else start)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len + extra_steps):
        prefix = ys if feed_back else ys[:, :1]
        out = model.decode(memory, src_mask, prefix, causal_mask(prefix.size(1)))
        if squeeze:  # meant to drop the position axis; a batch of one loses its batch axis too
            logits = model.generator(out[:, -1:]).squeeze()
        else:
            logits = model.generator(out[:, position])  # (B, V)
        if mask_pad:
            logits[:, pad_id] = float("-inf")
        token = logits.argmax(-1)
        if pad_after_eos:
            token = token.masked_fill(done, pad_id)
        ys = torch.cat([ys, token[:, None]], 1)
        done |= token == eos_id
        if stop_when_done and done.all():
            break
    return ys


WRONG_TRAINING_PIECES = [
    wrong("embeddings", EmbeddingsUnscaled, "scaled_by_sqrt_d_model"),
    wrong("embeddings", EmbeddingsScaledByDModel, "scaled_by_sqrt_d_model"),
    wrong(
        "embeddings", EmbeddingsWithPositions, "scaled_by_sqrt_d_model", "same_token_same_vector"
    ),
    wrong(
        "embeddings",
        EmbeddingsWithDropout,
        "scaled_by_sqrt_d_model",
        "same_token_same_vector",
        *UNSTABLE,
    ),
    wrong(
        "embeddings",
        EmbeddingsArgumentsSwapped,
        "output_shape",
        "scaled_by_sqrt_d_model",
        "same_token_same_vector",
    ),
    wrong("embeddings", EmbeddingsFrozen, "gradients_reach_every_parameter"),
    wrong(
        "label_smoothing",
        smoothing_all_classes_pads_scored,
        "no_smoothing_is_cross_entropy",
        "matches_reference",
        "pad_targets_contribute_nothing",
        "minimum_at_smoothed_target",
        "finite_with_large_logits",
    ),
    wrong(
        "label_smoothing",
        SmoothingPadScored,
        "matches_reference",
        "pad_targets_contribute_nothing",
        "finite_with_large_logits",
    ),
    wrong(
        "label_smoothing",
        SmoothingMean,
        "no_smoothing_is_cross_entropy",
        "matches_reference",
        "pad_targets_contribute_nothing",
        "sums_over_tokens",
        "finite_with_large_logits",
    ),
    wrong("label_smoothing", SmoothingLogOfSoftmax, "finite_with_large_logits"),
    wrong(
        "label_smoothing",
        SmoothingWithoutGradients,
        "minimum_at_smoothed_target",
        "gradients_reach_logits",
    ),
    wrong(
        "learning_rate",
        lr_counted_from_zero,
        "matches_closed_form",
        "peak_at_warmup",
        "linear_warmup",
        "inverse_sqrt_decay",
        "step_zero_is_refused",
    ),
    wrong(
        "learning_rate",
        lr_max_not_min,
        "matches_closed_form",
        "peak_at_warmup",
        "linear_warmup",
        "inverse_sqrt_decay",
        "step_zero_is_refused",  # ZeroDivisionError, not a ValueError
    ),
    wrong("learning_rate", lr_step_zero_clamped, "step_zero_is_refused"),
    wrong("learning_rate", lr_bare_formula, "step_zero_is_refused"),
    wrong("learning_rate", lr_only_zero_refused, "step_zero_is_refused"),
    wrong(
        "learning_rate",
        lr_warmup_exponent,
        "matches_closed_form",
        "peak_at_warmup",
        "linear_warmup",
        "step_zero_is_refused",
    ),
    # a different token early changes what follows, so the reference and the EOS step differ too
    wrong(
        "greedy_decode",
        partial(greedy, start=0),
        "starts_with_bos",
        "matches_reference",
        "stops_after_eos",
        name="decoding_from_pad",
    ),
    wrong(
        "greedy_decode",
        partial(greedy, position=0),
        "matches_reference",
        "each_token_is_argmax_of_prefix",
        "stops_after_eos",
        name="logits_of_first_position",
    ),
    wrong(
        "greedy_decode",
        partial(greedy, feed_back=False),
        "matches_reference",
        "each_token_is_argmax_of_prefix",
        "stops_after_eos",
        name="choices_not_fed_back",
    ),
    wrong(  # too many columns: every property that decodes without EOS refuses the output
        "greedy_decode",
        partial(greedy, extra_steps=1),
        "starts_with_bos",
        "matches_reference",
        "each_token_is_argmax_of_prefix",
        "stops_at_max_new_tokens",
        "stops_after_eos",
        "pad_is_never_a_token",
        "source_padding_is_hidden",
        "batch_independence",
        name="one_step_too_many",
    ),
    wrong(
        "greedy_decode",
        partial(greedy, mask_pad=False),
        "matches_reference",
        "each_token_is_argmax_of_prefix",
        "stops_after_eos",
        "pad_is_never_a_token",
        name="pad_not_excluded",
    ),
    wrong(
        "greedy_decode",
        partial(greedy, pad_after_eos=False),
        "matches_reference",
        "stops_after_eos",
        name="writes_after_eos",
    ),
    wrong(
        "greedy_decode",
        partial(greedy, stop_when_done=False),
        "stops_after_eos",
        name="runs_on_after_every_eos",
    ),
    wrong(  # the properties that decode one sentence alone
        "greedy_decode",
        partial(greedy, squeeze=True),
        "stops_after_eos",
        "batch_independence",
        name="batch_of_one_squeezed",
    ),
    wrong(  # the grader's other sources end in two pads: too few to move its choices
        "greedy_decode",
        partial(greedy, encode_mask=False, decode_mask=False),
        "source_padding_is_hidden",
        name="source_mask_dropped",
    ),
    wrong(  # the model's own forward pass masks the source: the recomputed choices differ too
        "greedy_decode",
        partial(greedy, decode_mask=False),
        "matches_reference",
        "each_token_is_argmax_of_prefix",
        "stops_after_eos",
        "source_padding_is_hidden",
        name="source_mask_not_passed_to_decode",
    ),
]


@pytest.mark.parametrize("w", WRONG_TRAINING_PIECES, ids=lambda w: f"{w.piece}-{w.name}")
def test_wrong_training_pieces_are_caught(w):
    assert_caught(w)


# ---- Every property is caught --------------------------------------------------------------------

# ---- Unusual but right: each must pass every property that applies, and none may be n/a ----------


class FusedKeysValues(nn.Module):
    """Encoder-decoder attention with W_k and W_v fused into one nn.Linear(D, 2D): read the memory once."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h = n_heads
        self.W_q, self.W_o = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.W_kv = nn.Linear(d_model, 2 * d_model)  # rows: W_k, then W_v

    def forward(self, query, key, value, mask=None):
        def heads(x):  # (B, L, D) -> (B, H, L, Dk)
            return x.unflatten(-1, (self.h, -1)).transpose(1, 2)

        k, v = (heads(t) for t in self.W_kv(key).chunk(2, dim=-1))  # key is value: the memory
        s = scores_of(heads(self.W_q(query)), k)  # (B, H, T, S)
        if mask is not None:
            s = s.masked_fill(~mask, -1e9)
        return self.W_o((softmax_keys(s, mask) @ v).transpose(1, 2).flatten(2))  # (B, T, D)


class DecoderFusedKeysValues(DecoderLayer):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__(d_model, n_heads, d_ff)
        self.cross_attn = FusedKeysValues(d_model, n_heads)

    def forward(self, x, memory, src_mask, tgt_mask):
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x, tgt_mask))
        x = self.sublayers[1](x, lambda x: self.cross_attn(x, memory, memory, src_mask))
        return self.sublayers[2](x, self.feed_forward)


class LayerNormTinyEps(nn.Module):
    """The paper's LayerNorm with eps = 1e-12 written into forward: no .eps to read."""

    def __init__(self, d_model):
        super().__init__()
        self.gain, self.bias = nn.Parameter(torch.ones(d_model)), nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        mean, var = x.mean(-1, keepdim=True), x.var(-1, correction=0, keepdim=True)
        return self.gain * (x - mean) / torch.sqrt(var + 1e-12) + self.bias


class TorchEncoderLayer(nn.Module):
    """nn.TransformerEncoderLayer called as the graders call a layer: our mask is bool (B, 1, 1, S)
    with True = may attend, PyTorch's key padding mask (B, S) has True = pad."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model, n_heads, d_ff, dropout, batch_first=True)

    def forward(self, x, mask=None):
        return self.layer(x, src_key_padding_mask=None if mask is None else ~mask[:, 0, 0])


class TorchDecoderLayer(nn.Module):
    """nn.TransformerDecoderLayer, its masks converted as TorchEncoderLayer's are."""

    def __init__(self, d_model, n_heads, d_ff, dropout=0.1):
        super().__init__()
        self.layer = nn.TransformerDecoderLayer(d_model, n_heads, d_ff, dropout, batch_first=True)

    def forward(self, x, memory, src_mask, tgt_mask):
        return self.layer(
            x, memory, tgt_mask=~tgt_mask[0, 0], memory_key_padding_mask=~src_mask[:, 0, 0]
        )


class FusedSelfAttention(nn.Module):
    """Self-attention with W_q, W_k, W_v fused in one nn.Linear(D, 3D), as nanoGPT writes it."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.h, self.W_qkv, self.W_o = (
            n_heads,
            nn.Linear(d_model, 3 * d_model),
            nn.Linear(d_model, d_model),
        )

    def forward(
        self, query, key, value, mask=None, *rest, **options
    ):  # self-attention: key is query
        q, k, v = (
            t.unflatten(-1, (self.h, -1)).transpose(1, 2) for t in self.W_qkv(query).chunk(3, -1)
        )
        s = scores_of(q, k)  # (B, H, T, T)
        if mask is not None:
            s = s.masked_fill(~mask, -1e9)
        return self.W_o((softmax_keys(s, mask) @ v).transpose(1, 2).flatten(2))  # (B, T, D)


def fused_qkv_model(src_vocab, tgt_vocab):
    """A Transformer whose self-attentions fuse Q, K, V: as many Linear(d, 3d) as feed-forward networks."""
    model = Transformer(TransformerConfig(src_vocab, tgt_vocab, **SMALL))
    for layer in [*model.encoder.layers, *model.decoder.layers]:
        layer.self_attn = FusedSelfAttention(SMALL["d_model"], SMALL["n_heads"])
    return model


def smoothing_t2t_own(vocab_size, pad_id, smoothing):
    """tensor2tensor's own smoothing_cross_entropy, summed: the cross-entropy less H(q), "for readability"."""
    confidence, low = 1.0 - smoothing, smoothing / (vocab_size - 1)
    normalizing = -(
        confidence * math.log(confidence) + (vocab_size - 1) * low * math.log(low + 1e-20)
    )

    def loss(logits, target):
        q = torch.full((*target.shape, vocab_size), low).scatter(-1, target[..., None], confidence)
        xent = -(q * logits.log_softmax(-1)).sum(-1)  # (B, T)
        return ((xent - normalizing) * (target != pad_id)).sum()

    return loss


def smoothing_all_classes_kl(vocab_size, pad_id, smoothing):
    """PyTorch's label_smoothing= cross-entropy less H(q): the same gradients, a lower number."""
    rest, top = smoothing / vocab_size, 1 - smoothing + smoothing / vocab_size
    entropy = (
        -(top * math.log(top) + (vocab_size - 1) * rest * math.log(rest)) if smoothing else 0.0
    )
    cross_entropy = smoothing_over_all_classes(vocab_size, pad_id, smoothing)

    def loss(logits, target):
        return cross_entropy(logits, target) - entropy * (target != pad_id).sum()

    return loss


def double(factory):
    """The module built in float64: the check's inputs must follow its dtype."""

    def build(*args):
        return factory(*args).double()

    build.__name__ = f"{getattr(factory, '__name__', 'factory')}_float64"
    return build


UNUSUAL_BUT_RIGHT = [
    ("multi_head", PerHeadMultiHead),
    ("multi_head", double(MultiHeadAttention)),
    ("layer_norm", LayerNormTinyEps),
    ("layer_norm", double(LayerNorm)),
    ("feed_forward", double(PositionwiseFeedForward)),
    ("encoder_layer", TorchEncoderLayer),
    ("encoder_layer", double(EncoderLayer)),
    ("encoder_layer", double(TorchEncoderLayer)),
    ("decoder_layer", DecoderFusedKeysValues),
    ("decoder_layer", TorchDecoderLayer),
    ("decoder_layer", double(DecoderLayer)),
    ("decoder_layer", double(TorchDecoderLayer)),
    ("model", double(small(Transformer))),
    ("model", fused_qkv_model),
    ("label_smoothing", smoothing_over_all_classes),
    ("label_smoothing", SmoothingTensor2Tensor),
    ("label_smoothing", SmoothingKL),
    ("label_smoothing", smoothing_t2t_own),
    ("label_smoothing", smoothing_all_classes_kl),
]


@pytest.mark.parametrize(
    "piece, factory", UNUSUAL_BUT_RIGHT, ids=[f"{p}-{f.__name__}" for p, f in UNUSUAL_BUT_RIGHT]
)
def test_unusual_but_right_implementations_pass(piece, factory):
    report = CHECKS[piece](factory)
    assert report and not report.not_applicable, str(report)


@pytest.mark.parametrize(
    "factory, convention",
    [
        (LabelSmoothingLoss, "the book's convention"),
        (smoothing_over_all_classes, "Szegedy et al.'s convention"),
        (SmoothingTensor2Tensor, "tensor2tensor's convention"),
    ],
)
def test_label_smoothing_names_the_convention_it_matched(factory, convention):
    """Each documented target passes, and the report says which one the reader's loss follows."""
    report = CHECKS["label_smoothing"](factory)
    matched = next(r for r in report.results if r.name == "matches_reference")
    assert report and convention in matched.message, str(report)


@pytest.mark.parametrize(
    "factory, convention",
    [
        (SmoothingKL, "the book's convention"),
        (smoothing_t2t_own, "tensor2tensor's convention"),
        (smoothing_all_classes_kl, "Szegedy et al.'s convention"),
    ],
)
def test_label_smoothing_in_the_kl_form_passes_and_is_named(factory, convention):
    """A convention's cross-entropy less H(q) has the same gradients: it passes, and the report says
    which convention and that it is the KL form; its minimum is that convention's q."""
    report = CHECKS["label_smoothing"](factory)
    messages = {r.name: r.message for r in report.results}
    assert report and convention in messages["matches_reference"], str(report)
    assert "in the KL form" in messages["matches_reference"], str(report)
    assert convention.removesuffix(" convention") in messages["minimum_at_smoothed_target"], str(
        report
    )


GALLERY = [
    *WRONG_ATTENTION,
    *WRONG_MASKS,
    *WRONG_MULTI_HEAD,
    *WRONG_PIECES,
    *WRONG_LAYERS,
    *WRONG_TRAINING_PIECES,
]


def test_every_property_of_every_grader_is_failed_by_some_wrong_implementation():
    uncaught = {
        f"check.{piece}: {name}"
        for piece in CHECKS
        for name in property_names(piece)
        if not any(w.piece == piece and name in w.caught_by for w in GALLERY)
    }
    assert not uncaught, "no wrong implementation in the gallery fails " + ", ".join(
        sorted(uncaught)
    )


def test_the_dropout_rate_is_read_from_the_layer_built_with_it():
    """A factory with a dropout argument is built at the check's rate; the report prints what it measured."""
    for factory in (EncoderLayer, TorchEncoderLayer):
        report = CHECKS["encoder_layer"](factory)
        measured = next(r for r in report.results if r.name == "sublayer_outputs_dropped_at_rate")
        assert (
            measured.passed
            and "dropout=0.3" in measured.message
            and "(this run: " in measured.message
        )
    as_built = CHECKS["encoder_layer"](lambda d, h, f: EncoderLayer(d, h, f))  # no dropout argument
    measured = next(r for r in as_built.results if r.name == "sublayer_outputs_dropped_at_rate")
    assert measured.passed and "(this run: " in measured.message, str(as_built)


def test_the_gallery_names_only_real_properties():
    """A misspelt name in caught_by would be 'covered' by an entry that can never fail it."""
    for w in GALLERY:
        assert w.caught_by and w.caught_by <= set(property_names(w.piece)), w
    assert len({(w.piece, w.name) for w in GALLERY}) == len(GALLERY)
