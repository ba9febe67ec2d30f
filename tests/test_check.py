"""annotated.check: a gallery of wrong implementations, each caught by a named property, and
correct ones (this package's pieces, thin wrappers around PyTorch's modules) that pass every check."""

import math
import os
import subprocess
import sys
import textwrap
from functools import partial
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
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
    Transformer,
    TransformerConfig,
    causal_mask,
    check,
    greedy_decode,
    make_model,
    noam_lr,
    padding_mask,
    sinusoidal_encoding,
)
from annotated.app import main

ROOT = Path(__file__).resolve().parents[1]
SMALL = dict(d_model=32, n_layers=2, d_ff=64, n_heads=4)

# ---- Wrong attention functions ------------------------------------------------------------------


def scores_of(q, k):
    return q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))


def fill_minus_1e_12(q, k, v, mask=None):  # the seed notes: a "very small" fill of -1e-12
    s = scores_of(q, k)
    if mask is not None:
        s = s.masked_fill(mask == 0, -1e-12)
    return s.softmax(-1) @ v


def fill_discarded(q, k, v, mask=None):  # the seed notes: masked_fill's result is thrown away
    s = scores_of(q, k)
    if mask is not None:
        s.masked_fill(mask == 0, -1e9)
    return s.softmax(-1) @ v


def unscaled(q, k, v, mask=None):
    s = q @ k.transpose(-2, -1)
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    return s.softmax(-1) @ v


