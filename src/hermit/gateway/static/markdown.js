// Safe Markdown for model replies: builds DOM nodes and sets every piece of text with textContent,
// so markup in a reply (<script>, <img onerror=…>) is shown as text and never parsed as HTML, and through
// HermitDom.visible, so a bidi control or a tag character in it is shown as an escape.
"use strict";
(function () {
  const { visible } = window.HermitDom;
  function el(tag, cls) { const e = document.createElement(tag); if (cls) e.className = cls; return e; }
  const text = (t) => document.createTextNode(visible(t));

  // A link must not show one address and open another (a contact can steer a reply the owner then reads).
  // Its label is shown only with the host it really opens, small beside it, and the full address is its
  // title; a label that names an address or a domain of its own (anywhere in it) other than that host is
  // replaced by the real address. Only http(s) links are links; javascript:, data: and the rest stay text.
  // The label is read as NFKC (U+2024 ONE DOT LEADER, U+FE52 and other compatibility dots are "."), and every
  // link is a bidi isolate (style.css), so text around it cannot reorder its label or host.
  const INVISIBLE = /[\u00ad\u061c\u115f\u1160\u17b4\u17b5\u180e\u200b-\u200f\u202a-\u202e\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0]/g;
  const DOTS = /[\u3002\uff0e\uff61]/g;  // what URL parsing reads as "." in a host
  // Address-shaped parts of a label: a scheme://…, or a dotted name ending in letters (bank.example, www.…).
  const ADDRESS = /[a-z][a-z0-9+.-]*:\/\/[^\s<>"'()\[\]]*|(?:[\p{L}\p{N}_-]+\.)+[\p{L}][\p{L}\p{N}-]+\.?(?::\d+)?(?:[/?#][^\s<>"'()\[\]]*)?/giu;

  function hostOf(text) {  // null when unreadable or carrying a user@ part (https://bank.example@evil.example)
    let u;
    try { u = new URL(/^[a-z][a-z0-9+.-]*:\/\//i.test(text) ? text : "http://" + text); } catch (e) { return null; }
    return u.username || u.password ? null : u.hostname;
  }

  function ownAddress(label, url) {
    if (!/^https?:\/\//i.test(label)) return false;
    try { return new URL(label).href === url.href; } catch (e) { return false; }
  }

  function link(rawLabel, href) {
    if (!/^https?:\/\//i.test(href)) return null;
    let url;
    try { url = new URL(href); } catch (e) { return null; }
    if (!url.hostname) return null;
    url.username = ""; url.password = "";  // never opens or shows a user@ part
    const label = rawLabel.replace(INVISIBLE, "").normalize("NFKC").trim();
    const a = el("a"); a.href = url.href; a.title = url.href; a.rel = "noopener noreferrer"; a.target = "_blank";
    if (ownAddress(label, url)) {  // a bare address: shown as the address it opens (an IDN host in xn-- form)
      a.textContent = visible(label === url.href || label + "/" === url.href ? label : url.href);
      return a;
    }
    const named = label.replace(DOTS, ".").match(ADDRESS) || [];
    if (!label || named.some((n) => hostOf(n.replace(/\.$/, "")) !== url.hostname)) {
      a.textContent = visible(url.href);  // the label names somewhere else: show where the link goes instead
      return a;
    }
    a.appendChild(text(rawLabel.trim() + " "));
    a.appendChild(el("span", "md-host")).textContent = "(" + url.host + ")";
    return a;
  }

  const INLINE = /(`[^`\n]+`)|(\*\*[^*\n]+\*\*)|(\*[^*\n]+\*)|(\[[^\]\n]+\]\([^)\s]+\))/;

  function inline(parent, line) {
    while (line.length) {
      const m = INLINE.exec(line);
      if (!m) { parent.appendChild(text(line)); return; }
      if (m.index) parent.appendChild(text(line.slice(0, m.index)));
      const tok = m[0];
      if (m[1]) { const c = el("code"); c.textContent = visible(tok.slice(1, -1)); parent.appendChild(c); }
      else if (m[2]) { const b = el("strong"); inline(b, tok.slice(2, -2)); parent.appendChild(b); }
      else if (m[3]) { const i = el("em"); inline(i, tok.slice(1, -1)); parent.appendChild(i); }
      else {
        const label = tok.slice(1, tok.indexOf("]("));
        const href = tok.slice(tok.indexOf("](") + 2, -1);
        const a = link(label, href);
        parent.appendChild(a || text(tok));
      }
      line = line.slice(m.index + tok.length);
    }
  }

  // GFM tables: a header row, a delimiter row (|---|:-:|) with as many cells, then rows until a line with no
  // pipe. Cells are split on pipes not escaped as \|, and each cell goes through inline() like any text.
  const DELIMITER = /^\s*\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?\s*$/;
  function cells(line) {
    let row = line.trim();
    if (row.startsWith("|")) row = row.slice(1);
    if (row.endsWith("|") && !row.endsWith("\\|")) row = row.slice(0, -1);
    return row.split(/(?<!\\)\|/).map((c) => c.trim().replace(/\\\|/g, "|"));
  }
  function isTable(lines, i) {
    return lines[i].includes("|") && i + 1 < lines.length && lines[i + 1].includes("|") && DELIMITER.test(lines[i + 1])
      && cells(lines[i]).length === cells(lines[i + 1]).length;
  }
  function table(lines, i, root) {
    const head = cells(lines[i]), n = head.length;
    const align = cells(lines[i + 1]).map((d) => d.startsWith(":") && d.endsWith(":") ? "center" : d.endsWith(":") ? "right" : d.startsWith(":") ? "left" : "");
    const row = (values, tag) => {
      const tr = el("tr");
      for (let k = 0; k < n; k++) {
        const c = el(tag, align[k] ? "align-" + align[k] : "");
        inline(c, values[k] || "");
        tr.appendChild(c);
      }
      return tr;
    };
    const t = el("table"), thead = el("thead"), tbody = el("tbody");
    thead.appendChild(row(head, "th"));
    t.appendChild(thead);
    i += 2;
    while (i < lines.length && lines[i].includes("|") && lines[i].trim()) tbody.appendChild(row(cells(lines[i++]), "td"));
    if (tbody.children.length) t.appendChild(tbody);
    const wrap = el("div", "md-table");  // scrolls sideways on its own when wider than the bubble
    wrap.appendChild(t);
    root.appendChild(wrap);
    return i;
  }

  function render(source) {
    const root = el("div", "md");
    const lines = source.split("\n");
    let i = 0;
    let para = [];
    const flush = () => {
      if (!para.length) return;
      const p = el("p");
      para.forEach((l, k) => { if (k) p.appendChild(el("br")); inline(p, l); });
      root.appendChild(p);
      para = [];
    };
    while (i < lines.length) {
      const line = lines[i];
      if (/^\s*```/.test(line)) {
        flush();
        const code = [];
        i++;
        while (i < lines.length && !/^\s*```/.test(lines[i])) code.push(lines[i++]);
        i++;
        const pre = el("pre"); const c = el("code"); c.textContent = visible(code.join("\n")); pre.appendChild(c);
        root.appendChild(pre);
        continue;
      }
      const heading = /^(#{1,6})\s+(.*)$/.exec(line);
      if (heading) { flush(); const h = el("div", "h"); inline(h, heading[2]); root.appendChild(h); i++; continue; }
      if (/^\s*([-*]|\d+\.)\s+/.test(line)) {
        flush();
        const ordered = /^\s*\d+\./.test(line);
        const list = el(ordered ? "ol" : "ul");
        while (i < lines.length && /^\s*([-*]|\d+\.)\s+/.test(lines[i])) {
          const li = el("li"); inline(li, lines[i].replace(/^\s*([-*]|\d+\.)\s+/, "")); list.appendChild(li); i++;
        }
        root.appendChild(list);
        continue;
      }
      if (isTable(lines, i)) { flush(); i = table(lines, i, root); continue; }
      if (!line.trim()) { flush(); i++; continue; }
      para.push(line);
      i++;
    }
    flush();
    return root;
  }

  window.HermitMarkdown = { render: render };
})();
