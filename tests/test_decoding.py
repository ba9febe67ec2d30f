"""Decoding (§6.1): greedy, beam search with length penalty, and the key/value cache.

The cache must change the cost and never the result: tokens equal and logits equal at every step, with
and without it, on random models and on a briefly trained one. Beam search with one beam is greedy
decoding; with more it scores at least as well here, and finds a known best output that greedy misses.
"""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import Tensor, nn

from annotated.data import BOS, EOS, PAD
from annotated.decoding import (
    beam_search,
    greedy_decode,
    length_penalty,
    max_new_tokens_from_source,
    next_token_logits,
    score_sequences,
)
from annotated.model import DecoderCache, KVCache, causal_mask, make_model, padding_mask

VOCAB = 12
SMALL = {"n_layers": 2, "d_model": 32, "d_ff": 64, "n_heads": 4, "dropout": 0.0}


def random_model(seed=0, **overrides):
    torch.manual_seed(seed)
    return make_model(VOCAB, VOCAB, **{**SMALL, **overrides}).eval()


def random_source(B=5, S=7, seed=0):
    gen = torch.Generator().manual_seed(seed)
    src = torch.randint(3, VOCAB, (B, S), generator=gen)
    src[B // 2, S - 2 :] = PAD  # one sentence with padding
    return src, padding_mask(src, PAD)


def step_logits(model, src, src_mask, ys, use_cache):
    """Logits (B, T - 1, V) of every step of decoding `ys`, computed step by step."""
    with torch.no_grad():
        memory, cache = model.encode(src, src_mask), DecoderCache() if use_cache else None
        steps = [
            next_token_logits(model, memory, src_mask, ys[:, :t], cache)
            for t in range(1, ys.size(1))
        ]
    return torch.stack(steps, dim=1)


# ---- the step ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("norm_first", [False, True])
def test_next_token_logits_is_the_last_row_of_the_forward_pass(norm_first):
    model = random_model(norm_first=norm_first)
    src, src_mask = random_source()
    ys = torch.randint(3, VOCAB, (5, 4))
    with torch.no_grad():
        full = model(src, ys, src_mask, causal_mask(4))[:, -1]  # (B, V)
        step = next_token_logits(model, model.encode(src, src_mask), src_mask, ys)
    torch.testing.assert_close(step, full)


def test_next_token_logits_rejects_a_cache_of_the_wrong_length():
    model = random_model()
    src, src_mask = random_source()
    memory, cache = model.encode(src, src_mask), DecoderCache()
    ys = torch.full((5, 1), BOS)
    next_token_logits(model, memory, src_mask, ys, cache)
    with pytest.raises(
        ValueError, match=r"cache must hold every token of ys but the last.*1 positions"
    ):
        next_token_logits(model, memory, src_mask, torch.cat([ys, ys, ys], 1), cache)


# ---- the cache: same tokens, same logits ------------------------------------------------------------


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("norm_first", [False, True])
def test_greedy_with_and_without_cache_gives_the_same_tokens_and_logits(seed, norm_first):
    model = random_model(seed, norm_first=norm_first)
    src, src_mask = random_source(seed=seed)
    with_cache = greedy_decode(model, src, src_mask, 20, BOS, -1, PAD)  # eos -1: all 20 steps
    without = greedy_decode(model, src, src_mask, 20, BOS, -1, PAD, use_cache=False)
    assert with_cache.shape == (5, 21)
    assert torch.equal(with_cache, without)
    torch.testing.assert_close(
        step_logits(model, src, src_mask, with_cache, True),
        step_logits(model, src, src_mask, with_cache, False),
    )


@settings(max_examples=8, deadline=None)
@given(
    B=st.integers(1, 3),
    S=st.integers(1, 6),
    K=st.integers(1, 5),
    alpha=st.sampled_from([0.0, 0.6, 1.0]),
    seed=st.integers(0, 1000),
)
def test_cache_never_changes_the_beam_search_result(B, S, K, alpha, seed):
    model = random_model(seed % 3)
    src = torch.randint(3, VOCAB, (B, S), generator=torch.Generator().manual_seed(seed))
    src[B // 2, S - S // 2 :] = PAD  # one sentence padded (all of it but its first half)
    src_mask = padding_mask(src, PAD) if S > 1 else None
    kwargs = dict(beam_size=K, alpha=alpha, max_new_tokens=6, bos_id=BOS, eos_id=EOS, pad_id=PAD)
    tokens, scores = beam_search(model, src, src_mask, return_scores=True, **kwargs)
    tokens_nc, scores_nc = beam_search(
        model, src, src_mask, use_cache=False, return_scores=True, **kwargs
    )
    assert torch.equal(tokens, tokens_nc)
    torch.testing.assert_close(scores, scores_nc)


def test_reorder_cache_follows_the_reordered_prefixes():
    model = random_model()
    src, _ = random_source(B=1)
    memory = model.encode(src.expand(4, -1))  # (4, S, D): four beams of one sentence
    prefixes = torch.randint(3, VOCAB, (4, 4))
    order = torch.tensor([2, 2, 0, 1])
    with torch.no_grad():
        cache = DecoderCache()
        for t in range(1, 4):
            next_token_logits(model, memory, None, prefixes[:, :t], cache)
        cache.reorder(order)
        moved = next_token_logits(model, memory, None, prefixes[order], cache)
        direct = next_token_logits(model, memory, None, prefixes[order])
    torch.testing.assert_close(moved, direct)
    self_kv, cross_kv = cache.layers[0]
    assert cache.length == 4 and self_kv.k.shape == (4, 4, 4, 8)  # (B, H, T, Dk)
    assert cross_kv.static and not self_kv.static


# ---- a briefly trained model -------------------------------------------------------------------------


def copy_batch(B, gen, S=8):
    """Sources of 4..S random tokens; targets BOS + source + EOS, padded."""
    lengths = torch.randint(4, S + 1, (B, 1), generator=gen)
    src = torch.randint(3, VOCAB, (B, S), generator=gen).masked_fill(
        torch.arange(S) >= lengths, PAD
    )
    tgt = F.pad(src, (1, 2), value=PAD)
    tgt[:, 0] = BOS
    tgt.scatter_(1, lengths + 1, EOS)
    return src, tgt


@pytest.fixture(scope="module")
def copier():
    """A tiny model trained for 120 steps (plain Adam) to copy its source: a few seconds on CPU."""
    model = random_model(0, shared_vocab=True).train()
    gen = torch.Generator().manual_seed(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)
    for _ in range(120):
        src, tgt = copy_batch(24, gen)
        logits = model(src, tgt[:, :-1], padding_mask(src, PAD), causal_mask(tgt.size(1) - 1))
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), tgt[:, 1:].reshape(-1), ignore_index=PAD)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    src, tgt = copy_batch(32, torch.Generator().manual_seed(1))
    return model.eval(), src, tgt


