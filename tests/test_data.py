"""Tests for annotated.data: the shared BPE vocabulary, text <-> ids and the length-bucketed batches."""

import unicodedata
from collections import Counter

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from annotated.data import (
    BOS,
    EOS,
    PAD,
    SPECIALS,
    UNK,
    Pair,
    decode,
    encode,
    encode_pairs,
    length_batches,
    load_multi30k,
    load_tokenizer,
    pad_batch,
    pad_fraction,
    save_tokenizer,
    shard_batches,
    token_batches,
    train_tokenizer,
)

# --- tokenizer ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sample_pairs(data_dir) -> list[Pair]:
    return load_multi30k("train", data_dir)[:3000]  # a slice keeps training well under a second


@pytest.fixture(scope="module")
def tok(sample_pairs):
    return train_tokenizer(sample_pairs, vocab_size=1000)


def normalized(text: str) -> str:
    return " ".join(unicodedata.normalize("NFKC", text).split())


def test_specials_have_fixed_ids_and_the_vocab_has_the_asked_size(tok):
    assert [tok.token_to_id(s) for s in SPECIALS] == [PAD, BOS, EOS, UNK] == [0, 1, 2, 3]
    assert tok.get_vocab_size() == 1000


def test_one_vocabulary_covers_both_languages(tok, sample_pairs):
    for pair in sample_pairs[:300]:
        for text in pair:
            assert UNK not in encode(tok, text)
    assert len(encode(tok, "Männer")) <= 2 and len(encode(tok, "men")) == 1


def test_decode_inverts_encode_up_to_whitespace(tok, sample_pairs):
    for pair in sample_pairs[:500]:
        for text in pair:
            assert decode(tok, encode(tok, text)) == normalized(text)
    assert decode(tok, encode(tok, "  Ein   Hund,\tder läuft.  ")) == "Ein Hund, der läuft."


@settings(max_examples=30, deadline=None)
@given(
    words=st.lists(
        st.sampled_from(
            ["Ein", "Hund", "läuft", "über", "Gras", "man", "dog's", "-", ".", ",", "3"]
        ),
        min_size=1,
        max_size=12,
    ),
    gaps=st.lists(st.sampled_from([" ", "  ", "\t"]), min_size=12, max_size=12),
)
def test_round_trip_property(tok, words, gaps):
    text = "".join(w + g for w, g in zip(words, gaps, strict=False))
    assert decode(tok, encode(tok, text)) == normalized(text)


def test_encode_adds_no_specials_and_decode_skips_them(tok):
    ids = encode(tok, "Ein Hund.")
    assert all(i >= len(SPECIALS) for i in ids)
    assert decode(tok, [BOS, *ids, EOS, PAD, PAD]) == "Ein Hund."
    assert decode(tok, torch.tensor([BOS, *ids, EOS])) == "Ein Hund."
    assert UNK in encode(tok, "☃")  # a character never seen in training


def test_save_load_and_determinism(tok, sample_pairs, tmp_path):
    save_tokenizer(tok, tmp_path / "model" / "tokenizer.json")
    again = load_tokenizer(tmp_path / "model" / "tokenizer.json")
    assert again.to_str() == tok.to_str()
    assert train_tokenizer(sample_pairs, vocab_size=1000).to_str() == tok.to_str()  # seedless


def test_encode_pairs_matches_encode(tok, sample_pairs):
    pairs = sample_pairs[:50]
    assert encode_pairs(tok, pairs) == [(encode(tok, de), encode(tok, en)) for de, en in pairs]


def test_bad_vocab_size_raises(sample_pairs):
    with pytest.raises(ValueError, match="vocab_size must exceed 4, got vocab_size=4"):
        train_tokenizer(sample_pairs[:10], vocab_size=4)


# --- batches --------------------------------------------------------------------------------


def random_examples(n: int, seed: int) -> list[tuple[list[int], list[int]]]:
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(1, 30, (n, 2), generator=g).tolist()
    return [
        (
            torch.randint(4, 50, (s,), generator=g).tolist(),
            torch.randint(4, 50, (t,), generator=g).tolist(),
        )
        for s, t in lengths
    ]


