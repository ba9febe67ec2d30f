"""Forward + backward time of MultiHeadAttention against torch.nn.MultiheadAttention, side by side.

Prints a table with the median time of each and their ratio (ours / PyTorch's; target <= 1.0), then a
second table: our causal self-attention given the (1, 1, T, T) mask tensor against `is_causal=True`, the
fused kernel's own causal path (what `Transformer(..., tgt_is_causal=True)` uses), and their ratio
(is_causal / mask; below 1.0: the fused path is faster). A benchmark prints; it never fails. Usage: python benchmarks/bench_attention.py [--repeats N] [--tiny]
"""

from __future__ import annotations

import argparse
from functools import partial

import torch
from _timing import median_ms
from torch import nn

from annotated import MultiHeadAttention, causal_mask

SHAPES = [  # (B, T, d_model, heads)
    (32, 128, 512, 8),
    (64, 32, 256, 8),
    (8, 256, 512, 8),
]
TINY = [(2, 8, 16, 2)]  # --tiny: what the suite runs to see the script still works


def copy_weights(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.W_q.weight, ours.W_k.weight, ours.W_v.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.W_q.bias, ours.W_k.bias, ours.W_v.bias]))
        theirs.out_proj.weight.copy_(ours.W_o.weight)
        theirs.out_proj.bias.copy_(ours.W_o.bias)


def forward_backward(layer: nn.Module, x: torch.Tensor, kwargs: dict) -> None:
    out = layer(x, x, x, **kwargs)
    out = (
        out[0] if isinstance(out, tuple) else out
    )  # nn.MultiheadAttention returns (output, weights)
    out.sum().backward()
    if x.device.type == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10, help="timed runs per case (median)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tiny", action="store_true", help="one tiny shape (a smoke test)")
    args = parser.parse_args()
    shapes = TINY if args.tiny else SHAPES
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}")
    print(
        f"{'B':>4} {'T':>4} {'D':>4} {'H':>2} {'mask':>6} {'ours ms':>9} {'torch ms':>9} {'ratio':>6}"
    )
    for B, T, D, H in shapes:
        torch.manual_seed(0)
        ours = MultiHeadAttention(D, H, dropout=0.0).to(device)
        theirs = nn.MultiheadAttention(D, H, dropout=0.0, batch_first=True).to(device)
        copy_weights(ours, theirs)
        x = torch.randn(B, T, D, device=device, requires_grad=True)
        ours_mask = causal_mask(T, device=device)
        theirs_mask = ~ours_mask[0, 0]  # PyTorch: True = may NOT attend
        for masked in (False, True):
            ours_kw = {"mask": ours_mask} if masked else {}
            theirs_kw = {"attn_mask": theirs_mask, "need_weights": False} if masked else {}
            ours_step = partial(forward_backward, ours, x, ours_kw)
            theirs_step = partial(forward_backward, theirs, x, {"need_weights": False, **theirs_kw})
            # alternate the two, twice, so that both see the same machine state
            t_ours, t_theirs = [], []
            for _ in range(2):
                t_ours.append(median_ms(ours_step, args.repeats, warmup=3))
                t_theirs.append(median_ms(theirs_step, args.repeats, warmup=3))
            a, b = min(t_ours), min(t_theirs)
            label = "causal" if masked else "none"
            print(f"{B:>4} {T:>4} {D:>4} {H:>2} {label:>6} {a:9.2f} {b:9.2f} {a / b:6.2f}")
    causal_via_mask_or_flag(shapes, args.repeats, device)


def causal_via_mask_or_flag(shapes: list, repeats: int, device: torch.device) -> None:
    """Our layer's causal self-attention: the mask tensor against the fused kernel's is_causal."""
    print("\ncausal self-attention, forward + backward: mask tensor vs is_causal=True")
    print(f"{'B':>4} {'T':>4} {'D':>4} {'H':>2} {'mask ms':>9} {'causal ms':>9} {'ratio':>6}")
    for B, T, D, H in shapes:
        torch.manual_seed(0)
        layer = MultiHeadAttention(D, H, dropout=0.0).to(device)
        x = torch.randn(B, T, D, device=device, requires_grad=True)
        with_mask = partial(forward_backward, layer, x, {"mask": causal_mask(T, device=device)})
        with_flag = partial(forward_backward, layer, x, {"is_causal": True})
        t_mask, t_flag = [], []
        for _ in range(2):  # alternate, twice, as above
            t_mask.append(median_ms(with_mask, repeats, warmup=3))
            t_flag.append(median_ms(with_flag, repeats, warmup=3))
        a, b = min(t_mask), min(t_flag)
        print(f"{B:>4} {T:>4} {D:>4} {H:>2} {a:9.2f} {b:9.2f} {b / a:6.2f}")


if __name__ == "__main__":
    main()
