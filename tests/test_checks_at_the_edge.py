"""Input checks run where a batch enters the model (encode, decode), and the layers inside trust it.

Issue 42's metric: a check function counts once however many guards it holds, that is each outermost call
of a function whose name starts with `check` or `_check` (or `positive_int`), plus each `raise` left in a
layer's `forward`. Its goal is at most 12 checks per forward of a 6-layer model (66 before). A second,
stricter count also counts every check function those outermost calls call. `MultiHeadAttention` is a
public layer (the README calls it): it keeps its own dtype and shape checks, which read no tensor value,
one `check_widths` and, given a mask, one `check_heads_mask` (chapter 02's `check_mask`, and no mask
tensor beside `is_causal`) per call; they are counted apart.
"""

import ast
import inspect
import sys
import textwrap

import pytest
import torch
from torch.overrides import TorchFunctionMode

import annotated
from annotated.decoding import beam_search, greedy_decode
from annotated.model import (
    Decoder,
    DecoderCache,
    DecoderLayer,
    Embeddings,
    Encoder,
    EncoderLayer,
    LayerNorm,
    MultiHeadAttention,
    PositionalEncoding,
    PositionwiseFeedForward,
    SublayerConnection,
    causal_mask,
    make_model,
    padding_mask,
)
from annotated.training import CheckedBatch, FastLabelSmoothingLoss

PACKAGE = annotated.__file__.rsplit("/", 1)[0]
LAYER_CHECKS = (
    "check_widths",
    "check_heads_mask",
)  # MultiHeadAttention's own, outermost on every call


def is_check(code) -> bool:
    name = code.co_name
    return code.co_filename.startswith(PACKAGE) and (
        name.startswith(("check", "_check")) or name == "positive_int"
    )


def check_calls(fn, *args, nested: bool = False, **kwargs) -> list[str]:
    """The names of the check functions that fn(*args, **kwargs) calls, in order: the outermost ones,
    or with nested=True also those they call."""
    calls, depth = [], [0]

    def profile(frame, event, arg):
        if not is_check(frame.f_code):
            return
        if event == "call":
            if depth[0] == 0 or nested:
                calls.append(frame.f_code.co_name)
            depth[0] += 1
        elif event == "return":
            depth[0] -= 1

    sys.setprofile(profile)
    try:
        fn(*args, **kwargs)
    finally:
        sys.setprofile(None)
    return calls


