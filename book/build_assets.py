"""Prepare the book's offline assets (run before `jupyter-book build book`).

The book must render equations and altair charts with no request leaving the site.

* Default (no arguments): write `book/_static/vega_bundle.js`, the vega + vega-lite + vega-embed
  bundle from vl-convert-python, wrapped in an IIFE so its top-level names cannot clash with
  Sphinx's scripts; it exposes `vegaEmbed`, `vega` and `vegaLite` on `window`. The file is
  generated, not committed (about 0.9 MB). Also check that `book/_static/vega_debug.js` (committed)
  announces exactly the versions altair's HTML template asks for, so altair's output uses the
  preloaded `vegaEmbed` instead of fetching it from a CDN.
* The in-browser translator (book/translate.md): write `book/_extra/translator/` (generated, not
  committed), which the site serves as `translator/`: the page's own script and style from
  `book/translator/`, the few files it loads from the npm packages installed there (`npm ci` in
  book/translator, from its committed lock file), and under `model/de-en/` and `model/en-de/` the
  ONNX export of each Multi30k model (`python -m annotated export-onnx`), each re-run only when its
  model file, its tokenizer or the export code changed.
* The landing page's attention map (`translator/example_attention.svg`): where the German-to-English
  model looked while translating the example sentence of book/intro.md, redrawn when the model file,
  the tokenizer or the sentence changed.
* `--vendor-mathjax TARBALL`: rebuild `book/_extra/mathjax/` from `npm pack mathjax@3.2.2`,
  keeping only what `es5/tex-chtml.js` loads (itself, its woff-v2 fonts, the TeX extensions its
  autoload can fetch) and the LICENSE. Only needed when upgrading MathJax; the result is committed.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

BOOK = Path(__file__).resolve().parent
STATIC = BOOK / "_static"
BUNDLE = STATIC / "vega_bundle.js"
VEGA_DEBUG = STATIC / "vega_debug.js"
MATHJAX = BOOK / "_extra" / "mathjax"
TRANSLATOR_SRC = BOOK / "translator"  # package.json, lock file, the page's script and style
TRANSLATOR = BOOK / "_extra" / "translator"  # generated: served as translator/
LANDING = BOOK / "intro.md"
LANDING_MAP = TRANSLATOR / "example_attention.svg"  # generated: the landing page's attention map
RESULTS = BOOK.parent / "results"
# The page's models, by direction (source-target): each is exported into translator/model/DIRECTION/.
MODELS = {
    "de-en": RESULTS / "multi30k" / "model_fp16.safetensors",  # chapter 17's model
    "en-de": RESULTS
    / "multi30k-en-de"
    / "model_fp16.safetensors",  # the same recipe, --direction en-de
}
MODEL_FILE = MODELS["de-en"]  # the landing page's map
TOKENIZER = MODEL_FILE.with_name("tokenizer.json")
EXPORT_CODE = tuple(
    BOOK.parent / "annotated" / "app" / f for f in ("onnx_export.py", "onnx_graphs.py")
)
# What the page loads from node_modules: onnxruntime-web's WebAssembly build (single-threaded use
# needs only these three; MIT, its licence header is in the .mjs) and the tokenizer library's
# browser module with its licence.
TRANSLATOR_LIBS = {
    "onnxruntime-web/dist/ort.wasm.min.mjs": "ort.wasm.min.mjs",
    "onnxruntime-web/dist/ort-wasm-simd-threaded.mjs": "ort-wasm-simd-threaded.mjs",
    "onnxruntime-web/dist/ort-wasm-simd-threaded.wasm": "ort-wasm-simd-threaded.wasm",
    "@huggingface/tokenizers/dist/tokenizers.min.mjs": "tokenizers.min.mjs",
    "@huggingface/tokenizers/LICENSE": "LICENSE.huggingface-tokenizers.txt",
}

# TeX extensions that tex-chtml's autoload may request (`newcommand` is already inside tex-chtml.js).
MATHJAX_AUTOLOAD = (
    "action amscd bbox boldsymbol braket bussproofs cancel color enclose extpfeil html mhchem "
    "unicode verb"
).split()


def altair_versions() -> dict[str, str]:
    """Return the version strings altair's HTML template compares `VEGA_DEBUG` against."""
    from altair.vegalite.v6 import display

    return {
        "vega_version": display.VEGA_VERSION,
        "vegalite_version": display.VEGALITE_VERSION,
        "vegaembed_version": display.VEGAEMBED_VERSION,
    }


def check_vega_debug(expected: dict[str, str]) -> None:
    """Fail unless vega_debug.js announces exactly the versions altair expects."""
    text = VEGA_DEBUG.read_text()
    found = dict(re.findall(r'(\w+_version):\s*"([^"]*)"', text))
    if found != expected:
        sys.exit(
            f"{VEGA_DEBUG.relative_to(BOOK.parent)} announces {found}, but the installed altair "
            f"expects {expected}: update the file to the versions altair expects."
        )


