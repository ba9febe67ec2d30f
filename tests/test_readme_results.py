"""The README's results paragraph states what the recorded runs in results/ hold."""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SEEDS = ("multi30k", "multi30k-seed1", "multi30k-seed2")  # the recipe's three seeds, German→English


def scores(run: str, search: str) -> dict:
    return json.loads((ROOT / "results" / run / "scores_test_2016_flickr.json").read_text())[search]


def results_paragraph() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    return " ".join(text.split("## Results", 1)[1].split("\n## ", 1)[0].split())


def test_the_german_english_figures_are_the_mean_and_range_of_the_three_seeds():
    said = results_paragraph()
    for search, pattern in (
        (
            "beam",
            r"\*\*([\d.]+) with beam search\*\* \(mean of three seeds; ([\d.]+) to ([\d.]+)\)",
        ),
        ("greedy", r"and ([\d.]+) greedy \(([\d.]+) to ([\d.]+)\)"),
    ):
        bleu = [scores(run, search)["bleu"] for run in SEEDS]
        match = re.search(pattern, said)
        assert match, f"README's results paragraph should state the {search} mean and range"
        assert [float(g) for g in match.groups()] == [
            round(sum(bleu) / len(bleu), 2),
            min(bleu),
            max(bleu),
        ], f"{search}: the seeds score {bleu}"


def test_the_english_german_figures_are_the_recorded_runs():
    beam = scores("multi30k-en-de", "beam")
    match = re.search(r"([\d.]+) with beam search \(([\d.]+) lower-cased\)", results_paragraph())
    assert match and [float(g) for g in match.groups()] == [beam["bleu"], beam["bleu_lc"]]


def test_each_seed_trained_for_the_hour_the_paragraph_says():
    for run in (*SEEDS, "multi30k-en-de"):
        record = json.loads((ROOT / "results" / run / "results.json").read_text())
        assert abs(record["training"]["wall_seconds"] - 3600) < 60, run
        assert "2 cores" in record["hardware"], run
