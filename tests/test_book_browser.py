"""Open every page of the built book in a real Chromium, as a reader would, on a desktop and a phone.

Every page of book/_toc.yml (so every page the book gains is checked too) is loaded from a local
server on 127.0.0.1, twice: at 1366 px wide (the HTTP cache on) and at 390 px (a phone; the cache
off, so each load transfers the whole page). The tests come in two tiers: the smoke tier (`make
test-browser`, part of `make test`, about a minute) opens the SMOKE pages (the landing page, chapters
04 and 12, the translator); every other page's tests are marked `sweep` (`make test-sweep`, in CI,
spread over pytest-xdist workers). A page fails when:

* it requests anything from another host, has a local request that fails, or logs a console error;
* its equations (MathJax) or altair charts (vega-embed) do not render, or MathJax reports a TeX error;
* at 1366 px an element reaches past the content column (outside any box that scrolls it);
* at 390 px the page scrolls sideways, or the menu button does not open the navigation drawer
  (or the contents button its drawer);
* it shows more than one search box, an image without real alt text (not a file name), or a
  figure without a caption;
* its weight, the bytes transferred for one uncached load (compressed as any static host does),
  exceeds the budget: 1.5 MB for the landing page, 3 MB for any other page.

Every page is also audited with axe-core (the accessibility engine of browsers' developer tools,
from npm: `npm ci` in book/translator installs it), at both widths, in light and in dark mode once
the colours have settled (transitions off): a page fails on any violation, whatever its impact,
unless the rule is in AXE_ACCEPTED with the reason it cannot be fixed from the book's side.

It also checks the favicon, dark mode and the search page, and writes screenshots of the landing
page and chapters 04, 12 and 17 at both widths to artifacts/screenshots/ (git-ignored). The book
must be built first: `make html` renders the notebooks' stored outputs (about a minute, executing
nothing), `make book` also sets up and exports the package.
"""

from __future__ import annotations

import functools
import gzip
import http.server
import json
import os
import re
import sys
import threading
import time
import tomllib
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

ROOT = Path(__file__).resolve().parents[1]
BOOK = ROOT / "book"
HTML = BOOK / "_build" / "html"
CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
LOCAL_HOST = "127.0.0.1"
RENDER_TIMEOUT_MS = 10_000
DESKTOP = {"width": 1366, "height": 900}
PHONE = {"width": 390, "height": 844}
LANDING_BUDGET = 1.5e6  # bytes transferred for one uncached load of the landing page
PAGE_BUDGET = 3.0e6  # ... and of any other page
# Pages photographed at both widths: the landing page and three chapters that are hard to lay out.
SCREENSHOT_PAGES = {"intro": "landing", "notebooks/04_": "04", "notebooks/12_": "12",
                    "notebooks/17_": "17"}  # fmt: skip
COMPRESSIBLE = (".html", ".js", ".css", ".svg", ".json", ".txt", ".map")
AXE = BOOK / "translator" / "node_modules" / "axe-core" / "axe.min.js"
# axe-core rules whose violations the book cannot fix from its side, with the reason: none today.
AXE_ACCEPTED: dict[str, str] = {}
# Rules that depend on the colours: the dark-mode pass runs only these (the markup is the same).
AXE_COLOUR_RULES = ["color-contrast", "link-in-text-block"]

pytestmark = pytest.mark.browser


def toc_pages(toc: Path = BOOK / "_toc.yml") -> list[str]:
    """Return the docnames of _toc.yml in reading order (root first)."""
    data = yaml.safe_load(toc.read_text())
    pages = [data["root"]]

    def walk(entries: list[dict]) -> None:
        for entry in entries:
            if "file" in entry:
                pages.append(entry["file"])
            for key in ("parts", "chapters", "sections"):
                walk(entry.get(key, []))

    walk(data.get("parts", []) + data.get("chapters", []) + data.get("sections", []))
    return [re.sub(r"\.(md|ipynb)$", "", page) for page in pages]


PAGES = toc_pages()
LANDING = PAGES[0]
# The smoke tier's pages (by docname prefix, so a renamed chapter stays in): the landing page, a
# chapter of equations and heatmaps (04), a long one with figures and a chart (12), the translator.
SMOKE = (LANDING, "notebooks/04_", "notebooks/12_", "translate")


def tiered(pages: list[str]) -> list:
    """The pages as test parameters: the smoke pages plain, every other one marked `sweep`."""
    return [d if d.startswith(SMOKE) else pytest.param(d, marks=pytest.mark.sweep) for d in pages]


@functools.cache
def source_features(docname: str) -> tuple[bool, int]:
    """Return (has math, number of altair charts) for a page, read from its source file."""
    for suffix in (".md", ".ipynb"):
        path = BOOK / f"{docname}{suffix}"
        if path.exists():
            break
    else:
        raise FileNotFoundError(
            f"_toc.yml lists {docname!r} but book/{docname}.md/.ipynb is missing"
        )
    if path.suffix == ".md":
        prose, outputs = [path.read_text()], []
    else:
        cells = json.loads(path.read_text())["cells"]
        prose = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
        outputs = [o for c in cells if c["cell_type"] == "code" for o in c.get("outputs", [])]
    # Math in prose: $...$, $$...$$, {math}, \begin{...}; code blocks and code spans do not count.
    text = "\n".join(prose)
    text = re.sub(r"^(```|~~~).*?^\1", "", text, flags=re.M | re.S)
    text = re.sub(r"`[^`\n]*`", "", text)
    has_math = bool(re.search(r"\$[^$\n]+\$|\$\$|\{math\}|\\begin\{", text))
    has_math |= any("text/latex" in o.get("data", {}) for o in outputs)
    charts = sum(
        "vegaEmbed(" in "".join(o.get("data", {}).get("text/html", ""))
        or any(k.startswith("application/vnd.vegalite") for k in o.get("data", {}))
        for o in outputs
    )
    return has_math, charts


