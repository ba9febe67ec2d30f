"""One notation everywhere (book/notation.md): each letter and each name means one thing.

T is the target length, N the number of layers, V the value matrix, K the keys; the vocabulary size
is n_vocab, the beam width n_beam, flattened batch x positions is B*T. The attention whose queries come
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
SYMBOLS |= {"d_ff", "d_k", "d_v", "V", "K", "Q", "k", "n_beam"}
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


# --- One notation, one meaning per symbol (issue 41): the clashes a reader met ---------------------
#
# Each check reads every line a reader sees (prose, captions, comments, docstrings, printed outputs)
# of the notebooks, the package, README.md and book/*.md, with code spans (`...`) removed, so that the
# code's own identifiers (`noam_lr`, `cross_attn`, `beam_size`) stay as they are. notation.md and
# glossary.md may name a symbol's other uses once, to tell the reader which letter they get instead.

NOTATION_PAGES = {"book/notation.md", "book/glossary.md"}
CODE_SPAN = re.compile(r"`[^`]*`")
MATH = re.compile(r"\$\$?([^$]+)\$\$?")
SUBSCRIPTED = r"(?:\s*(?:_|\^|[₀-₉]))"  # β_1, \beta_2, β₁, \epsilon_{ls}, ε_Adam


def seen(kinds=("prose", "comment", "output"), skip=NOTATION_PAGES):
    """(file, kind, line without code spans) for every line a reader sees."""
    for name, kind, line in texts():
        if kind in kinds and name not in skip:
            yield name, kind, CODE_SPAN.sub("", line)


def report(found, rule):
    return f"{rule}:\n" + "\n".join(
        f"{name} ({kind}): {line.strip()[:140]}" for name, kind, line in found
    )


def test_w_is_a_weight_matrix_and_the_beam_width_is_n_beam():
    """W only for weight matrices (W^Q, W_1, ...); the beam width is n_beam, `beam_size` in code."""
    found = []
    for name, kind, line in seen(skip=set()):
        shaped = any("W" in symbols for _, symbols in shapes(line))
        prose = re.search(
            r"beam (?:size|width)\W{0,3}\$?W\b|\$W\s*=|\bW\$? (?:beams|prefixes|hypotheses)"
            r"|beams?[^.]{0,40}\$W\$|\$W\$[^.]{0,40}beam",
            line,
            re.IGNORECASE,
        )
        if (shaped or prose) and name != "book/notation.md":
            found.append((name, kind, line))
    assert not found, report(
        found, "the beam width is n_beam (`beam_size` in code), W a weight matrix"
    )


def test_f_is_torch_functional_and_the_inner_width_is_d_ff():
    found = [
        (name, kind, line)
        for name, kind, line in seen(skip=set())
        if any("F" in symbols for _, symbols in shapes(line))
        or re.search(r"\$F\s*=|\$F\$ (?:units|hidden|inner|wide)|inner (?:size|width) \$?F\b", line)
    ]
    assert not found, report(
        found, "F is torch.nn.functional; the feed-forward's inner width is d_ff"
    )


LAYER_NORM_HOMES = {"notebooks/07_add_and_norm.ipynb", "annotated/model/norm.py"}


def test_beta_is_layer_norms_shift():
    """A softmax temperature is tau; Adam's are beta_1 and beta_2 (the paper's); a bare beta is LayerNorm's."""
    found = []
    for name, kind, line in seen():
        for match in re.finditer(r"β|\\beta\b", line):
            if re.match(SUBSCRIPTED, line[match.end() :]):
                continue  # beta_1, beta_2
            if name in LAYER_NORM_HOMES:
                break
            if not re.search(
                r"LayerNorm|layer norm|\\gamma|γ|gain|shift|bias", line, re.IGNORECASE
            ):
                found.append((name, kind, line))
                break
    assert not found, report(
        found, "a bare β is LayerNorm's shift (temperature τ, Adam's β_1, β_2)"
    )


def test_epsilon_is_layer_norms_constant():
    """Label smoothing is epsilon_ls (the paper's), Adam's constant epsilon_Adam; a bare epsilon is LayerNorm's."""
    found = []
    for name, kind, line in seen():
        for match in re.finditer(r"ε|\\(?:var)?epsilon\b", line):
            if re.match(SUBSCRIPTED, line[match.end() :]):
                continue
            if re.search(r"LayerNorm|layer norm", line, re.IGNORECASE):
                break  # LayerNorm's own constant, beside the others it is told apart from
            if re.search(r"smooth|Adam|optimi[sz]er", line, re.IGNORECASE):
                found.append((name, kind, line))
                break
    assert not found, report(
        found, "label smoothing is ε_ls and Adam's constant ε_Adam; a bare ε is LayerNorm's"
    )


def test_h_is_the_number_of_heads_and_entropy_is_calligraphic():
    """In maths the heads are h (the paper's); H is a shape letter of code comments, entropy is 𝓗(q)."""
    found = []
    for name, kind, line in seen():
        text = line.replace("\\mathcal{H}", "")
        if re.search(r"(?<![\w\\{])H\s*\(\s*[a-zA-Z]", text) and not SHAPE.search(text):
            found.append((name, kind, line))  # H(q): the entropy
            continue
        if kind == "prose":
            maths = " ".join(m.group(1) for m in MATH.finditer(text))
            if re.search(r"(?<![\w\\{])H\b", SHAPE.sub("", maths)):
                found.append((name, kind, line))  # $H$ heads, $H \cdot D_v$
    assert not found, report(found, "heads are $h$ in maths and entropy is $\\mathcal{H}(q)$")


