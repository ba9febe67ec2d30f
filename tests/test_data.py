"""Tests for the data path: the Multi30k loader (annotated.multi30k), the shared BPE vocabulary and
batches (annotated.data) and BLEU (annotated.evaluation)."""

import gzip
import hashlib
import io
import os
import shutil
import unicodedata
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
import sacrebleu
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from annotated.data import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    SPECIALS,
    UNK_ID,
    decode,
    encode,
    encode_pairs,
    length_batches,
    load_tokenizer,
    pad_batch,
    pad_fraction,
    save_tokenizer,
    token_batches,
    train_tokenizer,
)
from annotated.evaluation import corpus_bleu, corpus_chrf, simple_tokenize, tokenized_bleu
from annotated.multi30k import (
    MULTI30K_ENV,
    MULTI30K_SHA256,
    MULTI30K_SIZES,
    MULTI30K_URL,
    Pair,
    download_multi30k_file,
    load_multi30k,
    multi30k_path,
)

ROOT = Path(__file__).resolve().parents[1]
SHARED_COPY = ROOT.parent / "shared" / "data" / "multi30k"  # this project's copy, next to the repo


def find_local_copy() -> Path | None:
    for candidate in (os.environ.get(MULTI30K_ENV), SHARED_COPY):
        if candidate and all((Path(candidate) / name).is_file() for name in MULTI30K_SHA256):
            return Path(candidate)
    return None


@pytest.fixture(scope="module")
def data_dir() -> Path:
    found = find_local_copy()
    if found is None:
        reason = f"Multi30k files not found: set {MULTI30K_ENV} or place them in {SHARED_COPY}"
        if os.environ.get("CI"):
            pytest.fail(reason)  # CI must provide the data, never silently skip
        pytest.skip(reason)
    return found


@pytest.fixture(autouse=True)
def no_network(monkeypatch):
    """No test may reach the internet; download tests install their own fake opener."""

    def refuse(url, *args, **kwargs):
        raise AssertionError(f"a test tried to open {url}")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)


def serve(monkeypatch, files: dict[str, bytes], fail_after: int | None = None) -> list[str]:
    """Replace urlopen by a fake that serves files by name; returns the list of requested URLs."""
    requested = []

    class Response(io.BytesIO):
        def read(self, size=-1):
            if fail_after is not None and self.tell() >= fail_after:
                raise ConnectionResetError("connection reset by peer")
            return super().read(min(size, fail_after or size) if size > 0 else size)

    def fake_urlopen(url, timeout=None):
        requested.append(url)
        return Response(files[url.rsplit("/", 1)[1]])

    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen)
    return requested


# --- loading from a folder ------------------------------------------------------------------


def test_splits_have_the_published_sizes(data_dir):
    for split, size in MULTI30K_SIZES.items():
        pairs = load_multi30k(split, data_dir)
        assert len(pairs) == size
        assert all(isinstance(p, Pair) and p.de and p.en for p in pairs)
        assert all(p.de == p.de.strip() and "\n" not in p.de + p.en for p in pairs)
    first = load_multi30k("train", data_dir)[0]
    assert first.de == "Zwei junge weiße Männer sind im Freien in der Nähe vieler Büsche."
    assert first.en == "Two young, White males are outside near many bushes."


def test_environment_variable_names_the_folder(data_dir, monkeypatch, tmp_path):
    monkeypatch.setenv(MULTI30K_ENV, str(data_dir))
    pairs = load_multi30k("val", cache_dir=tmp_path)  # no download: urlopen would raise
    assert pairs == load_multi30k("val", data_dir)
    assert not any(tmp_path.iterdir())


def test_a_corrupted_local_copy_raises(data_dir, tmp_path):
    for name in MULTI30K_SHA256:
        shutil.copy(data_dir / name, tmp_path / name)
    bad = tmp_path / "val.en.gz"
    data = bytearray(bad.read_bytes())
    data[-10] ^= 0xFF
    bad.write_bytes(bytes(data))
    actual = hashlib.sha256(data).hexdigest()
    with pytest.raises(ValueError, match=f"val.en.gz.*{MULTI30K_SHA256['val.en.gz']}.*{actual}"):
        load_multi30k("val", tmp_path)
    assert bad.read_bytes() == bytes(data)  # a given copy is reported, never replaced
    assert len(load_multi30k("test_2016_flickr", tmp_path)) == 1000  # the intact files still load


