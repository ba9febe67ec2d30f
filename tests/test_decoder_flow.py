"""Chapter 10's data-flow figure is what tools/decoder_flow.py draws, and the chapter shows it."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIGURE = ROOT / "book" / "figures" / "decoder_flow.svg"


def test_the_committed_figure_is_what_the_tool_draws(tmp_path):
    spec = importlib.util.spec_from_file_location(
        "decoder_flow", ROOT / "tools" / "decoder_flow.py"
    )
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    drawn = tool.draw(tmp_path / "decoder_flow.svg")
    assert drawn.read_bytes() == FIGURE.read_bytes(), (
        "regenerate with `python tools/decoder_flow.py`"
    )
    text = drawn.read_text()
    assert text.count(">K, V<") == tool.LAYERS  # the memory reaches every decoder layer
    assert "(B, S, D)" in text and text.count("Q (B, T, D)") == tool.LAYERS


def test_chapter_10_shows_it():
    cells = json.loads((ROOT / "notebooks" / "10_decoder.ipynb").read_text())["cells"]
    markdown = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    assert any("](figures/decoder_flow.svg)" in text for text in markdown)
