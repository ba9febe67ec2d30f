"""Record the runs of the mini Table 3: one change per row, three seeds each, one fixed budget.

Every run is `python -m annotated train` with the budget below plus the row's flags and `--seed K`,
then `python -m annotated evaluate --beam 1 --split val` on its final weights (greedy validation BLEU).
The test sets are never read. Each run leaves two files that the commands wrote themselves:

    results/table3/ROW/seedK.json       the training run (configuration, curve, val perplexity)
    results/table3/ROW/seedK.val.json   its greedy sacreBLEU on the validation split
    results/table3/rows.json            the budget, and each row's flags and change (for notebook 18)

A run whose two files exist is skipped, so the script picks up where an earlier call stopped. Runs go
`--jobs` at a time, each on one thread (on a 2-core machine, 2 jobs use both cores).

    python tools/table3.py --list                 # the rows and what each changes
    python tools/table3.py --jobs 2               # record every missing run (about 6 minutes each)
    python tools/table3.py --rows base A-heads-1 --seeds 0

With `--lr-factor F` the same rows run with Eq. 3 scaled by F and are kept apart, in
results/table3-lr-F/ (notebook 18's test of its post-LN rows at a rate near the paper's):

    python tools/table3.py --lr-factor 0.11 --rows base C-layers-4 no-warmup pre-LN
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from annotated.data import MULTI30K_ENV

ROOT = Path(__file__).resolve().parents[1]
# The budget of every row: notebook 18's small model, 500 updates of at most 2,048 tokens.
BUDGET = (
    "--task multi30k --steps 500 --d-model 128 --n-heads 8 --d-ff 512 --n-layers 2 --warmup 200 "
    "--max-tokens 2048 --eval-every 100 --log-every 100 --average 1 --no-test"
)
ROWS = {  # name -> (flags that change the base, what the change is)
    "base": ("", "8 heads of d_k = 16, 2+2 layers, d_ff 512, dropout 0.1, smoothing 0.1"),
    "A-heads-1": ("--n-heads 1", "(A) 1 head, d_k = 128"),
    "A-heads-4": ("--n-heads 4", "(A) 4 heads, d_k = 32"),
    "A-heads-16": ("--n-heads 16", "(A) 16 heads, d_k = 8"),
    "B-dk-4": ("--d-k 4", "(B) d_k = 4 for queries and keys; d_v stays 16"),
    "C-layers-1": ("--n-layers 1", "(C) 1+1 layers"),
    "C-layers-4": ("--n-layers 4", "(C) 4+4 layers"),
    "C-dff-256": ("--d-ff 256", "(C) d_ff 256"),
    "C-dff-1024": ("--d-ff 1024", "(C) d_ff 1024"),
    "D-dropout-0": ("--dropout 0", "(D) dropout 0"),
    "D-dropout-0.3": ("--dropout 0.3", "(D) dropout 0.3"),
    "D-smoothing-0": ("--label-smoothing 0", "(D) label smoothing 0"),
    "E-learned": (
        "--learned-positions --position-init sinusoid",
        "(E) learned positions, started at the sinusoids' scale",
    ),
    "no-scale": ("--no-scale-attention", "no 1/sqrt(d_k) (§3.2.1)"),
    "no-warmup": ("--no-warmup", "no warm-up: the peak rate from update 1, then the same decay"),
    "pre-LN": ("--norm-first", "LayerNorm before each sub-layer"),
    "untied": ("--no-tie-output", "output layer not tied to the embeddings (§3.4)"),
}
SEEDS = (0, 1, 2)


def with_flags(budget: list[str], flags: list[str]) -> list[str]:
    """The budget's options with the row's flags in place of the same options (so each appears once)."""
    args = list(budget)
    i = 0
    while i < len(flags):
        name, value = flags[i], []
        if i + 1 < len(flags) and not flags[i + 1].startswith("--"):
            value = [flags[i + 1]]
        if name in args:
            at = args.index(name)
            args[at + 1 : at + 1 + len(value)] = value
        else:
            args += [name, *value]
        i += 1 + len(value)
    return args


def table_name(lr_factor: float) -> str:
    """The folder of a table: `table3` at the budget's rate, `table3-lr-F` at F times it."""
    return "table3" if lr_factor == 1 else f"table3-lr-{lr_factor:g}"