def softmax_over_queries(q, k, v, mask=None):
    s = scores_of(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    return s.softmax(-2) @ v


def polarity_reversed(q, k, v, mask=None):  # True taken as "hide"
    s = scores_of(q, k)
    if mask is not None:
        s = s.masked_fill(mask, -1e9)
    return s.softmax(-1) @ v


def fill_minus_inf(q, k, v, mask=None):  # a query with no visible key gets 0/0 = NaN
    s = scores_of(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    return s.softmax(-1) @ v


def key_view_not_transpose(q, k, v, mask=None):  # the seed notes: K^T by view
    B, H, S, Dk = k.shape
    s = q @ k.view(B, H, Dk, S) / math.sqrt(Dk)
    if mask is not None:
        s = s.masked_fill(mask == 0, -1e9)
    return s.softmax(-1) @ v, s


def softmax_without_dim(q, k, v, mask=None):  # the seed notes: nn.Softmax() guesses dim=1 in 4-D
    s = scores_of(q, k)
    if mask is not None:
        s = s.masked_fill(mask == 0, -1e9)
    return nn.Softmax()(s) @ v


def dropout_always_on(q, k, v, mask=None):
    s = scores_of(q, k)
    if mask is not None:
        s = s.masked_fill(~mask, -1e9)
    return F.dropout(s.softmax(-1), 0.1) @ v


WRONG_ATTENTION = [
    (fill_minus_1e_12, "masked_keys_get_no_weight"),
    (fill_discarded, "masked_keys_get_no_weight"),
    (unscaled, "scaled_by_sqrt_dk"),
    (softmax_over_queries, "rows_sum_to_one"),
    (polarity_reversed, "masked_keys_get_no_weight"),
    (fill_minus_inf, "fully_masked_row_is_finite"),
    (key_view_not_transpose, "matches_reference"),
    (softmax_without_dim, "rows_sum_to_one"),
    (dropout_always_on, "deterministic"),
]


@pytest.mark.parametrize(
    "fn, caught_by", WRONG_ATTENTION, ids=[f.__name__ for f, _ in WRONG_ATTENTION]
)
def test_wrong_attention_is_caught(fn, caught_by):
    report = check.attention(fn)
    assert not report
    assert caught_by in report.failed, str(report)


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


WRONG_MASKS = [
    (padding_reversed, causal_mask, "padding_hides_pads"),
    (padding_pad_is_zero, causal_mask, "padding_uses_pad_id"),
    (padding_float, causal_mask, "padding_shape_and_dtype"),
    (padding_unbroadcastable, causal_mask, "padding_shape_and_dtype"),
    (padding_mask, causal_triu, "causal_hides_future"),
    (padding_mask, causal_hides_itself, "causal_hides_future"),
]


@pytest.mark.parametrize(
    "padding_fn, causal_fn, caught_by",
    WRONG_MASKS,
    ids=[(p if p is not padding_mask else c).__name__ for p, c, _ in WRONG_MASKS],
)
def test_wrong_masks_are_caught(padding_fn, causal_fn, caught_by):
    report = check.masks(padding_fn, causal_fn)
    assert not report
    assert caught_by in report.failed, str(report)


# ---- Wrong multi-head attention ------------------------------------------------------------------


class SplitWithView(MultiHeadAttention):
    def split_heads(self, x):
        B, T, _ = x.shape
        return x.view(B, self.n_heads, T, self.d_k)  # no transpose: heads cut across positions


class MergeWithoutTranspose(MultiHeadAttention):
    def merge_heads(self, x):
        B, _, T, _ = x.shape
        return x.reshape(B, T, self.d_model)  # (B, H, T, Dk) read as (B, T, D)


class ScaledByDModel(MultiHeadAttention):
    def forward(self, query, key, value, mask=None):
        q, k, v = (
            self.split_heads(W(x))
            for W, x in ((self.W_q, query), (self.W_k, key), (self.W_v, value))
        )
        s = q @ k.transpose(-2, -1) / math.sqrt(self.d_model)  # sqrt(d_model), not sqrt(d_k)
        if mask is not None:
            s = s.masked_fill(~mask, -1e9)
        return self.W_o(self.merge_heads(s.softmax(-1) @ v))


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


class MultiHeadMinusInf(MultiHeadAttention):
    def forward(self, query, key, value, mask=None):
        q, k, v = (
            self.split_heads(W(x))
            for W, x in ((self.W_q, query), (self.W_k, key), (self.W_v, value))
        )
        s = q @ k.transpose(-2, -1) / math.sqrt(self.d_k)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        return self.W_o(self.merge_heads(s.softmax(-1) @ v))


WRONG_MULTI_HEAD = [
    (SplitWithView, "permutation_equivariance"),
    (SeedMultiHead, "permutation_equivariance"),
    (MergeWithoutTranspose, "permutation_equivariance"),
    (ScaledByDModel, "matches_reference"),
    (MultiHeadMinusInf, "fully_masked_row_is_finite"),
]


@pytest.mark.parametrize(
    "cls, caught_by", WRONG_MULTI_HEAD, ids=[c.__name__ for c, _ in WRONG_MULTI_HEAD]
)
def test_wrong_multi_head_is_caught(cls, caught_by):
    report = check.multi_head(lambda d, h: cls(d, h))
    assert not report
    assert caught_by in report.failed, str(report)


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


class NormOverPositions(LayerNorm):
    def forward(self, x):
        mean, var = x.mean(1, keepdim=True), x.var(1, correction=0, keepdim=True)  # wrong axis
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


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


class DropoutAlwaysOn(PositionwiseFeedForward):
    def forward(self, x):
        return self.w_2(F.dropout(torch.relu(self.w_1(x)), 0.1))  # training=True whatever the mode


class NoReLU(PositionwiseFeedForward):
    def forward(self, x):
        return self.w_2(self.w_1(x))


@pytest.mark.parametrize(
    "grade, wrong, caught_by",
    [
        (check.layer_norm, SeedLayerNorm, "matches_reference"),
        (check.layer_norm, StdPlusEps, "small_variance_inputs"),
        (check.layer_norm, NormOverPositions, "matches_reference"),
        (check.positional_encoding, exponent_per_column, "matches_closed_form"),
        (check.positional_encoding, exponent_per_column, "relative_shift_is_rotation"),
        (check.positional_encoding, sin_cos_swapped, "matches_closed_form"),
        (check.positional_encoding, positions_over_max_len, "independent_of_max_len"),
        (check.feed_forward, DropoutAlwaysOn, "deterministic_in_eval"),
        (check.feed_forward, NoReLU, "matches_reference"),
    ],
    ids=lambda x: getattr(x, "__name__", x) if not isinstance(x, str) else x,
)
def test_wrong_pieces_are_caught(grade, wrong, caught_by):
    report = grade(wrong)
    assert not report
    assert caught_by in report.failed, str(report)


# ---- Wrong layers and models ---------------------------------------------------------------------


class SelfAttentionIgnoresMask(EncoderLayer):
    def forward(self, x, mask=None):
        x = self.sublayers[0](x, lambda x: self.self_attn(x, x, x))  # mask never passed
        return self.sublayers[1](x, self.feed_forward)


class ContextFromTarget(DecoderLayer):
    def forward(self, x, memory, src_mask, tgt_mask):
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


class ScaleAfterPositions(Transformer):
    """sqrt(d_model) * (embedding + PE): the encodings are scaled with the embeddings."""

    def encode(self, src, src_mask=None):
        x = self.src_pos(self.src_embed.lut(src)) * math.sqrt(self.cfg.d_model)
        return self.encoder(x, src_mask)

    def decode(self, memory, src_mask, tgt, tgt_mask, cache=None):
        x = self.tgt_pos(self.tgt_embed.lut(tgt)) * math.sqrt(self.cfg.d_model)
        return self.decoder(x, memory, src_mask, tgt_mask)


class DecoderIgnoresTargetMask(Transformer):
    def forward(self, src, tgt, src_mask=None, tgt_mask=None):
        return super().forward(src, tgt, src_mask, None)


class EncoderIgnoresSourceMask(Transformer):
    def encode(self, src, src_mask=None):
        return super().encode(src, None)


def small(cls):
    return lambda src_vocab, tgt_vocab: cls(TransformerConfig(src_vocab, tgt_vocab, **SMALL))


WRONG_LAYERS = [
    (
        "encoder_layer",
        lambda d, h, f: EncoderLayer(d, h, f, norm_first=True),
        "output_is_layer_normalised",
    ),
    ("encoder_layer", SelfAttentionIgnoresMask, "padding_invariance"),
    (
        "decoder_layer",
        lambda d, h, f: DecoderLayer(d, h, f, norm_first=True),
        "output_is_layer_normalised",
    ),
    ("decoder_layer", ContextFromTarget, "memory_is_attended"),
    ("decoder_layer", NoTargetMask, "causality"),
    ("decoder_layer", NoSourceMask, "src_padding_invariance"),
    ("model", small(ScaleAfterPositions), "embeddings_scaled_then_positions_added"),
    ("model", small(DecoderIgnoresTargetMask), "causality"),
    ("model", small(EncoderIgnoresSourceMask), "src_padding_invariance"),
]


@pytest.mark.parametrize(
    "piece, factory, caught_by",
    WRONG_LAYERS,
    ids=[
        "pre_ln_encoder",
        "encoder_ignores_mask",
        "pre_ln_decoder",
        "context_attention_keys_from_target",
        "decoder_without_target_mask",
        "decoder_without_source_mask",
        "positions_scaled_with_embeddings",
        "model_without_target_mask",
        "encoder_without_source_mask",
    ],
)
def test_wrong_layers_and_models_are_caught(piece, factory, caught_by):
    report = getattr(check, piece)(factory)
    assert not report
    assert caught_by in report.failed, str(report)


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


def smoothing_over_all_classes(vocab_size, pad_id, smoothing):
    """PyTorch's label_smoothing: eps spread over all V classes, the label and padding included."""

    def loss(logits, target):
        return F.cross_entropy(
            logits.reshape(-1, vocab_size),
            target.reshape(-1),
            ignore_index=pad_id,
            label_smoothing=smoothing,
            reduction="sum",
        )

    return loss


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


def lr_counted_from_zero(step, d_model, warmup):  # the first update gets the rate of step 2
    step += 1
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def lr_max_not_min(step, d_model, warmup):
    return d_model**-0.5 * max(step**-0.5, step * warmup**-1.5)


def lr_step_zero_clamped(step, d_model, warmup):  # step 0 silently gets step 1's rate
    step = max(step, 1)
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
):
    """Greedy decoding with a switch for each classic mistake."""
    memory = model.encode(src, src_mask)
    ys = torch.full((src.size(0), 1), bos_id if start is None else start)
    done = torch.zeros(src.size(0), dtype=torch.bool)
    for _ in range(max_len + extra_steps):
        prefix = ys if feed_back else ys[:, :1]
        out = model.decode(memory, src_mask, prefix, causal_mask(prefix.size(1)))
        logits = model.generator(out[:, position])
        if mask_pad:
            logits[:, pad_id] = float("-inf")
        token = logits.argmax(-1)
        if pad_after_eos:
            token = token.masked_fill(done, pad_id)
        ys = torch.cat([ys, token[:, None]], 1)
        done |= token == eos_id
        if done.all():
            break
    return ys


WRONG_TRAINING_PIECES = [
    ("embeddings", EmbeddingsUnscaled, "scaled_by_sqrt_d_model"),
    ("embeddings", EmbeddingsScaledByDModel, "scaled_by_sqrt_d_model"),
    ("embeddings", EmbeddingsWithPositions, "same_token_same_vector"),
    ("embeddings", EmbeddingsWithDropout, "deterministic_in_eval"),
    ("label_smoothing", smoothing_over_all_classes, "matches_reference"),
    ("label_smoothing", smoothing_over_all_classes, "minimum_at_smoothed_target"),
    ("label_smoothing", SmoothingPadScored, "pad_targets_contribute_nothing"),
    ("label_smoothing", SmoothingMean, "sums_over_tokens"),
    ("label_smoothing", SmoothingLogOfSoftmax, "finite_with_large_logits"),
    ("learning_rate", lr_counted_from_zero, "peak_at_warmup"),
    ("learning_rate", lr_max_not_min, "matches_closed_form"),
    ("learning_rate", lr_step_zero_clamped, "step_zero_is_refused"),
    ("learning_rate", lr_warmup_exponent, "linear_warmup"),
    ("greedy_decode", partial(greedy, start=0), "starts_with_bos"),
    ("greedy_decode", partial(greedy, position=0), "each_token_is_argmax_of_prefix"),
    ("greedy_decode", partial(greedy, feed_back=False), "each_token_is_argmax_of_prefix"),
    ("greedy_decode", partial(greedy, extra_steps=1), "stops_at_max_len"),
    ("greedy_decode", partial(greedy, mask_pad=False), "pad_is_never_a_token"),
    ("greedy_decode", partial(greedy, pad_after_eos=False), "stops_after_eos"),
]


@pytest.mark.parametrize(
    "piece, wrong, caught_by",
    WRONG_TRAINING_PIECES,
    ids=[
        "embeddings_unscaled",
        "embeddings_scaled_by_d_model",
        "positions_inside_the_embedding",
        "embedding_dropout_always_on",
        "smoothing_over_all_classes-reference",
        "smoothing_over_all_classes-minimum",
        "pad_targets_scored",
        "smoothed_loss_averaged",
        "log_of_softmax",
        "steps_counted_from_zero",
        "max_not_min",
        "step_zero_clamped",
        "warmup_exponent",
        "decoding_from_pad",
        "logits_of_first_position",
        "choices_not_fed_back",
        "one_step_too_many",
        "pad_not_excluded",
        "writes_after_eos",
    ],
)
def test_wrong_training_pieces_are_caught(piece, wrong, caught_by):
    report = getattr(check, piece)(wrong)
    assert not report
    assert caught_by in report.failed, str(report)


# ---- Correct implementations pass every check ----------------------------------------------------


class TorchMultiHead(nn.Module):
    """nn.MultiheadAttention behind our call: its bool masks mean True = hide, one per head."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.mha = nn.MultiheadAttention(d_model, n_heads, batch_first=True)

    def forward(self, query, key, value, mask=None):
        if mask is not None:
            B, T, S = query.size(0), query.size(1), key.size(1)
            mask = ~mask.expand(B, self.mha.num_heads, T, S).reshape(-1, T, S)
        return self.mha(query, key, value, attn_mask=mask, need_weights=False)[0]


class TorchEncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model, n_heads, d_ff, batch_first=True)

    def forward(self, x, mask=None):  # mask (B, 1, 1, S) -> key padding mask (B, S), True = pad
        return self.layer(x, src_key_padding_mask=None if mask is None else ~mask[:, 0, 0])


class TorchDecoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff):
        super().__init__()
        self.layer = nn.TransformerDecoderLayer(d_model, n_heads, d_ff, batch_first=True)

    def forward(self, x, memory, src_mask, tgt_mask):
        return self.layer(
            x, memory, tgt_mask=~tgt_mask[0, 0], memory_key_padding_mask=~src_mask[:, 0, 0]
        )


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
    assert all(passed for _, passed, _ in report.results)


@pytest.mark.slow
def test_the_paper_sized_model_passes():
    assert check.model(make_model)  # d_model 512, six layers each side: still a few seconds


# ---- The checker itself --------------------------------------------------------------------------


def test_a_report_is_a_table_of_named_results():
    report = check.attention(unscaled)
    assert all(
        isinstance(name, str) and isinstance(passed, bool) and message
        for name, passed, message in report.results
    )
    text, page = str(report), report._repr_html_()
    assert text.splitlines()[0].startswith("check.attention:") and "FAIL" in text
    assert all(name in text and f"<code>{name}</code>" in page for name, _, _ in report.results)
    assert page.startswith("<div") and "<table>" in page and "scaled_by_sqrt_dk" in report.failed


def test_an_implementation_that_raises_is_reported_not_raised():
    def broken(q, k, v, mask=None):
        raise RuntimeError("not written yet")

    report = check.attention(broken)
    assert not report and all("not written yet" in message for _, _, message in report.results)
    failing_factory = check.multi_head(lambda d, h: 1 / 0)
    assert [r.name for r in failing_factory.results] == ["builds"]
    assert "ZeroDivisionError" in failing_factory.results[0].message
    not_a_module = check.layer_norm(lambda d: lambda x: x)
    assert not not_a_module and "expected an nn.Module" in not_a_module.results[0].message


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


def test_cli_fails_a_buggy_file_and_names_the_property(solutions, capsys):
    assert main(["check", "attention", f"{solutions / 'buggy.py'}:my_attention"]) == 1
    out = capsys.readouterr().out
    assert "FAIL  scaled_by_sqrt_dk" in out


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
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)

def clamped(step, d_model, warmup):
    step = max(step, 1)
    return d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)
"""


def test_cli_grades_the_training_pieces(tmp_path, capsys):
    (tmp_path / "rates.py").write_text(textwrap.dedent(RATES))
    assert main(["check", "learning_rate", f"{tmp_path / 'rates.py'}:noam"]) == 0
    assert "check.learning_rate: 5 of 5 properties hold" in capsys.readouterr().out
    assert main(["check", "learning_rate", f"{tmp_path / 'rates.py'}:clamped"]) == 1
    assert "FAIL  step_zero_is_refused" in capsys.readouterr().out


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
    assert all(check_named(name) is getattr(checks, name) for name in CHECKED)
