// Leaderboard: after a live re-fetch (an SSE event: grades, overrides, flags), mark the rows whose
// rank or score changed since the previous render, with a fading highlight and a text delta
// (▲2 / ▼1 / "score changed" / "new"), and announce the moves to screen readers. Changes of the
// filters re-render the whole board on purpose and are not marked: every row would "change".
(function () {
  let previous = null;

  // system → {rank, score} as the board shows them now
  function snapshot(board) {
    const rows = {};
    board.querySelectorAll("tbody.ranked tr[data-system]").forEach((row) => {
      const cell = row.querySelector("td.rank");
      rows[row.dataset.system] = { rank: Number(cell.dataset.rank), score: cell.dataset.score };
    });
    return rows;
  }

  function deltaText(before, now) {
    if (!before) return { mark: "new", spoken: "new on the board" };
    const moved = before.rank - now.rank;
    if (moved > 0) return { mark: "▲" + moved, spoken: "up " + moved };
    if (moved < 0) return { mark: "▼" + -moved, spoken: "down " + -moved };
    return { mark: "score changed", spoken: "score changed from " + before.score + " to " + now.score };
  }

  function markChanges(board, before) {
    const now = snapshot(board);
    const spoken = [];
    Object.keys(now).forEach((system) => {
      const was = before[system];
      if (was && was.rank === now[system].rank && was.score === now[system].score) return;
      const row = board.querySelector('tbody.ranked tr[data-system="' + CSS.escape(system) + '"]');
      const delta = deltaText(was, now[system]);
      const mark = document.createElement("span");
      mark.className = "delta";
      mark.textContent = delta.mark;
      mark.setAttribute("aria-hidden", "true");  // the arrows read badly; the hidden text says it
      const spokenText = document.createElement("span");
      spokenText.className = "visually-hidden";
      spokenText.textContent = " (" + delta.spoken + ")";
      const cell = row.querySelector("td.rank");
      cell.appendChild(mark);
      cell.appendChild(spokenText);
      row.classList.add("changed");
      spoken.push(system + " " + delta.spoken);
    });
    const live = document.getElementById("board-live");
    if (live) live.textContent = spoken.length ? "Leaderboard updated: " + spoken.join("; ") : "";
  }

  document.body.addEventListener("htmx:beforeSwap", (event) => {
    const source = event.detail.requestConfig && event.detail.requestConfig.elt;
    const board = document.getElementById("board");
    previous = source && source.classList && source.classList.contains("live-refresh") && board ? snapshot(board) : null;
  });
  // The stream is open: updates from now on reach this board (tests and the status line wait for it).
  document.body.addEventListener("htmx:sseOpen", (event) => {
    event.target.setAttribute("data-stream", "open");
  });
  document.body.addEventListener("htmx:afterSettle", () => {
    const board = document.getElementById("board");
    if (previous && board) markChanges(board, previous);
    previous = null;
  });
})();
