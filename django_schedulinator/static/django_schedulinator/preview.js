// The change form's next runs follow the timing as it is edited: the form is posted to the
// admin's preview URL (which validates it with the model's rules and saves nothing), and
// the description and the table it answers replace the ones shown.
"use strict";
(function () {
  const WAIT_MS = 400; // after the last keystroke: one request per pause in typing

  function setUp() {
    const box = document.getElementById("schedulinator-preview-box");
    if (box === null || box.dataset.schedulinatorPreview === "ready") {
      return;
    }
    box.dataset.schedulinatorPreview = "ready";
    const form = box.closest("form");
    if (form === null) {
      return;
    }
    const description = document.getElementById("schedulinator-description");
    const fields = new Set((box.dataset.timingFields || "").split(" "));
    let timer = null;
    let latest = 0; // answers that arrive out of order are dropped

    function isTiming(element) {
      // Split date and time widgets post run_at_0 and run_at_1 for run_at.
      const name = (element.name || "").replace(/_[01]$/, "");
      return fields.has(name);
    }

    async function refresh() {
      const asked = ++latest;
      box.setAttribute("aria-busy", "true");
      try {
        const response = await fetch(box.dataset.previewUrl, {
          method: "POST",
          body: new FormData(form), // with the CSRF token
          credentials: "same-origin",
          headers: { Accept: "application/json" },
        });
        if (!response.ok) {
          throw new Error("the server answered " + response.status);
        }
        const answer = await response.json();
        if (asked !== latest) {
          return;
        }
        box.innerHTML = answer.preview; // built and escaped by the server
        if (description !== null) {
          description.textContent = answer.description;
        }
      } catch (error) {
        if (asked === latest) {
          box.textContent = "No preview (" + error.message + "); save to see the next runs.";
        }
      } finally {
        if (asked === latest) {
          box.removeAttribute("aria-busy");
        }
      }
    }

    function changed(event) {
      if (!isTiming(event.target)) {
        return;
      }
      clearTimeout(timer);
      timer = setTimeout(refresh, WAIT_MS);
    }

    form.addEventListener("input", changed);
    form.addEventListener("change", changed);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", setUp);
  } else {
    setUp();
  }
})();
