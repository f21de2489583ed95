// django-schedulinator: says under a JSON field, as it is typed, whether it holds valid JSON
// of the expected kind (a list for args, an object for kwargs). A convenience only: the
// server validates what is saved.
"use strict";
(function () {
  // The same words as the server's errors (admin.py: ARGS_EXPECTED, KWARGS_EXPECTED).
  const EXPECTED = {
    array: 'Enter a JSON list: [] for no arguments, or for example [1, "a"].',
    object: 'Enter a JSON object: {} for no keyword arguments, or for example {"a": 1}.',
  };

  function problemWith(text, expected) {
    if (text.trim() === "") {
      // The server refuses an empty box too: [] or {} says "none" explicitly.
      return EXPECTED[expected] || "Enter JSON.";
    }
    let value;
    try {
      value = JSON.parse(text);
    } catch (error) {
      return "Not valid JSON: " + error.message;
    }
    if (expected === "array" && !Array.isArray(value)) {
      return EXPECTED.array;
    }
    if (
      expected === "object" &&
      (value === null || typeof value !== "object" || Array.isArray(value))
    ) {
      return EXPECTED.object;
    }
    return "";
  }

  function setUp(textarea) {
    if (textarea.dataset.schedulinatorJson === "ready") {
      return;
    }
    textarea.dataset.schedulinatorJson = "ready";
    const id = (textarea.id || textarea.name) + "_json_message";
    let message = document.getElementById(id);
    if (message === null) {
      message = document.createElement("div");
      message.id = id;
      message.className = "schedulinator-json-message";
      message.setAttribute("role", "status");
      message.setAttribute("aria-live", "polite");
      textarea.insertAdjacentElement("afterend", message);
    }
    const describedBy = (textarea.getAttribute("aria-describedby") || "").split(" ");
    if (!describedBy.includes(id)) {
      textarea.setAttribute("aria-describedby", describedBy.concat(id).join(" ").trim());
    }
    function check() {
      const problem = problemWith(textarea.value, textarea.dataset.jsonType || "");
      message.textContent = problem;
      message.hidden = problem === "";
      textarea.setAttribute("aria-invalid", problem === "" ? "false" : "true");
    }
    textarea.addEventListener("input", check);
    check();
  }

  function init() {
    document.querySelectorAll("textarea.schedulinator-json").forEach(setUp);
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