def screenshot_name(docname: str) -> str | None:
    return next((n for p, n in SCREENSHOT_PAGES.items() if docname.startswith(p)), None)


# --- the local server -------------------------------------------------------------------------


class _Server(http.server.ThreadingHTTPServer):
    """Serves the book; counts the bytes of every response body it sends."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.lock = threading.Lock()
        self.sent: list[tuple[str, int]] = []
        self.gzipped: dict[tuple[str, float], bytes] = {}

    def take_sent(self) -> list[tuple[str, int]]:
        with self.lock:
            sent, self.sent = self.sent, []
        return sent

    def handle_error(self, request, client_address) -> None:
        # A page left before its last file arrived closes the connection under the write: no fault.
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class _Handler(http.server.SimpleHTTPRequestHandler):
    server: _Server

    def do_GET(self) -> None:
        # Compress text as GitHub Pages, Netlify or any static host does, so the weight measured
        # is what a reader's browser really transfers.
        path = Path(self.translate_path(self.path))
        if (
            path.is_file()
            and path.suffix in COMPRESSIBLE
            and "gzip" in self.headers.get("Accept-Encoding", "")
        ):
            key = (str(path), path.stat().st_mtime)
            body = self.server.gzipped.get(key)
            if body is None:
                body = self.server.gzipped[key] = gzip.compress(path.read_bytes(), 6)
            self.send_response(200)
            self.send_header("Content-Type", self.guess_type(str(path)))
            self.send_header("Content-Encoding", "gzip")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            self._count(len(body))
            return
        super().do_GET()

    def copyfile(self, source, outputfile) -> None:
        n = 0
        while chunk := source.read(64 * 1024):
            outputfile.write(chunk)
            n += len(chunk)
        self._count(n)

    def _count(self, n: int) -> None:
        with self.server.lock:
            self.server.sent.append((self.path, n))

    def end_headers(self) -> None:
        # Let Chromium reuse the theme's, MathJax's and vega's files from one page to the next
        # at desktop width (much faster on two cores); the phone pass turns its cache off.
        self.send_header("Cache-Control", "max-age=600")
        super().end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        pass


@pytest.fixture(scope="session")
def book_server() -> Iterator[tuple[str, _Server]]:
    """Serve book/_build/html on 127.0.0.1 (a free port) for the whole session."""
    if not (HTML / "index.html").exists():
        pytest.fail(
            f"the book is not built: {HTML.relative_to(ROOT)}/index.html is missing. Build it first "
            "(make html, or make book)"
        )
    handler = functools.partial(_Handler, directory=str(HTML))
    server = _Server((LOCAL_HOST, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://{LOCAL_HOST}:{server.server_address[1]}", server
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="session")
def book_url(book_server) -> str:
    return book_server[0]


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict) -> dict:
    """Launch Debian's Chromium (Playwright cannot download its own browser here), offline-minded."""
    if not CHROMIUM.exists():
        reason = f"{CHROMIUM} is missing (apt-get install chromium)"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI is set, so the browser test may not be skipped")
        pytest.skip(reason)
    args = [
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        # Nothing may leave the machine: every other host fails to resolve at once. The tests
        # still see (and fail on) the attempt. Blocking with page.route instead would disable
        # the HTTP cache and make every page several times slower.
        f"--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE {LOCAL_HOST}",
    ]
    return {**browser_type_launch_args, "executable_path": str(CHROMIUM), "args": args}


@pytest.fixture(scope="session")
def desktop_tab(browser, book_url: str):
    """One tab at 1366 px that visits every page in turn, its cache on."""
    context = browser.new_context(viewport=DESKTOP)
    context.set_default_timeout(15_000)
    page = context.new_page()
    yield page
    context.close()


@pytest.fixture(scope="session")
def phone_tab(browser, book_url: str):
    """One tab at 390 px with its cache off: every load transfers the whole page."""
    context = browser.new_context(viewport=PHONE)
    context.set_default_timeout(15_000)
    page = context.new_page()
    cdp = context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send("Network.setCacheDisabled", {"cacheDisabled": True})
    yield page
    context.close()


