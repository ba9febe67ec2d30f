"""Every benchmark runs at a tiny size, so that `make bench` cannot break unseen.

A benchmark prints its figures and never fails on a number; here each script runs as `make bench` runs
it, on the smallest case it offers and one timed repeat, and must exit 0 with its table printed."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"

TINY = {  # script: (arguments, a line its table prints)
    "bench_attention.py": (["--tiny", "--repeats", "1", "--device", "cpu"], "mask ms"),
    "bench_decode.py": (["--repeats", "1", "--batch", "1", "--lengths", "2"], "speed-up"),
    "bench_loss.py": (["--tokens", "16", "--vocab", "32", "--repeats", "1"], "LabelSmoothingLoss"),
    "bench_recipe.py": (["--updates", "1", "--no-compile", "--threads", "1"], "updates/s"),
    "bench_train.py": (["--tiny", "--repeats", "1"], "dropout on"),
}


def test_every_benchmark_is_smoke_tested() -> None:
    assert sorted(TINY) == sorted(p.name for p in BENCHMARKS.glob("bench_*.py"))


def test_make_bench_runs_every_benchmark() -> None:
    makefile = (ROOT / "Makefile").read_text()
    missing = [name for name in TINY if f"benchmarks/{name}" not in makefile]
    assert not missing, f"make bench does not run {missing}"


@pytest.mark.slow  # a Python process each, 3 to 17 s: make test-slow runs them
@pytest.mark.parametrize("script", sorted(TINY))
def test_benchmark_runs_at_a_tiny_size(script, data_dir) -> None:
    args, expected = TINY[script]
    if script == "bench_recipe.py":
        args = [*args, "--data-dir", str(data_dir)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *args],
        capture_output=True, text=True, env=env, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, f"{script} failed:\n{done.stderr[-3000:]}"
    assert expected in done.stdout, f"{script} printed no table:\n{done.stdout}"
