// Safe Markdown for model replies: builds DOM nodes and sets every piece of text with textContent,
// so markup in a reply (<script>, <img onerror=…>) is shown as text and never parsed as HTML.
"use strict";
(function () {
  function el(tag, cls) { const e = document.createElement(tag); if (cls) e.className = cls; return e; }

  const INLINE = /(`[^`\n]+`)|(\*\*[^*\n]+\*\*)|(\*[^*\n]+\*)|(\[[^\]\n]+\]\([^)\s]+\))/;

  function inline(parent, text) {
    while (text.length) {
      const m = INLINE.exec(text);
      if (!m) { parent.appendChild(document.createTextNode(text)); return; }
      if (m.index) parent.appendChild(document.createTextNode(text.slice(0, m.index)));
      const tok = m[0];
      if (m[1]) { const c = el("code"); c.textContent = tok.slice(1, -1); parent.appendChild(c); }
      else if (m[2]) { const b = el("strong"); inline(b, tok.slice(2, -2)); parent.appendChild(b); }
      else if (m[3]) { const i = el("em"); inline(i, tok.slice(1, -1)); parent.appendChild(i); }
      else {
        const label = tok.slice(1, tok.indexOf("]("));
        const href = tok.slice(tok.indexOf("](") + 2, -1);
        if (/^https?:\/\//i.test(href)) {
          const a = el("a"); a.href = href; a.textContent = label; a.rel = "noopener noreferrer"; a.target = "_blank";
          parent.appendChild(a);
        } else {
          parent.appendChild(document.createTextNode(tok));
        }
      }
      text = text.slice(m.index + tok.length);
    }
  }

  function render(text) {
    const root = el("div", "md");
    const lines = text.split("\n");
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
        const pre = el("pre"); const c = el("code"); c.textContent = code.join("\n"); pre.appendChild(c);
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
      if (!line.trim()) { flush(); i++; continue; }
      para.push(line);
      i++;
    }
    flush();
    return root;
  }

  window.HermitMarkdown = { render: render };
})();
