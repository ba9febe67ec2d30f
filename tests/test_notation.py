"""One notation everywhere (book/notation.md): each letter and each name means one thing.

T is the target length, N the number of layers, V the value matrix, K the keys; the vocabulary size
is n_vocab, the beam width W, flattened batch x positions is B*T. The attention whose queries come
from the decoder and whose keys and values come from the encoder is the encoder-decoder attention
(§3.2.3); "cross-attention" is said once, on the notation and glossary pages, and the code's
identifiers (`cross`) stay. The tests read the notebooks' JSON (sources, figure captions and the
printed outputs), the generated package, the translator page's script, README.md and book/*.md.
"""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# One dimension of a shape: a symbol, a number, or a product/sum of them (B*W, T + 1, 2K).
DIM = r"\s*(?:\d*[A-Za-z][A-Za-z_0-9]*|\d+)(?:\s*[-+*/·×]\s*(?:\d*[A-Za-z][A-Za-z_0-9]*|\d+))*\s*"
SHAPE = re.compile(rf"\(({DIM}(?:,{DIM})*,?\s*)\)")
# The symbols a shape may use (notation.md); a parenthesis with any other word is not a shape.
SYMBOLS = {"B", "S", "T", "L", "D", "H", "Dk", "Dv", "F", "N", "W", "n", "n_vocab", "d_model"}
SYMBOLS |= {"d_ff", "d_k", "d_v", "V", "K", "Q", "k"}
TOKEN = re.compile(r"\d*([A-Za-z][A-Za-z_0-9]*)")


def texts():
    """(file, kind, line) for every line: kind is 'prose', 'comment' (comments, docstrings) or 'code'."""
    for path in sorted((ROOT / "notebooks").glob("*.ipynb")):
        name = f"notebooks/{path.name}"
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] == "markdown":
                yield from ((name, "prose", line) for line in source.splitlines())
            else:
                yield from code_lines(name, source)
            caption = (
                cell.get("metadata", {}).get("mystnb", {}).get("figure", {}).get("caption", "")
            )
            yield from ((name, "prose", line) for line in caption.splitlines())
            for output in cell.get("outputs", []):  # what the reader sees printed
                shown = output.get("text") or output.get("data", {}).get("text/plain") or ""
                yield from ((name, "output", line) for line in "".join(shown).splitlines())
    for path in sorted((ROOT / "annotated").rglob("*.py")):
        name = path.relative_to(ROOT).as_posix()
        if path.name != "_modidx.py":
            yield from code_lines(name, path.read_text(encoding="utf-8"))
    for path in [ROOT / "book" / "translator" / "translator.js", ROOT / "book" / "build_assets.py"]:
        name = path.relative_to(ROOT).as_posix()  # the page's labels and the landing map's drawing
        if path.suffix == ".py":
            yield from code_lines(name, path.read_text(encoding="utf-8"))
            continue
        for line in path.read_text(encoding="utf-8").splitlines():  # a // comment, or code
            code, _, comment = line.partition("//")
            yield (name, "code", code)
            if comment:
                yield (name, "comment", comment)
    for path in [ROOT / "README.md", *sorted((ROOT / "book").glob("*.md"))]:
        name = path.relative_to(ROOT).as_posix()
        yield from ((name, "prose", line) for line in path.read_text(encoding="utf-8").splitlines())


def code_lines(name, source):
    """Split code into its comments and docstrings (the prose of code) and the rest."""
    in_doc = False
    for line in source.splitlines():
        quotes = line.count('"""')
        if in_doc or quotes:
            yield name, "comment", line
            in_doc = in_doc != (quotes % 2 == 1)
            continue
        code, hash_, comment = line.partition("#")
        if hash_ and code.count('"') % 2 == 0 and code.count("'") % 2 == 0:
            yield name, "comment", comment
        yield name, "code", code if hash_ else line


