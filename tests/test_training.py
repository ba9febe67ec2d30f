"""Training (§5): batches, label smoothing vs PyTorch's, the schedule, accumulation, checkpoints."""

import math
import zipfile

import pytest
import torch
import torch.nn.functional as F
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from annotated.data import BOS, PAD, strip_specials
from annotated.model import Transformer, TransformerConfig, make_model
from annotated.training import (
    Batch,
    CheckedBatch,
    FastLabelSmoothingLoss,
    LabelSmoothingLoss,
    Snapshots,
    Trainer,
    average_state_dicts,
    average_weights,
    load_checkpoint,
    make_optimizer,
    make_scheduler,
    noam_lr,
    noam_scheduler,
    save_checkpoint,
    schedule_rates,
    train_step,
    train_step_at_scale,
)
from conftest import random_batch

V = 10
TINY = {"n_layers": 1, "d_model": 16, "d_ff": 32, "n_heads": 2}


pytestmark = pytest.mark.usefixtures("one_thread")  # tests/conftest.py


def tiny_model(seed=0, dropout=0.0, **overrides):
    torch.manual_seed(seed)
    return make_model(V, V, **{**TINY, "dropout": dropout, **overrides})


def flat_params(model):
    return torch.cat([p.detach().flatten() for p in model.parameters()])


# ---- CheckedBatch ----------------------------------------------------------------------------------


def test_batch_shifts_target_and_builds_masks():
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    tgt = torch.tensor([[1, 7, 6, 5, 2], [1, 9, 8, 2, 0]])
    batch = CheckedBatch(src, tgt, pad_id=0)
    assert torch.equal(batch.tgt_in, tgt[:, :-1]) and torch.equal(batch.tgt_out, tgt[:, 1:])
    assert (batch.tgt_in[:, 0] == 1).all()  # decoder input starts with BOS
    assert batch.n_tokens == 7  # 4 + 3 real labels
    assert torch.equal(batch.src_mask, (src != 0)[:, None, None, :])
    expected = torch.ones(4, 4, dtype=torch.bool).tril() & (batch.tgt_in != 0)[:, None, None, :]
    assert batch.tgt_mask.shape == (2, 1, 4, 4) and torch.equal(batch.tgt_mask, expected)
    moved = batch.to("cpu")
    assert moved.n_tokens == batch.n_tokens and torch.equal(moved.tgt_mask, batch.tgt_mask)
    assert "n_tokens=7" in repr(batch)


def test_a_mask_set_by_hand_survives_moving_the_batch():
    """The no-look-ahead ablation (chapter 19) sets tgt_mask by hand; `to()` must not rebuild it."""
    src = torch.tensor([[5, 6, 7, 2], [8, 9, 2, 0]])
    tgt = torch.tensor([[1, 7, 6, 5, 2], [1, 9, 8, 2, 0]])
    batch = CheckedBatch(src, tgt, pad_id=0)
    no_look_ahead = (batch.tgt_in != 0)[:, None, None, :].expand(-1, 1, 4, -1)  # (B, 1, T, T)
    batch.tgt_mask = no_look_ahead
    for device in ("cpu", "meta"):  # meta: a device other than the CPU, with no data
        moved = batch.to(device)
        assert moved.src.device.type == moved.tgt_mask.device.type == device
        assert not moved.causal_only  # the fused causal path would ignore the hand-set mask
        assert moved.tgt_mask.shape == no_look_ahead.shape
    assert torch.equal(batch.to("cpu").tgt_mask, no_look_ahead)
    assert torch.equal(batch.tgt_mask, no_look_ahead)  # the original is left as it was


@pytest.mark.parametrize(
    ("src", "tgt", "pad_id", "error", "match"),
    [
        (
            torch.ones(2, 3),
            torch.ones(2, 4, dtype=torch.long),
            0,
            TypeError,
            "src must be an integer",
        ),
        (
            torch.ones(2, 3, dtype=torch.long),
            [[1, 2]],
            0,
            TypeError,
            "tgt must be a torch.Tensor of token ids",
        ),
        (torch.ones(2, 3, dtype=torch.long), torch.ones(4, dtype=torch.long), 0, ValueError, "tgt"),
        (torch.ones(3, dtype=torch.long), torch.ones(2, 4, dtype=torch.long), 0, ValueError, "src"),
        (
            torch.ones(2, 3, dtype=torch.long),
            torch.ones(3, 4, dtype=torch.long),
            0,
            ValueError,
            "batch size",
        ),
        (
            torch.ones(2, 3, dtype=torch.long),
            torch.ones(2, 1, dtype=torch.long),
            0,
            ValueError,
            "tgt must hold",
        ),
        (
            torch.ones(2, 3, dtype=torch.long),
            torch.ones(2, 4, dtype=torch.long),
            0.0,
            TypeError,
            "pad_id",
        ),
    ],
)
def test_batch_bad_input(src, tgt, pad_id, error, match):
    with pytest.raises(error, match=match):
        CheckedBatch(src, tgt, pad_id)


