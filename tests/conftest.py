import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # tests/torch_reference.py


@pytest.fixture
def no_fast_path():
    """Keep PyTorch's attention and Transformer layers on their reference (math) path."""
    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    yield
    torch.backends.mha.set_fastpath_enabled(before)
