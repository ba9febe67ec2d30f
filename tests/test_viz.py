"""Tests for annotated.viz: the attention heatmap holds every weight, labelled and in sentence order."""

import json
import re

import altair as alt
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from annotated.viz import attention_chart

SENTENCE = "the cat sat on the mat".split()  # "the" twice: labels are not unique


def rows_of(chart: alt.LayerChart) -> list[dict]:
    """Return the chart's data rows after a full (schema-validated) serialization."""
    spec = chart.to_dict()
    data = spec["data"]
    return data["values"] if "values" in data else spec["datasets"][data["name"]]


def axis_labels(chart: alt.LayerChart, channel: str) -> list[str]:
    """Return the tokens an axis prints at positions 0, 1, ... (decoded from its labelExpr)."""
    expr = chart.to_dict()["encoding"][channel]["axis"]["labelExpr"]
    return json.loads(expr.removesuffix("[datum.value]"))


def random_weights(t: int, s: int, seed: int = 0) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.softmax(torch.randn(t, s, generator=generator), dim=-1)  # (T, S)


def test_data_holds_every_weight_with_its_tokens():
    queries = ["die", "Katze", "saß"]
    weights = random_weights(3, 6)
    rows = rows_of(attention_chart(weights, queries, SENTENCE))
    assert len(rows) == 3 * 6
    # Row-major: query 0 against every key in sentence order, then query 1, ...
    assert [(r["query_pos"], r["key_pos"]) for r in rows] == [
        (i, j) for i in range(3) for j in range(6)
    ]
    for r in rows:
        assert r["query"] == queries[r["query_pos"]]
        assert r["key"] == SENTENCE[r["key_pos"]]
        assert r["weight"] == pytest.approx(weights[r["query_pos"], r["key_pos"]].item(), abs=5e-5)


def test_axes_keep_sentence_order_and_repeated_tokens():
    queries = ["zebra", "apple", "the", "the"]  # deliberately not alphabetical, with a repeat
    chart = attention_chart(random_weights(4, 6), queries, SENTENCE)
    assert axis_labels(chart, "x") == SENTENCE
    assert axis_labels(chart, "y") == queries
    spec = chart.to_dict()
    # Positions are the axis fields, so the two "the" rows and columns stay apart.
    assert spec["encoding"]["x"]["field"] == "key_pos"
    assert spec["encoding"]["y"]["field"] == "query_pos"
    assert {r["key_pos"] for r in rows_of(chart) if r["key"] == "the"} == {0, 4}


def test_rendered_chart_prints_tokens_in_sentence_order():
    vl_convert = pytest.importorskip("vl_convert")
    chart = attention_chart(random_weights(2, 6), ["zz", "aa"], SENTENCE)
    svg = vl_convert.vegalite_to_svg(chart.to_dict())
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    assert texts[texts.index("key") - 6 : texts.index("key")] == SENTENCE
    assert texts[texts.index("query") - 2 : texts.index("query")] == ["zz", "aa"]


def test_torch_and_numpy_give_the_same_chart():
    weights = random_weights(4, 4)
    from_torch = attention_chart(weights, SENTENCE[:4], SENTENCE[:4]).to_dict()
    from_numpy = attention_chart(weights.numpy(), SENTENCE[:4], SENTENCE[:4]).to_dict()
    assert from_torch == from_numpy


def test_accepts_tensors_that_need_grad_or_use_half_precision():
    weights = random_weights(3, 3).requires_grad_(True)
    assert len(rows_of(attention_chart(weights, "a b c".split(), "x y z".split()))) == 9
    half = random_weights(3, 3).to(torch.bfloat16)
    assert len(rows_of(attention_chart(half, "a b c".split(), "x y z".split()))) == 9


def test_title_is_optional():
    weights = random_weights(2, 2)
    assert "title" not in attention_chart(weights, "a b".split(), "x y".split()).to_dict()
    titled = attention_chart(weights, "a b".split(), "x y".split(), title="head 3")
    assert titled.to_dict()["title"] == "head 3"


def test_small_chart_prints_numbers_large_chart_relies_on_tooltip():
    small = attention_chart(random_weights(4, 4), list("abcd"), list("wxyz"))
    assert [layer["mark"]["type"] for layer in small.to_dict()["layer"]] == ["rect", "text"]
    n = 72  # 5,184 rows: past altair's default 5,000-row limit for DataFrames
    labels = [f"t{i}" for i in range(n)]
    spec = attention_chart(random_weights(n, n), labels, labels).to_dict()
    assert [layer["mark"]["type"] for layer in spec["layer"]] == ["rect"]
    assert len(spec["data"]["values"]) == n * n
    assert {"query", "key", "weight"} <= {t["field"] for t in spec["encoding"]["tooltip"]}


def test_nan_weights_become_empty_cells():
    weights = random_weights(2, 3)
    weights[1] = float("nan")  # e.g. a query row whose keys were all masked
    rows = rows_of(attention_chart(weights, "a b".split(), "x y z".split()))
    assert [r["weight"] for r in rows[3:]] == [None, None, None]
    assert all(r["weight"] is not None for r in rows[:3])


@settings(max_examples=15, deadline=None)
@given(t=st.integers(1, 20), s=st.integers(1, 20), seed=st.integers(0, 2**16))
def test_any_shape_round_trips(t, s, seed):
    weights = random_weights(t, s, seed).numpy()
    queries, keys = [f"q{i}" for i in range(t)], [f"k{j}" for j in range(s)]
    rows = rows_of(attention_chart(weights, queries, keys))
    got = np.array([r["weight"] for r in rows]).reshape(t, s)
    np.testing.assert_allclose(got, weights, atol=5e-5, rtol=0)
    assert [r["key"] for r in rows[:s]] == keys
    assert [r["query"] for r in rows[::s]] == queries


@pytest.mark.parametrize(
    ("weights", "match"),
    [
        (torch.rand(4), r"weights must be 2-D with shape \(T, S\), got shape \(4,\)"),
        (torch.rand(1, 2, 4, 4), r"got shape \(1, 2, 4, 4\); select one batch element and head"),
        (np.zeros((2, 3, 4)), r"weights must be 2-D .* got shape \(2, 3, 4\)"),
    ],
)
def test_rejects_weights_that_are_not_a_matrix(weights, match):
    with pytest.raises(ValueError, match=match):
        attention_chart(weights, list("ab"), list("abcd"))


def test_rejects_weights_of_the_wrong_type():
    with pytest.raises(
        TypeError, match="weights must be a torch.Tensor or a numpy.ndarray, got list"
    ):
        attention_chart([[0.5, 0.5]], ["a"], ["x", "y"])


def test_rejects_label_counts_that_do_not_match_the_shape():
    weights = random_weights(3, 5)
    with pytest.raises(
        ValueError,
        match="query_labels must have one label per row of weights, got 2 labels, expected 3",
    ):
        attention_chart(weights, ["a", "b"], list("vwxyz"))
    with pytest.raises(
        ValueError,
        match="key_labels must have one label per column of weights, got 6 labels, expected 5",
    ):
        attention_chart(weights, ["a", "b", "c"], SENTENCE)


def test_rejects_a_sentence_string_instead_of_tokens():
    with pytest.raises(TypeError, match="key_labels must be a sequence of tokens, got the string"):
        attention_chart(random_weights(1, 3), ["a"], "cat")