def test_a_missing_file_and_a_bad_split_raise(tmp_path):
    with pytest.raises(FileNotFoundError, match="val.de.gz"):
        load_multi30k("val", tmp_path)
    with pytest.raises(ValueError, match="split must be one of .*got split='dev'"):
        load_multi30k("dev", tmp_path)
    with pytest.raises(ValueError, match="name must be one of"):
        multi30k_path("train.fr.gz", tmp_path)


# --- downloading ----------------------------------------------------------------------------


def test_download_caches_verified_files_and_reuses_them(data_dir, monkeypatch, tmp_path):
    monkeypatch.delenv(MULTI30K_ENV, raising=False)
    files = {name: (data_dir / name).read_bytes() for name in MULTI30K_SHA256}
    requested = serve(monkeypatch, files)
    pairs = load_multi30k("val", cache_dir=tmp_path)
    assert pairs == load_multi30k("val", data_dir)
    assert requested == [MULTI30K_URL.format(name=f"val.{lang}.gz") for lang in ("de", "en")]
    assert requested[0] == (
        "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/val.de.gz"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["val.de.gz", "val.en.gz"]
    load_multi30k("val", cache_dir=tmp_path)
    assert len(requested) == 2  # the verified cache is used, nothing downloaded again


def test_a_corrupted_cache_file_is_downloaded_again(data_dir, monkeypatch, tmp_path):
    monkeypatch.delenv(MULTI30K_ENV, raising=False)
    requested = serve(monkeypatch, {"val.de.gz": (data_dir / "val.de.gz").read_bytes()})
    (tmp_path / "val.de.gz").write_bytes(b"garbage")
    path = multi30k_path("val.de.gz", cache_dir=tmp_path)
    assert len(requested) == 1
    assert hashlib.sha256(path.read_bytes()).hexdigest() == MULTI30K_SHA256["val.de.gz"]


def test_wrong_bytes_raise_and_leave_no_file(monkeypatch, tmp_path):
    monkeypatch.delenv(MULTI30K_ENV, raising=False)
    wrong = gzip.compress(b"Ein Hund.\n")
    serve(monkeypatch, {"val.de.gz": wrong})
    expected, actual = MULTI30K_SHA256["val.de.gz"], hashlib.sha256(wrong).hexdigest()
    with pytest.raises(ValueError, match=f"val.de.gz.*expected sha256 {expected}, got {actual}"):
        load_multi30k("val", cache_dir=tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []  # neither the file nor a .part is left


def test_a_broken_download_raises_and_leaves_no_file(monkeypatch, tmp_path):
    payload = os.urandom(3 << 20)  # several chunks, the connection drops after the first
    monkeypatch.setitem(MULTI30K_SHA256, "val.de.gz", hashlib.sha256(payload).hexdigest())
    serve(monkeypatch, {"val.de.gz": payload}, fail_after=1 << 20)
    with pytest.raises(OSError, match="downloading val.de.gz from https://.*failed"):
        download_multi30k_file("val.de.gz", tmp_path / "val.de.gz")
    assert list(tmp_path.iterdir()) == []


def test_download_verifies_against_the_checksum_table(monkeypatch, tmp_path):
    payload = b"any bytes at all"  # runs without the data: the table is patched to match
    monkeypatch.setitem(MULTI30K_SHA256, "val.de.gz", hashlib.sha256(payload).hexdigest())
    serve(monkeypatch, {"val.de.gz": payload})
    download_multi30k_file("val.de.gz", tmp_path / "sub" / "val.de.gz")
    assert (tmp_path / "sub" / "val.de.gz").read_bytes() == payload
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["val.de.gz"]


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
    assert (
        [tok.token_to_id(s) for s in SPECIALS] == [PAD_ID, BOS_ID, EOS_ID, UNK_ID] == [0, 1, 2, 3]
    )
    assert tok.get_vocab_size() == 1000


def test_one_vocabulary_covers_both_languages(tok, sample_pairs):
    for pair in sample_pairs[:300]:
        for text in pair:
            assert UNK_ID not in encode(tok, text)
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
    assert decode(tok, [BOS_ID, *ids, EOS_ID, PAD_ID, PAD_ID]) == "Ein Hund."
    assert decode(tok, torch.tensor([BOS_ID, *ids, EOS_ID])) == "Ein Hund."
    assert UNK_ID in encode(tok, "☃")  # a character never seen in training


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
        s = [i for i in s if i != PAD_ID]
        t = [i for i in t if i != PAD_ID]
        assert t[0] == BOS_ID and t[-1] == EOS_ID
        rows.append((tuple(s), tuple(t[1:-1])))
    return rows


def test_pad_batch_layout():
    src, tgt = pad_batch([([5, 6, 7], [8]), ([9], [10, 11, 12])])
    assert src.dtype == tgt.dtype == torch.long
    assert src.tolist() == [[5, 6, 7], [9, 0, 0]]  # (B, S)
    assert tgt.tolist() == [[1, 8, 2, 0, 0], [1, 10, 11, 12, 2]]  # (B, T+2)
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
            for s, t in token_batches(examples, 150, seed=7, rank=r, world_size=world_size)
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
    with pytest.raises(ValueError, match="rank=2, world_size=2"):
        token_batches(examples, 100, rank=2, world_size=2)
    with pytest.raises(ValueError, match="world_size >= 1"):
        token_batches(examples, 100, world_size=0)
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


# --- BLEU -----------------------------------------------------------------------------------

REFS = ["A man's dog runs on the grass.", "Two children play soccer in a t-shirt."]


def test_identical_output_scores_100():
    assert corpus_bleu(REFS, REFS).score == pytest.approx(100)
    assert tokenized_bleu(REFS, REFS).score == pytest.approx(100)


def test_case_counts_only_in_the_cased_score():
    upper = [r.upper() for r in REFS]
    assert corpus_bleu(upper, REFS).score < 10
    assert tokenized_bleu(upper, REFS).score == pytest.approx(100)


def test_corpus_bleu_is_sacrebleus_default():
    hyps = ["A man's dog runs on grass.", "Two kids play soccer in a t-shirt."]
    expected = sacrebleu.corpus_bleu(hyps, [REFS])
    bleu = corpus_bleu(hyps, REFS)
    assert bleu.score == pytest.approx(expected.score)
    assert "tok:13a" in bleu.signature and "case:mixed" in bleu.signature
    assert 0 < bleu.score < 100


def test_corpus_chrf_is_sacrebleus_chrf_and_gives_partial_credit():
    hyps = ["A man's dogs run on grass.", "Two kids play soccer in a t-shirt."]
    chrf = corpus_chrf(hyps, REFS)
    assert chrf.score == pytest.approx(sacrebleu.corpus_chrf(hyps, [REFS]).score)
    assert chrf.signature.startswith("nrefs:1|case:mixed") and "nc:6" in chrf.signature
    assert corpus_chrf(REFS, REFS).score == pytest.approx(100)
    # a wrong word ending loses a whole word in BLEU's n-grams but only some character n-grams
    inflected = [r.replace("runs", "running") for r in REFS]
    assert 100 - corpus_chrf(inflected, REFS).score < 100 - corpus_bleu(inflected, REFS).score


def test_tokenized_bleu_scores_our_tokens():
    hyps = ["a man 's dog runs on grass .", "two kids play soccer in a t - shirt ."]
    bleu = tokenized_bleu(hyps, REFS)
    refs = [" ".join(simple_tokenize(r)) for r in REFS]
    assert bleu.score == pytest.approx(sacrebleu.corpus_bleu(hyps, [refs], tokenize="none").score)
    assert "tok:none" in bleu.signature and "case:lc" in bleu.signature


def test_simple_tokenize_splits_like_spacy_on_captions():
    assert simple_tokenize("A man's T-shirt, red.") == [
        "a",
        "man",
        "'s",
        "t",
        "-",
        "shirt",
        ",",
        "red",
        ".",
    ]


def test_bleu_input_errors():
    with pytest.raises(ValueError, match="got 1 hypotheses and 2 references"):
        corpus_bleu(REFS[:1], REFS)
    with pytest.raises(ValueError, match="non-empty"):
        tokenized_bleu([], [])
    with pytest.raises(TypeError, match="not one string"):
        corpus_bleu("A dog.", "A dog.")