def test_trained_model_decodes_the_same_with_and_without_cache(copier):
    model, src, tgt = copier
    src_mask = padding_mask(src, PAD)
    greedy = greedy_decode(model, src, src_mask, None, BOS, EOS, PAD)
    assert torch.equal(
        greedy, greedy_decode(model, src, src_mask, None, BOS, EOS, PAD, use_cache=False)
    )
    torch.testing.assert_close(
        step_logits(model, src, src_mask, greedy, True),
        step_logits(model, src, src_mask, greedy, False),
    )
    kwargs = dict(bos_id=BOS, eos_id=EOS, pad_id=PAD)
    beam = beam_search(model, src, src_mask, **kwargs)
    assert torch.equal(beam, beam_search(model, src, src_mask, use_cache=False, **kwargs))
    assert torch.equal(beam_search(model, src, src_mask, beam_size=1, **kwargs), greedy)
    copied = (greedy[:, 1:3] == tgt[:, 1:3]).all(1).float().mean()  # the first two tokens
    assert copied > 0.3  # trained: chance would be 1/81


# ---- beam search -------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(4))
def test_beam_size_one_is_greedy(seed):
    model = random_model(seed)
    src, src_mask = random_source(seed=seed)
    greedy = greedy_decode(model, src, src_mask, 12, BOS, EOS, PAD)
    one = beam_search(
        model, src, src_mask, beam_size=1, max_new_tokens=12, bos_id=BOS, eos_id=EOS, pad_id=PAD
    )
    assert torch.equal(one, greedy)


@pytest.mark.parametrize("seed", range(5))
def test_beam_search_scores_at_least_as_well_as_greedy(seed):
    # Usual, not a theorem (a beam can drop the greedy path); it holds for these seeded models.
    model = random_model(seed)
    src, src_mask = random_source(seed=seed)
    greedy = greedy_decode(model, src, src_mask, 12, BOS, EOS, PAD)
    beam, scores = beam_search(
        model,
        src,
        src_mask,
        max_new_tokens=12,
        bos_id=BOS,
        eos_id=EOS,
        pad_id=PAD,
        return_scores=True,
    )
    greedy_scores = score_sequences(model, src, src_mask, greedy, PAD, alpha=0.6)
    beam_scores = score_sequences(model, src, src_mask, beam, PAD, alpha=0.6)
    torch.testing.assert_close(
        beam_scores, scores, atol=1e-5, rtol=1e-5
    )  # reported = teacher forced
    assert (beam_scores >= greedy_scores - 1e-5).all()