class PageLog:
    """What a tab does while a page loads: its requests, failures and console errors."""

    def __init__(self, page) -> None:
        self.page = page
        self.outside: list[str] = []  # requests to any host but 127.0.0.1
        self.failed: list[str] = []  # local requests that failed or returned >= 400
        self.errors: list[str] = []  # console errors and uncaught exceptions
        self.pending: set = set()  # requests in flight
        self._handlers = {
            "request": self._on_request,
            "requestfinished": self._on_done,
            "requestfailed": self._on_failed,
            "response": self._on_response,
            "console": self._on_console,
            "pageerror": self._on_pageerror,
        }
        for event, handler in self._handlers.items():
            page.on(event, handler)

    def detach(self) -> None:
        for event, handler in self._handlers.items():
            self.page.remove_listener(event, handler)

    @staticmethod
    def is_local(url: str) -> bool:
        parts = urlsplit(url)
        return parts.scheme in ("data", "blob", "about") or parts.hostname == LOCAL_HOST

    def _on_request(self, request) -> None:
        self.pending.add(request)
        if not self.is_local(request.url):
            self.outside.append(request.url)

    def _on_done(self, request) -> None:
        self.pending.discard(request)

    def _on_failed(self, request) -> None:
        self.pending.discard(request)
        if self.is_local(request.url):
            self.failed.append(f"{request.failure}: {request.url}")

    def _on_response(self, response) -> None:
        if response.status >= 400:
            self.failed.append(f"HTTP {response.status}: {response.url}")

    def _on_console(self, message) -> None:
        if message.type == "error":
            self.errors.append(message.text)

    def _on_pageerror(self, error) -> None:
        self.errors.append(str(error))

    def report(self) -> str:
        return (
            f"requests outside {LOCAL_HOST}: {list(dict.fromkeys(self.outside))}; "
            f"failed local requests: {self.failed}; console errors: {self.errors}"
        )

    def wait_until_quiet(self, quiet_s: float = 0.15, timeout_s: float = 10) -> None:
        """Wait until no request has been in flight for quiet_s (late fonts, lazy MathJax parts)."""
        deadline = time.monotonic() + timeout_s
        quiet_since = time.monotonic()
        while time.monotonic() - quiet_since < quiet_s:
            self.page.wait_for_timeout(25)  # lets Playwright deliver the request events
            if self.pending:
                quiet_since = time.monotonic()
            if time.monotonic() > deadline:
                in_flight = [r.url for r in self.pending]
                pytest.fail(f"requests still in flight after {timeout_s} s: {in_flight}")

    def assert_clean(self, where: str) -> None:
        outside = list(dict.fromkeys(self.outside))
        assert not outside, f"{where}: requests left {LOCAL_HOST}: {outside}"
        assert not self.failed, f"{where}: local requests failed: {self.failed}"
        assert not self.errors, f"{where}: console errors: {self.errors}"


@pytest.fixture
def desktop(desktop_tab) -> Iterator[PageLog]:
    log = PageLog(desktop_tab)
    yield log
    log.detach()
    desktop_tab.goto("about:blank")


@pytest.fixture
def phone(phone_tab) -> Iterator[PageLog]:
    log = PageLog(phone_tab)
    yield log
    log.detach()
    phone_tab.goto("about:blank")


def open_page(log: PageLog, url: str, docname: str) -> None:
    """Load a page and wait until its equations and charts have rendered and requests stopped."""
    page = log.page
    has_math, charts = source_features(docname)
    path = HTML / f"{docname}.html"
    assert path.exists(), f"{path.relative_to(ROOT)} is missing: rebuild the book"

    def wait_for(what: str, expression: str, arg: object = None) -> None:
        try:
            page.wait_for_function(expression, arg=arg, timeout=RENDER_TIMEOUT_MS)
        except PlaywrightTimeoutError:
            pytest.fail(
                f"{docname}: {what} did not render within {RENDER_TIMEOUT_MS} ms; {log.report()}"
            )

    page.goto(f"{url}/{docname}.html", wait_until="load")
    if has_math:
        # MathJax typesets every .math element (and TeX in outputs) into an mjx-container.
        wait_for(
            "the equations (mjx-container)",
            "() => { const n = document.querySelectorAll('mjx-container').length;"
            " return n > 0 && n >= document.querySelectorAll('.math').length; }",
        )
    if charts:
        wait_for(
            f"{charts} altair chart(s) (.vega-embed svg/canvas)",
            "n => document.querySelectorAll("
            "'.vega-embed svg.marks, .vega-embed canvas.marks').length >= n",
            charts,
        )
    log.wait_until_quiet()


def screenshot(page, docname: str, width: int) -> None:
    name = screenshot_name(docname)
    if name:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=SCREENSHOTS / f"{name}-{width}.png", full_page=True)


VISIBLE_SEARCH_BOXES = """() => [...document.querySelectorAll(
    '.search-button__button, form.bd-search, input[type=search]')]
  .filter(e => { const r = e.getBoundingClientRect(), s = getComputedStyle(e);
                 return r.width > 0 && r.height > 0 && s.visibility !== 'hidden'; })
  .map(e => e.outerHTML.slice(0, 120))"""

# Elements of a container (the article; the body on a phone) that reach past its right edge or the
# window's, skipping what is inside a box that scrolls or clips (a wide equation or code block that
# scrolls inside itself is fine).
OVERFLOWING = """selector => {
  const column = document.querySelector(selector);
  const right = Math.min(column.getBoundingClientRect().right, window.innerWidth) + 1, bad = [];
  const walk = el => { for (const child of el.children) {
    const r = child.getBoundingClientRect();
    if (r.width > 0 && r.right > right)
      bad.push(`${child.tagName.toLowerCase()}.${[...child.classList].join('.')} `
               + `(${Math.round(r.right - right)} px too wide): `
               + (child.textContent || '').trim().slice(0, 60));
    if (!['auto', 'scroll', 'hidden', 'clip'].includes(getComputedStyle(child).overflowX))
      walk(child);
  } };
  walk(column);
  return bad;
}"""

