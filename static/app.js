// Shared page behaviour: let htmx swap edit conflicts (409), show other errors in a toast, and
// paint the agreement heat map. Error responses are only ever read as text (never innerHTML).
(function () {
  function toast(text) {
    let box = document.getElementById("toast");
    if (!box) {
      box = document.createElement("div");
      box.id = "toast";
      box.setAttribute("role", "alert");
      document.body.appendChild(box);
    }
    box.textContent = text;
    box.hidden = false;
    clearTimeout(box._timer);
    box._timer = setTimeout(() => { box.hidden = true; }, 6000);
  }

  // The text of an error response, for textContent only. Tags are dropped first, so the inert
  // document that decodes the entities never holds an element (not even a blocked onerror=).
  function errorText(body, status) {
    const tagless = String(body || "").replace(/<[^>]*>/g, " ");
    const text = new DOMParser().parseFromString(tagless, "text/html").body.textContent;
    return text.replace(/\s+/g, " ").trim() || ("request failed: " + status);
  }

  // The Content-Security-Policy forbids style attributes; the heat value travels in data-heat.
  function paintHeat(root) {
    root.querySelectorAll("td.heat[data-heat]").forEach((cell) => cell.style.setProperty("--h", cell.dataset.heat));
  }

  window.rubricToast = toast;
  window.rubricErrorText = errorText;
  document.body.addEventListener("htmx:beforeSwap", (event) => {
    const status = event.detail.xhr.status;
    if (status === 409) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    } else if (status >= 400) {
      toast(errorText(event.detail.xhr.responseText, status));
    }
  });
  document.body.addEventListener("htmx:afterSwap", (event) => paintHeat(event.detail.target || document));
  paintHeat(document);
})();
