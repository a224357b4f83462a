
"use strict";
// The page is whole without this script: it only adds filtering, zoom and keys. It reads the
// page's own markup (text and data- attributes, never parsed as HTML) and writes only text.
(function () {
  var rows = Array.prototype.slice.call(document.querySelectorAll("table.tests tbody tr"));
  // The drawn sections below the table follow its filter: what the table hides, they hide.
  var stories = Array.prototype.slice.call(document.querySelectorAll("section.story"));
  var search = document.getElementById("search");
  var select = document.getElementById("class");
  var shown = document.getElementById("shown");
  var chips = Array.prototype.slice.call(document.querySelectorAll(".chip"));
  var selected = -1;
  var controls = document.querySelector(".controls");
  if (controls) controls.hidden = false;

  function visible() {
    return rows.filter(function (row) { return !row.hidden; });
  }

  function filter() {
    var needle = search ? search.value.trim().toLowerCase() : "";
    var wanted = select ? select.value : "";
    function out(element, id) {
      return (wanted !== "" && element.getAttribute("data-class") !== wanted) ||
        (needle !== "" && id.toLowerCase().indexOf(needle) < 0);
    }
    rows.forEach(function (row) { row.hidden = out(row, row.getAttribute("data-id") || ""); });
    stories.forEach(function (story) { story.hidden = out(story, story.getAttribute("aria-label") || ""); });
    chips.forEach(function (chip) {
      chip.setAttribute("aria-pressed", String(chip.getAttribute("data-class") === wanted));
    });
    if (shown) shown.textContent = visible().length + " of " + rows.length + " shown";
    choose(visible().length ? 0 : -1, false);
  }

  function choose(index, scroll) {
    var list = visible();
    rows.forEach(function (row) { row.classList.remove("selected"); });
    // Up from the first row stays on it, as down from the last stays on the last.
    selected = list.length ? Math.max(0, Math.min(index, list.length - 1)) : -1;
    if (selected >= 0) {
      list[selected].classList.add("selected");
      if (scroll !== false) list[selected].scrollIntoView({ block: "nearest" });
    }
  }

  function open() {
    var list = visible();
    if (selected < 0 || selected >= list.length) return;
    var link = list[selected].querySelector("a[href^='#t']");
    if (link) link.click();
  }

  if (search) search.addEventListener("input", filter);
  if (select) select.addEventListener("change", filter);
  chips.forEach(function (chip) {
    chip.addEventListener("click", function () {
      var name = chip.getAttribute("data-class");
      select.value = select.value === name ? "" : name;
      filter();
    });
  });

  // --- zoom: every track of a waterfall shows the same window of its time ------------------
  var WIDTH = 1000;
  function Zoom(box) {
    this.box = box;
    this.origin = parseFloat(box.getAttribute("data-origin")) || 0;
    this.until = parseFloat(box.getAttribute("data-until")) || 1;
    this.from = 0;
    this.span = WIDTH;
    this.labels = box.querySelectorAll(".ruler .axis span");
    var bar = box.querySelector(".zoom");
    if (bar) bar.hidden = false;
    var self = this;
    box.querySelectorAll("[data-zoom]").forEach(function (button) {
      button.addEventListener("click", function () { self.act(button.getAttribute("data-zoom")); });
    });
  }
  Zoom.prototype.act = function (what) {
    var centre = this.from + this.span / 2;
    if (what === "in") this.span = Math.max(this.span / 2, 1);
    else if (what === "out") this.span = Math.min(this.span * 2, WIDTH);
    else if (what === "reset") this.span = WIDTH;
    else if (what === "left") centre -= this.span / 4;
    else if (what === "right") centre += this.span / 4;
    this.from = Math.max(0, Math.min(WIDTH - this.span, centre - this.span / 2));
    var box = [this.from, 0, this.span, 20].join(" ");
    this.box.querySelectorAll("svg.track").forEach(function (svg) { svg.setAttribute("viewBox", box); });
    var ms = this.until - this.origin;
    for (var i = 0; i < this.labels.length; i++) {
      var at = this.origin + ms * (this.from + this.span * i / (this.labels.length - 1)) / WIDTH;
      this.labels[i].textContent = duration(at);
    }
    this.box.setAttribute("data-zoomed", String(WIDTH / this.span));
  };
  function duration(value) {
    var size = Math.abs(value);
    if (size < 10) return value.toFixed(1) + " ms";
    if (size < 1000) return value.toFixed(0) + " ms";
    if (size < 10000) return (value / 1000).toFixed(2) + " s";
    return (value / 1000).toFixed(1) + " s";
  }
  var zooms = Array.prototype.slice.call(document.querySelectorAll(".waterfall")).map(function (box) {
    var zoom = new Zoom(box);
    box.zoom = zoom;
    return zoom;
  });

  function current() {
    // The waterfall with the focus, else the one of the test id in the address, else none.
    var active = document.activeElement;
    var box = active && active.closest ? active.closest(".waterfall") : null;
    if (!box && location.hash) {
      var story = document.getElementById(location.hash.slice(1));
      box = story ? story.querySelector(".waterfall") : null;
    }
    return box ? box.zoom : null;
  }

  document.addEventListener("keydown", function (event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    var typing = event.target && (event.target.tagName === "INPUT" || event.target.tagName === "SELECT");
    if (typing) {
      if (event.key === "Escape") { event.target.blur(); }
      else if (event.key === "Enter" && event.target === search) { choose(0); open(); }
      return;
    }
    var keys = { "+": "in", "=": "in", "-": "out", "0": "reset", "ArrowLeft": "left", "ArrowRight": "right" };
    if (event.key === "/") { event.preventDefault(); if (search) search.focus(); }
    else if (event.key === "j" || event.key === "ArrowDown") { event.preventDefault(); choose(selected + 1); }
    else if (event.key === "k" || event.key === "ArrowUp") { event.preventDefault(); choose(selected - 1); }
    else if (event.key === "Enter" && selected >= 0 && !(event.target && event.target.closest && event.target.closest("a, button, summary"))) { event.preventDefault(); open(); }
    else if (keys[event.key]) {
      var zoom = current();
      if (zoom) { event.preventDefault(); zoom.act(keys[event.key]); }
    }
  });

  filter();
  document.documentElement.setAttribute("data-ready", String(zooms.length));
})();
