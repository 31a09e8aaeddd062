// DOM building for the Hermit web app: every piece of data becomes a text node or a plain attribute,
// never HTML. The app has no innerHTML anywhere (a test checks the static files for it).
"use strict";
(function () {
  // el("div", {class: "x", dataset: {path: p}, title: t, onclick: fn}, child, "text", …)
  function el(tag, props) {
    const node = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === undefined || v === null || v === false) continue;
        if (k === "class") node.className = v;
        else if (k === "dataset") Object.assign(node.dataset, v);
        else if (k === "text") node.textContent = v;
        else if (k.startsWith("on") && typeof v === "function") node.addEventListener(k.slice(2), v);
        else if (k === "value" || k === "checked" || k === "disabled" || k === "hidden") node[k] = v;
        else if (/^(on|style$|src$|href$|srcdoc$)/i.test(k)) throw new Error("el(): refusing attribute " + k);
        else node.setAttribute(k, v === true ? "" : String(v));
      }
    }
    for (let i = 2; i < arguments.length; i++) add(node, arguments[i]);
    return node;
  }

  function add(node, child) {
    if (child === undefined || child === null || child === false) return;
    if (Array.isArray(child)) { child.forEach((c) => add(node, c)); return; }
    node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }

  // "3 min ago" for recent times, the local date and time otherwise.
  function when(iso) {
    if (!iso) return "";
    const t = typeof iso === "number" ? iso * 1000 : Date.parse(iso);
    if (isNaN(t)) return String(iso);
    const s = Math.round((Date.now() - t) / 1000);
    if (s >= 0 && s < 45) return "just now";
    if (s >= 0 && s < 3600) return Math.round(s / 60) + " min ago";
    if (s >= 0 && s < 86400) return Math.round(s / 3600) + " h ago";
    if (s < 0 && s > -3600) return "in " + Math.max(1, Math.round(-s / 60)) + " min";
    if (s < 0 && s > -86400) return "in " + Math.round(-s / 3600) + " h";
    return stamp(iso);
  }

  function stamp(iso) {
    if (!iso) return "";
    const t = typeof iso === "number" ? iso * 1000 : Date.parse(iso);
    return isNaN(t) ? String(iso) : new Date(t).toLocaleString(undefined, { dateStyle: "medium", timeStyle: "short" });
  }

  window.HermitDom = { el, add, when, stamp };
})();