def test_d_k_and_d_v_are_lowercase_in_maths():
    found = [
        (name, kind, line)
        for name, kind, line in seen(kinds=("prose",))
        if re.search(r"D_\{?[kv]\b", " ".join(m.group(1) for m in MATH.finditer(line)))
    ]
    assert not found, report(found, "write $d_k$ and $d_v$ (Dk, Dv only as shape letters in code)")


def test_k_is_a_key_and_an_offset_is_delta():
    """Chapter 05's relative shift moves by Delta; the page that says so once may name the paper's k."""
    found = [
        (name, kind, line)
        for name, kind, line in seen()
        if re.search(r"\b(?:pos|t|s)\s*[+-]\s*k\b|\bM_\{?k\b|offset \$k\$|[A-Za-z_}]\(k\)", line)
        and "paper" not in line
    ]
    assert not found, report(
        found, "an offset between positions is Δ (the paper writes k); k is a key"
    )


def test_an_attention_score_is_e_ts():
    found = [
        (name, kind, line)
        for name, kind, line in seen(kinds=("prose",))
        if re.search(r"(?<![\w\\])s_\{?[ijt]\b|\bscores? \$s\$", line)
    ]
    assert not found, report(found, "an attention score is $e_{ts}$; s is a key's position")


def test_dropouts_rate_is_p_drop():
    found = [
        (name, kind, line)
        for name, kind, line in seen()
        if re.search(r"dropout|drop", line, re.IGNORECASE)
        and re.search(r"probability \$p\$|\$p\s*=\s*0?\.\d|1/\(1\s*-\s*p\)", line)
    ]
    assert not found, report(
        found, "dropout's rate is $P_{drop}$ (`dropout` in code); p is a probability"
    )


NOAM = r"(?<!Shazeer, )\bNoam\b(?! Shazeer)"  # the paper's author keeps his name


def test_no_noam_schedule_in_prose():
    """The learning-rate schedule (Eq. 3), or the schedule; chapter 12 explains the package's noam_* once."""
    found = [
        (name, kind, line)
        for name, kind, line in seen()
        if re.search(NOAM, line) and name != "notebooks/12_training.ipynb"
    ]
    assert not found, report(found, 'say "the learning-rate schedule (Eq. 3)" or "the schedule"')


def test_chapters_and_appendices_are_named_as_such():
    """00-20 are chapters, 21-37 appendices; a notebook is never the name of a unit."""
    rules = (
        (
            r"\bnotebooks? \d{2}\b",
            "a unit is a chapter (00-20) or an appendix (21-37), not a notebook",
        ),
        (r"\bchapters? (?:2[1-9]|3\d)\b", "21-37 are appendices"),
        (r"\bappendi(?:x|ces) (?:[01]\d|20)\b", "00-20 are chapters"),
    )
    found = []
    for name, kind, line in seen(skip=set()):
        for pattern, why in rules:
            if re.search(pattern, line, re.IGNORECASE):
                found.append((name, kind, f"{why}: {line.strip()}"))
    assert not found, report(found, "chapter NN for 00-20, appendix NN for 21-37")


def test_one_name_for_the_causal_mask_and_the_sub_layer():
    found = []
    for name, kind, line in seen(kinds=("prose",)):
        text = re.sub(
            r"\([^)\s]*\.ipynb[^)\s]*\)|[\w-]*#[\w-]+", "", line
        )  # links and anchors stay
        if re.search(r"look-?ahead mask", text, re.IGNORECASE) or re.search(
            r"(?<![\w.])sublayers?\b", text
        ):
            found.append((name, kind, line))
    assert not found, report(found, 'say "causal mask" and "sub-layer"')


DECODING_WORDS = re.compile(r"generat|decod|greedy|beam|translat|tokens to|output", re.IGNORECASE)
TABLE_WORDS = re.compile(r"position|table|encod|d_model|the model's", re.IGNORECASE)


def test_max_len_is_only_the_position_tables_size():
    """The number of tokens a decoder may generate has its own name (max_new_tokens), in prose and package."""
    found = []
    for name, kind, line in texts():
        if kind == "code" or name in NOTATION_PAGES or "max_len" not in line:
            continue
        if DECODING_WORDS.search(line) and not TABLE_WORDS.search(line):
            found.append((name, kind, line))
    import ast

    for path in sorted((ROOT / "annotated").rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(encoding="utf-8"))
        exported = next(
            (ast.literal_eval(n.value) for n in tree.body
             if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "__all__"),
            None,
        )  # fmt: skip
        top = {id(n) for n in tree.body}
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                names = [a.arg for a in node.args.args + node.args.kwonlyargs]
                public = not node.name.startswith("_")  # a private shim may take the old name
                if public and exported is not None and id(node) in top:  # so may one not in __all__
                    public = node.name in exported
                if "decod" in where and public and ("max_len" in node.name or "max_len" in names):
                    found.append((where, "code", f"def {node.name}({', '.join(names)})"))
    assert not found, report(
        found, "max_len is the positional table's size; decoding's limit is max_new_tokens"
    )
