// Rubric page: keys [ and ] open the previous and next query (never while typing), and a flag or
// unflag (answered with JSON, swapped nowhere) redraws that item's flag area from the page's own URL.
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

  // Only the item's own flag area is swapped (selected out of the page), so unsaved text in the
  // other items' fields survives; focus lands on the new unflag button or flag summary.
  document.body.addEventListener("htmx:afterRequest", (event) => {
    const form = event.detail.elt.closest && event.detail.elt.closest("form[data-redraw]");
    const area = form && form.closest("[data-flag-area]");
    if (!area || !event.detail.successful) return;
    const answer = JSON.parse(event.detail.xhr.responseText);
    const selector = `[data-flag-area="${CSS.escape(area.dataset.flagArea)}"]`;
    const item = area.closest("li.item");
    if (item) item.classList.toggle("flagged", Boolean(answer.flagged));
    htmx.ajax("GET", form.dataset.redraw, { target: selector, select: selector, swap: "outerHTML" }).then(() => {
      const fresh = document.querySelector(selector);
      const focus = fresh && fresh.querySelector("[data-testid=unflag], summary");
      if (focus) focus.focus();
    });
  });
})();
