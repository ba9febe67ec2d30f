"""The package's Dropout (chapter 05): it keeps 1 - p of the entries in every floating-point dtype, and
in float32 it draws the masks it always drew."""

import math

import pytest
import torch

from annotated.model import Dropout

N = 4_000_000  # entries: the standard error of the kept fraction is below 2.5e-4


@pytest.mark.parametrize("p", [0.1, 0.3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_keeps_1_minus_p_of_the_entries_in_every_dtype(dtype, p):
    torch.manual_seed(0)
    x = torch.ones(N, dtype=dtype)
    out = Dropout(p).train()(x)
    kept = (out != 0).double().mean().item()
    margin = 6 * math.sqrt(
        p * (1 - p) / N
    )  # 6 standard errors: a seed would fail about once in 10^9
    assert abs(kept - (1 - p)) < margin, f"{dtype}: kept {kept}, expected {1 - p} ± {margin:.1e}"
    assert out.dtype == dtype
    scaled = (x.double() / (1 - p)).to(
        dtype
    )  # a kept entry: x / (1 - p), rounded once to x's dtype
    assert torch.equal(out[out != 0], scaled[out != 0])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_masks_are_the_uniform_draws_at_least_p(dtype):
    """Where x's own dtype is fine enough, an entry is kept where torch.rand_like(x) >= p: a seeded run
    draws the masks it drew before."""
    x = torch.randn(300, 70, dtype=dtype)
    torch.manual_seed(7)
    out = Dropout(0.3).train()(x)
    torch.manual_seed(7)
    draw = torch.rand_like(x)
    assert torch.equal(out, x * (draw >= 0.3).to(dtype).div(1 - 0.3))
