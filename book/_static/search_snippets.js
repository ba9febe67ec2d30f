// Search results show a snippet of each page's text. Sphinx takes it from the page's HTML, where the
// equations are still TeX source (MathJax typesets them only in the browser), so a snippet would read
// "\mathrm{softmax}\!\left(\frac{QK^\top}...". This rewrites the TeX of each equation into plain
// text first: "softmax((QK^T)/√(d_k))V". Loaded on the search page only (book/_ext/reader_view.py).
// searchtools.js comes after this file and defines Search; both act once the page is parsed, this one
// first because it registers first.
document.addEventListener("DOMContentLoaded", () => {
  if (typeof Search === "undefined") return;
  const SYMBOLS = {
    alpha: "α", beta: "β", gamma: "γ", delta: "δ", epsilon: "ε", varepsilon: "ε", lambda: "λ",
    mu: "μ", omega: "ω", pi: "π", sigma: "σ", theta: "θ", tau: "τ", Sigma: "Σ", sum: "Σ", prod: "Π",
    cdot: "·", times: "×", odot: "⊙", top: "T", infty: "∞", in: "∈", le: "≤", leq: "≤", ge: "≥",
    geq: "≥", ne: "≠", neq: "≠", approx: "≈", to: "→", rightarrow: "→", Longrightarrow: "⟹",
    mid: "|", dots: "…", ldots: "…", cdots: "⋯", sqrt: "√", log: "log", exp: "exp", sin: "sin",
    cos: "cos", max: "max", min: "min", mathbb: "", mathrm: "", mathbf: "", text: "",
    operatorname: "", left: "", right: "", big: "", Big: "", bigl: "", bigr: "", Bigl: "",
    Bigr: "", quad: " ", qquad: " ", underbrace: "", begin: "", end: "",
  };
  const readable = (tex) => {
    let s = tex.replace(/^\s*(\\\(|\\\[|\$\$?)|(\\\)|\\\]|\$\$?)\s*$/g, "");
    s = s.replace(/\\begin\{\w+\*?\}|\\end\{\w+\*?\}/g, " ");
    for (let i = 0; i < 3; i++) s = s.replace(/\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}/g, "($1)/($2)");
    s = s.replace(/\\sqrt\{([^{}]*)\}/g, "√($1)");
    s = s.replace(/\\([A-Za-z]+)/g, (m, name) => (name in SYMBOLS ? SYMBOLS[name] : name));
    s = s.replace(/\\[,;:!> ]|&|\\\\/g, " ").replace(/[{}]/g, "");
    return s.replace(/\s+/g, " ").trim();
  };
  // Sphinx reads the snippet from the page's [role="main"], which in this theme holds the page's
  // chrome too (download buttons ".pdf", the "Contents" list): a snippet read "….pdf 05 ·
  // Positional encoding … Contents …". Only the article's body counts, without its title (the
  // result's link shows it), the Colab/Binder line and the code cells.
  const original = Search.htmlToText;
  Search.htmlToText = (htmlString, anchor) => {
    const doc = new DOMParser().parseFromString(htmlString, "text/html");
    const article = doc.querySelector("article.bd-article");
    if (article) {
      doc.querySelectorAll('[role="main"]').forEach((el) => el.removeAttribute("role"));
      article.setAttribute("role", "main");
      article.querySelectorAll("h1").forEach((el) => el.remove());
      article.querySelectorAll('a[href*="colab.research.google.com"]').forEach((el) => el.closest("p")?.remove());
      article.querySelectorAll(".cell_input").forEach((el) => el.remove()); // prose, not imports
    }
    doc.querySelectorAll(".math").forEach((el) => { el.textContent = ` ${readable(el.textContent)} `; });
    return original(doc.documentElement.outerHTML, anchor);
  };

  // Rank a page whose title holds a searched word above pages that only mention it: Sphinx scores
  // every title match alike (a section title counts as much as the page's own) and breaks ties
  // alphabetically, so "positional" put chapter 03 above chapter 05, "Positional encoding".
  const escape = (w) => w.replace(/[.*+?^$()|[\]\\{}]/g, "\\$&");
  const starts = (new URLSearchParams(window.location.search).get("q") || "")
    .toLowerCase().split(/\s+/).filter((w) => w.length > 2)
    .map((w) => new RegExp("(^|[^\\p{L}])" + escape(w), "u")); // a title word that starts with w
  const previous = Scorer.score;
  Scorer.score = (result) => {
    const score = previous ? previous(result) : result[4];
    const title = String(result[1] || "").toLowerCase().split(" > ")[0];
    return score + 10 * starts.filter((re) => re.test(title)).length;
  };
});