# Display equations that do not fit their column and scroll inside their own box: a long equation is
# broken into aligned lines instead (the reader should never scroll an equation sideways).
WIDE_EQUATIONS = """() => [...document.querySelectorAll('mjx-container[display="true"]')]
  .filter(c => c.scrollWidth > c.clientWidth + 1)
  .map(c => `${c.scrollWidth - c.clientWidth} px too wide: `
            + (c.querySelector('mjx-assistive-mml') || c).textContent.slice(0, 60))"""

# Code blocks that scroll sideways (a desktop shows every line of code within the column).
WIDE_CODE = """() => [...document.querySelectorAll('main article pre')]
  .filter(p => p.scrollWidth > p.clientWidth + 1)
  .map(p => `${p.scrollWidth - p.clientWidth} px too wide: ` + p.textContent.trim().slice(0, 60))"""

# How many characters of its own font one line of the first code block holds.
CODE_LINE_CHARS = """() => {
  const pre = document.querySelector('main article div.highlight pre');
  if (!pre) return null;
  const probe = document.createElement('span');
  probe.textContent = 'x'.repeat(100);
  probe.style.cssText = 'white-space: pre; display: inline-block';
  pre.appendChild(probe);
  const char = probe.getBoundingClientRect().width / 100;
  probe.remove();
  const s = getComputedStyle(pre);
  return (pre.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight)) / char;
}"""
# The longest line a code cell should have: ruff's line-length.
LINE_LENGTH = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["line-length"]

IMAGE_PROBLEMS = """() => [...document.querySelectorAll('main article img')]
  .map(img => ({src: img.getAttribute('src'), alt: (img.getAttribute('alt') || '').trim()}))
  .filter(i => !i.alt || /\\.(png|jpe?g|svg|gif)$/i.test(i.alt) || /^\\S*\\/\\S*$/.test(i.alt))
  .map(i => i.src)"""

UNCAPTIONED_FIGURES = """() => [...document.querySelectorAll('main article figure')]
  .filter(f => !(f.querySelector('figcaption') || {textContent: ''}).textContent.trim())
  .map(f => f.outerHTML.slice(0, 100))"""


# The theme fades colours over 0.15 to 0.3 s when the mode changes: read during the fade, contrast
# is neither mode's (axe once found 2 to 13 mid-fade nodes a run). So the switch turns transitions
# and animations off first, then waits until no animation runs: every colour read is the final one.
NO_TRANSITIONS = (
    "*, *::before, *::after { transition: none !important; animation: none !important; }"
)
SWITCH_THEME = """([mode, css]) => {
  if (!document.getElementById('no-transitions')) {
    const style = document.createElement('style');
    style.id = 'no-transitions';
    style.textContent = css;
    document.head.append(style);
  }
  document.documentElement.dataset.theme = mode;
}"""
# (An endless animation a script started would never finish: it is not waited for.)
SETTLED = """mode => document.documentElement.dataset.theme === mode
  && document.getAnimations().every(a => a.playState !== 'running'
                                         || a.effect.getComputedTiming().endTime === Infinity)"""


def set_theme(page, mode: str) -> None:
    """Switch a loaded page to light or dark mode as the theme's switch does; let it settle."""
    # The theme's script in <head> sets data-mode (and data-theme) from the reader's last choice:
    # switching before it ran would be undone.
    page.wait_for_function("() => !!document.documentElement.dataset.mode")
    page.evaluate(SWITCH_THEME, [mode, NO_TRANSITIONS])
    page.wait_for_function(SETTLED, arg=mode, polling="raf")


# Each violation of axe-core's rules as "impact rule-id: target (how to fix, shortened)".
AXE_RUN = """async rules => {
  const options = {resultTypes: ['violations']};
  if (rules) options.runOnly = {type: 'rule', values: rules};
  const {violations} = await axe.run(document, options);
  return violations.flatMap(v => v.nodes.map(n =>
    `${v.impact} ${v.id}: ${n.target.join(' ')} (${(n.failureSummary || '').split('\\n')[1] || ''})`
      .slice(0, 300)));
}"""


def axe_audit(page, docname: str) -> None:
    """Fail on any axe-core violation on the page as loaded, in light mode and in dark mode."""
    if not AXE.exists():
        pytest.fail(
            f"{AXE.relative_to(ROOT)} is missing: run `npm ci` in book/translator (make install does)"
        )
    if not page.evaluate("typeof axe !== 'undefined'"):
        page.add_script_tag(path=str(AXE))
    found = []
    for mode, rules in (("light", None), ("dark", AXE_COLOUR_RULES)):
        set_theme(page, mode)
        found += [f"{mode}: {v}" for v in page.evaluate(AXE_RUN, rules)
                  if v.split()[1].rstrip(":") not in AXE_ACCEPTED]  # fmt: skip
    set_theme(page, "light")
    width = page.viewport_size["width"]
    assert not found, (
        f"{docname} at {width} px: {len(found)} accessibility violation(s) (axe-core): {found[:8]}"
    )


def test_the_smoke_pages_exist() -> None:
    missing = [prefix for prefix in SMOKE if not any(d.startswith(prefix) for d in PAGES)]
    assert not missing, f"no page of _toc.yml starts with {missing}: name the new docnames in SMOKE"


