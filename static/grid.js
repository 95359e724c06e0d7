// Keyboard-first grid (the help dialog, "?", lists every key). Judges: 0-5 set, a accept, c/Delete/Backspace
// clear, u/Ctrl+Z undo, x flag/unflag; everyone: arrows or h/j/k/l move, [ and ] change query.
// URLs come from data attributes rendered with url_for; a cell is redrawn from the server's JSON answer,
// and error responses are shown as text only (window.rubricErrorText).
(function () {
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  let row = 0;
  let col = 0;

  function grid() {
    return document.getElementById("grid");
  }

  function canEdit() {
    return grid().dataset.canEdit === "yes";
  }

  function cells() {
    return Array.from(document.querySelectorAll("#grid tbody tr")).map((tr) => Array.from(tr.querySelectorAll("td.cell")));
  }

  function focusCell(scroll = true) {
    const all = cells();
    if (!all.length || !all[0].length) return;
    row = Math.max(0, Math.min(row, all.length - 1));
    col = Math.max(0, Math.min(col, all[row].length - 1));
    document.querySelectorAll("#grid td.cell[tabindex='0']").forEach((c) => c.setAttribute("tabindex", "-1"));
    const cell = all[row][col];
    cell.setAttribute("tabindex", "0");
    cell.focus({ preventScroll: true });
    if (scroll) cell.scrollIntoView({ block: "nearest", inline: "nearest" });  // scroll-padding keeps it clear of the sticky header and passage column
  }

  // POST a form; the JSON answer, or null after showing the error's text in a toast. HX-Request asks the
  // server for an error fragment (its message only), never a whole error page.
  async function post(url, data) {
    let response;
    try {
      response = await fetch(url, {
        method: "POST",
        body: new URLSearchParams(data),
        headers: { "X-CSRF-Token": csrf, "HX-Request": "true", Accept: "application/json" },
      });
    } catch (error) {
      window.rubricToast("the server cannot be reached; try again");
      return null;
    }
    if (response.status === 401) {
      window.rubricToast("you are signed out: sign in again to change grades");
      return null;
    }
    if (!response.ok) {
      window.rubricToast(window.rubricErrorText(await response.text(), response.status));
      return null;
    }
    return response.json();
  }

  const JUDGED = " · judge's grade ";

  function shortTime(iso) {
    return iso ? iso.slice(0, 16).replace("T", " ") + " UTC" : "";
  }

  // Redraw a cell from a CellState: the judge's grade (response) beside the model's (suggestion).
  function draw(cell, state) {
    const model = cell.dataset.model === "" ? null : Number(cell.dataset.model);
    const judged = state.rating !== null && state.rating !== undefined;
    const shown = judged ? state.rating : model;
    cell.className = cell.className.replace(/\bg(\d|none)\b/, shown === null ? "gnone" : "g" + shown);
    cell.classList.toggle("overridden", judged);
    cell.querySelector(".grade").textContent = shown === null ? "·" : String(shown);
    cell.querySelector(".human").hidden = !judged;
    const sugg = cell.querySelector(".sugg");  // the full layout only: compact cells show numbers
    if (sugg) {
      sugg.hidden = !judged;
      sugg.textContent = "model " + (model === null ? "–" : model);
    }
    const who = cell.querySelector(".who");
    if (who) {
      who.hidden = !judged;
      who.textContent = judged ? `${state.judge} · ${shortTime(state.at)}` : "";
    }
    const clear = cell.querySelector("button.clear");
    if (clear && !judged) clear.remove();
    if (!clear && judged) cell.appendChild(clearButton());
    const about = cell.title.split(JUDGED)[0];  // the grader's side stays; the judge's side is redrawn
    cell.title = about + (judged ? `${JUDGED}${state.rating} by ${state.judge} at ${shortTime(state.at)}` : "");
  }

  // The mouse's way to clear a judge's grade; rendered only on judged cells, so pages stay small.
  function clearButton() {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "clear";
    button.tabIndex = -1;
    button.setAttribute("aria-label", "clear your grade");
    button.title = "clear the judge's grade (c)";
    button.textContent = "×";
    return button;
  }

  function describe(cell, state) {
    const head = document.querySelector(`#grid th.item-head[data-item="${CSS.escape(state.item_id)}"]`);
    const where = cell ? `Q${head ? head.dataset.number : state.item_id} of passage ${cell.closest("tr").dataset.passage}` : `question ${state.item_id} (another page)`;
    return `${where} ${state.rating === null ? "has no judge's grade" : "is " + state.rating}`;
  }

  function cellOf(state) {
    return document.querySelector(`#grid tr[data-entry="${state.pool_entry}"] td.cell[data-item="${CSS.escape(state.item_id)}"]`);
  }

  async function act(cell, action, rating) {
    const data = { pool_entry: cell.closest("tr").dataset.entry, item_id: cell.dataset.item, action, source: "grid" };
    if (rating !== undefined) data.rating = rating;
    if (grid().dataset.grader) data.grader = grid().dataset.grader;  // the log keeps the grade the judge saw
    const state = await post(grid().dataset.overrideUrl, data);
    if (state) draw(cell, state);
  }

  async function undo() {
    const state = await post(grid().dataset.undoUrl, {});
    if (!state) return;
    const cell = cellOf(state);
    if (cell) draw(cell, state);
    window.rubricToast("undone: " + describe(cell, state));
  }

  function drawFlag(head, flagged, by) {
    head.classList.toggle("flagged", flagged);
    head.querySelector(".flag-mark").hidden = !flagged;
    const now = new Date().toISOString();
    head.querySelector(".flag-who").textContent = flagged ? `flagged by ${by} · ${shortTime(now)}` : "flagged";
    const button = head.querySelector("button.unflag");
    if (button) button.hidden = !flagged;
  }

  async function toggleFlag(itemId) {
    const head = document.querySelector(`#grid th.item-head[data-item="${CSS.escape(itemId)}"]`);
    const flagged = head.classList.contains("flagged");
    const url = flagged ? grid().dataset.unflagUrl : grid().dataset.flagUrl;
    const result = await post(url, { item_id: itemId });
    if (!result) return;
    drawFlag(head, result.flagged, result.by);
    window.rubricToast(`Q${head.dataset.number} ${result.flagged ? "flagged as spurious" : "unflagged"}`);
  }

  function readOnly() {
    window.rubricToast("read only: judges set grades and flags");
  }

  function follow(rel) {
    const link = document.querySelector(`#grid a[rel="${rel}"]`);
    if (link) window.location.href = link.href;
  }

  const moves = { ArrowUp: [-1, 0], k: [-1, 0], ArrowDown: [1, 0], j: [1, 0], ArrowLeft: [0, -1], h: [0, -1], ArrowRight: [0, 1], l: [0, 1] };
  const edits = {
    a: (cell) => act(cell, "accept"),
    c: (cell) => act(cell, "clear"),
    Delete: (cell) => act(cell, "clear"),
    Backspace: (cell) => act(cell, "clear"),
    x: (cell) => toggleFlag(cell.dataset.item),
  };

  document.addEventListener("keydown", (event) => {
    if (event.target.closest("input, select, textarea, dialog") || event.metaKey || event.altKey) return;
    if (event.ctrlKey) {
      if (event.key === "z" && canEdit()) {
        event.preventDefault();
        undo();
      }
      return;
    }
    const current = document.activeElement && document.activeElement.closest("#grid td.cell");
    if (event.key === "?") {
      document.getElementById("help").showModal();
    } else if (event.key === "[" || event.key === "]") {
      follow(event.key === "[" ? "prev" : "next");
    } else if (event.key in moves && (current || document.activeElement === document.body)) {
      event.preventDefault();
      row += moves[event.key][0];
      col += moves[event.key][1];
      focusCell();
    } else if (current && (/^[0-5]$/.test(event.key) || event.key in edits || event.key === "u")) {
      event.preventDefault();
      if (!canEdit()) readOnly();
      else if (event.key === "u") undo();
      else if (event.key in edits) edits[event.key](current);
      else act(current, "set", Number(event.key));
    } else if (event.key === "u" && canEdit()) {
      undo();
    }
  });

  document.addEventListener("click", (event) => {
    const unflag = event.target.closest("#grid button.unflag");
    if (unflag) {
      toggleFlag(unflag.dataset.item);
      return;
    }
    const expand = event.target.closest("#grid button.expand");
    if (expand) {
      const text = document.getElementById(expand.getAttribute("aria-controls"));
      const open = text.classList.toggle("open");
      expand.setAttribute("aria-expanded", String(open));
      expand.textContent = open ? "less" : "more";
      return;
    }
    const cell = event.target.closest("#grid td.cell");
    if (!cell) return;
    const all = cells();
    row = all.findIndex((r) => r.includes(cell));
    col = all[row].indexOf(cell);
    focusCell();
    if (event.target.closest("button.clear")) act(cell, "clear");
  });

  document.body.addEventListener("htmx:afterSwap", () => { row = 0; col = 0; });
  if (cells().length) focusCell(false);  // keyboard-ready on load, without scrolling the page
})();
