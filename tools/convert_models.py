"""Convert the committed models (results/**/*.pt, torch.save checkpoints) to safetensors model files.

Each model is written with save_model (appendix 21) next to its checkpoint, as NAME.safetensors, in
the precision the checkpoint keeps, with its step and extras in the metadata. The conversion is then
checked: every tensor of the checkpoint, tied names included, must be torch.equal to the one that
load_model gives back (cast back to the checkpoint's dtype), and the raw tensors in the file must keep
the checkpoint's dtype. Run: .venv/bin/python tools/convert_models.py [CHECKPOINT ...]
"""

import sys
from pathlib import Path

import torch
from safetensors.torch import load_file

from annotated.training.checkpoint import load_checkpoint
from annotated.training.model_file import load_model, save_model

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = [
    "results/multi30k/model_fp16.pt",
    "results/multi30k-en-de/model_fp16.pt",
    "results/copy/copier.pt",
    "results/copy/early/copier.pt",
]


def convert(checkpoint: Path) -> Path:
    """Write checkpoint's model as safetensors beside it, and prove the two hold the same tensors."""
    original = torch.load(checkpoint, weights_only=True)[
        "model"
    ]  # the tensors as saved, for the check
    ckpt = load_checkpoint(checkpoint, restore_rng=False)  # every check of appendix 21 first
    dtypes = {t.dtype for t in original.values()}
    if len(dtypes) != 1:
        raise ValueError(f"{checkpoint} mixes dtypes {dtypes}; convert it by hand")
    target = checkpoint.with_suffix(".safetensors")
    save_model(target, ckpt.model.to(dtypes.pop()), step=ckpt.step, **ckpt.extra)
    model, info = load_model(target)
    state, raw = model.state_dict(), load_file(target)
    for name, tensor in original.items():
        if not torch.equal(state[name].to(tensor.dtype), tensor):
            raise AssertionError(f"{target}: {name} differs from {checkpoint}'s")
    if any(t.dtype != original[k].dtype or not torch.equal(t, original[k]) for k, t in raw.items()):
        raise AssertionError(f"{target} does not keep {checkpoint}'s tensors as they were")
    if info != {"step": ckpt.step, **ckpt.extra}:
        raise AssertionError(f"{target}: its metadata {info} differs from {checkpoint}'s extras")
    print(
        f"{checkpoint.relative_to(ROOT)} -> {target.name}: {len(original)} tensors equal "
        f"({len(raw)} stored, tied ones once), {target.stat().st_size:,} bytes"
    )
    return target


if __name__ == "__main__":
    for name in sys.argv[1:] or COMMITTED:
        convert((ROOT / name).resolve())