def commands(
    row: str, seed: int, data_dir: str, lr_factor: float = 1.0
) -> tuple[list[str], list[str], Path, Path]:
    flags, _ = ROWS[row]
    table = table_name(lr_factor)
    out = ROOT / "results" / table / row
    run = f"runs/{table}/{row}-seed{seed}"
    train_file, val_file = out / f"seed{seed}.json", out / f"seed{seed}.val.json"
    budget = BUDGET.split() + ([] if lr_factor == 1 else ["--lr-factor", f"{lr_factor:g}"])
    train = ["train", *with_flags(budget, flags.split()), "--seed", str(seed), "--out", run]
    train += ["--data-dir", data_dir, "--results", str(train_file.relative_to(ROOT))]
    evaluate = [
        "evaluate",
        "--model",
        f"{run}/model.safetensors",
        "--beam",
        "1",
        "--split",
        "val",
    ]
    evaluate += ["--data-dir", data_dir, "--results", str(val_file.relative_to(ROOT))]
    return train, evaluate, train_file, val_file


def record(row: str, seed: int, data_dir: str, lr_factor: float = 1.0) -> str:
    train, evaluate, train_file, val_file = commands(row, seed, data_dir, lr_factor)
    if train_file.is_file() and val_file.is_file():
        return f"{row} seed {seed}: recorded already"
    train_file.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    for args in ([train] if not train_file.is_file() else []) + [evaluate]:
        done = subprocess.run(
            [sys.executable, "-m", "annotated", *args],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
        )
        if done.returncode:
            command = shlex.join(["python", "-m", "annotated", *args])
            return f"{row} seed {seed}: FAILED ({command})\n{done.stderr[-2000:]}"
    return f"{row} seed {seed}: recorded"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="+", choices=list(ROWS), default=list(ROWS))
    parser.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    parser.add_argument("--jobs", type=int, default=1, help="runs at a time, one thread each")
    parser.add_argument(
        "--lr-factor", type=float, default=1.0, help="scale Eq. 3 (kept in results/table3-lr-F)"
    )
    parser.add_argument("--list", action="store_true", help="print the rows and stop")
    parser.add_argument(
        "--rows-only", action="store_true", help="write results/table3/rows.json, stop"
    )
    default_data = os.environ.get(MULTI30K_ENV) or str(ROOT.parent / "shared/data/multi30k")
    parser.add_argument("--data-dir", default=default_data)
    args = parser.parse_args()
    if args.list:
        for name, (flags, change) in ROWS.items():
            print(f"{name:>14}  {change}  [{flags or 'the budget alone'}]")
        return 0
    if args.jobs < 1:
        parser.error(f"--jobs must be >= 1, got {args.jobs}")
    if not 0 < args.lr_factor < float("inf"):
        parser.error(f"--lr-factor must be a positive finite number, got {args.lr_factor}")
    folder = ROOT / "results" / table_name(args.lr_factor)
    folder.mkdir(parents=True, exist_ok=True)
    # the main table lists every row; a table at another rate, the rows it has been asked for so far
    listed = (
        json.loads((folder / "rows.json").read_text())["rows"]
        if args.lr_factor != 1 and (folder / "rows.json").is_file()
        else {}
    )
    names = ROWS if args.lr_factor == 1 else [n for n in ROWS if n in listed or n in args.rows]
    rows = {name: {"change": ROWS[name][1], "flags": ROWS[name][0]} for name in names}
    budget = BUDGET + ("" if args.lr_factor == 1 else f" --lr-factor {args.lr_factor:g}")
    (folder / "rows.json").write_text(json.dumps({"budget": budget, "rows": rows}, indent=1) + "\n")
    if args.rows_only:
        return 0
    todo = [(row, seed) for seed in args.seeds for row in args.rows]  # every row once, then again
    failed = 0
    with ThreadPoolExecutor(args.jobs) as pool:
        for message in pool.map(lambda job: record(*job, args.data_dir, args.lr_factor), todo):
            print(message, flush=True)
            failed += "FAILED" in message
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
