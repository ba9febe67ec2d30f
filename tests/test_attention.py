"""Scaled dot-product attention (§3.2.1) against PyTorch's fused kernel, and its mask handling."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from annotated.model import attention


@settings(max_examples=25, deadline=None)
@given(
    batch=st.integers(1, 3),
    heads=st.integers(1, 4),
    t=st.integers(1, 9),
    s=st.integers(1, 9),
    d_k=st.integers(1, 16),
    seed=st.integers(0, 2**16),
    masked=st.booleans(),
)
def test_equals_torch_sdpa(batch, heads, t, s, d_k, seed, masked):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, t, d_k, generator=g)
    k = torch.randn(batch, heads, s, d_k, generator=g)
    v = torch.randn(batch, heads, s, d_k + 1, generator=g)
    mask = torch.rand(batch, 1, t, s, generator=g) > 0.4 if masked else None
    ours, weights = attention(q, k, v, mask=mask)
    torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    assert weights.shape == (batch, heads, t, s)


def test_weights_are_a_distribution_and_match_the_formula():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 5, 8), torch.randn(2, 7, 8), torch.randn(2, 7, 3)
    out, w = attention(q, k, v)
    expected = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(8), dim=-1)
    torch.testing.assert_close(w, expected)
    torch.testing.assert_close(out, expected @ v)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 5))


def test_unscaled_differs_from_scaled():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 4, 64), torch.randn(1, 4, 64), torch.randn(1, 4, 64)
    _, w_unscaled = attention(q, k, v, scale=False)
    torch.testing.assert_close(w_unscaled, torch.softmax(q @ k.transpose(-2, -1), dim=-1))
    assert not torch.allclose(w_unscaled, attention(q, k, v)[1])


def test_masked_keys_get_exactly_zero_weight():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 3, 4), torch.randn(1, 5, 4), torch.randn(1, 5, 4)
    mask = torch.tensor([True, True, False, True, False])
    _, w = attention(q, k, v, mask=mask)
    assert (w[..., ~mask] == 0).all()
    torch.testing.assert_close(w.sum(-1), torch.ones(1, 3))


def test_fully_masked_row_is_finite_and_zero():
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 4), torch.randn(1, 3, 4), torch.randn(1, 3, 4)
    mask = torch.tensor([[True, False, True], [False, False, False]])  # (T, S): row 1 sees nothing
    out, w = attention(q, k, v, mask=mask)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    assert (out[0, 1] == 0).all() and (w[0, 1] == 0).all()
    # and it agrees with PyTorch's fused kernel on that row too
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    # gradients stay finite as well
    q.requires_grad_(True)
    attention(q, k, v, mask=mask)[0].sum().backward()
    assert torch.isfinite(q.grad).all()


def test_half_precision_mask_fill_is_safe():
    q = torch.randn(1, 2, 4, dtype=torch.bfloat16)
    mask = torch.tensor([True, False])
    out, w = attention(q, q, q, mask=mask)
    assert torch.isfinite(out).all() and (w[..., 1] == 0).all()


def test_dropout_applies_to_weights_only_in_training():
    torch.manual_seed(0)
    q = torch.randn(2, 6, 8)
    drop = torch.nn.Dropout(0.5)
    _, w_train = attention(q, q, q, dropout=drop)
    assert (w_train == 0).any()
    drop.eval()
    _, w_eval = attention(q, q, q, dropout=drop)
    torch.testing.assert_close(w_eval.sum(-1), torch.ones(2, 6))


@pytest.mark.parametrize(
    ("mask", "error", "match"),
    [
        (torch.ones(1, 3, 5), TypeError, r"mask must have dtype torch.bool.*got torch.float32"),
        (
            torch.ones(1, 3, 5, dtype=torch.long),
            TypeError,
            r"mask must have dtype torch.bool.*torch.int64",
        ),
        ([[True] * 5] * 3, TypeError, r"mask must be a torch.Tensor.*got list"),
        (
            torch.ones(1, 3, 4, dtype=torch.bool),
            ValueError,
            r"mask of shape \(1, 3, 4\) cannot broadcast",
        ),
        (
            torch.ones(2, 3, 5, dtype=torch.bool),
            ValueError,
            r"mask of shape \(2, 3, 5\).*\(1, 3, 5\)",
        ),
    ],
)
def test_bad_mask_is_rejected(mask, error, match):
    q, k = torch.randn(1, 3, 4), torch.randn(1, 5, 4)
    with pytest.raises(error, match=match):
        attention(q, k, k, mask=mask)


def test_mismatched_feature_and_length_sizes_are_rejected():
    q = torch.randn(1, 3, 4)
    with pytest.raises(ValueError, match=r"key must have the query's feature size 4, got 5"):
        attention(q, torch.randn(1, 5, 5), torch.randn(1, 5, 4))
    with pytest.raises(ValueError, match=r"key and value must have the same length S, got 5 and 6"):
        attention(q, torch.randn(1, 5, 4), torch.randn(1, 6, 4))
