"""Data parallelism: W processes make the very updates of one process on the global batch."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from annotated.app import main
from annotated.data import PAD
from annotated.model import make_model
from annotated.training import CheckedBatch, FastLabelSmoothingLoss, train_step_at_scale
from conftest import random_batch

ROOT = Path(__file__).resolve().parents[1]
V = 10
LR = 0.5


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def sgd_update(batches, **kwargs):
    """Weights after one SGD step from a fixed initialisation, and the returned loss."""
    torch.manual_seed(0)
    model = make_model(V, V, n_layers=1, d_model=16, d_ff=32, n_heads=2, dropout=0.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    loss = train_step_at_scale(model, FastLabelSmoothingLoss(V, PAD), optimizer, batches, **kwargs)
    return torch.cat([p.detach().flatten() for p in model.parameters()]), loss


def test_process_shares_average_to_one_big_batch():
    """With SGD, averaging the processes' updates is averaging their gradients, as DDP does."""
    gen = torch.Generator().manual_seed(1)
    parts = [random_batch(n, gen) for n in (2, 5, 3)]  # unequal token counts
    ranks = [CheckedBatch(s, t, PAD) for s, t in parts]
    big = CheckedBatch(torch.cat([s for s, _ in parts]), torch.cat([t for _, t in parts]), PAD)
    assert len({b.n_tokens for b in ranks}) == 3
    one, loss = sgd_update(big)
    W = len(ranks)
    shares = [sgd_update(b, n_tokens=big.n_tokens, world_size=W) for b in ranks]
    torch.testing.assert_close(sum(w for w, _ in shares) / W, one)
    assert sum(share for _, share in shares) == pytest.approx(loss, rel=1e-5)
    naive = sum(sgd_update(b)[0] for b in ranks) / W  # each process divides by its own count
    assert (naive - one).abs().max() > 1e-4


def test_global_token_count_bad_input():
    batch = CheckedBatch(*random_batch(2, torch.Generator().manual_seed(2)), PAD)
    with pytest.raises(ValueError, match="n_tokens must be given when world_size=2"):
        sgd_update(batch, world_size=2)
    with pytest.raises(ValueError, match=f"n_tokens must be an int >= the {batch.n_tokens}"):
        sgd_update(batch, n_tokens=batch.n_tokens - 1, world_size=2)
    with pytest.raises(ValueError, match="world_size must be a positive int, got 0"):
        sgd_update(batch, n_tokens=batch.n_tokens, world_size=0)
    _, share = sgd_update(batch, n_tokens=4 * batch.n_tokens, world_size=4)
    assert share == pytest.approx(sgd_update(batch)[1] / 4, rel=1e-5)  # its share of 4


# A tiny copy-task run: one global batch of 8 sequences per update, no dropout, a fixed seed.
RUN = (
    "train --task copy --steps 3 --batch-size 8 --eval-size 8 --eval-every 2 --seed 3 --device cpu "
    "--n-layers 1 --d-model 16 --d-ff 32 --n-heads 2 --dropout 0"
).split()


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_available(), reason="this PyTorch build has no torch.distributed")
def test_two_processes_match_one(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    two = subprocess.run(
        [*launch, "-m", "annotated", *RUN, "--out", str(tmp_path / "two")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert two.returncode == 0, two.stderr[-3000:]
    assert "Traceback" not in two.stderr
    assert two.stdout.count("parameters, copy task, 2 process(es)") == 1  # rank 0 alone logs
    assert main([*RUN, "--out", str(tmp_path / "one")]) == 0  # one process, the same batches

    results = {n: json.loads((tmp_path / n / "results.json").read_text()) for n in ("one", "two")}
    assert results["two"]["training"]["processes"] == 2
    assert results["two"]["training"]["replica_max_abs_diff"] == 0.0  # the ranks agree exactly
    for (s1, loss1), (s2, loss2) in zip(*(results[n]["train_curve"] for n in results), strict=True):
        assert s1 == s2 and loss1 == pytest.approx(loss2, abs=2e-4)  # rounded to 4 decimals

    weights = {
        n: torch.load(tmp_path / n / "checkpoint.pt", weights_only=True)["model"]
        for n in ("one", "two")
    }
    for name, one in weights["one"].items():
        diff = (weights["two"][name] - one).abs().max().item()
        if name.endswith("W_k.bias"):
            # A shift of every key changes no softmax, so this gradient is 0 up to rounding, and
            # Adam's update, about lr * g / |g|, turns rounding into +-lr: bounded by the 3 rates.
            assert diff < 2 * 0.5 * 16**-0.5 * (1 + 2 + 3) * 100**-1.5, name
        else:
            # Each process normalising by its own token count would differ by about 3e-4 here.
            assert diff < 1e-6, (name, diff)


# Under torchrun: record the first dropout mask each process draws, then run the command line.
MASKS = """
import os, sys
import torch
from annotated.app import main
from annotated.model import Dropout

masks, forward = [], Dropout.forward

def recorded(self, x):
    out = forward(self, x)
    masks.append(out == 0)
    return out

Dropout.forward = recorded
code = main(sys.argv[2:])
if masks:
    torch.save(masks[0], f"{sys.argv[1]}/mask-{os.environ.get('RANK', 'one')}.pt")
sys.exit(code)
"""


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_available(), reason="this PyTorch build has no torch.distributed")
def test_each_process_draws_its_own_dropout_and_only_rank_0_reads_snapshots(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(name, None)
    script = tmp_path / "masks.py"
    script.write_text(MASKS)
    # --dropout 0.5, and a snapshot after each of 2 updates
    run = [*RUN[:-1], "0.5", "--steps", "2", "--eval-every", "1"]
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]

    def command(*args):
        done = subprocess.run(
            [*args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240
        )
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-3000:]
        return done

    command(*launch, script, tmp_path, *run, "--out", tmp_path / "two")
    command(sys.executable, script, tmp_path, *run, "--out", tmp_path / "one")
    m0, m1, one = (torch.load(tmp_path / f"mask-{r}.pt") for r in ("0", "1", "one"))
    assert m0.shape == m1.shape and not torch.equal(m0, m1)  # each process its own masks
    assert torch.equal(m0, one[: len(m0)])  # rank 0 draws what one process draws, as before

    # the finished run's snapshots are gone: rank 0 alone looks for them, and says so once
    resumed = command(
        *launch, "-m", "annotated", "train", "--resume", tmp_path / "two", "--steps", "3"
    )
    assert resumed.stdout.count("snapshot-1.pt is missing") == 1, resumed.stdout
