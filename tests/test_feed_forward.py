"""Tests for annotated.feed_forward: the position-wise FFN of §3.3 (Eq. 2)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.testing import assert_close

from annotated.model import Dropout, PositionwiseFeedForward, SublayerConnection

shapes = st.tuples(st.integers(1, 3), st.integers(1, 8), st.integers(1, 24), st.integers(1, 48))


@settings(max_examples=20, deadline=None)
@given(shape=shapes)
def test_equals_two_kernel_size_one_convolutions(shape):
    batch, length, d_model, d_ff = shape
    torch.manual_seed(0)
    ffn = PositionwiseFeedForward(d_model, d_ff).eval()
    conv1, conv2 = nn.Conv1d(d_model, d_ff, 1), nn.Conv1d(d_ff, d_model, 1)
    with torch.no_grad():
        conv1.weight.copy_(ffn.w_1.weight.unsqueeze(-1))  # (F, D, 1)
        conv1.bias.copy_(ffn.w_1.bias)
        conv2.weight.copy_(ffn.w_2.weight.unsqueeze(-1))  # (D, F, 1)
        conv2.bias.copy_(ffn.w_2.bias)
    x = torch.randn(batch, length, d_model)
    y_conv = conv2(torch.relu(conv1(x.transpose(1, 2)))).transpose(1, 2)  # (B, T, D)
    assert_close(ffn(x), y_conv)


def sequential_copy(ffn: PositionwiseFeedForward, p: float) -> nn.Sequential:
    """nn.Sequential(Linear, ReLU, Dropout, Linear) holding a copy of the FFN's weights."""
    ref = nn.Sequential(
        nn.Linear(ffn.w_1.in_features, ffn.w_1.out_features),
        nn.ReLU(),
        nn.Dropout(p),
        nn.Linear(ffn.w_2.in_features, ffn.w_2.out_features),
    )
    ref[0].load_state_dict(ffn.w_1.state_dict())
    ref[3].load_state_dict(ffn.w_2.state_dict())
    return ref


@settings(max_examples=20, deadline=None)
@given(shape=shapes)
def test_equals_sequential_reference_in_eval(shape):
    batch, length, d_model, d_ff = shape
    torch.manual_seed(0)
    ffn = PositionwiseFeedForward(d_model, d_ff).eval()
    ref = sequential_copy(ffn, 0.1).eval()
    x = torch.randn(batch, length, d_model)
    assert_close(ffn(x), ref(x))


def test_dropout_after_relu_in_training():
    torch.manual_seed(0)
    ffn = PositionwiseFeedForward(8, 32, dropout=0.3).train()
    ref = sequential_copy(ffn, 0.3).train()
    ref[2] = Dropout(0.3)  # the module's draw (notebook 05), replayed from the same seed
    x = torch.randn(2, 5, 8)
    torch.manual_seed(1)
    y = ffn(x)
    torch.manual_seed(1)
    assert_close(y, ref(x))


def test_gradients_match_the_reference():
    torch.manual_seed(0)
    ffn = PositionwiseFeedForward(8, 32, dropout=0.0)
    ref = sequential_copy(ffn, 0.0)
    x = torch.randn(3, 4, 8)
    ffn(x).square().sum().backward()
    ref(x).square().sum().backward()
    assert_close(ffn.w_1.weight.grad, ref[0].weight.grad)
    assert_close(ffn.w_2.bias.grad, ref[3].bias.grad)


@settings(max_examples=15, deadline=None)
@given(shape=shapes, seed=st.integers(0, 2**16))
def test_positions_are_treated_independently(shape, seed):
    batch, length, d_model, d_ff = shape
    torch.manual_seed(seed)
    ffn = PositionwiseFeedForward(d_model, d_ff).eval()
    x = torch.randn(batch, length, d_model)
    perm = torch.randperm(length)
    assert_close(ffn(x[:, perm]), ffn(x)[:, perm])
    alone = torch.stack([ffn(x[:, t]) for t in range(length)], dim=1)  # (B, T, D)
    assert_close(alone, ffn(x))


def test_matches_the_feed_forward_block_of_torch_encoder_layer():
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 64, dropout=0.0, batch_first=True)
    ffn = PositionwiseFeedForward(16, 64, dropout=0.0)
    ffn.w_1.load_state_dict(layer.linear1.state_dict())
    ffn.w_2.load_state_dict(layer.linear2.state_dict())
    x = torch.randn(2, 5, 16)
    assert_close(ffn(x), layer.linear2(layer.dropout(layer.activation(layer.linear1(x)))))


@pytest.mark.parametrize("norm_first", [False, True])
def test_sublayer_connections_rebuild_torch_encoder_layer(norm_first):
    """Two SublayerConnections (attention, FFN) on copied weights equal nn.TransformerEncoderLayer."""
    torch.manual_seed(0)
    d_model, d_ff = 16, 64
    layer = nn.TransformerEncoderLayer(
        d_model, 2, d_ff, dropout=0.0, batch_first=True, norm_first=norm_first
    )
    with torch.no_grad():  # non-trivial norm parameters, so a swapped norm would be caught
        for norm in (layer.norm1, layer.norm2):
            norm.weight.normal_()
            norm.bias.normal_()
    attn_sub = SublayerConnection(d_model, dropout=0.0, norm_first=norm_first)
    ffn_sub = SublayerConnection(d_model, dropout=0.0, norm_first=norm_first)
    attn_sub.norm.load_state_dict(layer.norm1.state_dict())
    ffn_sub.norm.load_state_dict(layer.norm2.state_dict())
    ffn = PositionwiseFeedForward(d_model, d_ff, dropout=0.0)
    ffn.w_1.load_state_dict(layer.linear1.state_dict())
    ffn.w_2.load_state_dict(layer.linear2.state_dict())

    def self_attention(h):
        return layer.self_attn(h, h, h, need_weights=False)[0]

    x = torch.randn(3, 7, d_model)
    expected = layer(x)
    assert_close(ffn_sub(attn_sub(x, self_attention), ffn), expected)


def test_defaults_and_names():
    ffn = PositionwiseFeedForward(512, 2048)
    assert ffn.dropout.p == 0.1
    assert ffn.w_1.weight.shape == (2048, 512) and ffn.w_2.weight.shape == (512, 2048)
    assert sum(p.numel() for p in ffn.parameters()) == 2 * 512 * 2048 + 2048 + 512