def write_vega_bundle(expected: dict[str, str]) -> None:
    """Write the IIFE-wrapped vega bundle matching altair's vega-lite minor version."""
    import vl_convert as vlc

    major_minor = ".".join(expected["vegalite_version"].split(".")[:2])
    if major_minor not in vlc.get_vegalite_versions():
        sys.exit(
            f"vl-convert-python {vlc.__version__} has no vega-lite {major_minor} "
            f"(it has {vlc.get_vegalite_versions()}); altair expects {expected['vegalite_version']}"
        )
    for key, have in (
        ("vega_version", vlc.get_vega_version()),
        ("vegaembed_version", vlc.get_vega_embed_version()),
    ):
        if have.split(".")[0] != expected[key].split(".")[0]:
            sys.exit(f"vl-convert bundles {key}={have}, altair expects {expected[key]}")
    bundle = vlc.javascript_bundle(vl_version=major_minor)
    header = (
        f"/* Generated by book/build_assets.py from vl-convert-python {vlc.__version__}: "
        f"vega {vlc.get_vega_version()}, vega-lite {major_minor}, "
        f"vega-embed {vlc.get_vega_embed_version()}. Do not edit or commit. */\n"
    )
    STATIC.mkdir(exist_ok=True)
    BUNDLE.write_text(header + "(function () {\n" + bundle + "\n})();\n")
    print(f"wrote {BUNDLE.relative_to(BOOK.parent)} ({BUNDLE.stat().st_size / 1e6:.2f} MB)")


def vendor_mathjax(tarball: Path) -> None:
    """Replace book/_extra/mathjax with the parts of the npm tarball that tex-chtml uses."""
    with tempfile.TemporaryDirectory() as tmp:
        with tarfile.open(tarball) as tar:
            tar.extractall(tmp, filter="data")
        pkg = Path(tmp) / "package"
        keep = [pkg / "LICENSE", pkg / "es5/tex-chtml.js"]
        keep += sorted((pkg / "es5/output/chtml/fonts/woff-v2").glob("*.woff"))
        keep += [pkg / f"es5/input/tex/extensions/{name}.js" for name in MATHJAX_AUTOLOAD]
        if MATHJAX.exists():
            shutil.rmtree(MATHJAX)
        for src in keep:
            dst = MATHJAX / src.relative_to(pkg)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
        version = json.loads((pkg / "package.json").read_text())["version"]
    (MATHJAX / "SOURCE.txt").write_text(
        f"MathJax {version} (Apache-2.0, see LICENSE) from the npm registry: `npm pack mathjax@{version}`,\n"
        "trimmed to what es5/tex-chtml.js loads by `python book/build_assets.py --vendor-mathjax`.\n"
    )
    size = sum(p.stat().st_size for p in MATHJAX.rglob("*") if p.is_file())
    print(
        f"vendored {len(keep)} files into {MATHJAX.relative_to(BOOK.parent)} ({size / 1e6:.2f} MB)"
    )


def write_translator() -> None:
    """Copy the translator's scripts and libraries into the site; re-export each model if it changed."""
    modules = TRANSLATOR_SRC / "node_modules"
    missing = [name for name in TRANSLATOR_LIBS if not (modules / name).is_file()]
    if missing:
        sys.exit(
            f"{modules.relative_to(BOOK.parent)} lacks {missing}: run `npm ci` in "
            f"{TRANSLATOR_SRC.relative_to(BOOK.parent)} (make install does)"
        )
    absent = [str(path.relative_to(BOOK.parent)) for path in MODELS.values() if not path.is_file()]
    if absent:
        sys.exit(
            f"the translator page's models {absent} are missing (results/README.md says how to make them)"
        )
    TRANSLATOR.mkdir(parents=True, exist_ok=True)
    for name, target in TRANSLATOR_LIBS.items():
        shutil.copyfile(modules / name, TRANSLATOR / target)
    for own in ("translator.js", "translator.css"):
        shutil.copyfile(TRANSLATOR_SRC / own, TRANSLATOR / own)
    models = TRANSLATOR / "model"
    for stale in models.glob("*"):  # an earlier layout's files, a direction no longer offered
        if stale.name not in MODELS:
            if stale.is_dir():
                shutil.rmtree(stale)
            else:
                stale.unlink()
    for direction, model_file in MODELS.items():
        export_model(model_file, models / direction)
    size = sum(p.stat().st_size for p in TRANSLATOR.rglob("*") if p.is_file())
    print(f"wrote {TRANSLATOR.relative_to(BOOK.parent)} ({size / 1e6:.1f} MB)")


