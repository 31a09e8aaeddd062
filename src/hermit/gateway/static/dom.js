// DOM building for the Hermit web app: every piece of data becomes a text node or a plain attribute,
// never HTML. The app has no innerHTML anywhere (a test checks the static files for it). Every text el()
// sets goes through visible(), which shows what would be drawn as nothing, or would reorder a line, as an escape.
"use strict";
(function () {
  // Text from others (a group member's message, a note, a display name, a log line) must not hide words from
  // the owner or draw itself in another order. Shown as a visible ⟨U+202E⟩: format characters (Cf: bidi
  // controls, zero-width characters, Unicode tag characters), the other default-ignorable code points
  // (variation selectors, Hangul fillers, the combining grapheme joiner), private-use (Co) and unassigned
  // (Cn) code points, lone surrogates, line and paragraph separators, and control characters but a line
  // break and a tab. Kept, as part of how a script or an emoji is written (none can spell hidden words): one
  // joiner (ZWJ, ZWNJ) between letters or marks (Indic conjuncts, Persian), a ZWJ between emoji (👩‍💻), one
  // variation selector after a visible character (❤️, an ideograph's variant), the tag sequences of the
  // three subdivision flags (England, Scotland, Wales), a CR before LF, and ordinary combining marks.
  const HIDDEN = /\u{1f3f4}\u{e0067}\u{e0062}(?:\u{e0065}\u{e006e}\u{e0067}|\u{e0073}\u{e0063}\u{e0074}|\u{e0077}\u{e006c}\u{e0073})\u{e007f}|[\p{Default_Ignorable_Code_Point}\p{Cf}\p{Co}\p{Cn}\p{Cs}\p{Zl}\p{Zp}\p{Cc}]/gu;
  const LETTER = /^[\p{L}\p{M}]$/u, EMOJI = /^\p{Extended_Pictographic}$/u;
  const EMOJI_END = /^[\p{Extended_Pictographic}\p{Emoji_Modifier}\ufe0f\u20e3]$/u;
  const SHOWN = /^[^\p{Default_Ignorable_Code_Point}\p{C}\p{Z}\s]$/u;
  const SELECTOR = /^[\ufe00-\ufe0f\u{e0100}-\u{e01ef}]$/u;

  function before(text, i) {  // the code point that ends at index i ("" at the start)
    if (i <= 0) return "";
    const low = text.charCodeAt(i - 1);
    return i >= 2 && low >= 0xdc00 && low <= 0xdfff ? String.fromCodePoint(text.codePointAt(i - 2)) : text[i - 1];
  }
  function after(text, i) { return i < text.length ? String.fromCodePoint(text.codePointAt(i)) : ""; }

  function kept(c, text, i) {
    if (c.length > 2 || c === "\n" || c === "\t") return true;  // a flag's tag sequence, a line break, a tab
    if (c === "\r") return text[i + 1] === "\n";
    const prev = before(text, i), next = after(text, i + c.length);
    if (c === "\u200c" || c === "\u200d") {
      if (LETTER.test(prev) && LETTER.test(next)) return true;
      return c === "\u200d" && EMOJI_END.test(prev) && EMOJI.test(next);
    }
    return SELECTOR.test(c) && SHOWN.test(prev);
  }

  function visible(text) {
    if (text === undefined || text === null) return "";
    return String(text).replace(HIDDEN, (c, i, all) => kept(c, all, i) ? c
      : "⟨U+" + c.codePointAt(0).toString(16).toUpperCase().padStart(4, "0") + "⟩");
  }
  // el("div", {class: "x", dataset: {path: p}, title: t, onclick: fn}, child, "text", …)
  function el(tag, props) {
    const node = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === undefined || v === null || v === false) continue;
        if (k === "class") node.className = v;
        else if (k === "dataset") Object.assign(node.dataset, v);
        else if (k === "text") node.textContent = visible(v);
        else if (k.startsWith("on") && typeof v === "function") node.addEventListener(k.slice(2), v);
        else if (k === "value" || k === "checked" || k === "disabled" || k === "hidden") node[k] = v;
        else if (/^(on|style$|src$|href$|srcdoc$)/i.test(k)) throw new Error("el(): refusing attribute " + k);
        else node.setAttribute(k, v === true ? "" : k === "title" || k.startsWith("aria-") ? visible(v) : String(v));
      }
    }
    for (let i = 2; i < arguments.length; i++) add(node, arguments[i]);
    return node;
  }

  function add(node, child) {
    if (child === undefined || child === null || child === false) return;
    if (Array.isArray(child)) { child.forEach((c) => add(node, c)); return; }
    node.appendChild(child instanceof Node ? child : document.createTextNode(visible(child)));
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

  // A list redrawn by a refresh (Operations every 4 s, the sessions after each turn): left as it is when nothing
  // in it changed, and otherwise the control that had the focus (Run now of a job, a session's row) has it again
  // in the new list, found by its row's data and its class — replacing it sent the focus, and a screen reader's
  // place, back to the top of the page.
  function swap(list, nodes) {
    const old = [...list.children];
    if (old.length === nodes.length && old.every((n, i) => n.isEqualNode(nodes[i]))) return;
    const had = list.contains(document.activeElement) ? document.activeElement : null;
    const rowOf = (n) => { for (let r = n.closest("li"); r && list.contains(r); r = r.parentElement.closest("li")) if (Object.keys(r.dataset).length) return r; return null; };
    const row = had && rowOf(had);
    const rowKey = row ? JSON.stringify(row.dataset) : null, cls = had ? had.className : "", self = had === row;
    list.replaceChildren(...nodes);
    if (!had || !rowKey) return;
    const same = [...list.querySelectorAll("li")].find((li) => JSON.stringify(li.dataset) === rowKey);
    const again = same && (self ? same : [...same.querySelectorAll("button, a, input, select, textarea")].find((n) => n.className === cls));
    if (again) again.focus();
  }

  window.HermitDom = { el, add, when, stamp, visible, swap };
})();