# ---- Label smoothing --------------------------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(
    vocab=st.integers(3, 20),
    pad=st.integers(0, 19),
    eps=st.floats(0.0, 0.9),
    seed=st.integers(0, 99),
)
def test_smoothed_distribution(vocab, pad, eps, seed):
    pad = pad % vocab
    gen = torch.Generator().manual_seed(seed)
    target = torch.randint(0, vocab, (4, 5), generator=gen)
    q = FastLabelSmoothingLoss(vocab, pad, eps).target_distribution(target)  # (N, V)
    flat = target.reshape(-1)
    real = flat != pad
    assert q.shape == (20, vocab)
    assert (q[:, pad] == 0).all() and (q[~real] == 0).all()
    torch.testing.assert_close(q[real].sum(-1), torch.ones(int(real.sum())))
    if real.any():
        rows = q[real]
        label = flat[real]
        torch.testing.assert_close(
            rows.gather(1, label[:, None])[:, 0], torch.full_like(label, 1 - eps, dtype=torch.float)
        )
        others = torch.ones_like(rows, dtype=torch.bool)
        others[:, pad] = False
        others.scatter_(1, label[:, None], False)
        torch.testing.assert_close(rows[others], torch.full_like(rows[others], eps / (vocab - 2)))


@settings(max_examples=25, deadline=None)
@given(
    vocab=st.integers(3, 30),
    pad=st.integers(0, 29),
    eps=st.sampled_from([0.0, 1e-8, 0.1, 0.5, 0.9]),
    shape=st.tuples(st.integers(1, 4), st.integers(1, 7)),
    seed=st.integers(0, 999),
)
def test_loss_equals_the_explicit_sum_over_q(vocab, pad, eps, shape, seed):
    """forward's three terms give the same loss and gradient as -sum(q * log p) with q built."""
    pad = pad % vocab
    gen = torch.Generator().manual_seed(seed)
    logits = (3 * torch.randn(*shape, vocab, generator=gen, dtype=torch.float64)).requires_grad_()
    target = torch.randint(0, vocab, shape, generator=gen)
    loss_fn = FastLabelSmoothingLoss(vocab, pad, eps)
    q = loss_fn.target_distribution(target, torch.float64)  # (N, V)
    explicit = -(q * logits.reshape(-1, vocab).log_softmax(-1)).sum()
    fast = loss_fn(logits, target)
    torch.testing.assert_close(fast, explicit)
    (g_explicit,), (g_fast,) = (torch.autograd.grad(x, logits) for x in (explicit, fast))
    torch.testing.assert_close(g_fast, g_explicit)


@pytest.mark.parametrize("pad", [0, 4, 9])
def test_loss_with_impossible_classes_is_never_nan(pad):
    """A -inf logit on padding is harmless; on the label the loss is +inf, as -sum(q log p) says."""
    logits = torch.randn(3, V, dtype=torch.float64)
    logits[:, pad] = -math.inf  # the model rules padding out
    target = torch.tensor([(pad + 1) % V, (pad + 2) % V, pad])
    loss_fn = FastLabelSmoothingLoss(V, pad, 0.1)
    q = loss_fn.target_distribution(target, torch.float64)
    log_p = logits.log_softmax(-1)
    explicit = -(q * log_p.masked_fill(q == 0, 0.0)).sum()
    torch.testing.assert_close(loss_fn(logits, target), explicit)
    assert torch.isfinite(explicit)
    logits[0, target[0]] = -math.inf  # ... and the label too
    assert loss_fn(logits, target).item() == math.inf
    assert FastLabelSmoothingLoss(V, pad, 0.0)(logits, target).item() == math.inf


