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

  // Sub-nugget rows: "add" appends a row from the editor's template and focuses it; "remove" drops a
  // row and moves focus to the next row's field (else the add button). The rows are form fields, so
  // nothing is saved before the item's Save. Without script the blank last row adds, clearing removes.
  // With script each editor starts closed behind its disclosure button (aria-expanded); the page
  // serves them open, so that without script they are there to use.
  function enhance() {
    document.querySelectorAll("[data-sub-toggle][hidden]").forEach((toggle) => {
      toggle.hidden = false;
      toggle.setAttribute("aria-expanded", "false");
      document.getElementById(toggle.getAttribute("aria-controls")).hidden = true;
    });
    document.querySelectorAll("[data-sub-add][hidden]").forEach((button) => { button.hidden = false; });
  }
  enhance();
  document.body.addEventListener("htmx:afterSettle", enhance);

  document.addEventListener("click", (event) => {
    const target = event.target instanceof Element ? event.target : null;
    const toggle = target && target.closest("[data-sub-toggle]");
    const add = target && target.closest("[data-sub-add]");
    const remove = target && target.closest("[data-sub-remove]");
    if (toggle) {
      const open = toggle.getAttribute("aria-expanded") !== "true";
      toggle.setAttribute("aria-expanded", String(open));
      const editor = document.getElementById(toggle.getAttribute("aria-controls"));
      editor.hidden = !open;  // focus stays on the button; the editor's fields follow it in tab order
    } else if (add) {
      const editor = add.closest("fieldset");
      const rows = editor.querySelector("[data-sub-rows]");
      rows.append(editor.querySelector("template[data-sub-template]").content.cloneNode(true));
      const fields = rows.querySelectorAll("input[name=sub_text]");
      fields[fields.length - 1].focus();
    } else if (remove) {
      const row = remove.closest("li.sub-row");
      const editor = row.closest("fieldset");
      const next = row.nextElementSibling || row.previousElementSibling;
      row.remove();
      const focus = next ? next.querySelector("input[name=sub_text]") : editor.querySelector("[data-sub-add]");
      if (focus) focus.focus();
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
