"""Tests for annotated.positional: the sinusoidal table, its shift property and the module (§3.5)."""

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn
from torch.testing import assert_close

from annotated.model import (
    Dropout,
    PositionalEncoding,
    angular_frequencies,
    relative_shift_matrix,
    sinusoidal_encoding,
)


def formula(pos: int, j: int, d_model: int) -> float:
    """PE(pos, j) written out as in §3.5, one entry at a time."""
    angle = pos / 10000 ** ((j - j % 2) / d_model)
    return math.sin(angle) if j % 2 == 0 else math.cos(angle)


@pytest.mark.parametrize("d_model", [2, 7, 64, 512])
def test_encoding_matches_formula(d_model):
    pe = sinusoidal_encoding(300, d_model)
    assert pe.shape == (300, d_model)
    assert pe.dtype == torch.get_default_dtype()
    gen = torch.Generator().manual_seed(0)
    positions = torch.randint(0, 300, (200,), generator=gen).tolist()
    columns = torch.randint(0, d_model, (200,), generator=gen).tolist()
    for pos, j in zip(positions, columns, strict=True):
        assert pe[pos, j].item() == pytest.approx(formula(pos, j, d_model), abs=1e-6)


def test_first_row_and_value_range():
    pe = sinusoidal_encoding(1000, 64)
    assert torch.equal(pe[0, 0::2], torch.zeros(32))  # sin(0)
    assert torch.equal(pe[0, 1::2], torch.ones(32))  # cos(0)
    assert pe.abs().max() <= 1.0
    # each (sin, cos) pair is a unit vector, so the squared row norm is d_model / 2
    assert_close((pe**2).sum(-1), torch.full((1000,), 32.0))


def test_odd_d_model_drops_the_last_cosine():
    pe = sinusoidal_encoding(40, 5)
    omega = angular_frequencies(5)
    assert pe.shape == (40, 5) and omega.shape == (3,)
    pos = torch.arange(40, dtype=torch.float64)
    assert_close(pe[:, 4], torch.sin(pos * omega[2]).float())  # last column is a sine


def test_wavelengths_are_geometric():
    wavelengths = 2 * math.pi / angular_frequencies(512)
    assert wavelengths[0].item() == pytest.approx(2 * math.pi)
    assert wavelengths[-1].item() == pytest.approx(2 * math.pi * 10000 ** (510 / 512))
    ratios = wavelengths[1:] / wavelengths[:-1]
    assert_close(ratios, torch.full_like(ratios, 10000 ** (2 / 512)))


@settings(max_examples=30, deadline=None)
@given(
    pos=st.integers(0, 2000),
    k=st.integers(0, 2000),
    half=st.integers(1, 64),
)
def test_rotation_property(pos, k, half):
    d_model = 2 * half
    pe = sinusoidal_encoding(pos + k + 1, d_model)
    m_k = relative_shift_matrix(k, d_model)
    assert_close(m_k @ pe[pos], pe[pos + k], atol=2e-6, rtol=0)
    # going back by k is the transpose (inverse) of going forward
    assert_close(relative_shift_matrix(-k, d_model) @ pe[pos + k], pe[pos], atol=2e-6, rtol=0)


@settings(max_examples=20, deadline=None)
@given(j=st.integers(-500, 500), k=st.integers(-500, 500), half=st.integers(1, 32))
def test_shift_matrices_form_a_group_of_rotations(j, k, half):
    d_model = 2 * half
    m_j, m_k = relative_shift_matrix(j, d_model), relative_shift_matrix(k, d_model)
    assert_close(m_j @ m_k, relative_shift_matrix(j + k, d_model), atol=1e-5, rtol=0)
    assert_close(m_k @ m_k.T, torch.eye(d_model), atol=1e-6, rtol=0)


def test_shift_matrix_is_block_diagonal():
    m = relative_shift_matrix(5, 8)
    mask = torch.block_diag(*[torch.ones(2, 2)] * 4).bool()
    assert torch.equal(m[~mask], torch.zeros(int((~mask).sum())))


def test_dot_product_depends_on_offset_only():
    pe = sinusoidal_encoding(1200, 64).double()
    ks = torch.arange(200)
    dots = torch.stack([(pe[p] * pe[p + ks]).sum(-1) for p in (0, 333, 999)])  # (3, 200)
    closed_form = torch.cos(ks[:, None] * angular_frequencies(64)).sum(-1)
    assert_close(dots, closed_form.expand_as(dots), atol=1e-4, rtol=0)


def test_module_adds_the_table_exactly_in_eval():
    torch.manual_seed(0)
    module = PositionalEncoding(d_model=32, max_len=100).eval()
    x = torch.randn(3, 17, 32)
    assert torch.equal(module(x), x + sinusoidal_encoding(100, 32)[:17])