@settings(max_examples=30, deadline=None)
@given(
    vocab=st.integers(3, 40),
    pad=st.integers(0, 39),
    eps=st.sampled_from([0.0, 0.1, 0.25, 0.5]),
    shape=st.tuples(st.integers(1, 4), st.integers(1, 7)),
    seed=st.integers(0, 999),
)
def test_relation_to_pytorch_label_smoothing(vocab, pad, eps, shape, seed):
    """ours = CE(label_smoothing=eps V/(V-2)) + eps/(V-2) * (NLL(label) - NLL(pad)), all summed."""
    pad = pad % vocab
    c = eps / (vocab - 2)
    assume(c * vocab <= 1)  # PyTorch takes label_smoothing in [0, 1]
    gen = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(*shape, vocab, generator=gen, dtype=torch.float64)  # (B, T, V)
    target = torch.randint(0, vocab, shape, generator=gen)
    target[0, 0] = (pad + 1) % vocab  # at least one real position
    flat_logits, flat_target = logits.reshape(-1, vocab), target.reshape(-1)
    real = flat_target != pad
    theirs = F.cross_entropy(
        flat_logits, flat_target, label_smoothing=c * vocab, ignore_index=pad, reduction="sum"
    )
    nll_label = F.cross_entropy(flat_logits, flat_target, ignore_index=pad, reduction="sum")
    pads = torch.full_like(flat_target[real], pad)
    nll_pad = F.cross_entropy(flat_logits[real], pads, reduction="sum")
    ours = FastLabelSmoothingLoss(vocab, pad, eps)(logits, target)
    torch.testing.assert_close(ours, theirs + c * (nll_label - nll_pad))


def test_no_smoothing_is_plain_cross_entropy_and_kl_differs_by_entropy():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 5, V, generator=gen)
    target = torch.randint(0, V, (3, 5), generator=gen)
    plain = F.cross_entropy(
        logits.reshape(-1, V), target.reshape(-1), ignore_index=PAD, reduction="sum"
    )
    torch.testing.assert_close(FastLabelSmoothingLoss(V, PAD, 0.0)(logits, target), plain)
    loss_fn = FastLabelSmoothingLoss(V, PAD, 0.1)
    q = loss_fn.target_distribution(target)
    log_p = F.log_softmax(logits.reshape(-1, V), -1)
    kl = F.kl_div(log_p, q, reduction="sum")  # terms with q = 0 count as 0
    n_real = int((target != PAD).sum())
    torch.testing.assert_close(loss_fn(logits, target), kl + n_real * loss_fn.entropy)


def test_half_precision_logits_are_summed_in_float32():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 6, V, generator=gen)
    target = torch.randint(0, V, (4, 6), generator=gen)
    loss_fn = FastLabelSmoothingLoss(V, PAD)
    half = loss_fn(logits.bfloat16(), target)
    assert half.dtype == torch.float32
    torch.testing.assert_close(half, loss_fn(logits.bfloat16().float(), target))


def test_loss_is_smallest_at_the_smoothed_target_and_stays_above_zero():
    loss_fn = FastLabelSmoothingLoss(V, PAD, 0.1)
    target = torch.tensor([3, 7, 0, 5])
    q = loss_fn.target_distribution(target, torch.float64)
    logits = q.log()  # -inf on the pad column: the loss must not turn 0 * -inf into nan
    logits[2] = 0.0  # the pad row is not scored; any finite logits
    logits.requires_grad_()
    loss = loss_fn(logits, target)
    loss.backward()
    assert torch.isfinite(loss) and torch.isfinite(logits.grad).all()
    torch.testing.assert_close(loss.item(), 3 * loss_fn.entropy)  # three real positions
    assert loss_fn.entropy > 0.5
    confident = torch.full((4, V), -50.0).scatter(1, target[:, None], 0.0)  # p(label) ~ 1
    assert loss_fn(confident, target) > 5 * loss.item()  # over-confidence is penalised


@pytest.mark.parametrize(
    ("args", "error", "match"),
    [
        ((10, 0, 1.0), ValueError, "smoothing must be in"),
        ((10, 0, -0.1), ValueError, "smoothing must be in"),
        ((10, 0, "0.1"), TypeError, "smoothing"),
        ((10, 10, 0.1), ValueError, "pad_id must be an int in"),
        ((10, -1, 0.1), ValueError, "pad_id"),
        ((2, 0, 0.1), ValueError, "vocab_size"),
    ],
)
def test_label_smoothing_bad_input(args, error, match):
    with pytest.raises(error, match=match):
        FastLabelSmoothingLoss(*args)


