"""Draw chapter 10's data-flow figure: one memory, read by the encoder-decoder attention of every decoder layer.

    python tools/decoder_flow.py     # writes book/figures/decoder_flow.svg

Figure 1 of the paper draws one decoder layer and writes "N×" beside it. This figure unrolls the stack:
the encoder's last layer produces the memory (B, S, D) once; every decoder layer n takes its queries
(B, T, D) from its own masked self-attention, and its keys and values from that same memory. The
shapes follow book/notation.md. The colours are Figure 1's (tools/figure1.py). The output is
byte-for-byte deterministic, so tests/test_decoder_flow.py can regenerate it and compare.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "book" / "figures"
ATTENTION, FEED_FORWARD, STACK, INK = "#fcd9b6", "#c6e2f5", "#f0f0f0", "#222222"
MEMORY = "#c0392b"  # the memory and the keys and values it becomes
FONT, SMALL = 10, 8
LAYERS = 3  # decoder layers drawn: the base model has N = 6, ours 3


def box(ax, x: float, y: float, w: float, h: float, text: str, fill: str, size: int = FONT) -> None:
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0,rounding_size=1.2",
                                facecolor=fill, edgecolor=INK, linewidth=0.8))  # fmt: skip
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=size, color=INK)


def arrow(ax, start, end, color=INK, style="-|>", rad=0.0) -> None:
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=9, color=color,
                                 linewidth=1.0, connectionstyle=f"arc3,rad={rad}"))  # fmt: skip


def draw(path: Path) -> Path:
    with matplotlib.rc_context():  # whatever another drawing in this process set is left as it was
        matplotlib.rcdefaults()
        plt.rcParams["svg.hashsalt"] = "annotated"  # fixed ids: the same bytes on every run
        plt.rcParams["svg.fonttype"] = "none"  # text stays text
        plt.rcParams["font.family"] = "DejaVu Sans"
        return _draw(path)


def _draw(path: Path) -> Path:
    fig = plt.figure(figsize=(5.2, 5.6))
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set_xlim(0, 104), ax.set_ylim(2, 126), ax.axis("off")
    # the encoder: N layers, the last one's output is the memory
    box(ax, 4, 10, 30, 62, "", STACK)
    for n in range(LAYERS):
        box(ax, 7, 16 + 18 * n, 24, 12, f"encoder layer {n + 1}", FEED_FORWARD)
    ax.text(19, 6, "source ids (B, S)", ha="center", fontsize=SMALL, color=INK)
    arrow(ax, (19, 9), (19, 16))
    box(ax, 7, 82, 24, 10, "memory", "#ffffff")
    arrow(ax, (19, 64), (19, 82))
    ax.text(19, 95, "(B, S, D), computed once", ha="center", fontsize=SMALL, color=MEMORY)
    # the decoder, unrolled: three sub-layers per layer, the data flowing upwards as in Figure 1
    step = 35
    for n in range(LAYERS):
        y = 14 + step * n
        box(ax, 44, y, 58, 31, "", STACK)
        ax.text(
            100,
            y + 28.5,
            f"decoder layer {n + 1}",
            ha="right",
            va="center",
            fontsize=SMALL,
            color=INK,
        )
        box(ax, 48, y + 2, 42, 6, "masked self-attention", ATTENTION, SMALL + 1)
        box(ax, 48, y + 11.5, 42, 6, "encoder-decoder attention", ATTENTION, SMALL + 1)
        box(ax, 48, y + 21, 42, 5, "feed-forward", FEED_FORWARD, SMALL + 1)
        arrow(
            ax, (69, y - 4 if n else 13), (69, y + 2)
        )  # the layer below's output, or the embeddings
        arrow(ax, (69, y + 8), (69, y + 11.5))  # queries: the decoder's own state
        ax.text(70, y + 9.75, "Q (B, T, D)", fontsize=SMALL - 1, color=INK, va="center")
        arrow(ax, (69, y + 17.5), (69, y + 21))
        arrow(ax, (31, 87), (48, y + 14.5), color=MEMORY, rad=0.12)  # keys, values: the same memory
        ax.text(39.5, (87 + y + 14.5) / 2 + 2, "K, V", fontsize=SMALL, color=MEMORY, ha="center")
    top = 14 + step * (LAYERS - 1) + 26
    arrow(ax, (69, top), (69, top + 6))
    ax.text(
        69, 10, "target ids, shifted right (B, T)", ha="center", va="top", fontsize=SMALL, color=INK
    )
    ax.text(69, top + 7, "(B, T, D) to the linear layer and softmax", ha="center", va="bottom",
            fontsize=SMALL, color=INK)  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="svg", metadata={"Date": None}, facecolor="white")
    plt.close(fig)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="folder for the SVG file")
    path = draw(parser.parse_args().out / "decoder_flow.svg")
    print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB)")


if __name__ == "__main__":
    main()
