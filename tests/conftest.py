import os
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import settings

sys.path.insert(0, str(Path(__file__).parent))  # tests/torch_reference.py


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