def test_label_smoothing_bad_shapes():
    loss_fn = FastLabelSmoothingLoss(V, PAD)
    with pytest.raises(ValueError, match="logits must be target's shape"):
        loss_fn(torch.randn(2, 3, V + 1), torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match="logits must be target's shape"):
        loss_fn(torch.randn(2, 3, V), torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(TypeError, match="target must be an integer"):
        loss_fn(torch.randn(2, 3, V), torch.zeros(2, 3))


# ---- Schedule and optimizer -------------------------------------------------------------------------


@pytest.mark.parametrize(("d_model", "warmup"), [(512, 4000), (256, 100), (64, 1), (32, 7)])
def test_noam_peaks_at_warmup(d_model, warmup):
    rates = [noam_lr(s, d_model, warmup) for s in range(1, 3 * warmup + 2)]
    peak = d_model**-0.5 * warmup**-0.5
    assert math.isclose(max(rates), peak) and rates.index(max(rates)) == warmup - 1
    assert all(a < b for a, b in zip(rates[: warmup - 1], rates[1:warmup], strict=True))
    assert all(a > b for a, b in zip(rates[warmup - 1 : -1], rates[warmup:], strict=True))
    assert math.isclose(noam_lr(1, d_model, warmup), d_model**-0.5 * warmup**-1.5)


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ((0, 512, 4000), "step"),
        ((1, 512, 0), "warmup"),
        ((1, 0, 10), "d_model"),
        ((1.5, 512, 10), "step"),
    ],
)
def test_noam_bad_input(args, match):
    with pytest.raises(ValueError, match=match):
        noam_lr(*args)


def test_scheduler_sets_the_rate_of_each_update():
    model = tiny_model()
    optimizer = make_optimizer(model)
    assert optimizer.defaults["betas"] == (0.9, 0.98) and optimizer.defaults["eps"] == 1e-9
    scheduler = make_scheduler(optimizer, d_model=16, warmup=5, factor=2.0)
    for step in range(1, 12):
        assert math.isclose(optimizer.param_groups[0]["lr"], 2.0 * noam_lr(step, 16, 5))
        optimizer.step(), scheduler.step()


def test_scheduler_without_warm_up_holds_the_peak_then_decays_the_same():
    """hold_peak: the peak rate from update 1 to `warmup`, then Eq. 3 exactly (notebook 20's ablation)."""
    optimizer = make_optimizer(tiny_model())
    scheduler = make_scheduler(optimizer, d_model=16, warmup=5, factor=2.0, hold_peak=True)
    for step in range(1, 12):
        expected = 2.0 * noam_lr(max(step, 5), 16, 5)
        assert math.isclose(optimizer.param_groups[0]["lr"], expected)
        optimizer.step(), scheduler.step()


def test_scheduler_decay_to_falls_linearly_from_the_peak_to_zero():
    """decay_to: Eq. 3's warm-up and peak, then a straight line to 0 at update decay_to, and 0 after."""
    rates = schedule_rates(14, 16, 4, factor=2.0, decay_to=12)
    peak = 2.0 * noam_lr(4, 16, 4)
    assert all(math.isclose(rates[k - 1], 2.0 * noam_lr(k, 16, 4)) for k in (1, 2, 3, 4))
    assert math.isclose(rates[8 - 1], peak / 2)  # halfway from update 4 to update 12
    assert rates[12 - 1] == 0.0 and rates[13 - 1] == 0.0
    falls = [a - b for a, b in zip(rates[3:11], rates[4:12], strict=True)]
    assert all(math.isclose(d, peak / 8) for d in falls)  # the same drop at every update
    held = make_scheduler(make_optimizer(tiny_model()), 16, 4, hold_peak=True, decay_to=12)
    assert math.isclose(held.get_last_lr()[0], noam_lr(4, 16, 4))  # no warm-up: the peak at once


def test_schedule_rates_are_the_rates_the_scheduler_sets():
    rates = schedule_rates(11, 16, 5, factor=2.0, hold_peak=True)
    optimizer = make_optimizer(tiny_model())
    scheduler = make_scheduler(optimizer, 16, 5, factor=2.0, hold_peak=True)
    for rate in rates:
        assert rate == optimizer.param_groups[0]["lr"]
        optimizer.step(), scheduler.step()
    with pytest.raises(ValueError, match="updates must be"):
        schedule_rates(0, 16, 5)
    with pytest.raises(ValueError, match="decay_to"):
        schedule_rates(3, 16, 5, decay_to=5)


def test_scheduler_bad_input():
    model = tiny_model()
    with pytest.raises(ValueError, match="lr=1.0"):
        make_scheduler(torch.optim.Adam(model.parameters(), lr=1e-3), 16, 10)
    with pytest.raises(ValueError, match="warmup"):
        make_scheduler(make_optimizer(model), 16, 0)
    with pytest.raises(ValueError, match="factor"):
        make_scheduler(make_optimizer(model), 16, 10, factor=0.0)
    for bad in (10, 3, 12.5):
        with pytest.raises(
            ValueError, match=rf"decay_to must be an int > warmup \(10\), got {bad}"
        ):
            make_scheduler(make_optimizer(model), 16, 10, decay_to=bad)


# ---- Training step and accumulation -----------------------------------------------------------------