@pytest.mark.parametrize("docname", tiered(PAGES))
def test_desktop(desktop: PageLog, book_url: str, docname: str) -> None:
    """At 1366 px: renders offline without errors, fits its column, one search box, alt texts."""
    page = desktop.page
    open_page(desktop, book_url, docname)
    if source_features(docname)[0]:
        # A TeX error renders as mjx-merror, an unknown macro as red text: name the formula.
        tex_errors = page.evaluate(
            "() => [...document.querySelectorAll('mjx-container')]"
            ".filter(c => c.querySelector('mjx-merror, mjx-mtext[style*=\"color: red\"]'))"
            ".map(c => (c.querySelector('mjx-assistive-mml') || c).textContent.slice(0, 80))"
        )
        assert not tex_errors, f"{docname}: MathJax could not typeset: {tex_errors}"
    if source_features(docname)[1]:
        # altair's template takes its requirejs branch (loading from a CDN) when an AMD loader
        # is on the page; the preloaded vegaEmbed is only used when there is none.
        assert not page.evaluate("typeof define === 'function' && !!define.amd"), (
            f"{docname}: an AMD loader (requirejs) is on the page; altair would load from a CDN"
        )
    screenshot(page, docname, DESKTOP["width"])
    desktop.assert_clean(docname)

    overflowing = page.evaluate(OVERFLOWING, "main article, .bd-article")
    assert not overflowing, f"{docname}: wider than the content column at 1366 px: {overflowing}"
    wide = page.evaluate(WIDE_EQUATIONS)
    assert not wide, f"{docname}: equations wider than the column at 1366 px: {wide}"
    wide_code = page.evaluate(WIDE_CODE)
    assert not wide_code, f"{docname}: code scrolls sideways at 1366 px: {wide_code[:3]}"
    chars = page.evaluate(CODE_LINE_CHARS)
    assert chars is None or chars >= LINE_LENGTH, (
        f"{docname}: a line of code holds {chars:.0f} characters at 1366 px, not {LINE_LENGTH}"
    )
    boxes = page.evaluate(VISIBLE_SEARCH_BOXES)
    assert len(boxes) == 1, f"{docname}: {len(boxes)} visible search boxes at 1366 px: {boxes}"
    bad_alt = page.evaluate(IMAGE_PROBLEMS)
    assert not bad_alt, f"{docname}: images without real alt text (empty or a file name): {bad_alt}"
    uncaptioned = page.evaluate(UNCAPTIONED_FIGURES)
    assert not uncaptioned, f"{docname}: figures without a caption: {uncaptioned}"
    axe_audit(page, docname)


@pytest.mark.parametrize("docname", tiered(PAGES))
def test_phone(phone: PageLog, book_server, docname: str) -> None:
    """At 390 px, uncached: within the weight budget, no sideways scroll, a working menu."""
    url, server = book_server
    page = phone.page
    server.take_sent()
    open_page(phone, url, docname)
    sent = server.take_sent()
    weight = sum(n for _, n in sent)
    budget = LANDING_BUDGET if docname == LANDING else PAGE_BUDGET
    heaviest = sorted(sent, key=lambda s: -s[1])[:5]
    print(f"page weight {docname}: {weight / 1e6:.2f} MB in {len(sent)} requests")
    assert weight <= budget, (
        f"{docname}: {weight / 1e6:.2f} MB transferred, over its {budget / 1e6:.1f} MB budget; "
        f"heaviest: {heaviest}"
    )
    screenshot(page, docname, PHONE["width"])
    phone.assert_clean(docname)

    scroll_width, client_width = page.evaluate(
        "[document.scrollingElement.scrollWidth, document.scrollingElement.clientWidth]"
    )
    if scroll_width > client_width:
        culprits = page.evaluate(OVERFLOWING, "body")
        pytest.fail(
            f"{docname}: the page scrolls sideways at 390 px ({scroll_width} px wide); "
            f"widest elements: {culprits}"
        )
    wide = page.evaluate(WIDE_EQUATIONS)
    assert not wide, f"{docname}: equations wider than the column at 390 px: {wide}"
    boxes = page.evaluate(VISIBLE_SEARCH_BOXES)
    assert len(boxes) == 1, f"{docname}: {len(boxes)} visible search boxes at 390 px: {boxes}"
    axe_audit(page, docname)  # the phone shows its own buttons (menu, search icon), the drawer shut

    # The menu button opens the navigation drawer with the chapter list in view, and the theme moves
    # the focus into it (100 ms later), where Escape closes it.
    drawer = page.locator(".bd-sidebar-primary")
    assert drawer.bounding_box()["x"] + drawer.bounding_box()["width"] <= 0, (
        f"{docname}: the navigation drawer is open before the menu is pressed"
    )
    page.locator(".primary-toggle:visible").first.click()
    page.wait_for_function(
        "() => { const drawer = document.querySelector('.bd-sidebar-primary');"
        " const r = drawer.getBoundingClientRect();"
        " return r.left >= 0 && r.width > 200 && drawer.contains(document.activeElement); }",
        timeout=3_000,
    )
    assert page.locator(".bd-sidebar-primary nav a:visible").count() >= 3, (
        f"{docname}: the drawer opened but shows no chapter links"
    )
    # The page-contents button (pages with sections) slides its drawer in from the right.
    page.keyboard.press("Escape")
    contents = page.locator(".secondary-toggle:visible")
    if contents.count():
        contents.first.click()
        page.wait_for_function(
            "w => { const r = document.querySelector('.bd-sidebar-secondary')"
            ".getBoundingClientRect(); return r.width > 200 && r.right <= w + 1 && r.left < w; }",
            arg=PHONE["width"],
            timeout=3_000,
        )


