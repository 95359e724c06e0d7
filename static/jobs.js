// Job progress within a batch. A running batch announces, on its job's SSE event, cells computed
// but not yet committed ("job-progress" with in_batch). Those are shown in place, without asking
// the server (it only knows committed counts); the batch's own "job" event then re-fetches the row,
// whose committed counts are the truth (the in-batch count is lost if the worker dies).
(() => {
  if (window.rubricJobProgress) return; // loaded once per document
  window.rubricJobProgress = true;

  const sseData = (event) => {
    const message = event && event.detail;
    if (!message || typeof message.data !== "string") return null;
    try {
      return JSON.parse(message.data);
    } catch {
      return null;
    }
  };

  const showInBatch = (root, inBatch) => {
    const box = root.querySelector("[data-job-progress]") || root;
    const total = Number(box.dataset.total);
    if (!box.hasAttribute("data-job-progress") || !(total > 0)) return;
    const processed = Math.min(total, Number(box.dataset.processed) + inBatch);
    const bar = box.querySelector("progress");
    const percent = box.querySelector("[data-role=percent]");
    const note = box.querySelector("[data-role=in-batch]");
    if (bar) bar.value = processed / total;
    if (percent) percent.textContent = `${Math.round((100 * processed) / total)}%`;
    if (note) {
      note.textContent = ` · ${inBatch} more graded, not saved yet`;
      note.hidden = false;
    }
  };

  document.body.addEventListener("htmx:confirm", (event) => {
    const data = sseData(event.detail.triggeringEvent);
    if (!data || data.type !== "job-progress") return; // a committed batch: re-fetch the row
    event.preventDefault();
    showInBatch(event.detail.elt, Number(data.in_batch) || 0);
  });
})();