def raises_in_forward(cls) -> int:
    """How many `raise` statements the class's own forward holds."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls.forward)))
    return sum(isinstance(node, ast.Raise) for node in ast.walk(tree))


def batch():
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])  # (B, S)
    tgt = torch.tensor([[1, 7, 6, 5], [1, 9, 8, 0]])  # (B, T)
    return src, tgt, padding_mask(src, 0), padding_mask(tgt, 0) & causal_mask(4)


def test_the_layers_trust_their_input():
    layers = (
        Embeddings,
        LayerNorm,
        SublayerConnection,
        PositionwiseFeedForward,
        MultiHeadAttention,
        EncoderLayer,
        Encoder,
        DecoderLayer,
        Decoder,
    )
    assert {cls.__name__: raises_in_forward(cls) for cls in layers} == dict.fromkeys(
        (cls.__name__ for cls in layers), 0
    )
    # the one check a layer keeps, because its message says what max_len is (chapter 05)
    assert raises_in_forward(PositionalEncoding) == 1


def test_one_forward_of_a_six_layer_model_runs_twelve_checks_at_most():
    model = make_model(11, 11, n_layers=6, d_model=16, d_ff=32, n_heads=2).eval()
    src, tgt, src_mask, tgt_mask = batch()
    calls = check_calls(model, src, tgt, src_mask, tgt_mask)
    position_guards = 2  # the positional encoding's length check, in the encoder and in the decoder
    attention = 3 * 6  # the attention layers: one in each encoder layer, two in each decoder layer
    assert (
        calls.count("check_widths") == calls.count("check_heads_mask") == attention
    )  # the layer's own
    edge = [name for name in calls if name not in LAYER_CHECKS]
    assert edge == ["check_source", "check_target"]  # at the edge: encode, decode
    assert len(edge) + position_guards <= 12  # the count: 4 now, 66 before
    nested = check_calls(model, src, tgt, src_mask, tgt_mask, nested=True)
    # every check function, nested ones too, less the layer's own three (check_heads_mask calls check_mask)
    assert len(nested) - 3 * attention + position_guards <= 14, nested


def test_a_cached_decode_checks_the_memory_on_its_first_step_only():
    model = make_model(11, 11, n_layers=2, d_model=16, d_ff=32, n_heads=2).eval()
    src, _, src_mask, _ = batch()
    memory, cache = model.encode(src, src_mask), DecoderCache()
    step = torch.ones(2, 1, dtype=torch.long)  # (B, 1): one new token a step
    first = check_calls(model.decode, memory, src_mask, step, None, cache, nested=True)
    later = [
        check_calls(model.decode, memory, src_mask, step, None, cache, nested=True)
        for _ in range(3)
    ]
    layers = 2  # each cross-attention checks the dtype and shape of src_mask itself, every step
    assert (
        "_check_memory" in first and first.count("check_mask") == layers
    )  # encode checked src_mask
    for calls in later:  # the new tokens only: neither the memory nor its mask again at the edge
        assert "check_target" in calls and "_check_memory" not in calls, calls
        assert calls.count("check_mask") == layers, calls


class ValueReads(TorchFunctionMode):
    """Counts the reads of a tensor's values into Python (each one a wait for a GPU): .item(), .tolist(),
    bool(), int(), float() of a tensor."""

    READS = ("item", "tolist", "__bool__", "__int__", "__float__", "__index__")

    def __init__(self):
        super().__init__()
        self.reads = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in self.READS:
            self.reads.append(func.__name__)
        return func(*args, **(kwargs or {}))


def reads(fn, *args, **kwargs) -> list[str]:
    with ValueReads() as mode:
        fn(*args, **kwargs)
    return mode.reads


def test_an_eval_forward_reads_values_twice_at_most():
    model = make_model(11, 11, n_layers=2, d_model=16, d_ff=32, n_heads=2).eval()
    src, tgt, src_mask, tgt_mask = batch()
    with torch.no_grad():
        assert (
            len(reads(model, src, tgt, src_mask, tgt_mask)) <= 2
        )  # one for encode, one for decode
        assert len(reads(model, src, tgt, src_mask, None, tgt_is_causal=True)) <= 2
    # the counter sees a read: an id outside the vocabulary is found by reading the ids
    assert reads(model.encode, src) != []


def test_a_greedy_step_after_the_first_reads_one_value():
    """The decoder never checks the tokens it produced: a later step reads only whether all have finished."""
    model = make_model(11, 11, n_layers=2, d_model=16, d_ff=32, n_heads=2).eval()
    src, _, src_mask, _ = batch()
    never = -1  # an eos_id the model never writes: every step runs
    steps = [len(reads(greedy_decode, model, src, src_mask, n, 1, never, 0)) for n in (4, 5, 6)]
    assert steps[2] - steps[1] == steps[1] - steps[0] == 1, steps


def test_one_rule_for_a_tensor_of_token_ids():
    """The checked batch, the model, the loss and the decoders refuse the same ids with the same message.

    Chapter 12's Batch and loss are the formulas alone; the runs build appendix 33's CheckedBatch and
    FastLabelSmoothingLoss, which check what they are given by the model's rule."""
    model = make_model(11, 11, n_layers=1, d_model=16, d_ff=32, n_heads=2).eval()
    good = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    loss = FastLabelSmoothingLoss(11, 0)
    for bad in (good.to(torch.uint8), good.bool(), good.float(), good[0], good.tolist()):
        messages = set()
        for refuse in (
            lambda ids: CheckedBatch(ids, good, 0),
            lambda ids: model.encode(ids),
            lambda ids: greedy_decode(model, ids, None, 3, 1, 2, 0),
            lambda ids: beam_search(model, ids, None, 2, bos_id=1, eos_id=2, pad_id=0),
        ):
            with pytest.raises((TypeError, ValueError)) as error:
                refuse(bad)
            messages.add(str(error.value))
        assert len(messages) == 1, messages
    # the loss names its labels "target", by the same rule
    with pytest.raises(
        TypeError,
        match=r"target must be an integer tensor of token ids \(torch.long or torch.int\)",
    ):
        loss(torch.zeros(2, 4, 11), good.to(torch.uint8))
