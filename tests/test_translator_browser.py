"""The book's translator page in a real Chromium: the same output as Python, offline, never frozen.

The page (book/translate.md) runs the two exported Multi30k models, German -> English and English ->
German, with onnxruntime-web, each loaded only when the reader first translates in its direction. In
both directions its greedy translations of validation sentences must equal `python -m annotated
translate --beam 1`, word for word; awkward input must end in a translation or a clear message. Any
request that leaves the local server, any failed local request and any console error fails the test.
The book must be built first (the Makefile does). The greedy comparison over many sentences is in
the sweep tier (marked `sweep`: make test-sweep); TRANSLATOR_SENTENCES=200 compares more sentences
per direction (default 60).
"""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import test_book_browser
import torch
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from test_book_browser import HTML, LOCAL_HOST, ROOT, PageLog

from annotated.app import load_for_inference
from annotated.data import MULTI30K_ENV, decode, encode, load_multi30k
from annotated.decoding import translate_ids

pytestmark = pytest.mark.browser

# The book test's fixtures, shared: its server on 127.0.0.1 and its offline-minded Chromium.
book_server = test_book_browser.book_server
browser_type_launch_args = test_book_browser.browser_type_launch_args

CHECKPOINTS = {  # the page's models by direction (book/build_assets.py exports each)
    "de-en": ROOT / "results" / "multi30k" / "model_fp16.safetensors",
    "en-de": ROOT / "results" / "multi30k-en-de" / "model_fp16.safetensors",
}
DIRECTIONS = tuple(CHECKPOINTS)
LANGUAGES = {"de-en": ("German", "English"), "en-de": ("English", "German")}  # source, target
SHARED_COPY = ROOT.parent / "shared" / "data" / "multi30k"
SENTENCES = int(os.environ.get("TRANSLATOR_SENTENCES", "60"))
FINISHED = (
    "s => ['done', 'error'].includes(document.getElementById('translator-output').dataset.state)"
)


@pytest.fixture(scope="module")
def site_url(book_server) -> str:
    """The book's server (shared with the book's browser test), once the page is built."""
    if not (HTML / "translate.html").exists():
        pytest.fail(f"{HTML.relative_to(ROOT)}/translate.html is missing: build the book first")
    return book_server[0]


@pytest.fixture(scope="module")
def translator(browser, site_url: str) -> Iterator[tuple]:
    """One tab on the translator page for the whole module, with its requests and errors logged."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(60_000)
    page = context.new_page()
    log = PageLog(page)
    page.goto(f"{site_url}/translate.html", wait_until="load")
    page.wait_for_function("() => !document.getElementById('translator-run').disabled")
    yield page, log
    outside = list(dict.fromkeys(log.outside))
    context.close()
    assert not outside, f"the translator page requested hosts other than {LOCAL_HOST}: {outside}"


def check_clean(log: PageLog) -> None:
    assert not log.outside, f"requests left {LOCAL_HOST}: {log.outside}"
    assert not log.failed, f"local requests failed: {log.failed}"
    assert not log.errors, f"console errors: {log.errors}"


def choose(page, direction: str) -> None:
    page.check(f'input[name="translator-direction"][value="{direction}"]')


# Counts the turns the page's event loop gives to other work while the translator's state is "running".
TICKER = """() => {
  const output = document.getElementById("translator-output");
  const channel = new MessageChannel();
  let turns = 0, live = true;
  channel.port1.onmessage = () => {
    if (output.dataset.state === "running") turns += 1;
    if (live) channel.port2.postMessage(0);
  };
  channel.port2.postMessage(0);
  window.__ticker = { stop: () => { live = false; return turns; } };
}"""


def run(
    page, text: str, search: str = "greedy", direction: str = "de-en"
) -> tuple[str, str, float]:
    """Translate `text` on the page; return (state, shown text, seconds from click to finish).

    The page also records its own decoding time (model load excluded) in data-ms.
    """
    choose(page, direction)
    page.fill("#translator-input", text)
    page.check(f'input[name="translator-search"][value="{search}"]')
    started = time.perf_counter()
    page.click("#translator-run")
    page.wait_for_function(FINISHED)
    seconds = time.perf_counter() - started
    output = page.locator("#translator-output")
    return output.get_attribute("data-state"), output.inner_text(), seconds


@pytest.fixture(scope="module")
def validation() -> dict[str, list[str]]:
    """The first SENTENCES validation sources of each direction: German ones, then English ones."""
    for candidate in (os.environ.get(MULTI30K_ENV), SHARED_COPY):
        if candidate and Path(candidate).is_dir():
            return {
                direction: [p.src for p in load_multi30k("val", candidate, direction=direction)]
                for direction in DIRECTIONS
            }
    reason = f"Multi30k files not found: set {MULTI30K_ENV} or place them in {SHARED_COPY}"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def python_models() -> dict[str, tuple]:
    """(model, tokenizer) by direction; load_for_inference checks each checkpoint's direction."""
    cpu = torch.device("cpu")
    return {d: load_for_inference(str(c), None, cpu, d)[:2] for d, c in CHECKPOINTS.items()}


