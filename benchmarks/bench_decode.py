"""Greedy decoding time with and without the key/value cache, side by side.

Prints, for 32, 64 and 128 generated tokens, the median decode time of each and the speed-up of the
cache (target: at least 5x at 128 tokens). The model is of moderate size (d_model 256, 8 heads, d_ff 1024,
3 + 3 layers, vocabularies of 1000), the batch 8 sentences of 32 tokens, and decoding is forced to run
to the full length (an eos_id the model never produces). A benchmark prints; it never fails.

Usage: python benchmarks/bench_decode.py [--repeats N] [--device cpu|cuda] [--threads N]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from annotated.data import BOS, PAD
from annotated.decoding import greedy_decode
from annotated.model import make_model

NEVER = -1  # NEVER: an eos_id outside the vocabulary, so every step runs


def timed_decode(model, src, n: int, use_cache: bool, repeats: int) -> tuple[float, torch.Tensor]:
    """Median seconds of `repeats` greedy decodes of n tokens, and the tokens of the last one."""
    times = []
    for _ in range(repeats):
        if src.device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        out = greedy_decode(model, src, None, n, BOS, NEVER, PAD, use_cache=use_cache)
        if src.device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times), out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per case (median)")
    parser.add_argument("--device", default="cpu", help="cpu (default) or cuda")
    parser.add_argument(
        "--threads", type=int, default=None, help="torch CPU threads (default: torch's)"
    )
    parser.add_argument("--batch", type=int, default=8, help="sentences decoded together")
    parser.add_argument(
        "--lengths", type=int, nargs="+", default=[32, 64, 128], help="tokens to generate"
    )
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    model = make_model(1000, 1000, d_model=256, n_heads=8, d_ff=1024, n_layers=3, dropout=0.0)
    model = model.to(device).eval()
    src = torch.randint(3, 1000, (args.batch, 32), device=device)  # (B, S)
    print(
        f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}, "
        f"batch {args.batch} x 32 source tokens, median of {args.repeats}"
    )
    greedy_decode(model, src, None, 8, BOS, NEVER, PAD)  # warm-up
    greedy_decode(model, src, None, 8, BOS, NEVER, PAD, use_cache=False)
    print(f"{'tokens':>6} {'cache ms':>10} {'no cache ms':>12} {'speed-up':>9} {'same tokens':>12}")
    for n in args.lengths:
        with_cache, tokens = timed_decode(model, src, n, True, args.repeats)
        without, tokens_nc = timed_decode(model, src, n, False, args.repeats)
        same = "yes" if torch.equal(tokens, tokens_nc) else "NO"
        print(
            f"{n:>6} {1000 * with_cache:10.1f} {1000 * without:12.1f} "
            f"{without / with_cache:8.1f}x {same:>12}"
        )


if __name__ == "__main__":
    main()
