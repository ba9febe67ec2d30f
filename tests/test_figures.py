"""The committed Figure 1 and chapter maps are what tools/figure1.py draws, and each chapter shows its map."""

import importlib.util
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ROOT / "book" / "figures"


def load_tool():
    spec = importlib.util.spec_from_file_location("figure1", ROOT / "tools" / "figure1.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_figures_are_what_the_tool_draws(tmp_path):
    tool = load_tool()
    drawn = tool.draw_all(tmp_path)
    assert len(drawn) == 2 + len(tool.MAPS)
    stale = [p.name for p in drawn if p.read_bytes() != (FIGURES / p.name).read_bytes()]
    assert not stale, f"regenerate with `python tools/figure1.py`: {stale} differ from book/figures"


def test_drawing_twice_gives_the_same_bytes(tmp_path):
    tool = load_tool()
    first = tool.draw_all(tmp_path / "a")
    second = tool.draw_all(tmp_path / "b")
    assert [p.read_bytes() for p in first] == [p.read_bytes() for p in second]


def test_maps_differ_from_figure1_and_from_each_other():
    tool = load_tool()
    texts = {c: (FIGURES / tool.map_name(c)).read_text() for c in tool.MAPS}
    texts["full"] = (FIGURES / "figure1.svg").read_text()
    assert len(set(texts.values())) == len(texts)
    for chapter in tool.MAPS:
        assert tool.MARK in texts[chapter], f"map {chapter} outlines nothing"
    assert tool.MARK not in texts["full"]


def markdown_of(notebook: Path) -> list[str]:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]


def test_each_chapter_shows_its_map_near_the_top():
    tool = load_tool()
    for chapter in tool.MAPS:
        (notebook,) = (ROOT / "notebooks").glob(f"{chapter}_*.ipynb")
        markdown = markdown_of(notebook)
        image = f"](figures/{tool.map_name(chapter)})"
        where = [i for i, text in enumerate(markdown) if image in text]
        assert where, f"{notebook.name} does not show {tool.map_name(chapter)}"
        assert where[0] <= 2, f"{notebook.name}: the map is not near the top"
        assert "![" in markdown[where[0]] and "![](" not in markdown[where[0]], "map without alt"


def test_chapter_00_shows_figure1_and_the_images_resolve():
    assert any(
        "](figures/figure1.svg)" in t for t in markdown_of(ROOT / "notebooks" / "00_overview.ipynb")
    )
    # notebooks/figures is a link to book/figures: the same relative path works in Jupyter
    # (notebooks/) and in the book (book/notebooks -> ../notebooks).
    assert (ROOT / "notebooks" / "figures" / "figure1.svg").resolve() == (
        FIGURES / "figure1.svg"
    ).resolve()