def unpad(src: torch.Tensor, tgt: torch.Tensor) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    rows = []
    for s, t in zip(src.tolist(), tgt.tolist(), strict=True):
        s = [i for i in s if i != PAD]
        t = [i for i in t if i != PAD]
        assert t[0] == BOS and t[-1] == EOS
        rows.append((tuple(s), tuple(t[1:-1])))
    return rows


def test_pad_batch_layout():
    src, tgt = pad_batch([([5, 6, 7], [8]), ([9], [10, 11, 12])])
    assert src.dtype == tgt.dtype == torch.long
    assert src.tolist() == [[5, 6, 7], [9, 0, 0]]  # (B, S)
    assert tgt.tolist() == [[1, 8, 2, 0, 0], [1, 10, 11, 12, 2]]  # (B, T + 1)
    with pytest.raises(ValueError, match="at least one"):
        pad_batch([])


@settings(max_examples=15, deadline=None)
@given(n=st.integers(1, 200), max_tokens=st.integers(32, 400), seed=st.integers(0, 10**6))
def test_every_example_once_and_every_batch_within_budget(n, max_tokens, seed):
    examples = random_examples(n, seed)
    batches = list(token_batches(examples, max_tokens, shuffle=True, seed=seed))
    assert all(s.numel() <= max_tokens and t.numel() <= max_tokens for s, t in batches)
    seen = Counter(row for s, t in batches for row in unpad(s, t))
    assert seen == Counter((tuple(s), tuple(t)) for s, t in examples)


def test_same_seed_same_batches_other_seed_other_order():
    examples = random_examples(300, 0)

    def run(seed):
        return [(s.tolist(), t.tolist()) for s, t in token_batches(examples, 200, seed=seed)]

    assert run(3) == run(3)
    assert run(3) != run(4)
    unshuffled = [
        len(b) for b in length_batches([(len(s), len(t)) for s, t in examples], 200, False)
    ]
    assert sum(unshuffled) == 300


def test_without_shuffle_batches_come_sorted_by_length():
    examples = random_examples(300, 1)
    widths = [s.size(1) for s, _ in token_batches(examples, 200, shuffle=False)]
    assert widths == sorted(widths)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_every_rank_gets_the_same_number_of_distinct_batches(world_size):
    """Unequal counts would leave one process waiting for a gradient exchange that never comes."""
    examples = random_examples(250, 2)
    everything = [(s.tolist(), t.tolist()) for s, t in token_batches(examples, 150, seed=7)]
    per_rank = [
        [
            (s.tolist(), t.tolist())
            for s, t in shard_batches(list(token_batches(examples, 150, seed=7)), r, world_size)
        ]
        for r in range(world_size)
    ]
    share = len(everything) // world_size
    for r, batches in enumerate(per_rank):
        assert batches == everything[r::world_size][:share]  # rank r: every world_size-th batch
    kept = sorted(map(str, sum(per_rank, [])))
    assert (
        len(kept) == len(set(kept)) == share * world_size
    )  # no batch twice, at most W - 1 left out
    assert len(everything) - len(kept) < world_size


def test_bad_batching_arguments_raise_at_call_time():
    examples = random_examples(10, 3)
    batches = list(token_batches(examples, 100))
    with pytest.raises(ValueError, match="rank=2, world_size=2"):
        shard_batches(batches, rank=2, world_size=2)
    with pytest.raises(ValueError, match="world_size >= 1"):
        shard_batches(batches, rank=0, world_size=0)
    with pytest.raises(
        ValueError, match=r"max_tokens must be >= the longest example \(12\), got 10"
    ):
        token_batches([([4] * 12, [5])], max_tokens=10)


def test_pad_fraction_counts_source_and_target():
    batch = pad_batch([([5, 6], [7]), ([8], [9])])  # src 1 pad of 4, tgt 0 pads of 6
    assert pad_fraction([batch]) == pytest.approx(1 / 10)


def test_length_bucketing_pads_less_than_random_batching():
    examples = random_examples(2000, 4)
    bucketed = list(token_batches(examples, 500, seed=0))
    sizes, start, naive = [s.size(0) for s, _ in bucketed], 0, []
    for n in sizes:
        naive.append(pad_batch(examples[start : start + n]))  # examples are in random order already
        start += n
    assert pad_fraction(bucketed) < 0.5 * pad_fraction(naive)
