"""Draw the book's Figure 1 (the paper's model architecture) and its favicon, as SVG.

    python tools/figure1.py          # writes book/figures/figure1.svg and book/figures/favicon.svg

The drawing follows Figure 1 of Vaswani et al. (2017): the encoder on the left, the decoder on the
right, each a stack of N identical layers; masked multi-head self-attention in the decoder; every
sub-layer wrapped in a residual connection and layer normalisation (Add & Norm); positional encodings
added to the embeddings; a linear layer and a softmax on top. Text stays text in the SVG (small,
sharp at any size, searchable). Sized to be read on a 390 px wide phone.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Circle, FancyArrowPatch, FancyBboxPatch  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "book" / "figures"

# Colours of the paper's figure, softened: attention orange, feed-forward blue, norm yellow.
ATTENTION, FEED_FORWARD, NORM = "#fcd9b6", "#c6e2f5", "#f5f0b0"
EMBED, LINEAR, SOFTMAX, STACK = "#f6d0d6", "#ddd5f3", "#cdeccd", "#f0f0f0"
INK = "#222222"
FONT = 11

W = 28  # width of a sub-layer box
ENC_X, DEC_X = 26, 74  # centres of the two columns


def box(ax, x, y, h, text, colour, w=W):
    """A rounded sub-layer box centred on x, from y to y + h."""
    ax.add_patch(
        FancyBboxPatch(
            (x - w / 2, y),
            w,
            h,
            boxstyle="round,pad=0,rounding_size=1.2",
            fc=colour,
            ec=INK,
            lw=1.0,
        )
    )
    ax.text(x, y + h / 2, text, ha="center", va="center", fontsize=FONT, color=INK)
    return y, y + h


def arrow(ax, start, end, style="-|>", **kw):
    ax.add_patch(
        FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=9, lw=1.1, color=INK, **kw)
    )


def residual(ax, x, y_from, y_to, side):
    """The residual path: from below a sub-layer, around it, into its Add & Norm."""
    off = W / 2 + 2.2
    xs = x - off if side == "left" else x + off
    edge = x - W / 2 if side == "left" else x + W / 2
    ax.plot([x, xs, xs], [y_from, y_from, y_to], color=INK, lw=1.1)
    arrow(ax, (xs, y_to), (edge, y_to))


def sublayer(ax, x, y, label, colour, side, h=6.5):
    """A sub-layer with its Add & Norm above and the residual around both; returns its top."""
    arrow(ax, (x, y), (x, y + 2.5))
    residual(ax, x, y + 1.2, y + 2.5 + h + 2 + 2, side)
    box(ax, x, y + 2.5, h, label, colour)
    arrow(ax, (x, y + 2.5 + h), (x, y + 2.5 + h + 2))
    box(ax, x, y + 2.5 + h + 2, 4, "Add & Norm", NORM)
    return y + 2.5 + h + 2 + 4


def positional(ax, x, y, side):
    """The (+) where the positional encoding joins the embedding, with a small sine wave."""
    ax.add_patch(Circle((x, y), 1.6, fc="white", ec=INK, lw=1.1))
    ax.text(x, y, "+", ha="center", va="center", fontsize=FONT, color=INK)
    sx = x - 8 if side == "left" else x + 8
    ax.add_patch(Circle((sx, y), 2.6, fc="white", ec=INK, lw=1.0))
    import numpy as np

    t = np.linspace(-2, 2, 40)
    ax.plot(sx + t, y + 1.1 * np.sin(t * 2.4), color=INK, lw=1.0)
    arrow(
        ax, (sx + (2.6 if side == "left" else -2.6), y), (x + (-1.6 if side == "left" else 1.6), y)
    )
    tx = sx - 3.3 if side == "left" else sx + 3.3
    ax.text(
        tx,
        y,
        "Positional\nEncoding",
        ha="right" if side == "left" else "left",
        va="center",
        fontsize=FONT - 2,
        color=INK,
    )


def draw(path: Path) -> None:
    plt.rcParams["svg.fonttype"] = "none"  # keep text as text
    plt.rcParams["font.family"] = "DejaVu Sans"
    fig = plt.figure(figsize=(5.0, 5.6))
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set_xlim(-6, 106)
    ax.set_ylim(-1, 124)
    ax.axis("off")

    # Inputs, embeddings, positional encodings.
    for x, label, emb, side in (
        (ENC_X, "Inputs", "Input\nEmbedding", "left"),
        (DEC_X, "Outputs\n(shifted right)", "Output\nEmbedding", "right"),
    ):
        ax.text(x, 3, label, ha="center", va="center", fontsize=FONT, color=INK)
        arrow(ax, (x, 5.5 if x == ENC_X else 7.2), (x, 9))
        box(ax, x, 9, 8, emb, EMBED)
        arrow(ax, (x, 17), (x, 21.4))
        positional(ax, x, 23, side)

    def stack(x, top_of_layers, n_side, title):
        """The grey box around one layer of the stack, its N x and its title."""
        left, bottom, height = x - W / 2 - 4, 27, top_of_layers + 8 - 27
        ax.add_patch(
            FancyBboxPatch(
                (left, bottom),
                W + 8,
                height,
                boxstyle="round,pad=0,rounding_size=2",
                fc=STACK,
                ec=INK,
                lw=1.0,
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
            color=INK,
        )
        ax.text(
            left + 1.5,
            bottom + height - 3.2,
            title,
            ha="left",
            va="center",
            fontsize=FONT,
            color=INK,
            fontweight="bold",
        )
        return bottom + height

    # Encoder: N x [multi-head self-attention, feed-forward], each with Add & Norm.
    y0 = 27
    arrow(ax, (ENC_X, 24.6), (ENC_X, y0 + 1), style="-")
    top = sublayer(ax, ENC_X, y0 + 1, "Multi-Head\nAttention", ATTENTION, "left", h=8)
    enc_top = sublayer(ax, ENC_X, top, "Feed\nForward", FEED_FORWARD, "left", h=8)

    # Decoder: N x [masked self-attention, attention over the encoder, feed-forward].
    arrow(ax, (DEC_X, 24.6), (DEC_X, y0 + 1), style="-")
    top = sublayer(ax, DEC_X, y0 + 1, "Masked\nMulti-Head\nAttention", ATTENTION, "right", h=11)
    cross_y = top
    top = sublayer(ax, DEC_X, top, "Multi-Head\nAttention", ATTENTION, "right", h=8)
    dec_top = sublayer(ax, DEC_X, top, "Feed\nForward", FEED_FORWARD, "right", h=8)

    enc_box_top = stack(ENC_X, enc_top, "left", "Encoder")
    dec_box_top = stack(DEC_X, dec_top, "right", "Decoder")

    # The encoder's output feeds the decoder's second attention (its keys and values).
    mid_x = 50
    y_out = enc_box_top + 4
    y_in = cross_y + 2.5 + 4
    ax.plot([ENC_X, ENC_X, mid_x, mid_x], [enc_top, y_out, y_out, y_in], color=INK, lw=1.1)
    arrow(ax, (mid_x, y_in), (DEC_X - W / 2, y_in))

    # Output head.
    arrow(ax, (DEC_X, dec_top), (DEC_X, dec_box_top + 3))
    box(ax, DEC_X, dec_box_top + 3, 5.5, "Linear", LINEAR)
    arrow(ax, (DEC_X, dec_box_top + 8.5), (DEC_X, dec_box_top + 11))
    box(ax, DEC_X, dec_box_top + 11, 5.5, "Softmax", SOFTMAX)
    arrow(ax, (DEC_X, dec_box_top + 16.5), (DEC_X, dec_box_top + 19))
    ax.text(
        DEC_X,
        dec_box_top + 22.5,
        "Output\nProbabilities",
        ha="center",
        va="center",
        fontsize=FONT,
        color=INK,
    )

    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="svg", metadata={"Date": None}, facecolor="white")
    plt.close(fig)
    print(f"wrote {path} ({path.stat().st_size / 1e3:.0f} kB)")


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
    draw(args.out / "figure1.svg")
    draw_favicon(args.out / "favicon.svg")


if __name__ == "__main__":
    main()