@pytest.fixture(scope="module")
def python_model(python_models) -> tuple:
    return python_models["de-en"]  # the landing page's model


def python_translation(python_model, text: str, beam: int = 1) -> str:
    """What `python -m annotated translate --beam N TEXT` prints for one sentence."""
    model, tok = python_model
    ids = translate_ids(model, [encode(tok, text)], beam, 0.6, torch.device("cpu"))[0]
    return decode(tok, ids)


# Sixty sentences a direction take about 50 s: the sweep's (make test-sweep). The smoke tier still
# compares the landing page's example and five beam searches a direction with Python's output.
@pytest.mark.sweep
@pytest.mark.parametrize("direction", DIRECTIONS)
def test_greedy_equals_python(translator, validation, python_models, direction, capsys) -> None:
    page, log = translator
    sources, python_model = validation[direction][:SENTENCES], python_models[direction]
    # The command itself, once, so that "equal to the command" is checked literally.
    command = [sys.executable, "-m", "annotated", "translate", "--beam", "1"]
    command += ["--model", str(CHECKPOINTS[direction]), sources[0]]
    printed = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert printed.strip() == python_translation(python_model, sources[0])

    differ, seconds, decoding = [], [], []
    for i, source in enumerate(sources):
        state, shown, took = run(page, source, direction=direction)
        assert state == "done", f"{direction} sentence {i}: the page reported {shown!r}"
        seconds.append(took)
        decoding.append(float(page.locator("#translator-output").get_attribute("data-ms")))
        expected = python_translation(python_model, source)
        if shown != expected:
            differ.append(f"{i}: {source!r}\n  page:   {shown!r}\n  python: {expected!r}")
    rest, inside = sorted(seconds[1:]), sorted(decoding[1:])
    with capsys.disabled():
        print(
            f"\ntranslator {direction}: first translation (model load included) {seconds[0]:.2f} "
            f"s; then median {1000 * rest[len(rest) // 2]:.0f} ms, slowest "
            f"{1000 * rest[-1]:.0f} ms per sentence from click to text (decoding alone: median "
            f"{inside[len(inside) // 2]:.0f} ms); {len(differ)} of {len(sources)} differ from "
            "Python's greedy output"
        )
    listing = "\n".join(differ)
    assert not differ, f"the page's {direction} greedy output differs from Python's:\n{listing}"
    check_clean(log)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_beam_search_equals_python(translator, validation, python_models, direction) -> None:
    page, log = translator
    for source in validation[direction][:5]:
        state, shown, _ = run(page, source, search="beam", direction=direction)
        assert state == "done", shown
        assert shown == python_translation(python_models[direction], source, beam=4), source
    check_clean(log)