class TreeModel(nn.Module):
    """A 'model' whose next-token distribution is a table indexed by the whole prefix.

    It keeps the prefix in a cache laid out like the real model's (`cache.layers[0][0].k`, one
    position per token), so a beam search that forgets to reorder the cache reads the wrong prefixes.
    """

    A, B = 3, 4
    TABLE = {  # prefix after BOS -> {token: probability}; greedy takes A, the best output starts with B
        (): {A: 0.6, B: 0.4},
        (A,): {A: 0.4, B: 0.3, EOS: 0.3},
        (A, A): {EOS: 0.4, A: 0.3, B: 0.3},
        (B,): {EOS: 0.9, A: 0.05, B: 0.05},
    }
    OTHER = {EOS: 0.8, A: 0.1, B: 0.1}

    def __init__(self):
        super().__init__()
        self.generator = nn.Identity()  # decode already returns logits

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        return torch.zeros(src.size(0), src.size(1), 1)

    def decode(self, memory, src_mask, tgt, tgt_mask, cache=None) -> Tensor:
        if cache is not None:
            if not cache.layers:
                cache.layers = [(KVCache(), KVCache(static=True))]
            new = tgt[:, None, :, None].float()  # (B, 1, T, 1): the tokens as "keys"
            keys, _ = cache.layers[0][0].append(new, new)
            tgt = keys[:, 0, :, 0].long()  # (B, T so far): the whole prefix
        logits = torch.full((tgt.size(0), tgt.size(1), 5), float("-inf"))
        for b, row in enumerate(tgt.tolist()):
            for t in range(len(row)):
                for token, p in self.TABLE.get(tuple(row[1 : t + 1]), self.OTHER).items():
                    logits[b, t, token] = torch.tensor(p).log()
        return logits  # (B, T, V)


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_beam_search_finds_the_best_output_where_greedy_does_not(use_cache, alpha):
    model, src = TreeModel(), torch.ones(2, 3, dtype=torch.long)
    greedy = greedy_decode(model, src, None, 5, BOS, EOS, PAD, use_cache=use_cache)
    assert greedy.tolist() == [[BOS, 3, 3, EOS]] * 2  # probability 0.6 * 0.4 * 0.4 = 0.096
    beam, scores = beam_search(
        model,
        src,
        None,
        2,
        alpha,
        5,
        bos_id=BOS,
        eos_id=EOS,
        pad_id=PAD,
        use_cache=use_cache,
        return_scores=True,
    )
    assert beam.tolist() == [[BOS, 4, EOS]] * 2  # probability 0.4 * 0.9 = 0.36
    expected = torch.tensor(0.36).log() / length_penalty(2, alpha)
    torch.testing.assert_close(scores, expected.expand(2))
    assert torch.equal(
        beam_search(model, src, None, 1, alpha, 5, bos_id=BOS, eos_id=EOS, pad_id=PAD), greedy
    )


# ---- limits, length penalty, form of the output ----------------------------------------------------


def test_length_penalty_values():
    assert length_penalty(7, 0.0) == 1.0
    assert length_penalty(7, 1.0) == 2.0  # (5 + 7) / 6
    torch.testing.assert_close(length_penalty(1, 0.6), torch.tensor(1.0))
    lp = length_penalty(torch.arange(1, 50), 0.6)
    assert (lp[1:] > lp[:-1]).all()


def test_max_new_tokens_from_source_is_source_length_plus_50():
    src, src_mask = random_source(S=7)
    assert max_new_tokens_from_source(src, src_mask).tolist() == [57, 57, 55, 57, 57]
    assert max_new_tokens_from_source(src, None, extra=3).tolist() == [10] * 5


def test_greedy_output_form_and_per_sentence_limits():
    model = random_model()
    src, src_mask = random_source()
    limits = torch.tensor([3, 1, 6, 2, 4])
    out = greedy_decode(model, src, src_mask, limits, BOS, -1, PAD)  # never stops at EOS
    assert out.shape == (5, 7) and (out[:, 0] == BOS).all()
    for row, limit in zip(out, limits.tolist(), strict=True):
        assert (row[1 : 1 + limit] != PAD).all() and (row[1 + limit :] == PAD).all()
    default = greedy_decode(model, src, src_mask, None, BOS, -1, PAD)  # source length + 50
    assert default.shape == (5, 58) and (default[2, 56:] == PAD).all()


def test_greedy_pads_after_eos_and_stops_when_all_have_finished():
    model = TreeModel()
    src = torch.ones(3, 2, dtype=torch.long)
    out = greedy_decode(model, src, None, 50, BOS, EOS, PAD)
    assert out.shape == (3, 4)  # stopped early: every sentence produced EOS at step 3
    beam = beam_search(
        model,
        src,
        None,
        max_new_tokens=torch.tensor([1, 2, 50]),
        bos_id=BOS,
        eos_id=EOS,
        pad_id=PAD,
    )
    assert beam.tolist() == [
        [BOS, 3, PAD],
        [BOS, 4, EOS],
        [BOS, 4, EOS],
    ]  # limit 1: no room for EOS


