"""Tests for annotated.evaluation: BLEU and chrF as sacreBLEU computes them, and the token BLEU."""

import pytest
import sacrebleu

from annotated.decoding import corpus_bleu, corpus_chrf, simple_tokenize, tokenized_bleu

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


def test_lowercased_corpus_bleu_is_sacrebleus_lc():
    hyps = [r.upper() for r in REFS]
    expected = sacrebleu.corpus_bleu(hyps, [REFS], lowercase=True)
    bleu = corpus_bleu(hyps, REFS, lowercase=True)
    assert bleu.score == pytest.approx(expected.score) and bleu.score == pytest.approx(100)
    assert "case:lc" in bleu.signature and corpus_bleu(hyps, REFS).score < 10


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
