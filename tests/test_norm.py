"""Tests for annotated.norm: hand-written LayerNorm and the residual sub-layer connection (§3.1, §5.4)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.testing import assert_close

from annotated.model import Dropout, LayerNorm, SublayerConnection


def randomised(d_model: int, eps: float) -> tuple[LayerNorm, nn.LayerNorm]:
    """Our LayerNorm with random gain and bias, and nn.LayerNorm holding a copy of them."""
    ours = LayerNorm(d_model, eps=eps)
    with torch.no_grad():
        ours.weight.normal_()
        ours.bias.normal_()
    ref = nn.LayerNorm(d_model, eps=eps)
    ref.load_state_dict(ours.state_dict())
    return ours, ref


@settings(max_examples=30, deadline=None)
@given(
    lead=st.lists(st.integers(1, 4), min_size=0, max_size=3),
    d_model=st.integers(1, 96),
    eps=st.sampled_from([1e-12, 1e-6, 1e-5, 1e-3, 0.1]),
    scale=st.sampled_from([1e-3, 1.0, 30.0]),
    seed=st.integers(0, 2**16),
)
def test_layer_norm_equals_torch_forward_and_gradients(lead, d_model, eps, scale, seed):
    torch.manual_seed(seed)
    ours, ref = randomised(d_model, eps)
    x = (scale * torch.randn(*lead, d_model, dtype=torch.float64) + 0.5).requires_grad_()
    ours, ref = ours.double(), ref.double()
    y_ours, y_ref = ours(x), ref(x)
    assert_close(y_ours, y_ref)
    upstream = torch.randn_like(y_ours)
    grads_ours = torch.autograd.grad(y_ours, (x, ours.weight, ours.bias), upstream)
    grads_ref = torch.autograd.grad(y_ref, (x, ref.weight, ref.bias), upstream)
    for g_ours, g_ref in zip(grads_ours, grads_ref, strict=True):
        assert_close(g_ours, g_ref)


def test_layer_norm_float32_matches_torch():
    torch.manual_seed(0)
    ours, ref = randomised(512, 1e-5)
    x = 3 * torch.randn(4, 10, 512) + 1
    assert_close(ours(x), ref(x))


def test_layer_norm_defaults_and_state_dict_compatibility():
    ours = LayerNorm(8)
    ref = nn.LayerNorm(8)
    assert ours.eps == ref.eps == 1e-5
    assert ours.state_dict().keys() == ref.state_dict().keys()
    assert torch.equal(ours.weight, torch.ones(8)) and torch.equal(ours.bias, torch.zeros(8))
    ref.load_state_dict(ours.state_dict())  # and the other way round
    ours.load_state_dict(ref.state_dict())


def test_layer_norm_output_statistics():
    x = 5 * torch.randn(6, 64, dtype=torch.float64) - 2
    y = LayerNorm(64, eps=0.0).double()(x)
    assert_close(y.mean(-1), torch.zeros(6, dtype=torch.float64))
    assert_close(y.var(-1, correction=0), torch.ones(6, dtype=torch.float64))


def test_layer_norm_is_not_the_unbiased_std_variant():
    torch.manual_seed(0)
    x = torch.randn(16, 8)
    variant = (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + 1e-5)
    assert (LayerNorm(8)(x) - variant).abs().max() > 0.05


def sublayer_and_reference(d_model: int, norm_first: bool, eps: float = 1e-5):
    """A SublayerConnection, a small FFN and an nn.LayerNorm that holds a copy of its norm."""
    block = SublayerConnection(d_model, dropout=0.0, norm_first=norm_first)
    block.norm.eps = eps
    with torch.no_grad():
        block.norm.weight.normal_()
        block.norm.bias.normal_()
    ln = nn.LayerNorm(d_model, eps=eps)
    ln.load_state_dict(block.norm.state_dict())
    ffn = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.ReLU(), nn.Linear(2 * d_model, d_model))
    return block, ln, ffn


@settings(max_examples=15, deadline=None)
@given(
    batch=st.integers(1, 3),
    length=st.integers(1, 6),
    d_model=st.integers(2, 32),
    norm_first=st.booleans(),
)
def test_sublayer_connection_formulas(batch, length, d_model, norm_first):
    torch.manual_seed(0)
    block, ln, ffn = sublayer_and_reference(d_model, norm_first)
    x = torch.randn(batch, length, d_model)
    expected = x + ffn(ln(x)) if norm_first else ln(x + ffn(x))
    assert_close(block(x, ffn), expected)


def test_post_ln_is_the_default():
    block = SublayerConnection(16)
    assert block.norm_first is False and block.dropout.p == 0.1 and block.norm.eps == 1e-5


@pytest.mark.parametrize("norm_first", [False, True])
def test_dropout_falls_on_the_sublayer_output(norm_first):
    torch.manual_seed(0)
    d_model = 16
    block = SublayerConnection(d_model, dropout=0.5, norm_first=norm_first).train()
    ln = nn.LayerNorm(d_model)
    ffn = nn.Linear(d_model, d_model)
    x = torch.randn(3, 5, d_model)
    torch.manual_seed(1)
    y = block(x, ffn)
    torch.manual_seed(1)

    def drop(t, p):  # the module's own draw (notebook 05), replayed from the same seed
        return Dropout(p)(t)

    expected = x + drop(ffn(ln(x)), 0.5) if norm_first else ln(x + drop(ffn(x), 0.5))
    assert_close(y, expected)
    # in eval mode the dropout is the identity
    block.eval()
    assert_close(block(x, ffn), x + ffn(ln(x)) if norm_first else ln(x + ffn(x)))


@pytest.mark.parametrize("norm_first", [False, True])
def test_gradients_flow_to_sublayer_norm_and_input(norm_first):
    torch.manual_seed(0)
    block, _, ffn = sublayer_and_reference(8, norm_first)
    x = torch.randn(2, 4, 8, requires_grad=True)
    block(x, ffn).square().sum().backward()
    for p in [x, *block.parameters(), *ffn.parameters()]:
        assert p.grad is not None and p.grad.abs().sum() > 0
