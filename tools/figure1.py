"""Draw the book's Figure 1 (the paper's model architecture), its chapter maps and the favicon, as SVG.

    python tools/figure1.py          # writes book/figures/figure1.svg, figure1-04.svg … figure1-11.svg
                                     # and favicon.svg

The drawing follows Figure 1 of Vaswani et al. (2017): the encoder on the left, the decoder on the
right, each a stack of N identical layers; masked multi-head self-attention in the decoder; every
sub-layer wrapped in a residual connection and layer normalisation (Add & Norm); positional encodings
added to the embeddings; a linear layer and a softmax on top. The main arrows carry the shapes of
book/notation.md: token ids (B, S) and (B, T), vectors (B, S, D) and (B, T, D), the memory (B, S, D)
that feeds the encoder-decoder attention, logits (B, T, n_vocab). Text stays text in the SVG (small,
sharp at any size, searchable). Sized to be read on a 390 px wide phone.

The maps ("you are here") are the same drawing with the block a chapter builds kept in colour and
outlined, and everything else greyed out. The output is byte-for-byte deterministic (a fixed SVG
hash salt, no date), so tests/test_figures.py can regenerate it and compare with what is committed.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "book" / "figures"

# Colours of the paper's figure, softened: attention orange, feed-forward blue, norm yellow.
ATTENTION, FEED_FORWARD, NORM = "#fcd9b6", "#c6e2f5", "#f5f0b0"
EMBED, LINEAR, SOFTMAX, STACK = "#f6d0d6", "#ddd5f3", "#cdeccd", "#f0f0f0"
INK = "#222222"
FONT = 11
SHAPE_FONT = 8  # the shapes written beside the arrows
FADED_FILL, FADED_INK = "#f3f3f3", "#a0a0a0"  # what a map greys out
MARK = "#c0392b"  # the outline of the block a map points at

# Chapter -> (blocks kept in colour, blocks outlined, a title). "all" keeps every block in colour.
MAPS = {
    "04": ({"attention"}, {"attention"}, "multi-head attention"),
    "05": ({"positional"}, {"positional"}, "positional encoding"),
    "06": ({"embedding"}, {"embedding"}, "embeddings"),
    "07": ({"norm"}, {"norm"}, "Add & Norm"),
    "08": ({"ffn"}, {"ffn"}, "feed-forward network"),
    "09": ({"encoder"}, {"encoder"}, "the encoder stack"),
    "10": ({"decoder"}, {"decoder"}, "the decoder stack"),
    "11": ({"all"}, {"head"}, "the whole model"),
}

# The blocks the current drawing keeps in colour and outlines (set by draw()).
_coloured: set[str] = {"all"}
_marked: set[str] = set()


def _style(key: str, colour: str, column: str | None = None) -> tuple[str, str, float]:
    """Fill, ink and line width of a block named key (in the encoder or decoder column)."""
    keys = {key} | ({column} if column else set())
    if "all" in _coloured or keys & _coloured:
        return colour, INK, (2.6 if key in _marked else 1.0)
    return FADED_FILL, FADED_INK, 1.0


W = 28  # width of a sub-layer box
ENC_X, DEC_X = 26, 74  # centres of the two columns


def box(ax, x, y, h, text, colour, w=W, key="", column=None):
    """A rounded sub-layer box centred on x, from y to y + h."""
    fill, ink, lw = _style(key, colour, column)
    ax.add_patch(
        FancyBboxPatch(
            (x - w / 2, y),
            w,
            h,
            boxstyle="round,pad=0,rounding_size=1.2",
            fc=fill,
            ec=MARK if lw > 1 else ink,
            lw=lw,
        )
    )
    ax.text(x, y + h / 2, text, ha="center", va="center", fontsize=FONT, color=ink)
    return y, y + h


def shape(ax, x, y, text, side, color=INK):
    """The shape a main arrow carries, e.g. (B, S, D), written beside it on side 'left' or 'right'."""
    dx = 1.3 if side == "right" else -1.3
    ha = "left" if side == "right" else "right"
    ax.text(x + dx, y, text, ha=ha, va="center", fontsize=SHAPE_FONT, color=color, style="italic")


def arrow(ax, start, end, style="-|>", color=INK, **kw):
    ax.add_patch(
        FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=9, lw=1.1, color=color, **kw)
    )


def residual(ax, x, y_from, y_to, side, column):
    """The residual path: from below a sub-layer, around it, into its Add & Norm."""
    _, ink, lw = _style("norm", NORM, column)
    colour = MARK if lw > 1 else ink
    off = W / 2 + 2.2
    xs = x - off if side == "left" else x + off
    edge = x - W / 2 if side == "left" else x + W / 2
    ax.plot([x, xs, xs], [y_from, y_from, y_to], color=colour, lw=1.1 if lw == 1 else 1.8)
    arrow(ax, (xs, y_to), (edge, y_to), color=colour)


def sublayer(ax, x, y, label, colour, side, key, h=6.5):
    """A sub-layer with its Add & Norm above and the residual around both; returns its top."""
    column = "encoder" if side == "left" else "decoder"
    ink = _style(key, colour, column)[1]
    arrow(ax, (x, y), (x, y + 2.5), color=ink)
    residual(ax, x, y + 1.2, y + 2.5 + h + 2 + 2, side, column)
    box(ax, x, y + 2.5, h, label, colour, key=key, column=column)
    arrow(ax, (x, y + 2.5 + h), (x, y + 2.5 + h + 2), color=ink)
    box(ax, x, y + 2.5 + h + 2, 4, "Add & Norm", NORM, key="norm", column=column)
    return y + 2.5 + h + 2 + 4


def positional(ax, x, y, side):
    """The (+) where the positional encoding joins the embedding, with a small sine wave."""
    _, ink, lw = _style("positional", "white")
    edge = MARK if lw > 1 else ink
    ax.add_patch(Circle((x, y), 1.6, fc="white", ec=edge, lw=lw))
    ax.text(x, y, "+", ha="center", va="center", fontsize=FONT, color=ink)
    sx = x - 8 if side == "left" else x + 8
    ax.add_patch(Circle((sx, y), 2.6, fc="white", ec=edge, lw=lw))
    t = np.linspace(-2, 2, 40)
    ax.plot(sx + t, y + 1.1 * np.sin(t * 2.4), color=ink, lw=1.0)
    arrow(
        ax,
        (sx + (2.6 if side == "left" else -2.6), y),
        (x + (-1.6 if side == "left" else 1.6), y),
        color=ink,
    )
    tx = sx - 3.3 if side == "left" else sx + 3.3
    ax.text(
        tx,
        y,
        "Positional\nEncoding",
        ha="right" if side == "left" else "left",
        va="center",
        fontsize=FONT - 2,
        color=ink,
    )


def draw(path: Path, coloured: set[str] | None = None, marked: set[str] | None = None) -> None:
    """Draw Figure 1 to path; a map keeps only the blocks in coloured in colour and outlines marked."""
    global _coloured, _marked
    _coloured, _marked = coloured or {"all"}, marked or set()
    plt.rcParams["svg.fonttype"] = "none"  # keep text as text
    plt.rcParams["font.family"] = "DejaVu Sans"
    plt.rcParams["svg.hashsalt"] = "annotated"  # fixed ids: the same bytes on every run
    fig = plt.figure(figsize=(5.0, 5.6))
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set_xlim(-6, 106)
    ax.set_ylim(-1, 124)
    ax.axis("off")

    # Inputs, embeddings, positional encodings.
    # Shapes go on the inner side of each column, away from the positional encodings.
    for x, label, emb, side, length in (
        (ENC_X, "Inputs", "Input\nEmbedding", "left", "S"),
        (DEC_X, "Outputs\n(shifted right)", "Output\nEmbedding", "right", "T"),
    ):
        ink = _style("embedding", EMBED)[1]
        inner = "right" if side == "left" else "left"
        ax.text(x, 3, label, ha="center", va="center", fontsize=FONT, color=ink)
        arrow(ax, (x, 5.5 if x == ENC_X else 7.2), (x, 9), color=ink)
        if x == ENC_X:
            shape(ax, x, 7.2, f"(B, {length})", inner, ink)
        else:  # the label "(shifted right)" reaches down to the arrow: write the shape beside it
            shape(ax, x - 13.5, 3, f"(B, {length})", inner, ink)
        box(ax, x, 9, 8, emb, EMBED, key="embedding")
        arrow(ax, (x, 17), (x, 21.4), color=ink)
        shape(ax, x, 19.2, f"(B, {length}, D)", inner, ink)
        positional(ax, x, 23, side)

    def stack(x, top_of_layers, n_side, title):
        """The grey box around one layer of the stack, its N x and its title."""
        left, bottom, height = x - W / 2 - 4, 27, top_of_layers + 8 - 27
        key = title.lower()
        fill, ink, lw = _style(key, STACK)
        ax.add_patch(
            FancyBboxPatch(
                (left, bottom),
                W + 8,
                height,
                boxstyle="round,pad=0,rounding_size=2",
                fc="white" if fill == FADED_FILL else fill,
                ec=MARK if lw > 1 else ink,
                lw=lw,
                zorder=0,
            )
        )
        nx = left - 1.5 if n_side == "left" else left + W + 9.5
        ax.text(
            nx,
            bottom + height / 2,
            "N×",
            ha="right" if n_side == "left" else "left",
            va="center",
            fontsize=FONT + 2,
            color=ink,
        )
        ax.text(
            left + 1.5,
            bottom + height - 3.2,
            title,
            ha="left",
            va="center",
            fontsize=FONT,
            color=ink,
            fontweight="bold",
        )
        return bottom + height

    # Encoder: N x [multi-head self-attention, feed-forward], each with Add & Norm.
    y0 = 27
    arrow(ax, (ENC_X, 24.6), (ENC_X, y0 + 1), style="-", color=_style("encoder", STACK)[1])
    top = sublayer(ax, ENC_X, y0 + 1, "Multi-Head\nAttention", ATTENTION, "left", "attention", h=8)
    enc_top = sublayer(ax, ENC_X, top, "Feed\nForward", FEED_FORWARD, "left", "ffn", h=8)

    # Decoder: N x [masked self-attention, encoder-decoder attention, feed-forward].
    arrow(ax, (DEC_X, 24.6), (DEC_X, y0 + 1), style="-", color=_style("decoder", STACK)[1])
    top = sublayer(
        ax, DEC_X, y0 + 1, "Masked\nMulti-Head\nAttention", ATTENTION, "right", "attention", h=11
    )
    cross_y = top
    top = sublayer(ax, DEC_X, top, "Multi-Head\nAttention", ATTENTION, "right", "attention", h=8)
    dec_top = sublayer(ax, DEC_X, top, "Feed\nForward", FEED_FORWARD, "right", "ffn", h=8)

    enc_box_top = stack(ENC_X, enc_top, "left", "Encoder")
    dec_box_top = stack(DEC_X, dec_top, "right", "Decoder")

    # The encoder's output, the memory, feeds the decoder's encoder-decoder attention (its keys and
    # values).
    mid_x = 50
    y_out = enc_box_top + 4
    y_in = cross_y + 2.5 + 4
    memory_ink = _style("encoder", STACK, "decoder")[1]
    ax.plot([ENC_X, ENC_X, mid_x, mid_x], [enc_top, y_out, y_out, y_in], color=memory_ink, lw=1.1)
    arrow(ax, (mid_x, y_in), (DEC_X - W / 2, y_in), color=memory_ink)
    ax.text(
        (ENC_X + mid_x) / 2,
        y_out + 2,
        "(B, S, D)",
        ha="center",
        va="center",
        fontsize=SHAPE_FONT,
        color=memory_ink,
        style="italic",
    )

    # Output head.
    ink = _style("head", LINEAR)[1]
    arrow(ax, (DEC_X, dec_top), (DEC_X, dec_box_top + 3), color=ink)
    shape(ax, DEC_X, dec_box_top + 1.3, "(B, T, D)", "left", ink)
    box(ax, DEC_X, dec_box_top + 3, 5.5, "Linear", LINEAR, key="head")
    arrow(ax, (DEC_X, dec_box_top + 8.5), (DEC_X, dec_box_top + 11), color=ink)
    shape(ax, DEC_X, dec_box_top + 9.75, "(B, T, n_vocab)", "left", ink)
    box(ax, DEC_X, dec_box_top + 11, 5.5, "Softmax", SOFTMAX, key="head")
    arrow(ax, (DEC_X, dec_box_top + 16.5), (DEC_X, dec_box_top + 19), color=ink)
    ax.text(
        DEC_X,
        dec_box_top + 22.5,
        "Output\nProbabilities",
        ha="center",
        va="center",
        fontsize=FONT,
        color=ink,
    )

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="svg", metadata={"Date": None}, facecolor="white")
    plt.close(fig)
    print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB)")


def map_name(chapter: str) -> str:
    """The file name of chapter's map, e.g. figure1-04.svg."""
    return f"figure1-{chapter}.svg"


def draw_all(out: Path) -> list[Path]:
    """Write Figure 1, every chapter's map and the favicon into out; return their paths."""
    paths = [out / "figure1.svg"]
    draw(paths[0])
    for chapter, (coloured, marked, _) in MAPS.items():
        paths.append(out / map_name(chapter))
        draw(paths[-1], coloured, marked)
    paths.append(out / "favicon.svg")
    draw_favicon(paths[-1])
    return paths


FAVICON = """<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32">
<!-- Generated by tools/figure1.py: a 4x4 attention pattern (a causal mask's lower triangle). -->
<rect width="32" height="32" rx="6" fill="#1f4e79"/>
{cells}
</svg>
"""


def draw_favicon(path: Path) -> None:
    cells = []
    for row in range(4):
        for col in range(row + 1):
            opacity = 1.0 if col == row else 0.55
            cells.append(
                f'<rect x="{5 + 6 * col}" y="{5 + 6 * row}" width="5" height="5" rx="1" '
                f'fill="#fcd9b6" fill-opacity="{opacity}"/>'
            )
    path.write_text(FAVICON.format(cells="\n".join(cells)))
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="folder for the SVG files")
    args = parser.parse_args()
    draw_all(args.out)


if __name__ == "__main__":
    main()