def shapes(line):
    """The dimension symbols of every shape tuple written on a line, e.g. {'B', 'T', 'n_vocab'}."""
    for match in SHAPE.finditer(line):
        items = {item.strip() for item in match.group(1).split(",") if item.strip()}
        symbols = set(TOKEN.findall(match.group(1)))
        if symbols and symbols <= SYMBOLS and not items <= {"Q", "K", "V"}:  # (Q, K, V): matrices
            yield match.group(0), symbols | ({"N1"} if items == {"N", "1"} else set())


def offences(check):
    found = []
    for name, kind, line in texts():
        if kind == "code":
            continue
        if why := check(line):
            found.append(f"{name}: {why}: {line.strip()[:120]}")
    return found


def shape_misuse(line):
    for shape, symbols in shapes(line):
        if {"V", "K"} & symbols:
            return f"{shape} uses V or K as a dimension (n_vocab, W)"
        if "N" in symbols and symbols & {"n_vocab", "V", "N1"}:  # (N, n_vocab), (N, 1): positions
            return f"{shape} uses N for positions (B*T)"
    return None


def test_no_shape_uses_v_k_as_dimensions_or_n_for_positions():
    found = offences(shape_misuse)
    assert not found, "\n".join(found)


LEGEND = re.compile(r"(?:Legend|Shapes):(.*)")


def legend_misuse(line):
    """A legend line (`# Legend: B batch, ...`) gives T, N, V and K their one meaning, or none."""
    if not (match := LEGEND.search(line)):
        return None
    if re.search(r"\bN\s*=\s*B\b", line):
        return "N defined as B*T"
    for entry in match.group(1).split(","):
        symbol, _, meaning = entry.strip().partition(" ")
        if symbol in {"V", "K"}:
            return f"{symbol} defined as {meaning!r}"
        if symbol == "T" and "target" not in meaning and "quer" not in meaning:
            return f"T defined as {meaning!r}"
        if symbol == "N" and "layer" not in meaning:
            return f"N defined as {meaning!r}"
    return None


def test_legends_give_t_n_v_k_one_meaning():
    found = offences(legend_misuse)
    assert not found, "\n".join(found)


def prose_misuse(line):
    if re.search(r"\bN\s*=\s*B\s*[*·×]\s*T\b|\bvocab(?:ulary)?(?: size)? \$?V\b", line):
        return "N as B*T, or V as the vocabulary"
    if re.search(r"\bK\s*beam|beam (?:size|width) \$?K\b", line, re.IGNORECASE):
        return "K as the beam size"
    return None


def test_prose_keeps_n_for_layers_and_v_k_for_values_keys():
    found = offences(prose_misuse)
    assert not found, "\n".join(found)


ALSO_CALLED = {"book/notation.md", "book/glossary.md"}  # where "cross-attention" is named, once


@pytest.mark.parametrize(
    ("pattern", "allowed"),
    [
        (r"context[- ]attention|source[- ]attention|encoder–decoder attention", set()),
        (r"cross[- ]attention", ALSO_CALLED),
    ],
)
def test_one_name_for_the_encoder_decoder_attention(pattern, allowed):
    found = []
    for name, kind, line in texts():
        if name in allowed:
            continue
        # code identifiers (cross, test_cross_attention_...) and anchors stay as they are
        quoted = "" if name.endswith(".js") else r"|`[^`]*`"  # in JavaScript, backticks quote text
        text = re.sub(r"[\w-]*#[\w-]+|\w+_attention\w*" + quoted, "", line)
        if re.search(pattern, text, re.IGNORECASE):
            found.append(f"{name} ({kind}): {line.strip()[:120]}")
    assert not found, "call it the encoder-decoder attention (§3.2.3):\n" + "\n".join(found)
    for page in allowed:
        text = (ROOT / page).read_text(encoding="utf-8")
        assert re.search(pattern, text, re.IGNORECASE), f"{page} no longer gives the other name"
