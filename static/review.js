// The review queue, keyboard first: a/Enter accept the grader's grade, 0-5 grade, n skip, u undo, ? help.
// Each action POSTs to the judging routes, then the next cell comes back as the page's "cell" block.
// URLs come from data attributes rendered with url_for; error answers are shown as text only.
(function () {
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  let busy = false;

  function section() {
    return document.getElementById("review-cell");
  }

  function say(text) {
    const status = section() && section().querySelector(".review-status");
    if (status) status.textContent = text;
  }

  async function post(url, data) {
    const response = await fetch(url, { method: "POST", body: new URLSearchParams(data), headers: { "X-CSRF-Token": csrf } });
    if (!response.ok) {
      const message = window.rubricErrorText(await response.text(), response.status);
      say(message);
      window.rubricToast(message);
      return null;
    }
    return response.json();
  }

  // The next cell: the judge's queue after ``offset`` skipped cells, or one given cell (after an undo).
  async function load(offset, cell) {
    const url = new URL(section().dataset.nextUrl, window.location.origin);
    url.searchParams.set("offset", String(offset));
    if (cell) {
      url.searchParams.set("pool_entry", String(cell.pool_entry));
      url.searchParams.set("item_id", cell.item_id);
    }
    // the page's "cell" block, swapped in at once (htmx's settling would show the old data-* for a moment)
    const response = await fetch(url.pathname + url.search, { headers: { "HX-Request": "true" } });
    const html = await response.text();
    if (!response.ok) {
      if (cell) return load(offset); // the undone cell is not in this queue (another grader, an older item)
      say(window.rubricErrorText(html, response.status));
      return;
    }
    const holder = document.createElement("template");
    holder.innerHTML = html.trim();
    section().replaceWith(holder.content);
    section().focus({ preventScroll: true });
    window.scrollTo(0, 0);
  }

  async function act(kind, rating) {
    const here = section();
    if (!here || busy) return;
    const offset = Number(here.dataset.offset || "0");
    const canEdit = here.dataset.canEdit === "yes";
    busy = true;
    try {
      if (kind === "skip") {
        if (here.dataset.poolEntry) await load(offset + 1);
      } else if (kind === "undo") {
        if (!canEdit) return;
        const undone = await post(here.dataset.undoUrl, {});
        if (undone) await load(offset, undone);
      } else if (here.dataset.poolEntry && canEdit) {
        const data = { pool_entry: here.dataset.poolEntry, item_id: here.dataset.item, action: kind, source: here.dataset.source };
        if (here.dataset.grader) data.grader = here.dataset.grader;
        if (kind === "set") data.rating = String(rating);
        if (await post(here.dataset.overrideUrl, data)) await load(offset);
      }
    } finally {
      busy = false;
    }
  }

  document.addEventListener("click", (event) => {
    const button = event.target.closest("#review-cell button[data-action]");
    if (!button || button.disabled) return;
    act(button.dataset.action, button.dataset.rating);
  });

  document.addEventListener("keydown", (event) => {
    if (event.target.closest("input, select, textarea, dialog") || event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.target.closest("button, a") && (event.key === "Enter" || event.key === " ")) return; // the control's own action
    if (event.key === "?") {
      event.preventDefault();
      document.getElementById("review-help").showModal();
    } else if (event.key === "a" || event.key === "Enter") {
      event.preventDefault();
      act("accept");
    } else if (/^[0-5]$/.test(event.key)) {
      event.preventDefault();
      act("set", Number(event.key));
    } else if (event.key === "n") {
      event.preventDefault();
      act("skip");
    } else if (event.key === "u") {
      event.preventDefault();
      act("undo");
    }
  });
})();