def test_notebook_figures_have_captions() -> None:
    """Every figure a notebook draws sits in a captioned figure (read from the built HTML)."""
    from lxml import html

    bare_images = (
        "//article//div[contains(concat(' ', @class, ' '), ' cell_output ')]"
        "//img[not(ancestor::figure[.//figcaption])]"
    )
    missing = {}
    for docname in PAGES:
        if (BOOK / f"{docname}.ipynb").exists():
            tree = html.fromstring((HTML / f"{docname}.html").read_bytes())
            if bare := tree.xpath(bare_images):
                missing[docname] = len(bare)
    assert not missing, f"figures without a caption, per chapter: {missing}"


def test_site_features(desktop: PageLog, book_url: str) -> None:
    """Favicon, dark mode and search work."""
    page = desktop.page
    open_page(desktop, book_url, LANDING)
    icon = page.evaluate("document.querySelector('link[rel~=icon]')?.href")
    assert icon, "the landing page declares no favicon"
    assert page.request.get(icon).ok, f"the favicon {icon} does not load"

    set_theme(page, "dark")
    background = page.evaluate("getComputedStyle(document.body).backgroundColor")
    channels = [int(c) for c in re.findall(r"\d+", background)[:3]]
    assert sum(channels) < 3 * 80, f"dark mode left the page background at {background}"
    set_theme(page, "light")

    # "softmax" sits next to TeX on many pages: the snippets must read as text, not TeX source.
    page.goto(f"{book_url}/search.html?q=softmax", wait_until="load")
    page.wait_for_function(
        "() => document.querySelectorAll('#search-results li p.context').length > 3", timeout=10_000
    )
    snippets = page.evaluate(
        "() => [...document.querySelectorAll('#search-results p.context')].map(p => p.textContent)"
    )
    tex = [s for s in snippets if re.search(r"\\[a-zA-Z]+|\\[()\[\]]|\$\$", s)]
    assert not tex, f"search snippets show TeX source: {tex[:2]}"
    desktop.assert_clean("search.html")


SEARCH_RESULTS = """() => [...document.querySelectorAll('#search-results li')].map(li => ({
  title: li.querySelector('a').textContent, snippet: (li.querySelector('.context') || {}).textContent || ''}))"""

# The magnifier's right edge and where the query's text starts, in each visible search box.
SEARCH_ICON_GAP = """() => [...document.querySelectorAll('form.bd-search')]
  .filter(f => f.getBoundingClientRect().width > 0)
  .map(f => { const icon = f.querySelector('.fa-magnifying-glass, svg'), input = f.querySelector('input');
              const r = input.getBoundingClientRect(), s = getComputedStyle(input);
              return (r.left + parseFloat(s.paddingLeft)) - icon.getBoundingClientRect().right; })"""


def test_search_reads_well(desktop: PageLog, phone: PageLog, book_url: str) -> None:
    """A page named after the query ranks first; snippets are body text; the icon clears the query."""
    page = desktop.page
    page.goto(f"{book_url}/search.html?q=positional", wait_until="load")
    page.wait_for_function(
        "() => document.querySelectorAll('#search-results li p.context').length > 3", timeout=10_000
    )
    results = page.evaluate(SEARCH_RESULTS)
    titled = [r["title"] for r in results if "positional" in r["title"].lower()]
    assert titled and results[0]["title"] == titled[0], (
        f"'positional': the page titled {titled[:1]} is not first: {[r['title'] for r in results[:3]]}"
    )
    chrome = [
        r["snippet"][:80] for r in results if re.search(r"\.pdf\b|\.ipynb\b|Contents", r["snippet"])
    ]
    assert not chrome, f"search snippets show the page's buttons and contents list: {chrome[:2]}"
    gaps = page.evaluate(SEARCH_ICON_GAP)
    assert gaps and min(gaps) >= 0, f"the magnifier covers the query's first letter ({gaps} px)"
    desktop.assert_clean("search.html")

    phone.page.goto(f"{book_url}/search.html?q=positional", wait_until="load")
    hints = phone.page.locator(".search-button__kbd-shortcut:visible").count()
    assert hints == 0, f"a phone shows {hints} 'Ctrl+K' keyboard hint(s)"


# --- the graders' reports, long names, the paper-to-code page, the phone menu -------------------

REPORT_TABLE = re.compile(r"<table\b[^>]*>\s*<caption>check\.")


def pages_with(marker: str) -> list[str]:
    """The pages whose built HTML contains `marker`, in reading order."""
    return [d for d in PAGES if marker in (HTML / f"{d}.html").read_text(encoding="utf-8")]


