// The altair charts' actions menu (vega-embed's "..." button: save as SVG or PNG, view the
// source) is a <summary> holding only an icon, so a screen reader announced it without a name.
// Name each one as vega-embed draws it. Loaded only on pages with a chart (book/_ext/reader_view.py).
(function () {
  const LABEL = "Chart actions: save the chart or view its source";
  new MutationObserver((records) => {
    for (const record of records) {
      const chart = record.target.closest && record.target.closest(".vega-embed");
      if (!chart) continue;
      chart.querySelectorAll("details > summary:not([aria-label])").forEach((summary) =>
        summary.setAttribute("aria-label", LABEL),
      );
    }
  }).observe(document.documentElement, { childList: true, subtree: true });
})();