def micro_and_big(sizes=(3, 5, 4), seed=1):
    gen = torch.Generator().manual_seed(seed)
    parts = [random_batch(n, gen) for n in sizes]
    micro = [CheckedBatch(s, t, PAD) for s, t in parts]
    big = CheckedBatch(torch.cat([s for s, _ in parts]), torch.cat([t for _, t in parts]), PAD)
    assert len({b.n_tokens for b in micro}) > 1  # unequal counts: the normalisation matters
    return micro, big


def test_the_fused_causal_path_gives_the_masked_gradients():
    # Targets padded at their ends: train_step_at_scale uses tgt_is_causal, which must update like the full mask.
    src, tgt = random_batch(6, torch.Generator().manual_seed(3))
    batch = CheckedBatch(src, tgt, PAD)
    assert (
        batch.causal_only and (batch.tgt_in == PAD).any()
    )  # padding that the look-ahead mask hides
    grads = []
    for causal_only in (True, False):
        model = tiny_model(seed=1)
        batch.causal_only = causal_only  # False: the (B, 1, T, T) padding-and-look-ahead mask
        loss = train_step_at_scale(
            model, FastLabelSmoothingLoss(V, PAD), torch.optim.SGD(model.parameters(), lr=0), batch
        )
        grads.append((loss, {n: p.grad for n, p in model.named_parameters()}))
    (loss_fused, fused), (loss_masked, masked) = grads
    assert math.isclose(loss_fused, loss_masked, rel_tol=1e-5)
    for name, g in fused.items():
        torch.testing.assert_close(g, masked[name], rtol=1e-4, atol=1e-6)
    gap = torch.tensor([[5, 6, 7, 8]])  # a pad between real tokens: only the full mask is right
    assert not CheckedBatch(gap, torch.tensor([[BOS, PAD, 5, 6]]), PAD).causal_only
    by_hand = CheckedBatch(src, tgt, PAD)
    by_hand.tgt_mask = by_hand.tgt_mask[:, :, -1:]  # a mask set by hand (padding only) is obeyed
    assert not by_hand.causal_only


@pytest.mark.parametrize("optimizer_name", ["sgd", "adam"])
def test_accumulation_equals_one_big_batch(optimizer_name):
    micro, big = micro_and_big()
    results = []
    for batches, accum in ((micro, 3), ([big], 1)):
        model = tiny_model()
        if optimizer_name == "sgd":
            optimizer, scheduler = torch.optim.SGD(model.parameters(), lr=0.5), None
        else:
            optimizer = make_optimizer(model)
            scheduler = make_scheduler(optimizer, d_model=16, warmup=4)
        trainer = Trainer(model, FastLabelSmoothingLoss(V, PAD), optimizer, scheduler, accum)
        log = trainer.fit(batches, progress=False)
        assert trainer.step == 1 and len(log) == 1
        if scheduler is not None:
            assert scheduler.last_epoch == 1  # one scheduler step per update, not per micro-batch
        results.append((dict(model.named_parameters()), log[0][1]))
    (acc, loss_acc), (big_batch, loss_big) = results
    assert math.isclose(loss_acc, loss_big, rel_tol=1e-5)
    for name, p in acc.items():
        torch.testing.assert_close(p.grad, big_batch[name].grad, rtol=1e-4, atol=1e-6)
        if optimizer_name == "adam" and name.endswith("W_k.bias"):
            # Shifting every key by one vector shifts a query's scores equally: softmax ignores it,
            # so this gradient is 0 up to rounding, and Adam's first step, about g / |g|, turns that
            # rounding into +-lr. Every other parameter must agree.
            continue
        torch.testing.assert_close(p, big_batch[name], rtol=1e-5, atol=1e-6)


def test_trainer_groups_logs_and_calls_back():
    micro, _ = micro_and_big(sizes=(2, 2, 2, 2, 2))
    model = tiny_model()
    optimizer = make_optimizer(model)
    scheduler = make_scheduler(optimizer, d_model=16, warmup=4)
    seen, rates = [], []
    trainer = Trainer(model, FastLabelSmoothingLoss(V, PAD), optimizer, scheduler, accum_steps=2)
    assert trainer.lr is None  # no update yet

    def callback(step, loss):
        seen.append((step, loss)), rates.append(trainer.lr)

    log = trainer.fit(iter(micro), progress=False, callback=callback)
    assert [s for s, _ in log] == [1, 2, 3]  # groups of 2, 2 and a short last one of 1
    assert seen == log == trainer.history and scheduler.last_epoch == 3
    # trainer.lr: the rate the update used, not the next one the scheduler has already set
    assert rates == pytest.approx([noam_lr(k, 16, 4) for k in (1, 2, 3)])
    assert optimizer.param_groups[0]["lr"] == pytest.approx(noam_lr(4, 16, 4))
    assert all(math.isfinite(loss) and loss > 0 for _, loss in log)