def test_every_report_table_is_labelled() -> None:
    """Every report of a `check.*` grader carries the classes its dark and phone styles need."""
    bare = {}
    for docname in PAGES:
        text = (HTML / f"{docname}.html").read_text(encoding="utf-8")
        tables = REPORT_TABLE.findall(text)
        if unlabelled := [t for t in tables if 'class="check-report"' not in t]:
            bare[docname] = len(unlabelled)
    assert pages_with('class="check-report"'), "no page shows a grader's report"
    assert not bare, f"report tables without class check-report, per page: {bare}"


# WCAG 2 contrast of every piece of text in the report tables against what is painted behind it
# (the element's and its ancestors' backgrounds, composited).
REPORT_CONTRAST = """() => {
  const rgba = c => { const v = (c.match(/[\\d.]+/g) || [0, 0, 0, 0]).map(Number);
                      return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1]; };
  const over = ([r, g, b, a], under) => [r * a + under[0] * (1 - a), g * a + under[1] * (1 - a),
                                         b * a + under[2] * (1 - a)];
  const behind = el => {
    const layers = [];
    for (let n = el; n; n = n.parentElement) {
      const c = rgba(getComputedStyle(n).backgroundColor);
      if (c[3] > 0) { layers.push(c); if (c[3] >= 1) break; }
    }
    return layers.reverse().reduce((under, c) => over(c, under), [255, 255, 255]);
  };
  const lum = rgb => rgb.map(v => { v /= 255; return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4; })
                        .reduce((s, v, i) => s + v * [0.2126, 0.7152, 0.0722][i], 0);
  const out = [];
  for (const el of document.querySelectorAll('table.check-report *')) {
    const own = [...el.childNodes].filter(n => n.nodeType === 3).map(n => n.textContent).join('').trim();
    if (!own || el.getBoundingClientRect().width === 0) continue;
    const bg = behind(el), fg = over(rgba(getComputedStyle(el).color), bg);
    const [hi, lo] = [lum(fg), lum(bg)].sort((a, b) => b - a);
    out.push({text: own.slice(0, 40), ratio: (hi + 0.05) / (lo + 0.05)});
  }
  return out;
}"""

# Lines of text a result cell ("✓ pass") takes, and the painted look of a pass and a FAIL row.
REPORT_RESULTS = """() => {
  const lines = el => { const range = document.createRange(); range.selectNodeContents(el);
                        return new Set([...range.getClientRects()].map(r => Math.round(r.top))).size; };
  const look = row => { const cell = row.querySelector('td.check-result'), s = getComputedStyle(row);
                        return [s.backgroundColor, s.boxShadow, getComputedStyle(cell).color].join(' | '); };
  const rows = [...document.querySelectorAll('table.check-report tr')].filter(r => r.querySelector('td'));
  const pass = rows.find(r => /pass/.test(r.textContent)), fail = rows.find(r => /FAIL/.test(r.textContent));
  return {wrapped: rows.filter(r => lines(r.querySelector('td:nth-child(2)')) > 1).map(r => r.textContent.slice(0, 50)),
          pass: pass && look(pass), fail: fail && look(fail)};
}"""


def test_report_tables_on_a_desktop(desktop: PageLog, book_url: str) -> None:
    """Reports read at WCAG AA (4.5:1) in light and dark mode; "✓ pass" on one line; FAIL stands out."""
    failing = pages_with('class="check-fail"')
    assert failing, "no page shows a failing report (the grading chapters do)"
    page = desktop.page
    open_page(desktop, book_url, failing[0])
    for mode in ("light", "dark"):
        set_theme(page, mode)
        texts = page.evaluate(REPORT_CONTRAST)
        assert texts, f"{failing[0]}: no report text found"
        low = [f"{t['text']!r} {t['ratio']:.1f}:1" for t in texts if t["ratio"] < 4.5]
        assert not low, f"{failing[0]}, {mode} mode: report text below 4.5:1 contrast: {low[:6]}"
        results = page.evaluate(REPORT_RESULTS)
        assert not results["wrapped"], f"{failing[0]}: result cells wrap: {results['wrapped'][:3]}"
        assert results["pass"] != results["fail"], (
            f"{failing[0]}, {mode} mode: a FAIL row looks like a pass row: {results['fail']}"
        )
    set_theme(page, "light")


# Every text cell of the report tables: its width and how much text it holds.
REPORT_CELLS = """() => [...document.querySelectorAll('table.check-report td')]
  .map(td => ({text: td.textContent.trim(), width: td.getBoundingClientRect().width}))
  .filter(c => c.text.length >= 20)"""


def test_report_tables_on_a_phone(phone: PageLog, book_url: str) -> None:
    """At 390 px no report cell is a narrow column: each cell of text takes most of the width."""
    docname = pages_with('class="check-fail"')[0]
    open_page(phone, book_url, docname)
    cells = phone.page.evaluate(REPORT_CELLS)
    assert cells, f"{docname}: no report cells found"
    narrowest = min(cells, key=lambda c: c["width"])
    # Half the phone's width: about 25 characters a line (the old table gave "what was seen" ~6).
    assert narrowest["width"] >= PHONE["width"] / 2, (
        f"{docname}: a report cell is {narrowest['width']:.0f} px wide at 390 px: "
        f"{narrowest['text'][:60]!r}"
    )