def test_a_model_loads_only_when_its_direction_translates(browser, site_url: str) -> None:
    """A fresh page fetches no model; a translation fetches its direction's model, once."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(60_000)
    page = context.new_page()
    log, paths = PageLog(page), []
    page.on("request", lambda request: paths.append(urlsplit(request.url).path))

    def fetched() -> list[str]:
        """What the page fetched from translator/ since the last call, its own script and style aside."""
        found = [p.split("/translator/", 1)[1] for p in paths if "/translator/" in p]
        paths.clear()
        return [name for name in found if name not in ("translator.js", "translator.css")]

    def models(names: list[str]) -> set[str]:
        return {name.split("/")[1] for name in names if name.startswith("model/")}

    page.goto(f"{site_url}/translate.html", wait_until="load")
    page.wait_for_function("() => !document.getElementById('translator-run').disabled")
    log.wait_until_quiet()
    assert fetched() == [], "the page fetched the runtime or a model before any translation"
    choose(page, "en-de")
    log.wait_until_quiet()
    assert fetched() == [], "choosing a direction fetched something before any translation"
    assert run(page, "Two dogs are playing in the snow.", direction="en-de")[0] == "done"
    names = fetched()
    assert models(names) == {"en-de"}, names
    for name in ("translator.json", "encoder.onnx", "decoder_step.onnx"):
        assert f"model/en-de/{name}" in names, names
    assert run(page, "Zwei Hunde spielen im Schnee.", direction="de-en")[0] == "done"
    names = fetched()
    assert models(names) == {"de-en"}, names
    assert run(page, "A dog runs.", direction="en-de")[0] == "done"
    assert run(page, "Ein Hund rennt.", direction="de-en")[0] == "done"
    assert fetched() == [], "switching back to a direction fetched its model again"
    check_clean(log)
    context.close()


def article(language: str) -> str:
    return f"an {language}" if language[0] in "AEIOU" else f"a {language}"


def texts(page, selector: str) -> list[str]:
    return [t.strip() for t in page.locator(selector).all_text_contents()]


def test_the_direction_switch_relabels_the_page(translator, python_models) -> None:
    page, log = translator
    examples = {
        d: texts(page, f'.translator-examples[data-direction="{d}"] button') for d in DIRECTIONS
    }
    assert all(examples.values()) and examples["de-en"] != examples["en-de"], examples
    for direction, other in zip(DIRECTIONS, reversed(DIRECTIONS), strict=True):
        source, target = LANGUAGES[direction]
        # A translation in the other direction first: switching must clear it.
        assert run(page, examples[other][0], direction=other)[0] == "done"
        choose(page, direction)
        assert page.get_attribute("#translator-output", "data-state") == "idle"
        assert not page.is_visible("#translator-output") and not page.is_visible("#translator-map")
        assert page.inner_text('label[for="translator-input"]') == source
        assert texts(page, ".translator-example:visible") == examples[direction]
        assert page.input_value("#translator-input") != examples[other][0], (
            "the other language's example stayed in the box"
        )
        sentence = examples[direction][0]
        state, shown, _ = run(page, sentence, direction=direction)
        assert state == "done" and shown
        assert page.inner_text(".translator-output-label") == target
        explanation = " ".join(page.inner_text("#translator-map p").split())
        wanted = f"one {target} subword as it was generated, each column one {source} subword"
        assert wanted in explanation, explanation
        title = page.locator("#translator-svg svg > title").text_content()
        assert f"row is {article(target)} subword, each column {article(source)}" in title, title
        # The map is this direction's: a cell per output subword (and EOS) per input subword.
        model, tok = python_models[direction]
        output = translate_ids(model, [encode(tok, sentence)], 1, 0.0, torch.device("cpu"))[0]
        cells = (len(output) + 1) * len(encode(tok, sentence))
        assert page.locator("#translator-svg rect").count() == cells
    check_clean(log)


def test_attention_map_has_a_cell_per_subword_pair(translator, python_model) -> None:
    page, log = translator
    model, tok = python_model
    sentence = "Zwei Hunde spielen im Schnee."
    state, shown, _ = run(page, sentence)
    assert state == "done"
    english = translate_ids(model, [encode(tok, sentence)], 1, 0.0, torch.device("cpu"))[0]
    rows = len(english) + 1  # the English subwords and EOS
    cells = rows * len(encode(tok, sentence))
    assert page.locator("#translator-svg rect").count() == cells
    page.select_option("#translator-layer", "0")
    page.select_option("#translator-head", "2")  # one head, first layer: redrawn, same grid
    assert page.locator("#translator-svg rect").count() == cells
    # Each row of one head's weights is a distribution over the source subwords.
    sums = page.evaluate(
        """() => {
        const rows = new Map();
        for (const r of document.querySelectorAll('#translator-svg rect')) {
          const y = r.getAttribute('y');
          rows.set(y, (rows.get(y) || 0) + Number(r.querySelector('title').textContent.split(': ')[1]));
        }
        return [...rows.values()];
    }"""
    )
    assert len(sums) == rows and all(abs(s - 1) < 0.01 * len(encode(tok, sentence)) for s in sums)
    check_clean(log)


def test_awkward_input_ends_in_a_result_or_a_message(translator) -> None:
    page, log = translator
    state, shown, _ = run(page, "   ")
    assert (state, shown) == ("error", "Type a German sentence first.")
    paragraph = " ".join(["Ein Mann fährt mit dem Fahrrad durch die Stadt."] * 56)  # 504 words
    state, shown, _ = run(page, paragraph)
    assert state == "error" and "at most 256" in shown, shown
    for text in (
        "Zwei Hunde 🐕🐕 spielen im Schnee 😀",
        "Собака бежит по снегу.",
        "犬が雪の中を走る。",
    ):
        state, shown, _ = run(page, text)
        assert state == "done" and shown.strip(), (text, state, shown)
    # The page answers while it decodes: a long beam search yields to the browser between steps. A
    # ticker that posts itself a message counts the turns the page got while the state read "running"
    # (a race-free measure: how soon the click's decode finishes does not matter).
    page.fill("#translator-input", " ".join(["Ein Hund läuft über die Wiese und"] * 8) + " bellt.")
    page.check('input[name="translator-search"][value="beam"]')
    page.evaluate(TICKER)
    page.click("#translator-run")
    page.wait_for_function(FINISHED)
    turns = page.evaluate("window.__ticker.stop()")
    assert page.locator("#translator-output").get_attribute("data-state") == "done"
    assert turns >= 2, (
        f"the page got {turns} turns while it decoded a 57-word sentence with beam search"
    )
    check_clean(log)


def test_ctrl_enter_translates(translator) -> None:
    page, log = translator
    choose(page, "de-en")
    page.fill("#translator-input", "Zwei Hunde spielen im Schnee.")
    page.evaluate("document.getElementById('translator-output').dataset.state = 'idle'")
    page.focus("#translator-input")
    page.keyboard.press("Control+Enter")
    try:
        page.wait_for_function(FINISHED, timeout=20_000)
    except PlaywrightTimeoutError:
        pytest.fail("Ctrl+Enter in the text box did not translate")
    output = page.locator("#translator-output")
    assert output.get_attribute("data-state") == "done" and output.inner_text().strip()
    assert page.input_value("#translator-input") == "Zwei Hunde spielen im Schnee.", (
        "Ctrl+Enter also typed a line break into the sentence"
    )
    check_clean(log)


@pytest.mark.parametrize("direction", DIRECTIONS)
def test_an_example_sentence_translates_on_click(translator, direction) -> None:
    page, log = translator
    choose(page, direction)
    example = page.locator(f'.translator-examples[data-direction="{direction}"] button').first
    assert example.is_visible(), f"the {direction} examples are hidden when {direction} is chosen"
    sentence = example.inner_text()
    page.evaluate("document.getElementById('translator-output').dataset.state = 'idle'")
    example.click()
    try:
        page.wait_for_function(FINISHED, timeout=20_000)
    except PlaywrightTimeoutError:
        pytest.fail(f"a click on the example {sentence!r} did not translate it")
    assert page.input_value("#translator-input") == sentence
    assert page.locator("#translator-output").get_attribute("data-state") == "done"
    check_clean(log)


def test_the_map_reads_as_words_and_leaves_with_an_error(translator) -> None:
    page, log = translator
    state, _, _ = run(page, "Zwei Hunde spielen im Schnee.")
    assert state == "done" and page.is_visible("#translator-map")
    labels = page.locator("#translator-svg text").all_text_contents()
    assert labels and not [t for t in labels if "▁" in t], f"raw subword markers: {labels}"
    assert page.is_visible(".translator-legend-bar"), "the map has no colour legend"
    assert not page.is_visible("#translator-note"), page.inner_text("#translator-note")
    state, _, _ = run(page, "   ")
    assert state == "error"
    assert not page.is_visible("#translator-map"), "the previous sentence's map stayed on screen"
    check_clean(log)


def test_a_cut_or_repeating_output_is_flagged(translator) -> None:
    page, log = translator
    # One word, no sentence around it: the model repeats a word until the length limit.
    state, shown, _ = run(page, "Hund")
    assert state == "done"
    words = shown.split()
    note = page.inner_text("#translator-note") if page.is_visible("#translator-note") else ""
    if len(words) > 3 and len(set(words)) < len(words) / 2:
        assert "repeats" in note, f"{shown[:60]!r} repeats, but the page's note says {note!r}"
    else:  # a model that learned better: no false alarm either
        assert "repeats" not in note, f"{shown!r} does not repeat, but the page says {note!r}"
    # Two sentences: the model was trained on one at a time.
    state, _, _ = run(page, "Ein Hund rennt über die Wiese. Eine Katze schläft auf dem Sofa.")
    assert state == "done"
    assert "one sentence at a time" in page.inner_text("#translator-note")
    check_clean(log)


def test_nothing_shows_before_the_first_translation(browser, site_url: str) -> None:
    page = browser.new_page()
    page.goto(f"{site_url}/translate.html", wait_until="load")
    page.wait_for_function("() => !document.getElementById('translator-run').disabled")
    for hidden in ("#translator-output", ".translator-output-label", "#translator-map"):
        assert not page.is_visible(hidden), f"{hidden} shows before anything was translated"
    checked = 'input[name="translator-direction"]:checked'
    assert page.get_attribute(checked, "value") == "de-en", "German -> English is not the default"
    page.close()


def test_the_page_states_what_it_downloads(site_url: str) -> None:
    """The sizes book/translate.md gives (MB = 10**6 bytes) are those of the files the site serves."""
    text = (ROOT / "book" / "translate.md").read_text(encoding="utf-8")
    stated_model = int(re.search(r"about (\d+) MB of weights", text).group(1))
    stated_wasm = int(re.search(r"the (\d+) MB WebAssembly build", text).group(1))
    served = HTML / "translator"
    for direction in DIRECTIONS:  # the encoder's and the decoder step's ONNX files
        weights = sum(p.stat().st_size for p in (served / "model" / direction).glob("*.onnx"))
        assert weights and round(weights / 1e6) == stated_model, (direction, weights)
    wasm = (served / "ort-wasm-simd-threaded.wasm").stat().st_size
    assert round(wasm / 1e6) == stated_wasm, wasm


def test_the_landing_page_example_is_the_models_translation(python_model) -> None:
    """The example on the landing page is what the model really says (greedy, as the page runs)."""
    page = (HTML / "index.html").read_text(encoding="utf-8")
    if "landing-example" not in page:
        page = (HTML / "intro.html").read_text(encoding="utf-8")
    block = re.search(r'class="[^"]*landing-example[^"]*">(.*?)</div>', page, re.S)
    assert block, "the landing page shows no example translation (class landing-example)"
    german, english = (
        html.unescape(re.sub(r"<[^>]+>", "", part)).strip() for part in block.group(1).split("→")
    )
    assert python_translation(python_model, german) == english, (german, english)
    # Its attention map (book/build_assets.py) has a cell per English subword (and EOS) per German one.
    model, tok = python_model
    svg = (HTML / "translator" / "example_attention.svg").read_text(encoding="utf-8")
    rows = len(translate_ids(model, [encode(tok, german)], 1, 0.0, torch.device("cpu"))[0]) + 1
    assert svg.count("<rect x=") == rows * len(encode(tok, german)), (
        "the map is not of this sentence"
    )


# The focused element, and whether a focus ring is drawn on it (or on its label, for the radio
# buttons of the direction switch, which are invisible over their labels).
FOCUSED = """() => {
  const el = document.activeElement;
  const ring = e => { const s = getComputedStyle(e);
    return (s.outlineStyle !== 'none' && parseFloat(s.outlineWidth) >= 2) || s.boxShadow !== 'none'; };
  return {id: el.id, name: el.name || '', value: el.value || '', tag: el.tagName.toLowerCase(),
          text: (el.textContent || '').trim().slice(0, 40),
          ring: ring(el) || (el.closest('label') !== null && ring(el.closest('label')))};
}"""


def tab_to(page, predicate, limit: int = 40) -> dict:
    """Press Tab until the focused element satisfies `predicate`; return it (with its focus ring)."""
    for _ in range(limit):
        page.keyboard.press("Tab")
        focused = page.evaluate(FOCUSED)
        if predicate(focused):
            return focused
    pytest.fail(f"Tab never reached the control ({limit} presses); last focused: {focused}")


def test_the_translator_works_from_the_keyboard_alone(browser, site_url: str) -> None:
    """Direction, example, translate, and the map's layer and heads, with keys only; focus visible."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(60_000)
    page = context.new_page()
    log = PageLog(page)
    try:
        page.goto(f"{site_url}/translate.html", wait_until="load")
        page.wait_for_function("() => !document.getElementById('translator-run').disabled")
        page.focus("#translator-input")
        page.keyboard.press("Shift+Tab")  # back to the direction switch, just before the text box
        radio = page.evaluate(FOCUSED)
        assert radio["name"] == "translator-direction", f"Shift+Tab from the text box: {radio}"
        assert radio["ring"], f"the direction switch shows no focus: {radio}"
        page.keyboard.press("ArrowRight")  # radio buttons move with the arrow keys
        assert page.evaluate(FOCUSED)["value"] == "en-de", (
            "ArrowRight did not choose English → German"
        )
        example = tab_to(page, lambda f: f["tag"] == "button" and "translator-example" in
                         page.evaluate("document.activeElement.className"))  # fmt: skip
        assert example["ring"], f"an example sentence shows no focus: {example}"
        assert example["text"] == "Two dogs are playing in the snow.", example
        page.keyboard.press("Enter")  # an example translates at once
        page.wait_for_function(FINISHED)
        assert page.locator("#translator-output").get_attribute("data-state") == "done"
        assert page.input_value("#translator-input") == example["text"]
        page.locator("#translator-input").focus()
        page.keyboard.press("Shift+Tab")
        run_button = tab_to(page, lambda f: f["id"] == "translator-run")
        assert run_button["ring"], f"Translate shows no focus: {run_button}"
        page.keyboard.press("Enter")
        page.wait_for_function(FINISHED)
        assert page.locator("#translator-output").get_attribute("data-state") == "done"
        for control in ("translator-layer", "translator-head"):
            focused = tab_to(page, lambda f, c=control: f["id"] == c)
            assert focused["ring"], f"{control} shows no focus: {focused}"
            before = page.inner_html("#translator-svg")
            chosen = page.evaluate(f"document.getElementById('{control}').value")
            last = page.evaluate(f"(s => s.selectedIndex === s.options.length - 1)"
                                 f"(document.getElementById('{control}'))")  # fmt: skip
            page.keyboard.press("ArrowUp" if last else "ArrowDown")  # a select moves with arrows
            page.wait_for_function(
                "([id, v]) => document.getElementById(id).value !== v", arg=[control, chosen]
            )
            page.wait_for_function("b => document.getElementById('translator-svg').innerHTML !== b",
                                   arg=before)  # fmt: skip
        check_clean(log)
    finally:
        log.detach()
        context.close()
