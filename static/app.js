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
  // A JSON body ({"detail": ...}, FastAPI's shape) gives its detail's message, never the raw JSON; a
  // whole error page gives its role="alert" message only, not the page's navigation around it.
  function errorText(body, status) {
    const raw = String(body || "");
    const detail = jsonDetail(raw, status);
    if (detail) return detail;
    const alert = raw.match(/role="alert"[^>]*>([^<]*)</);
    const tagless = (alert ? alert[1] : raw).replace(/<[^>]*>/g, " ");
    const text = new DOMParser().parseFromString(tagless, "text/html").body.textContent;
    return text.replace(/\s+/g, " ").trim() || ("request failed: " + status);
  }

  function jsonDetail(raw, status) {
    let parsed;
    try {
      parsed = JSON.parse(raw);
    } catch (error) {
      return null;
    }
    const detail = parsed && typeof parsed === "object" ? parsed.detail : null;
    if (typeof detail === "string") return detail;
    if (Array.isArray(detail)) return detail.map((d) => (d && d.msg) || "invalid").join("; ");
    return "request failed: " + status;
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

// === navigation: flag / unflag buttons (templates/_flags.html) ===
// The server answers {item_id, flagged, by}; every cell of that item says so in words, the other button
// shows (and takes the focus), and a toast confirms. Errors are toasted by the htmx:beforeSwap handler.
(function () {
  function flagAnswered(event) {
    const form = event.detail.elt;
    if (!form || !form.matches || !form.matches("form[data-flag-form]") || !event.detail.successful) return;
    let answer;
    try { answer = JSON.parse(event.detail.xhr.responseText); } catch (e) { return; }
    const flagged = Boolean(answer.flagged);
    let question = "";
    document.querySelectorAll("[data-flag-item]").forEach((cell) => {
      if (cell.dataset.flagItem !== answer.item_id) return;
      question = cell.dataset.question || answer.item_id;
      cell.classList.toggle("flagged", flagged);
      const status = cell.querySelector("[data-flag-status]");
      if (status) status.textContent = flagged ? "⚑ flagged by you · just now" : "not flagged";
      cell.querySelectorAll("form[data-flag-form]").forEach((f) => {
        f.hidden = (f.dataset.flagForm === "flag") === flagged;
      });
    });
    const other = form.parentElement && form.parentElement.querySelector(
      "form[data-flag-form='" + (flagged ? "unflag" : "flag") + "'] button");
    if (other) other.focus();
    if (window.rubricToast) window.rubricToast((flagged ? "Flagged: " : "Unflagged: ") + question);
  }
  document.body.addEventListener("htmx:afterRequest", flagAnswered);
})();