def test_trainer_stops_at_its_budget_of_steps_minutes_or_stop():
    micro, _ = micro_and_big(sizes=(2,) * 6)

    def fresh_trainer():
        model = tiny_model()
        return Trainer(
            model, FastLabelSmoothingLoss(V, PAD), torch.optim.SGD(model.parameters(), lr=0.1)
        )

    trainer = fresh_trainer()
    assert len(trainer.fit(iter(micro), progress=False, steps=4)) == 4 and trainer.step == 4
    assert trainer.fit(iter(micro), progress=False, steps=4) == []  # the budget counts all updates
    trainer = fresh_trainer()
    assert trainer.fit(micro, progress=False, minutes=0.0) == []  # a spent clock: no update at all
    trainer = fresh_trainer()
    log = trainer.fit(micro, progress=False, stop=lambda: trainer.step >= 2)
    assert [s for s, _ in log] == [1, 2]
    trainer = fresh_trainer()
    stream = iter(micro)
    trainer.fit(stream, progress=False, steps=3)
    assert len(list(stream)) == 3  # a stopped run takes no batch it does not train on


def test_snapshots_keep_the_last_and_average_them():
    models = [tiny_model() for _ in range(3)]
    for m, scale in zip(models, (1.0, 2.0, 4.0), strict=True):
        with torch.no_grad():
            for p in m.parameters():
                p.fill_(scale)
    snapshots = Snapshots(keep=2)
    for step, m in enumerate(models, 1):
        snapshots.add(step, m)
    assert snapshots.steps == [2, 3] and len(snapshots) == 2
    with torch.no_grad():  # a snapshot is a copy: later changes to the model do not reach it
        models[2].generator.weight.fill_(100.0)
    averaged = snapshots.average(models[0])
    assert all(torch.equal(p, torch.full_like(p, 3.0)) for p in averaged.parameters())
    assert averaged is not models[0] and averaged.cfg == models[0].cfg
    with pytest.raises(ValueError, match="keep must be a positive int, got 0"):
        Snapshots(keep=0)
    with pytest.raises(ValueError, match="at least one state dict"):
        average_state_dicts([])
    other = make_model(V, V, n_layers=2, d_model=16, d_ff=32, n_heads=2).state_dict()
    with pytest.raises(ValueError, match="state 1 has other keys"):
        average_state_dicts([models[0].state_dict(), other])


def test_one_set_of_special_ids_and_one_strip():
    from annotated.data import BOS, EOS, PAD, SPECIALS, UNK

    assert (PAD, BOS, EOS, UNK) == (0, 1, 2, 3)
    assert SPECIALS == ("<pad>", "<bos>", "<eos>", "<unk>")  # the tokens, in id order
    assert strip_specials(torch.tensor([1, 5, 0, 6, 2, 7, 2, 0])) == [5, 6]  # up to the first EOS
    assert strip_specials([1, 4, 4]) == [4, 4] and strip_specials([1, 2]) == []