def test_beam_search_handles_a_source_mask_of_batch_one():
    model = random_model()
    src = torch.randint(3, VOCAB, (3, 5))
    mask = torch.ones(1, 1, 1, 5, dtype=torch.bool)
    kwargs = dict(max_new_tokens=6, bos_id=BOS, eos_id=EOS, pad_id=PAD)
    assert torch.equal(
        beam_search(model, src, mask, **kwargs), beam_search(model, src, None, **kwargs)
    )


# ---- bad input ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"beam_size": 0}, r"beam_size must be a positive int, got 0"),
        ({"beam_size": 2.0}, r"beam_size must be a positive int, got 2.0"),
        ({"beam_size": True}, r"beam_size must be a positive int, got True"),
        ({"alpha": -0.5}, r"alpha must be >= 0 .* got -0.5"),
        (
            {"max_new_tokens": 0},
            r"max_new_tokens must be a positive int \(tokens to generate\), got 0",
        ),
        ({"max_new_tokens": "10"}, r"max_new_tokens must be a positive int .* got '10'"),
        (
            {"max_new_tokens": torch.tensor([3, 0, 3, 3, 3])},
            r"max_new_tokens as a tensor must hold B=5 positive ints",
        ),
        (
            {"max_new_tokens": torch.tensor([3, 3])},
            r"max_new_tokens as a tensor must hold B=5 positive ints",
        ),
        (
            {"src_mask": torch.ones(2, 1, 1, 7, dtype=torch.bool)},
            r"src_mask must have shape .*B=5.*\(2, 1, 1, 7\)",
        ),
        (
            {"src_mask": torch.ones(5, 7, dtype=torch.bool)},
            r"src_mask must have shape \(B, 1, 1, S\)",
        ),
        (
            {"src": torch.ones(7, dtype=torch.long)},
            r"src must have shape \(B, length\), got \(7,\)",
        ),
        (  # checked once, before the first step (on a GPU the model itself does not read ids)
            {"src": torch.full((5, 7), VOCAB)},
            r"src: token ids must lie in \[0, vocab_size=12\), got ids from 12 to 12",
        ),
    ],
)
def test_bad_input_is_reported_by_name(kwargs, message):
    model = random_model()
    src, src_mask = random_source()
    arguments = {"src": src, "src_mask": src_mask, "max_new_tokens": 5} | kwargs
    with pytest.raises(ValueError, match=message):
        beam_search(model, **arguments, bos_id=BOS, eos_id=EOS, pad_id=PAD)
    if "beam_size" not in kwargs and "alpha" not in kwargs:  # greedy shares the other checks
        with pytest.raises(ValueError, match=message):
            greedy_decode(
                model,
                arguments["src"],
                arguments["src_mask"],
                arguments["max_new_tokens"],
                BOS,
                EOS,
                PAD,
            )


# ---- the saved copier that notebooks 14 and 15 decode with ----------------------------------------


@pytest.mark.parametrize(
    ("folder", "low", "high"), [("copy", 0.95, 1.0), ("copy/early", 0.5, 0.99)]
)
def test_the_saved_copiers_load_and_copy_as_their_notebooks_say(folder, low, high):
    """results/copy holds chapter 13's recipe run for 1,000 updates, and a separate 200-update run."""
    import json
    from pathlib import Path

    from annotated.data import copy_batches
    from annotated.decoding import exact_match
    from annotated.training import load_model

    run = Path(__file__).resolve().parents[1] / "results" / folder
    record = json.loads((run / "results.json").read_text())
    model = load_model(run / "copier.safetensors")[0].eval()
    # the recorded configuration; fields added since it was recorded take their defaults
    assert model.cfg == type(model.cfg)(**record["config"])
    t = record["training"]
    src, tgt = next(
        copy_batches(1, 200, t["seq_len"], t["vocab_size"], t["seed"] + 1, t["min_len"])
    )
    assert low <= exact_match(model, src, tgt) <= high  # trained: all; stopped early: unsure


def test_exact_stop_never_scores_lower_and_equals_the_heuristic_without_a_penalty():
    """tensor2tensor's bound (the penalty at the limit) searches at least as long as chapter 15's rule."""
    model = random_model()
    src, src_mask = random_source()
    ids = dict(bos_id=BOS, eos_id=EOS, pad_id=PAD, max_new_tokens=8, return_scores=True)
    for alpha in (0.0, 0.6, 1.0):
        ours, ours_score = beam_search(model, src, src_mask, 3, alpha, **ids)
        exact, exact_score = beam_search(model, src, src_mask, 3, alpha, **ids, exact_stop=True)
        assert (exact_score >= ours_score - 1e-6).all()
        if alpha == 0.0:  # no penalty: the heuristic is the exact bound
            assert torch.equal(ours, exact)