def export_model(model_file: Path, out: Path) -> None:
    """Export one model file (with the tokenizer beside it) into `out`, unless its inputs are unchanged."""
    stamp = out / "inputs.sha256"
    inputs = (model_file, model_file.with_name("tokenizer.json"), *EXPORT_CODE)
    digest = "".join(hashlib.sha256(p.read_bytes()).hexdigest() for p in inputs)
    if stamp.is_file() and stamp.read_text() == digest:
        print(f"{out.relative_to(BOOK.parent)} is up to date with its model file")
        return
    if out.exists():
        shutil.rmtree(out)
    command = [sys.executable, "-m", "annotated", "export-onnx"]
    command += ["--model", str(model_file), "--out", str(out), "--direction", out.name]
    if subprocess.run(command, cwd=BOOK.parent).returncode:  # the command said why
        sys.exit(f"could not export {model_file.relative_to(BOOK.parent)} for the translator page")
    stamp.write_text(digest)


def landing_sentence() -> str:
    """The German sentence of the landing page's example (book/intro.md, container landing-example)."""
    found = re.search(r"```\{container\} landing-example\n\*([^*\n]+)\*", LANDING.read_text())
    if not found:
        sys.exit(
            f"{LANDING.relative_to(BOOK.parent)} has no example for its attention map: a "
            "```{container} landing-example block starting with the German sentence in *italics*"
        )
    return found.group(1).strip()


def subword_label(token: str) -> str:
    """A subword as a reader writes it (as translator.js labels its map): "▁Hund" -> "Hund", "e" -> "-e"."""
    if token.startswith("▁"):
        return token[1:] or "␣"
    return f"-{token}" if token[:1].isalnum() else token


def write_landing_map() -> None:
    """Draw where the decoder looked for the landing page's example: translator/example_attention.svg.

    The trained model translates the sentence greedily (as the page says it does), then reads the
    translation back with need_weights: the last layer's encoder-decoder attention, mean over its heads.
    """
    sentence = landing_sentence()
    stamp = LANDING_MAP.with_suffix(".sha256")
    digest = hashlib.sha256(
        MODEL_FILE.read_bytes() + TOKENIZER.read_bytes() + sentence.encode()
    ).hexdigest()
    if LANDING_MAP.is_file() and stamp.is_file() and stamp.read_text() == digest:
        print(f"{LANDING_MAP.relative_to(BOOK.parent)} is up to date")
        return
    import html

    import torch

    from annotated.app import load_for_inference
    from annotated.data import BOS, EOS, encode
    from annotated.decoding import translate_ids
    from annotated.model import causal_mask

    cpu = torch.device("cpu")
    model, tok, _ = load_for_inference(str(MODEL_FILE), None, cpu)
    source = encode(tok, sentence)
    target = translate_ids(model, [source], 1, 0.0, cpu)[0] + [EOS]
    with torch.no_grad():
        memory = model.encode(torch.tensor([source]))  # (1, S, D)
        tgt_in = torch.tensor([[BOS, *target[:-1]]])  # (1, T)
        _, _, cross = model.decode(
            memory, None, tgt_in, causal_mask(len(target)), need_weights=True
        )
    weights = cross[-1][0].mean(0)  # last layer, mean over heads: (T, S)
    rows = [subword_label(tok.id_to_token(t)) if t != EOS else "⟨end⟩" for t in target]
    cols = [subword_label(tok.id_to_token(t)) for t in source]
    cell, left, top = 22, 8 + 8 * max(map(len, rows)), 12 + 7 * max(map(len, cols))
    width, height = left + cell * len(cols) + 4, top + cell * len(rows) + 4
    font = 'font-family="DejaVu Sans Mono, Menlo, Consolas, monospace" font-size="12" fill="#222"'
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}">',
        f'<rect width="{width}" height="{height}" fill="#fff"/>',
    ]
    for s, label in enumerate(cols):
        x, y = left + s * cell + cell / 2, top - 6
        parts.append(
            f'<text x="{x}" y="{y}" transform="rotate(-60 {x} {y})" {font}>{html.escape(label)}</text>'
        )
    for t, label in enumerate(rows):
        y = top + t * cell
        parts.append(
            f'<text x="{left - 6}" y="{y + cell * 0.7}" text-anchor="end" {font}>'
            f"{html.escape(label)}</text>"
        )
        for s in range(len(cols)):
            w = float(weights[t, s])
            parts.append(
                f'<rect x="{left + s * cell}" y="{y}" width="{cell - 1}" height="{cell - 1}" '
                f'fill="rgb(31,119,180)" fill-opacity="{w:.3f}"/>'
            )
    parts.append("</svg>")
    LANDING_MAP.parent.mkdir(parents=True, exist_ok=True)
    LANDING_MAP.write_text("\n".join(parts) + "\n")
    stamp.write_text(digest)
    print(f"wrote {LANDING_MAP.relative_to(BOOK.parent)} ({len(rows)} x {len(cols)} subwords)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vendor-mathjax", type=Path, metavar="TARBALL", help="mathjax-3.x.tgz")
    args = parser.parse_args()
    if args.vendor_mathjax:
        vendor_mathjax(args.vendor_mathjax)
    expected = altair_versions()
    check_vega_debug(expected)
    write_vega_bundle(expected)
    write_translator()
    write_landing_map()


if __name__ == "__main__":
    main()
