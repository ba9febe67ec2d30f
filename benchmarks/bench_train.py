"""One training step (forward, backward, Adam step) of make_model against nn.Transformer, side by side.

The reference wraps PyTorch's nn.Transformer in the same embeddings (one table shared by source, target
and output layer, as in ours), positional encodings and output layer, so both models have the same
parameters and do the same work. Prints the median step time
of each and the ratio (ours / PyTorch's; target <= 1.0), for ours twice: with the decoder's
(B, 1, T, T) mask, and with the fused causal path that train_step takes for batches padded at their ends
(`tgt_is_causal`). A benchmark prints; it never fails.
Usage: python benchmarks/bench_train.py [--repeats N] [--device cpu|cuda] [--tiny]
"""

from __future__ import annotations

import argparse
import statistics

import torch
from _timing import median_ms
from torch import nn

from annotated import causal_mask, make_model, padding_mask
from annotated.data import PAD
from annotated.model import Dropout

CONFIGS = [  # (d_model, heads, d_ff, layers, batch, length)
    (256, 8, 1024, 3, 32, 32),
    (512, 8, 2048, 2, 16, 64),
]
TINY = [(16, 2, 32, 1, 2, 8)]  # --tiny: what the suite runs to see the script still works
VOCAB = 8000


class TorchReference(nn.Module):
    """Our embeddings and generator around PyTorch's nn.Transformer (the paper's post-LN)."""

    def __init__(self, ours):
        super().__init__()
        cfg = ours.cfg
        self.src_embed, self.tgt_embed = ours.src_embed, ours.tgt_embed
        self.src_pos, self.tgt_pos, self.generator = ours.src_pos, ours.tgt_pos, ours.generator
        self.body = nn.Transformer(
            cfg.d_model,
            cfg.n_heads,
            cfg.n_layers,
            cfg.n_layers,
            cfg.d_ff,
            cfg.dropout,
            batch_first=True,
        )
        self.body.encoder.norm, self.body.decoder.norm = None, None  # post-LN: no extra final norms

    def forward(self, src, tgt, src_pad, tgt_causal):
        x = self.body(
            self.src_pos(self.src_embed(src)),
            self.tgt_pos(self.tgt_embed(tgt)),
            tgt_mask=tgt_causal,
            src_key_padding_mask=src_pad,
            memory_key_padding_mask=src_pad,
        )
        return self.generator(x)


def make_step(model, inputs, device, **options):
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    loss_fn = nn.CrossEntropyLoss(ignore_index=PAD)

    def step():
        optimizer.zero_grad(set_to_none=True)
        logits = model(*inputs[:-1], **options)
        loss_fn(logits.flatten(0, 1), inputs[-1].flatten()).backward()
        optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=25, help="timed steps per model (median)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tiny", action="store_true", help="one tiny model (a smoke test)")
    args = parser.parse_args()
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}")
    print(
        f"{'d_model':>7} {'layers':>6} {'B x T':>8} {'ours ms':>9} {'torch ms':>9} {'ratio':>6}"
        f" {'causal ms':>9} {'ratio':>6}"
    )
    for d, h, f, n, batch, length in TINY if args.tiny else CONFIGS:
        torch.manual_seed(0)
        ours = make_model(VOCAB, VOCAB, d_model=d, n_heads=h, d_ff=f, n_layers=n, shared_vocab=True)
        ours = ours.to(device).train()
        twin = make_model(VOCAB, VOCAB, d_model=d, n_heads=h, d_ff=f, n_layers=n, shared_vocab=True)
        ref = TorchReference(twin).to(device)  # the same shared table: the same parameters as ours
        src = torch.randint(4, VOCAB, (batch, length), device=device)
        src[: batch // 2, -length // 4 :] = PAD  # some padding, as in real batches
        tgt = torch.randint(4, VOCAB, (batch, length + 1), device=device)
        tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
        ours_inputs = (src, tgt_in, padding_mask(src, PAD), causal_mask(length, device), tgt_out)
        ref_inputs = (src, tgt_in, src == PAD, ~causal_mask(length, device)[0, 0], tgt_out)
        fused_inputs = (src, tgt_in, padding_mask(src, PAD), tgt_out)
        steps = (
            make_step(ours, ours_inputs, device),
            make_step(ref, ref_inputs, device),
            make_step(ours, fused_inputs, device, tgt_is_causal=True),
        )
        for step in steps:
            for _ in range(3):  # warm up: first calls allocate and pick kernels
                step()
        times = [[], [], []]
        for _ in range(args.repeats):  # take turns step by step: all see the same machine state
            for step, timed in zip(steps, times, strict=True):
                timed.append(median_ms(step, 1, warmup=0))
        a, b, c = (statistics.median(t) for t in times)
        print(
            f"{d:>7} {n:>3}+{n:<2} {batch:>3} x {length:<3} {a:9.1f} {b:9.1f} {a / b:6.2f}"
            f" {c:9.1f} {c / b:6.2f}"
        )
    # Drawing dropout masks is a large share of a CPU step: ours keeps the entries whose uniform draw
    # is >= p, PyTorch's nn.Dropout draws Bernoulli samples (notebook 05).
    x = torch.randn(32, 32, 256, device=device)
    draws = (Dropout(0.1).train(), nn.Dropout(0.1).train())
    times = [[], []]
    for _ in range(args.repeats * 4):
        for drop, timed in zip(draws, times, strict=True):
            timed.append(median_ms(lambda drop=drop: drop(x), 1, warmup=0))
    a, b = (statistics.median(t) for t in times)
    print(f"dropout on {tuple(x.shape)}: ours {a:.2f} ms, nn.Dropout {b:.2f} ms, ratio {a / b:.2f}")


if __name__ == "__main__":
    main()