def test_dropout_acts_on_the_sum():
    torch.manual_seed(0)
    module = PositionalEncoding(d_model=32, dropout=0.5, max_len=100).train()
    x = torch.randn(4, 20, 32)
    total = x + sinusoidal_encoding(100, 32)[:20]
    torch.manual_seed(1)
    y = module(x)
    torch.manual_seed(1)
    assert_close(y, Dropout(0.5)(total))
    kept = y != 0
    assert 0 < kept.float().mean() < 1
    assert_close(y[kept], 2 * total[kept])


def test_default_matches_the_paper():
    module = PositionalEncoding(d_model=512)
    assert module.max_len == 5000 and module.dropout.p == 0.1 and not module.learned
    assert module.pe.shape == (5000, 512)


def test_sinusoidal_table_is_a_non_persistent_buffer():
    module = PositionalEncoding(d_model=16, max_len=50)
    assert list(module.parameters()) == []
    assert "pe" in dict(module.named_buffers())
    assert "pe" not in module.state_dict()
    # it follows the module through dtype (and device) moves
    assert module.to(torch.float64).pe.dtype == torch.float64


def test_learned_flag_has_trainable_positions():
    torch.manual_seed(0)
    module = PositionalEncoding(d_model=16, dropout=0.0, max_len=50, learned=True)
    params = dict(module.named_parameters())
    assert list(params) == ["embedding.weight"] and params["embedding.weight"].shape == (50, 16)
    assert "pe" not in dict(module.named_buffers())
    x = torch.randn(2, 7, 16)
    y = module(x)
    assert torch.equal(y, x + module.embedding.weight[:7])
    y.sum().backward()
    grad = module.embedding.weight.grad
    assert (grad[:7] != 0).all() and (grad[7:] == 0).all()


@pytest.mark.parametrize("learned", [False, True])
def test_too_long_sequence_raises(learned):
    module = PositionalEncoding(d_model=8, max_len=10, learned=learned)
    module(torch.randn(1, 10, 8))  # exactly max_len is fine
    with pytest.raises(ValueError, match=r"sequence length 11 exceeds max_len=10"):
        module(torch.randn(1, 11, 8))


def test_bad_sizes_raise():
    with pytest.raises(ValueError, match=r"max_len must be a positive int, got 0"):
        sinusoidal_encoding(0, 8)
    with pytest.raises(ValueError, match=r"d_model must be a positive int, got -2"):
        sinusoidal_encoding(4, -2)
    with pytest.raises(ValueError, match=r"d_model must be a positive int, got 8.0"):
        angular_frequencies(8.0)
    with pytest.raises(ValueError, match=r"d_model must be a positive int, got True"):
        angular_frequencies(True)
    with pytest.raises(ValueError, match=r"max_len must be a positive int, got 0"):
        PositionalEncoding(d_model=8, max_len=0, learned=True)
    with pytest.raises(ValueError, match=r"d_model must be even, got d_model=7"):
        relative_shift_matrix(1, 7)


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_keeps_each_entry_with_probability_one_minus_p(p):
    """The uniform draw gives nn.Dropout's distribution: the kept share, their scale, the mean."""
    torch.manual_seed(0)
    x = torch.rand(400, 500) + 0.5  # no zeros, so a zero in the output was dropped
    n = x.numel()
    for drop in (Dropout(p), nn.Dropout(p)):  # the same bounds hold for PyTorch's own
        y = drop.train()(x)
        kept = y != 0
        assert abs(kept.float().mean().item() - (1 - p)) < 5 * math.sqrt(p * (1 - p) / n)
        assert_close(y[kept], x[kept] / (1 - p))
    draws = torch.stack([Dropout(p)(x[:4, :5]) for _ in range(20_000)])  # (20000, 4, 5)
    assert_close(draws.mean(0), x[:4, :5], atol=0.05, rtol=0)  # E[dropout(x)] = x


def test_dropout_gradient_is_the_mask_times_the_scale():
    torch.manual_seed(0)
    x = (torch.rand(30, 40) + 0.5).requires_grad_()
    grad = torch.randn(30, 40)
    y = Dropout(0.25)(x)
    y.backward(grad)
    assert_close(x.grad, grad * (y != 0) / 0.75)


def test_dropout_edges_and_modes():
    x = torch.randn(8, 9)
    assert isinstance(Dropout(0.1), nn.Dropout)  # a drop-in replacement, repr and checks included
    assert torch.equal(Dropout(0.5).eval()(x), x)  # identity outside training
    assert torch.equal(Dropout(0.0)(x), x)
    dropped = Dropout(1.0)(x)
    assert torch.equal(dropped, torch.zeros_like(x))  # everything dropped, and no 0/0
    assert dropped.dtype == x.dtype and Dropout(0.5)(x.double()).dtype == torch.float64
    with pytest.raises(ValueError, match="1.5"):
        Dropout(1.5)
