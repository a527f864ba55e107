// The review pages' behaviour: rubric items toggled by click or keys 1-9, the points shown as they would be
// saved, saving (key s) with the version the page showed, a conflicting save shown beside one's own choice, and
// next/previous (keys n/p). Every word shown comes from the server, in the page's language.
"use strict";

(function () {
  const page = document.getElementById("grading");
  if (!page || !page.dataset.save) return;

  const buttons = Array.from(document.querySelectorAll("#rubric button[data-item]"));
  const adjustment = document.getElementById("adjustment");
  const comment = document.getElementById("comment");
  const points = document.getElementById("points");
  const status = document.getElementById("status");
  const conflict = document.getElementById("conflict");
  const applyGroup = document.getElementById("apply-group");
  const maxPoints = Number(page.dataset.max);
  let theirs = null;   // the other TA's review a conflicting save met
  let fresh = null;    // that refusal's reply: the versions as they are now
  let saving = false;

  function version() {
    return page.dataset.version === "" ? null : Number(page.dataset.version);
  }

  // The points the question would get: grader/batch/manual.py's question_points (applied items plus the
  // adjustment, between 0 and the question's points), shown before saving; the saved value replaces it.
  function preview() {
    let sum = Number(adjustment.value) || 0;
    for (const b of buttons) if (b.getAttribute("aria-pressed") === "true") sum += Number(b.dataset.points);
    points.textContent = String(Math.round(Math.min(Math.max(sum, 0), maxPoints) * 1e6) / 1e6);
  }

  function toggle(button) {
    button.setAttribute("aria-pressed", button.getAttribute("aria-pressed") === "true" ? "false" : "true");
    preview();
  }

  function show(review) {
    const chosen = new Set(review.items);
    for (const b of buttons) b.setAttribute("aria-pressed", chosen.has(b.dataset.item) ? "true" : "false");
    adjustment.value = String(review.adjustment);
    comment.value = review.comment;
    points.textContent = String(review.points);
  }

  function saved(reply) {
    page.dataset.version = String(reply.review.version);
    points.textContent = String(reply.review.points);
    document.getElementById("student").textContent = reply.student;
    conflict.hidden = true;
    theirs = fresh = null;
    status.textContent = reply.status;
    status.dataset.state = "saved";
  }

  // Nothing was saved: another TA saved this answer, or an alike one this save was to grade too, meanwhile.
  // The page keeps its own choice and the versions it was showing (Save meets the conflict again); Overwrite saves
  // on the versions the reply says are current, Keep theirs puts their grade on the page.
  function conflicted(reply) {
    theirs = reply.current;
    fresh = reply;
    status.textContent = reply.status;
    status.dataset.state = "conflict";
    if (!theirs) {   // no grade stored any more: the next save starts from none
      page.dataset.version = "";
      return;
    }
    conflict.dataset.kept = reply.kept;
    conflict.querySelector(".conflict-said").textContent = reply.status;
    document.getElementById("their-author").textContent = theirs.author;
    document.getElementById("their-points").textContent = String(theirs.points);
    const list = document.getElementById("their-items");
    list.replaceChildren(...theirs.item_texts.map(function (text) {
      const li = document.createElement("li");
      li.textContent = text;
      return li;
    }));
    document.getElementById("their-comment").textContent = theirs.comment;
    conflict.hidden = false;
    if (reply.mine && reply.student) document.getElementById("student").textContent = reply.student;
  }

  function onVersionsOf(reply) {
    page.dataset.version = reply.version === null ? "" : String(reply.version);
    page.dataset.group = JSON.stringify(reply.group || {});
  }

  async function save(expected) {
    if (saving) return;
    saving = true;
    const body = {
      student: page.dataset.student,
      items: buttons.filter((b) => b.getAttribute("aria-pressed") === "true").map((b) => b.dataset.item),
      adjustment: Number(adjustment.value) || 0,
      comment: comment.value,
      expected_version: expected,
      group: applyGroup && applyGroup.checked ? JSON.parse(page.dataset.group || "{}") : null,
    };
    try {
      const response = await fetch(page.dataset.save, {
        method: "POST", credentials: "same-origin", headers: {"Content-Type": "application/json"},
        body: JSON.stringify(body),
      });
      const text = await response.text();
      let reply = null;
      try {
        reply = JSON.parse(text);
      } catch (error) {   // the server's sentence as text (a gradebook it cannot use now: 503)
        reply = {error: text};
      }
      if (response.status === 409) conflicted(reply);
      else if (response.ok) saved(reply);
      else {
        status.textContent = reply.error || String(response.status);
        status.dataset.state = "error";
      }
    } catch (error) {
      status.textContent = String(error);
      status.dataset.state = "error";
    } finally {
      saving = false;
    }
  }

  for (const b of buttons) b.addEventListener("click", () => toggle(b));
  adjustment.addEventListener("input", preview);
  document.getElementById("save").addEventListener("click", () => save(version()));
  document.getElementById("overwrite").addEventListener("click", function () {
    if (!fresh) return;
    onVersionsOf(fresh);
    save(version());
  });
  document.getElementById("keep-theirs").addEventListener("click", function () {
    if (!theirs) return;
    onVersionsOf(fresh);
    show(theirs);
    conflict.hidden = true;
    status.textContent = conflict.dataset.kept || status.textContent;
    status.dataset.state = fresh.mine ? "saved" : "";
    theirs = fresh = null;
  });

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    const target = event.target;
    if (target instanceof HTMLElement &&
        (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName))) {
      if (event.key === "Escape") target.blur();   // back to the keys without the mouse
      return;
    }
    if (/^[1-9]$/.test(event.key)) {
      const button = buttons[Number(event.key) - 1];
      if (button) {
        toggle(button);
        event.preventDefault();
      }
    } else if (event.key === "s") {
      event.preventDefault();
      save(version());
    } else if (event.key === "n" || event.key === "p") {
      const link = document.getElementById(event.key === "n" ? "next" : "prev");
      if (link) {
        event.preventDefault();
        window.location.assign(link.href);
      }
    }
  });
})();
