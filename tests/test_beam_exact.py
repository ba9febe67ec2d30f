"""Beam search finishing (issue 32), against brute force on a 'model' whose next-token distribution is a
table written by hand, per sentence and per prefix.

The expected output of every sentence is found by enumerating every hypothesis the search may return
(tokens up to EOS, or exactly as many tokens as the sentence's limit) and scoring each with the table
and the length penalty of §6.1; the tables are made so that two beams hold the best one. The sentences
of one batch end at different steps: one with EOS at step 2, one at its own limit of 2 while the
others go on (and its table would reward going on), one with EOS at step 4 after an earlier EOS
hypothesis, and one whose table keeps emitting EOS after EOS (a hypothesis extended past its EOS
would score better there).
"""

import itertools
import math

import pytest
import torch
from torch import Tensor, nn

from annotated.data import BOS, EOS, PAD
from annotated.decoding import beam_search, length_penalty
from annotated.model import KVCache

A, B = 3, 4  # the two symbols after PAD, BOS, EOS
V = 5

# sentence -> prefix after BOS -> {token: probability}; "default": every other prefix (after EOS too)
TABLES = [
    {  # ends with EOS at step 2, on a path that greedy decoding does not take
        (): {A: 0.55, B: 0.45},
        (A,): {A: 0.4, B: 0.3, EOS: 0.3},
        (A, A): {EOS: 0.4, A: 0.3, B: 0.3},
        (B,): {EOS: 0.85, A: 0.1, B: 0.05},
        "default": {EOS: 0.5, A: 0.25, B: 0.25},
    },
    {  # stopped by its limit of 2 at step 2; its table rewards every further token
        (): {A: 0.7, B: 0.3},
        (A,): {A: 0.6, B: 0.3, EOS: 0.1},
        "default": {A: 0.97, B: 0.01, EOS: 0.02},
    },
    {  # offers an EOS hypothesis at step 2, but ends with EOS at step 4
        (): {A: 0.6, B: 0.4},
        (A,): {EOS: 0.45, A: 0.35, B: 0.2},
        (B,): {A: 0.95, B: 0.03, EOS: 0.02},
        (B, A): {A: 0.95, EOS: 0.04, B: 0.01},
        (B, A, A): {EOS: 0.9, A: 0.05, B: 0.05},
        "default": {EOS: 0.5, A: 0.25, B: 0.25},
    },
    {  # its best ends with EOS at step 2 while a better live prefix goes on; after EOS, more EOS
        (): {A: 0.6, B: 0.4},
        (A,): {EOS: 0.45, B: 0.3, A: 0.25},
        (B,): {B: 0.8, A: 0.1, EOS: 0.1},
        (B, B): {EOS: 0.5, A: 0.25, B: 0.25},
        "default": {EOS: 0.99, A: 0.005, B: 0.005},
    },
]
LIMITS = [5, 2, 5, 5]


def probability(sentence: int, prefix: tuple, token: int) -> float:
    table = TABLES[sentence]
    return table.get(prefix, table["default"]).get(token, 0.0)


class TableModel(nn.Module):
    """Logits log P(token | sentence, prefix) from TABLES; the source's first token names the sentence.

    With a cache it keeps the prefix as the keys of `cache.layers[0][0]`, one position per token, so a
    search that does not reorder the cache with its beams reads the wrong prefixes.
    """

    def __init__(self):
        super().__init__()
        self.generator = nn.Identity()  # decode already returns logits

    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        return src[..., None].float()  # (B, S, 1): beams copy their sentence's rows

    def decode(self, memory, src_mask, tgt, tgt_mask, cache=None) -> Tensor:
        if cache is not None:
            if not cache.layers:
                cache.layers = [(KVCache(), KVCache(static=True))]
            new = tgt[:, None, :, None].float()  # (B, 1, T, 1): the tokens as keys
            keys, _ = cache.layers[0][0].append(new, new)
            tgt = keys[:, 0, :, 0].long()  # (B, T so far): the whole prefix
        logits = torch.full((tgt.size(0), tgt.size(1), V), float("-inf"))
        for row, (sentence, tokens) in enumerate(
            zip(memory[:, 0, 0].long(), tgt.tolist(), strict=True)
        ):
            for t in range(len(tokens)):
                for token in range(V):
                    p = probability(int(sentence), tuple(tokens[1 : t + 1]), token)
                    if p > 0:
                        logits[row, t, token] = math.log(p)
        return logits  # (B, T, V)


def brute_force(sentence: int, limit: int, alpha: float) -> tuple[tuple, float]:
    """The best hypothesis and its score among all of them: up to EOS, or `limit` tokens long."""
    scored = []
    for n in range(1, limit + 1):
        for tokens in itertools.product((A, B, EOS), repeat=n):
            if EOS in tokens[:-1] or (n < limit and tokens[-1] != EOS):
                continue  # EOS ends a hypothesis; without it, only the limit does
            log_p = sum(
                math.log(probability(sentence, tokens[:t], tok) or 1e-300)
                for t, tok in enumerate(tokens)
            )
            scored.append((log_p / float(length_penalty(n, alpha)), tokens))
    scored.sort(reverse=True)
    (best, tokens), (second, _) = scored[:2]
    assert best - second > 1e-3, "a near tie: the test would hinge on rounding"
    return tokens, best


def test_the_tables_are_distributions():
    for table in TABLES:
        for dist in table.values():
            assert math.isclose(sum(dist.values()), 1.0) and PAD not in dist and BOS not in dist


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
def test_beam_search_returns_the_best_finished_hypothesis_of_each_sentence(alpha, use_cache):
    src = torch.arange(len(TABLES))[:, None].repeat(1, 3)  # (B, 3): row b is sentence b
    tokens, scores = beam_search(
        TableModel(),
        src,
        None,
        beam_size=2,
        alpha=alpha,
        max_new_tokens=torch.tensor(LIMITS),
        bos_id=BOS,
        eos_id=EOS,
        pad_id=PAD,
        use_cache=use_cache,
        return_scores=True,
    )
    best = [brute_force(s, limit, alpha) for s, limit in enumerate(LIMITS)]
    width = 1 + max(len(hyp) for hyp, _ in best)  # the batch's longest output, BOS included
    expected = [[BOS, *hyp] + [PAD] * (width - 1 - len(hyp)) for hyp, _ in best]
    assert tokens.tolist() == expected
    torch.testing.assert_close(scores, torch.tensor([score for _, score in best]))