# Where inline code wraps: the character before each line break inside a <code> (not in <pre>).
CODE_BREAKS = """() => {
  const out = [];
  for (const code of document.querySelectorAll('main article code')) {
    if (code.closest('pre') || !code.getClientRects().length) continue;
    const walker = document.createTreeWalker(code, NodeFilter.SHOW_TEXT), chars = [];
    for (let node; (node = walker.nextNode()); )
      for (let i = 0; i < node.length; i++) chars.push([node, i]);
    let last = null;
    chars.forEach(([node, i], k) => {
      const range = document.createRange(); range.setStart(node, i); range.setEnd(node, i + 1);
      const r = range.getBoundingClientRect();
      if (!r.width) return;
      if (last && r.top > last.top + r.height / 2)
        out.push({before: chars[k - 1][0].data[chars[k - 1][1]], code: code.textContent.slice(0, 60)});
      last = r;
    });
  }
  return out;
}"""


def bad_code_breaks(page) -> list[str]:
    return [f"{b['code']!r} after {b['before']!r}" for b in page.evaluate(CODE_BREAKS)
            if b["before"] not in "._: "]  # fmt: skip


def test_paper_to_code_page_on_a_phone(desktop: PageLog, phone: PageLog, book_url: str) -> None:
    """The paper-to-code page is one block per row on a phone, and names break only at . _ ::"""
    docname = "concordance"
    assert docname in PAGES, "the paper-to-code page left _toc.yml: name its new docname here"
    heights = {}
    for log in (desktop, phone):
        open_page(log, book_url, docname)
        heights[log] = log.page.evaluate("document.scrollingElement.scrollHeight")
        bad = bad_code_breaks(log.page)
        width = log.page.viewport_size["width"]
        assert not bad, f"{docname} at {width} px: code names break inside a word: {bad[:5]}"
    ratio = heights[phone] / heights[desktop]
    # Stacked rows make a phone page a little taller than the desktop's; a squeezed three-column
    # table made it more than three times as tall.
    assert ratio <= 2.0, (
        f"{docname}: {heights[phone]} px tall at 390 px, {ratio:.1f} times its "
        f"{heights[desktop]} px at 1366 px"
    )
    stacked = phone.page.evaluate(
        "() => [...document.querySelectorAll('main article table tbody tr')]"
        ".every(tr => getComputedStyle(tr).display === 'block')"
    )
    assert stacked, f"{docname}: the tables keep their columns at 390 px"


def test_landing_page_names_break_only_between_parts(phone: PageLog, book_url: str) -> None:
    open_page(phone, book_url, LANDING)
    bad = bad_code_breaks(phone.page)
    assert not bad, f"{LANDING} at 390 px: code names break inside a word: {bad[:5]}"


def test_phone_menu_opens_at_the_current_chapter(phone: PageLog, book_url: str) -> None:
    """The drawer opens scrolled to the current chapter, even the last one of a long list."""
    docname = PAGES[-1]
    page = phone.page
    open_page(phone, book_url, docname)
    page.locator(".primary-toggle:visible").first.click()
    try:
        page.wait_for_function(
            """() => {
              const drawer = document.querySelector('.bd-sidebar-primary').getBoundingClientRect();
              const links = document.querySelectorAll('.bd-sidebar-primary nav a.current');
              const r = links.length && links[links.length - 1].getBoundingClientRect();
              return drawer.left >= 0 && r && r.top >= 0 && r.bottom <= window.innerHeight;
            }""",
            timeout=3_000,
        )
    except PlaywrightTimeoutError:
        top = page.evaluate(
            "() => { const l = document.querySelectorAll('.bd-sidebar-primary nav a.current');"
            " return l.length ? l[l.length - 1].getBoundingClientRect().top : null; }"
        )
        pytest.fail(
            f"{docname}: the menu opened but its current chapter is at y={top} px, outside the "
            f"{PHONE['height']} px screen"
        )


# Each figure's CSS filter and the background of the output box around it (read in dark mode).
DARK_FIGURES = """() => {
  const boxes = [...document.querySelectorAll('main article .cell_output img, main article figure img,'
                                            + ' main article .vega-embed svg.marks')];
  return boxes.filter(el => el.getBoundingClientRect().width > 0).map(el => {
    const frame = el.closest('.output') || el.parentElement;
    return {what: el.tagName + ' ' + (el.getAttribute('src') || '').slice(-30),
            filter: getComputedStyle(el).filter, frame: getComputedStyle(frame).backgroundColor};
  });
}"""


def test_dark_mode_figures(desktop: PageLog, book_url: str) -> None:
    """In dark mode figures and charts are drawn dark (inverted), not as light grey panels."""
    charted = [d for d in PAGES if source_features(d)[1]]
    assert charted, "no page has an altair chart"
    page = desktop.page
    for docname in (LANDING, charted[-1]):
        open_page(desktop, book_url, docname)
        set_theme(page, "dark")
        figures = page.evaluate(DARK_FIGURES)
        assert figures, f"{docname}: no figure found"
        light = [f["what"] for f in figures if "invert" not in f["filter"]]
        assert not light, f"{docname}: figures left light in dark mode: {light[:3]}"
        framed = [f["what"] for f in figures
                  if re.findall(r"[\\d.]+", f["frame"])[3:4] != ["0"] and f["frame"] != "rgba(0, 0, 0, 0)"]  # fmt: skip
        assert not framed, f"{docname}: figures sit in a light frame in dark mode: {framed[:3]}"
        set_theme(page, "light")
