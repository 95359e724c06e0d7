// Keyboard-first grid: arrows or h/j/k/l move, 0-5 set a human grade, x flags the column's question, ? help.
// URLs come from data attributes rendered with url_for; error responses are shown as text only.
(function () {
  const csrf = document.querySelector('meta[name="csrf-token"]').content;
  let row = 0;
  let col = 0;

  function cells() {
    return Array.from(document.querySelectorAll("#grid tbody tr")).map((tr) => Array.from(tr.querySelectorAll("td.cell")));
  }

  function focusCell() {
    const grid = cells();
    if (!grid.length || !grid[0].length) return;
    row = Math.max(0, Math.min(row, grid.length - 1));
    col = Math.max(0, Math.min(col, grid[row].length - 1));
    document.querySelectorAll("#grid td.cell[tabindex='0']").forEach((c) => c.setAttribute("tabindex", "-1"));
    const cell = grid[row][col];
    cell.setAttribute("tabindex", "0");
    cell.focus();
  }

  async function post(url, data) {
    const body = new URLSearchParams(data);
    const response = await fetch(url, { method: "POST", body, headers: { "X-CSRF-Token": csrf } });
    if (!response.ok) {
      window.rubricToast(window.rubricErrorText(await response.text(), response.status));
      return null;
    }
    return response.json();
  }

  async function override(cell, rating) {
    const grid = document.getElementById("grid");
    if (grid.dataset.canEdit !== "yes") return;
    const entry = cell.closest("tr").dataset.entry;
    const result = await post(grid.dataset.overrideUrl, { pool_entry: entry, item_id: cell.dataset.item, rating });
    if (!result) return;
    cell.className = cell.className.replace(/\bg(\d|none)\b/, "g" + rating);
    cell.querySelector(".grade").textContent = String(rating);
    if (!cell.querySelector(".human")) {
      const mark = document.createElement("span");
      mark.className = "human";
      mark.textContent = "✎";
      cell.insertBefore(mark, cell.querySelector(".expected"));
    }
    cell.dataset.override = String(rating);
  }

  async function flag(cell) {
    const grid = document.getElementById("grid");
    if (grid.dataset.canEdit !== "yes") return;
    const result = await post(grid.dataset.flagUrl, { item_id: cell.dataset.item });
    if (result) {
      document.querySelectorAll(`#grid th.item-head[data-item="${CSS.escape(cell.dataset.item)}"]`).forEach((th) => th.classList.add("flagged"));
      window.rubricToast("question flagged as spurious");
    }
  }

  const moves = { ArrowUp: [-1, 0], k: [-1, 0], ArrowDown: [1, 0], j: [1, 0], ArrowLeft: [0, -1], h: [0, -1], ArrowRight: [0, 1], l: [0, 1] };

  document.addEventListener("keydown", (event) => {
    if (event.target.closest("input, select, textarea") || event.ctrlKey || event.metaKey || event.altKey) return;
    if (event.key === "?") {
      document.getElementById("help").showModal();
      return;
    }
    const current = document.activeElement && document.activeElement.closest("td.cell");
    if (event.key in moves) {
      event.preventDefault();
      row += moves[event.key][0];
      col += moves[event.key][1];
      focusCell();
    } else if (current && /^[0-5]$/.test(event.key)) {
      event.preventDefault();
      override(current, Number(event.key));
    } else if (current && event.key === "x") {
      event.preventDefault();
      flag(current);
    }
  });

  document.addEventListener("click", (event) => {
    const cell = event.target.closest("#grid td.cell");
    if (!cell) return;
    const grid = cells();
    row = grid.findIndex((r) => r.includes(cell));
    col = grid[row].indexOf(cell);
    focusCell();
  });

  document.body.addEventListener("htmx:afterSwap", () => { row = 0; col = 0; });
  focusCell();
})();
