"""Updates per second of the Multi30k CPU recipe (preset multi30k-cpu-60min), side by side.

The recipe's model, loss, Adam and schedule, trained by `train_step_at_scale` on real Multi30k batches of at
most `max_tokens` tokens, in one process. Four ways to run the same updates:
  recorded the recorded run's path: the explicit (B, 1, T, T) look-ahead mask and PyTorch's
           nn.Dropout (Bernoulli draws);
  mask     the same mask, with the package's Dropout (uniform draws compared with p, notebook 05);
  causal   the fused causal path (`tgt_is_causal`) that `train_step_at_scale` takes for batches padded at
           their ends, which all of Multi30k's are;
  compile  the causal path with the model under `torch.compile` (inductor on the CPU).
Each trains its own copy of the same initial model on the same batches; the variants take turns so
that all see the same machine. Prints the median seconds per update, updates per second and the
ratio to the first row. A benchmark prints; it never fails.
Usage: python benchmarks/bench_recipe.py [--updates N] [--threads N] [--no-compile] [--data-dir D]
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import time
from itertools import islice
from pathlib import Path

import torch

from annotated import PRESETS, make_model
from annotated.app import run_config
from annotated.data import (
    MULTI30K_ENV,
    PAD,
    encode_pairs,
    load_multi30k,
    load_tokenizer,
    token_batches,
)
from annotated.model import Dropout
from annotated.training import (
    CheckedBatch,
    FastLabelSmoothingLoss,
    make_optimizer,
    noam_scheduler,
    train_step_at_scale,
)

ROOT = Path(__file__).resolve().parents[1]


def recipe_batches(data_dir: str, count: int, max_tokens: int) -> tuple[list[CheckedBatch], int]:
    tok = load_tokenizer(ROOT / "results" / "multi30k" / "tokenizer.json")
    pairs = load_multi30k("train", data_dir)[:8000]
    examples = encode_pairs(tok, [(p.src, p.tgt) for p in pairs])
    stream = token_batches(examples, max_tokens, shuffle=True, seed=0)
    batches = [CheckedBatch(src, tgt, PAD) for src, tgt in islice(stream, count)]
    return batches, tok.get_vocab_size()


def with_mask(b: CheckedBatch) -> CheckedBatch:
    masked = copy.copy(b)
    masked.tgt_mask = b.tgt_mask  # a mask set on the batch switches the fused causal path off
    return masked


def with_torch_dropout(model: torch.nn.Module) -> None:
    """Put PyTorch's nn.Dropout where the model has the package's Dropout (same rate)."""
    for module in list(model.modules()):
        for name, child in module.named_children():
            if type(child) is Dropout:
                setattr(module, name, torch.nn.Dropout(child.p))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=24, help="timed updates per variant")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile row")
    default_data = os.environ.get(MULTI30K_ENV) or str(ROOT.parent / "shared/data/multi30k")
    parser.add_argument("--data-dir", default=default_data)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    recipe = PRESETS["multi30k-cpu-60min"]
    warm = 3  # untimed updates per variant (compilation happens in these and on new shapes)
    batches, vocab = recipe_batches(args.data_dir, warm + args.updates, recipe["max_tokens"])
    assert all(b.causal_only for b in batches), "Multi30k batches are padded at their ends"
    torch.manual_seed(0)
    config = run_config(recipe).model.overrides()  # every model field the preset sets
    base = make_model(vocab, vocab, shared_vocab=True, **config)
    masked = [with_mask(b) for b in batches]
    variants = {
        "recorded": (False, masked, True),
        "mask": (False, masked, False),
        "causal": (False, batches, False),
    }
    if not args.no_compile:
        variants["compile"] = (True, batches, False)

    runs = {}
    for name, (compiled, data, torch_dropout) in variants.items():
        model = copy.deepcopy(base)
        if torch_dropout:
            with_torch_dropout(model)
        optimizer = make_optimizer(model)
        scheduler = noam_scheduler(
            optimizer, config["d_model"], recipe["warmup"], recipe["lr_factor"]
        )
        loss_fn = FastLabelSmoothingLoss(vocab, PAD, smoothing=0.1)
        net = torch.compile(model, dynamic=True) if compiled else model
        runs[name] = (net, loss_fn, optimizer, scheduler, data)

    def update(name: str, i: int) -> float:
        net, loss_fn, optimizer, scheduler, data = runs[name]
        start = time.perf_counter()
        train_step_at_scale(net, loss_fn, optimizer, data[i], scheduler)
        return time.perf_counter() - start

    warm_seconds = {name: sum(update(name, i) for i in range(warm)) for name in runs}
    times = {name: [] for name in runs}
    for i in range(warm, warm + args.updates):  # take turns, update by update
        for name in runs:
            times[name].append(update(name, i))

    tokens = statistics.mean(b.n_tokens for b in batches[warm:])
    print(
        f"torch {torch.__version__}, threads {torch.get_num_threads()}, {args.updates} timed updates"
    )
    print(f"recipe multi30k-cpu-60min: {config}, about {tokens:.0f} target tokens per update")
    print(f"{'variant':>8} {'s/update':>9} {'updates/s':>10} {'ratio':>6} {'first 3 s':>10}")
    first = statistics.median(times[next(iter(times))])
    for name, t in times.items():
        median = statistics.median(t)
        print(
            f"{name:>8} {median:9.3f} {1 / median:10.2f} {median / first:6.2f} {warm_seconds[name]:10.1f}"
        )


if __name__ == "__main__":
    main()
