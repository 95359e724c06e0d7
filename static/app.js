// Shared page behaviour: let htmx swap edit conflicts (409), and show other errors in a toast.
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
  window.rubricToast = toast;
  document.body.addEventListener("htmx:beforeSwap", (event) => {
    const status = event.detail.xhr.status;
    if (status === 409) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    } else if (status >= 400) {
      const holder = document.createElement("div");
      holder.innerHTML = event.detail.xhr.responseText;
      toast(holder.textContent.trim() || ("request failed: " + status));
    }
  });
})();