def test_gradient_clipping_bounds_the_update():
    _, big = micro_and_big()
    model = tiny_model()
    before = flat_params(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    train_step_at_scale(model, FastLabelSmoothingLoss(V, PAD), optimizer, [big], clip_norm=1e-3)
    assert (flat_params(model) - before).norm() <= 1e-3 * (1 + 1e-4)
    before = flat_params(model)  # the clipping hook lasts one call: the next update is not clipped
    train_step_at_scale(model, FastLabelSmoothingLoss(V, PAD), optimizer, [big])
    assert (flat_params(model) - before).norm() > 1e-2


def test_train_step_and_trainer_bad_input():
    model = tiny_model()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    only_pad = CheckedBatch(torch.ones(2, 3, dtype=torch.long), torch.tensor([[1, 0], [1, 0]]), PAD)
    with pytest.raises(ValueError, match="at least one real target token"):
        train_step_at_scale(model, FastLabelSmoothingLoss(V, PAD), optimizer, only_pad)
    with pytest.raises(ValueError, match="accum_steps"):
        Trainer(model, FastLabelSmoothingLoss(V, PAD), optimizer, accum_steps=0)
    with pytest.raises(ValueError, match="clip_norm"):
        Trainer(model, FastLabelSmoothingLoss(V, PAD), optimizer, clip_norm=-1.0)


# ---- Checkpoints ------------------------------------------------------------------------------------


def training_run(model, n_updates, data, step=0, optimizer=None, scheduler=None):
    optimizer = optimizer or make_optimizer(model)
    scheduler = scheduler or make_scheduler(optimizer, d_model=16, warmup=3)
    trainer = Trainer(model, FastLabelSmoothingLoss(V, PAD), optimizer, scheduler, 2, step=step)
    trainer.fit(data[2 * step : 2 * (step + n_updates)], progress=False)
    return trainer


def resume_data():
    gen = torch.Generator().manual_seed(5)
    return [CheckedBatch(*random_batch(4, gen), PAD) for _ in range(12)]


@pytest.mark.parametrize("fresh_model", [True, False])
def test_resuming_continues_exactly(tmp_path, fresh_model):
    data = resume_data()  # 6 updates of 2 micro-batches; dropout on, so the RNG state matters
    straight = training_run(tiny_model(dropout=0.1), 6, data)

    first = training_run(tiny_model(dropout=0.1), 3, data)
    save_checkpoint(tmp_path / "ck.pt", first.model, first.optimizer, first.scheduler, first.step)
    torch.manual_seed(1234)  # as if a new process: the RNG has moved on
    if fresh_model:  # rebuild everything from the file
        ckpt = load_checkpoint(tmp_path / "ck.pt")
        optimizer = make_optimizer(ckpt.model)
        scheduler = make_scheduler(optimizer, d_model=16, warmup=3)
        ckpt.restore(optimizer, scheduler)
    else:  # fill objects built by the caller
        model = make_model(V, V, **TINY, dropout=0.1)
        optimizer = make_optimizer(model)
        scheduler = make_scheduler(optimizer, d_model=16, warmup=3)
        ckpt = load_checkpoint(tmp_path / "ck.pt", model, optimizer, scheduler)
    resumed = training_run(ckpt.model, 3, data, ckpt.step, optimizer, scheduler)

    assert resumed.step == straight.step == 6
    assert scheduler.last_epoch == straight.scheduler.last_epoch == 6
    for (name, a), b in zip(
        straight.model.named_parameters(), resumed.model.parameters(), strict=True
    ):
        assert torch.equal(a, b), name
    assert optimizer.param_groups[0]["lr"] == straight.optimizer.param_groups[0]["lr"]
    assert [loss for _, loss in resumed.history] == [loss for _, loss in straight.history[3:]]


def test_checkpoint_keeps_config_tie_and_extras(tmp_path):
    model = tiny_model(shared_vocab=True, norm_first=True)
    save_checkpoint(tmp_path / "ck.pt", model, step=7, note="hello", best_bleu=12.5)
    assert not list(tmp_path.glob("*.tmp"))  # written through a temporary file, then renamed
    ckpt = load_checkpoint(tmp_path / "ck.pt")
    assert isinstance(ckpt.model, Transformer) and ckpt.model.cfg == model.cfg
    assert ckpt.step == 7 and ckpt.extra == {"note": "hello", "best_bleu": 12.5}
    loaded = ckpt.model
    assert loaded.generator.weight is loaded.tgt_embed.lut.weight is loaded.src_embed.lut.weight
    for a, b in zip(model.state_dict().values(), loaded.state_dict().values(), strict=True):
        assert torch.equal(a, b)
    state = torch.load(tmp_path / "ck.pt", weights_only=True)
    assert isinstance(state["config"], dict) and TransformerConfig(**state["config"]) == model.cfg


def _mark_called():
    _mark_called.called = True  # pragma: no cover (must never run)
    return {}


class _Payload:
    """Unpickling this would call _mark_called: weights_only must refuse it."""

    def __reduce__(self):
        return (_mark_called, ())


def test_bad_checkpoint_files(tmp_path):
    good = tmp_path / "good.pt"
    save_checkpoint(good, tiny_model())
    data = good.read_bytes()
    files = {
        "random.pt": bytes(
            torch.randint(0, 256, (4000,), generator=torch.Generator().manual_seed(0)).tolist()
        ),
        "truncated.pt": data[: len(data) // 2],
        "empty.pt": b"",
    }
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
        with pytest.raises(
            ValueError, match=rf"{name} is not a checkpoint: expected the zip archive"
        ):
            load_checkpoint(tmp_path / name)
    torch.save({"weights": torch.ones(3)}, tmp_path / "foreign.pt")
    with pytest.raises(
        ValueError, match=r"foreign.pt is not an annotated checkpoint: expected a dict"
    ):
        load_checkpoint(tmp_path / "foreign.pt")
    torch.save({"format": "annotated.training/2", "model": {}}, tmp_path / "later.pt")
    with pytest.raises(
        ValueError, match=r"later.pt is a checkpoint of format 'annotated.training/2'; this version"
    ):
        load_checkpoint(tmp_path / "later.pt")
    torch.save(torch.ones(3), tmp_path / "tensor.pt")
    with pytest.raises(ValueError, match=r"tensor.pt is not an annotated checkpoint.*got Tensor"):
        load_checkpoint(tmp_path / "tensor.pt")
    torch.save({"format": "annotated.training/1", "x": _Payload()}, tmp_path / "code.pt")
    assert zipfile.is_zipfile(tmp_path / "code.pt")
    with pytest.raises(ValueError, match=r"code.pt is not a checkpoint: its pickle asks for"):
        load_checkpoint(tmp_path / "code.pt")
    assert not getattr(_mark_called, "called", False)  # nothing was executed
    with pytest.raises(FileNotFoundError, match="missing.pt"):
        load_checkpoint(tmp_path / "missing.pt")


def test_checkpoint_bad_arguments(tmp_path):
    path = tmp_path / "ck.pt"
    with pytest.raises(TypeError, match="model must be a Transformer"):
        save_checkpoint(path, torch.nn.Linear(2, 2))
    model = tiny_model()
    save_checkpoint(path, model)  # no optimizer state saved
    with pytest.raises(ValueError, match="config differs"):
        load_checkpoint(path, tiny_model(d_model=32, n_heads=4))
    with pytest.raises(ValueError, match="optimizer and scheduler must be built over the model"):
        load_checkpoint(path, optimizer=make_optimizer(model))
    with pytest.raises(ValueError, match="holds no optimizer state"):
        load_checkpoint(path, model, make_optimizer(model))


def test_entropy_is_finite_for_a_tiny_smoothing():
    """Regression (found by hypothesis): eps / (V - 2) underflowed to 0 and log(0) raised."""
    import math

    from annotated.training import FastLabelSmoothingLoss

    loss = FastLabelSmoothingLoss(4, 0, smoothing=5e-324)
    assert math.isfinite(loss.entropy) and loss.entropy >= 0


# ---- chapter 12's pieces and appendix 33's, which call them ------------------------------------


def test_appendix_33_builds_on_chapter_12_under_names_of_its_own():
    """Chapter 12's names are chapter 12's code; appendix 33's subclass them or call them, bit for bit."""
    from annotated.training.loop import fused_logits_of
    from annotated.training.step import logits_of

    assert issubclass(CheckedBatch, Batch) and issubclass(
        FastLabelSmoothingLoss, LabelSmoothingLoss
    )
    assert not hasattr(Batch, "to") and "forward" in vars(LabelSmoothingLoss)
    for f in (train_step, noam_scheduler, average_weights, logits_of):
        assert f.__module__.split(".")[-1] in ("step", "schedule", "averaging"), f
        assert not hasattr(f, "__wrapped__")
    gen = torch.Generator().manual_seed(4)
    src, tgt = random_batch(3, gen)
    tgt[0, 2] = PAD  # a pad inside a row: the masked path, which chapter 12's step takes
    plain, checked = Batch(src, tgt, PAD), CheckedBatch(src, tgt, PAD)
    assert not checked.causal_only
    for name in ("src", "tgt_in", "tgt_out", "src_mask", "tgt_mask"):
        assert torch.equal(getattr(plain, name), getattr(checked, name))
    logits = torch.randn(3, tgt.size(1) - 1, V, dtype=torch.float64, generator=gen)
    torch.testing.assert_close(  # the explicit form and the three terms
        LabelSmoothingLoss(V, PAD)(logits, plain.tgt_out),
        FastLabelSmoothingLoss(V, PAD)(logits, plain.tgt_out),
    )
    runs = []
    for step, batch in ((train_step, plain), (train_step_at_scale, checked)):
        model = tiny_model()
        optimizer = make_optimizer(model)
        scheduler = (
            noam_scheduler(optimizer, 16, 4)
            if step is train_step
            else make_scheduler(optimizer, 16, 4)
        )
        loss = step(model, FastLabelSmoothingLoss(V, PAD), optimizer, [batch], scheduler)
        runs.append(
            (loss, [p.detach().clone() for p in model.parameters()], scheduler.get_last_lr())
        )
    assert runs[0][0] == runs[1][0] and runs[0][2] == runs[1][2]
    assert all(torch.equal(a, b) for a, b in zip(runs[0][1], runs[1][1], strict=True))
    assert fused_logits_of.__module__ == "annotated.training.loop"
    states = [{"w": torch.randn(2, 3, generator=gen)} for _ in range(3)]
    assert torch.equal(average_weights(states)["w"], average_state_dicts(states)["w"])
    with pytest.raises(ValueError, match="at least one state dict"):
        average_state_dicts([])  # the checks are appendix 33's
    assert schedule_rates(6, 16, 4) == [noam_lr(s, 16, 4) for s in range(1, 7)]
