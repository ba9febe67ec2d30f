"""Show which environment variables change PyTorch's CPU arithmetic in this build.

`make test-portable` runs the notebooks under settings that make this machine compute the way an older or
different CPU would. This script shows which settings are not a no-op here: it runs the same small
computations (a float32 matrix product through BLAS, and 20 training updates of a tiny Transformer)
in a fresh process per setting and prints whether the results differ, bit for bit, from the defaults.

    python tools/portable_env.py           # print the table
    python tools/portable_env.py --check   # exit 1 if PORTABLE_ENV changes nothing at all here

A single setting can be inert on one machine and still matter on another: on a 2-core Intel Xeon
(AVX-512) one thread and two give the same bits for these computations, on an AMD EPYC they do not.
So `--check` fails only when all the settings together leave the results unchanged on a machine whose
PyTorch uses vector kernels, which would mean the portable run is no different from the default one
(a misspelt variable, say); a setting that is inert here is reported, not failed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

# The settings `make test-portable` uses (the Makefile passes the same ones).
PORTABLE_ENV = {
    "ATEN_CPU_CAPABILITY": "default",  # PyTorch's own kernels: scalar code instead of AVX2/AVX-512
    "MKL_CBWR": "COMPATIBLE",  # MKL's matrix products on its SSE2-compatible code path
    "OMP_NUM_THREADS": "1",  # one thread: other reduction orders
}
# Tried and left out: MKL_ENABLE_INSTRUCTIONS=SSE4_2 and ONEDNN_MAX_CPU_ISA=SSE41 changed nothing
# here (torch 2.13 CPU build, AMD EPYC): the model's products go through MKL's sgemm, and oneDNN
# serves convolutions, which the model has none of.

PROBE = r"""
import hashlib, json, torch
torch.manual_seed(0)
a, b = torch.randn(257, 1031), torch.randn(1031, 263)
mm = (a @ b).numpy().tobytes()
from annotated.model import make_model
from annotated.training import LabelSmoothingLoss, make_optimizer
model = make_model(11, 11, n_layers=1, d_model=32, d_ff=64, n_heads=2, dropout=0.0, shared_vocab=True)
opt, loss_fn = make_optimizer(model), LabelSmoothingLoss(11, 0, smoothing=0.1)
for _ in range(20):
    src = torch.randint(3, 11, (16, 8))
    logits = model(src, src, None, None)
    loss = loss_fn(logits.reshape(-1, 11), src.reshape(-1))
    opt.zero_grad(), loss.backward(), opt.step()
train = b"".join(p.detach().numpy().tobytes() for p in model.parameters())
print(json.dumps({"matmul": hashlib.sha256(mm).hexdigest()[:12],
                  "training": hashlib.sha256(train).hexdigest()[:12]}))
"""


def probe(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in PORTABLE_ENV} | extra
    out = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(out.stdout)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a setting changes nothing")
    args = parser.parse_args()
    import torch

    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}")
    threads = {"OMP_NUM_THREADS": str(max(2, os.cpu_count() or 2))}
    base = probe(threads)
    print(f"{'setting':36s} {'matmul':>10s} {'training':>10s}")
    print(f"{'(defaults, 2+ threads)':36s} {'-':>10s} {'-':>10s}")
    inert = []
    for name, value in PORTABLE_ENV.items():
        got = probe(threads | {name: value})
        marks = ["changed" if got[k] != base[k] else "same" for k in ("matmul", "training")]
        print(f"{name + '=' + value:36s} {marks[0]:>10s} {marks[1]:>10s}")
        if marks == ["same", "same"]:
            inert.append(name)
    together = probe(PORTABLE_ENV)
    marks = ["changed" if together[k] != base[k] else "same" for k in ("matmul", "training")]
    print(f"{'all of them (make test-portable)':36s} {marks[0]:>10s} {marks[1]:>10s}")
    if inert:
        print("no effect on this machine (other machines differ): " + ", ".join(inert))
    vector = torch.backends.cpu.get_cpu_capability().upper() != "DEFAULT"
    useless = marks == ["same", "same"] and vector
    if useless:
        print("the settings change nothing here: make test-portable would test nothing new")
    return int(args.check and useless)


if __name__ == "__main__":
    sys.exit(main())
