// Rubric page: keys [ and ] open the previous and next query (never while typing), and a flag or
// unflag (answered with JSON, swapped nowhere) redraws the items from the page's own URL.
(function () {
  function typing(target) {
    return target instanceof HTMLElement &&
      (target.isContentEditable || target.closest("input, textarea, select") !== null);
  }

  document.addEventListener("keydown", (event) => {
    if (event.ctrlKey || event.metaKey || event.altKey || typing(event.target)) return;
    const rel = event.key === "[" ? "prev" : event.key === "]" ? "next" : null;
    const link = rel && document.querySelector(`nav.query-nav a[rel=${rel}]`);
    if (link) {
      event.preventDefault();
      window.location.assign(link.href);
    }
  });

  document.body.addEventListener("htmx:afterRequest", (event) => {
    const form = event.detail.elt.closest && event.detail.elt.closest("form[data-redraw]");
    if (form && event.detail.successful) {
      htmx.ajax("GET", form.dataset.redraw, { target: "#items", swap: "outerHTML" });
    }
  });
})();
