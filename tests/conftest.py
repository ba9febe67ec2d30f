import os
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).parent))  # tests/torch_reference.py

from annotated.data import MULTI30K_ENV, MULTI30K_SHA256  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
# the Multi30k files: the environment's folder, else the shared copy beside the repository
DATA = Path(os.environ.get(MULTI30K_ENV) or ROOT.parent / "shared/data/multi30k")


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The Multi30k folder; a missing copy skips locally and fails in CI (never a silent skip)."""
    if not all((DATA / name).is_file() for name in MULTI30K_SHA256):
        reason = f"Multi30k files not found in {DATA}: set {MULTI30K_ENV} to their folder"
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    return DATA


@pytest.fixture
def no_fast_path():
    """Keep PyTorch's attention and Transformer layers on their reference (math) path."""
    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    yield
    torch.backends.mha.set_fastpath_enabled(before)


@pytest.fixture
def one_thread():
    """Tiny models run faster on one thread, and CPU contention cannot slow them down."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# CI replays the same examples every run (a landing never hinges on a lucky draw); locally hypothesis
# explores new ones each time.
settings.register_profile("ci", derandomize=True, deadline=None)
if os.environ.get("CI"):
    settings.load_profile("ci")


def random_batch(n, gen, length=6, vocab=10, pad=0, bos=1):
    """`n` random sentences (src (n, length), tgt (n, length + 1) starting with BOS), each cut to a
    random length of at least one label and padded; the symbols are 3 .. vocab - 1. Import it with
    `from conftest import random_batch` (pytest puts tests/ on the path)."""
    src = torch.randint(3, vocab, (n, length), generator=gen)
    body = torch.randint(3, vocab, (n, length), generator=gen)
    tgt = torch.cat([torch.full((n, 1), bos), body], dim=1)  # (n, length + 1)
    for i in range(n):
        cut = int(torch.randint(1, length + 1, (1,), generator=gen))
        src[i, cut:], tgt[i, cut + 1 :] = pad, pad
    return src, tgt
