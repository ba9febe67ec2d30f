"""Label-smoothing loss, forward and backward: ours against PyTorch's fused cross-entropy.

Prints the median time of three ways to compute the loss of notebook 12 for B*T target positions over a
vocabulary of n_vocab, and their ratios to PyTorch's `F.cross_entropy(label_smoothing=...)` (a close
relative: it spreads eps over all n_vocab classes, so its value differs slightly; appendix 33 gives the
exact relation):

- `FastLabelSmoothingLoss` of appendix 33: the label's term plus one sum per row, without building q;
- the explicit form -sum(q * log p) with the (B*T, n_vocab) target distribution q built, as the paper states it.

The sizes default to a Multi30k batch of notebook 16 (about 1,800 target tokens, 8,000 subwords). The
three values are checked to agree before timing. A benchmark prints; it never fails.

Usage: python benchmarks/bench_loss.py [--tokens N] [--vocab V] [--repeats R] [--threads T]
"""

from __future__ import annotations

import argparse
from functools import partial

import torch
import torch.nn.functional as F
from _timing import median_ms

from annotated.data import PAD
from annotated.training import FastLabelSmoothingLoss

EPS = 0.1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=1800, help="target positions N")
    parser.add_argument("--vocab", type=int, default=8000, help="vocabulary size V")
    parser.add_argument("--repeats", type=int, default=15, help="timed runs per way (median)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    V = args.vocab
    ours = FastLabelSmoothingLoss(V, PAD, EPS)

    def explicit(logits, target):
        q = ours.target_distribution(target)  # (N, V)
        return -(q * logits.log_softmax(-1).masked_fill(q == 0, 0.0)).sum()

    def pytorch(logits, target):
        smoothing = EPS * V / (V - 2)  # the same mass on each class that is neither label nor pad
        return F.cross_entropy(
            logits, target, label_smoothing=smoothing, ignore_index=PAD, reduction="sum"
        )

    logits = torch.randn(args.tokens, V, requires_grad=True)  # (N, V)
    target = torch.randint(3, V, (args.tokens,))
    target[: args.tokens // 20] = PAD  # a few padded positions

    def backward(fn):
        logits.grad = None
        fn(logits, target).backward()

    values = [f(logits, target).item() for f in (ours, explicit, pytorch)]
    assert abs(values[0] - values[1]) <= 1e-4 * abs(values[1]), values
    print(
        f"torch {torch.__version__}, {args.threads} thread(s), N {args.tokens}, V {V}, "
        f"forward + backward, median of {args.repeats}"
    )
    reference = median_ms(partial(backward, pytorch), args.repeats)
    print(f"{'F.cross_entropy(label_smoothing)':34s} {reference:8.1f} ms   1.00")
    for name, fn in (
        ("FastLabelSmoothingLoss (three terms)", ours),
        ("explicit -sum(q log p)", explicit),
    ):
        ms = median_ms(partial(backward, fn), args.repeats)
        print(f"{name:34s} {ms:8.1f} ms   {ms / reference:.2f}")


if __name__ == "__main__":
    main()
