// The memory view: search as the agent does (path, lines, score, audience, origin), open a file at the lines
// found, browse MEMORY.md and the daily logs by date, edit MEMORY.md (its previous version is kept) and
// append to today's log. Every file line is set as text.
"use strict";
(function () {
  const H = window.Hermit, { el, when, visible } = window.HermitDom;
  const $ = (id) => document.getElementById(id);
  const results = $("memory-results"), filesEl = $("memory-files"), viewer = $("memory-lines");
  const AUDIENCE = { owner: "owner-only", shared: "shared" };

  let file = null;      // the open file: {path, text, sha256, editable}
  let index = null;     // memory.files' answer

  const audienceLabel = (a) => AUDIENCE[a] || "chat " + a;
  const editor = $("memory-editor"), appendText = $("memory-append-text");

  // Drafts: an edit of a file not yet saved, and a note not yet appended, are kept in this tab's sessionStorage
  // (per agent and file) as they are typed, so a reload — a phone's pull-to-refresh, a tab the browser discarded
  // — brings them back; they go once saved, appended or discarded. Closing the tab with an unsaved edit asks first.
  const draftKey = (path) => "hermit.draft.memory:" + (agent() || "") + ":" + path;
  const appendKey = () => "hermit.draft.append:" + (agent() || "");
  function readDraft(path) {
    try { return JSON.parse(sessionStorage.getItem(draftKey(path)) || "null"); } catch (e) { return null; }
  }
  function dropDraft(path) { sessionStorage.removeItem(draftKey(path)); }
  const editing = () => document.body.classList.contains("editing") && !!file;
  const unsaved = () => editing() && editor.value !== file.text;
  // Memory is per agent (no search crosses agents); with several, a picker says whose.
  const picker = $("memory-agent");
  const agent = () => picker.value || null;
  H.onConnected((hello) => {
    const current = picker.value || hello.defaultAgent;
    picker.replaceChildren(...hello.agents.map((a) => el("option", { value: a, text: "agent " + a })));
    picker.value = hello.agents.includes(current) ? current : hello.defaultAgent;
    picker.hidden = hello.agents.length < 2;
  });
  picker.addEventListener("change", () => { stopEditing(); results.replaceChildren(); viewer.replaceChildren(); file = null; loadFiles(); });
  const failed = (e) => e.message + (e.hint ? " — " + e.hint : "");  // what went wrong, and what to do
  function counted(n, word) { return n + " " + word + (n === 1 ? "" : "s"); }
  function say(where, text, cls) { const n = $(where); n.textContent = visible(text || ""); n.className = "say " + (cls || ""); }
  // The open edit's draft is kept as it is typed.
  editor.addEventListener("input", () => {
    if (!editing()) return;
    if (unsaved()) sessionStorage.setItem(draftKey(file.path), JSON.stringify({ text: editor.value, base: file.base }));
    else dropDraft(file.path);
  });
  appendText.addEventListener("input", () => {
    if (appendText.value) sessionStorage.setItem(appendKey(), appendText.value); else sessionStorage.removeItem(appendKey());
  });
  window.addEventListener("beforeunload", (e) => { if (unsaved()) { e.preventDefault(); e.returnValue = ""; } });

  // ---- search ---------------------------------------------------------------------------------------
  async function search(query) {
    // One pane at a time (a phone): the results are in the list, so a search from an open note goes back to it.
    if (onePane() && document.body.classList.contains("file-open")) {
      if (!discard()) return;
      document.body.classList.remove("file-open");
    }
    say("memory-search-note", "searching…");
    let res;
    try { res = await H.call("memory.search", { query, agentId: agent() }); }
    catch (e) { say("memory-search-note", failed(e), "bad"); return; }
    const notes = [];
    if (res.error) notes.push(res.error);
    if (res.mode) notes.push("mode: " + res.mode + (res.reason ? " (" + res.reason + ")" : ""));
    for (const w of res.warnings || []) notes.push(w);
    say("memory-search-note", (res.results.length ? res.results.length + " result" + (res.results.length === 1 ? "" : "s") : "no results")
        + (notes.length ? " · " + notes.join(" · ") : ""), res.error ? "bad" : "");
    const terms = termsOf(query);
    results.replaceChildren(...res.results.map((r) => el("li", {
      class: "result", tabindex: "0", role: "button",
      dataset: { path: r.path, start: r.startLine, end: r.endLine, audience: r.audience },
      onclick: () => openFile(r.path, r.startLine, r.endLine, terms),
      onkeydown: (e) => { if (e.key === "Enter") openFile(r.path, r.startLine, r.endLine, terms); },
    },
      el("div", { class: "r-where", text: whereOf(r) + " · lines " + r.startLine + "–" + r.endLine }),
      el("div", { class: "r-head" },
        el("span", { class: "r-path", text: r.path + ":" + r.startLine + "–" + r.endLine }),
        el("span", { class: "badge score", title: "score", text: r.score.toFixed(2) }),
        el("span", { class: "badge", dataset: { audience: r.audience }, title: "who may see this passage", text: audienceLabel(r.audience) }),
        r.source !== "memory" ? el("span", { class: "badge", text: r.source }) : null),
      r.origin ? el("div", { class: "r-origin", text: "from " + (r.origin.channel ? r.origin.channel + " " : "")
        + (r.origin.group ? "group " + r.origin.group : "session " + r.origin.session) + (r.origin.sender ? " · by " + r.origin.sender : "") }) : null,
      el("div", { class: "snippet" }, marked(fromHit(r.snippet, terms), terms)))));
  }

  // Where a result is from, in words (a path says it only to those who know the layout): the long-term memory,
  // a daily log by its date, a past conversation, another memory file.
  const DAILY = /^memory\/(\d{4})-(\d{2})-(\d{2})(?:[-_.][^/]*)?\.md$/;
  function whereOf(r) {
    if (r.source && r.source !== "memory") return "a past conversation";
    if (r.path === "MEMORY.md") return "long-term memory (MEMORY.md)";
    const d = DAILY.exec(r.path);
    if (!d) return "memory file " + r.path.replace(/^memory\//, "");
    const day = new Date(Date.UTC(+d[1], +d[2] - 1, +d[3]));
    const today = index && index.today === d[1] + "-" + d[2] + "-" + d[3] ? " (today)" : "";
    return "daily log of " + day.toLocaleDateString(undefined, { timeZone: "UTC", weekday: "short", day: "numeric",
                                                                  month: "short", year: "numeric" }) + today;
  }

  // The words searched for, to find and mark them in a passage (a keyword search finds them as typed).
  const termsOf = (query) => [...new Set(query.toLowerCase().split(/\s+/).filter((t) => t.length > 0))];
  const hasTerm = (line, terms) => terms.some((t) => line.toLowerCase().includes(t));
  // A passage is shown from a line before its first hit when the hit is further down than its shown lines
  // reach: the line that matched is what a phone shows, not the passage's heading.
  function fromHit(snippet, terms) {
    const lines = snippet.split("\n"), at = lines.findIndex((l) => hasTerm(l, terms));
    return at > 2 ? "…\n" + lines.slice(at - 1).join("\n") : snippet;
  }
  function marked(text, terms) {
    if (!terms.length) return text;
    const escaped = terms.map((t) => t.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).sort((a, b) => b.length - a.length);
    return text.split(new RegExp("(" + escaped.join("|") + ")", "i")).map((part, i) => i % 2 ? el("mark", { text: part }) : part);
  }

  // ---- files ------------------------------------------------------------------------------------------
  async function loadFiles() {
    try { index = await H.call("memory.files", { agentId: agent() }); } catch (e) { return; }
    $("memory-date").max = index.today;
    const byKind = (k) => index.files.filter((f) => f.kind === k);
    // A file the index leaves out (binary, too large, a link…) is listed muted with a "not indexed" label and its
    // reason, said to a screen reader too: search will not find it.
    const item = (f, label) => {
      const skip = skipOf(f);
      return el("li", {
        tabindex: "0", role: "button", dataset: { path: f.path }, class: skip ? "skipped" : null,
        title: skip ? "not indexed: " + skip.reason + " — " + skip.fix : null,
        "aria-label": skip ? (label || f.path) + " — not indexed: " + skip.reason : null,
        onclick: () => openFile(f.path), onkeydown: (e) => { if (e.key === "Enter") openFile(f.path); },
      }, el("span", { class: "f-head" }, el("span", { class: "f-name", text: label || f.path }),
                                         skip ? el("span", { class: "badge skip", text: "not indexed" }) : null),
         el("span", { class: "f-meta", text: size(f.bytes) + " · " + (skip ? skip.reason : when(f.modifiedAt || f.modified)) }));
    };
    const daily = byKind("daily"), other = byKind("other"), long = byKind("long-term");
    filesEl.replaceChildren(
      el("li", { class: "group", text: "Long-term" }),
      ...(long.length ? long.map((f) => item(f, "MEMORY.md")) : [el("li", { class: "empty", text: "no MEMORY.md yet" })]),
      el("li", { class: "group", text: "Daily logs" }),
      ...(daily.length ? daily.map((f) => item(f, f.date + (f.date === index.today ? " (today)" : "") + (f.path !== "memory/" + f.date + ".md" ? " · " + f.path.slice(7) : ""))) : [el("li", { class: "empty", text: "no daily logs yet" })]),
      ...(other.length ? [el("li", { class: "group", text: "Other memory files" }), ...other.map((f) => item(f))] : []));
    try {
      const st = await H.request("memory.status", { agentId: agent() });
      say("memory-index", "index: " + counted(st.files, "file") + ", " + counted(st.chunks, "chunk") + " · " + (st.provider === "none" ? "keyword search (no embeddings)" : st.provider + "/" + st.model) + (st.dirty ? " · updating" : ""));
    } catch (e) { say("memory-index", ""); }
  }

  const skipOf = (f) => f && f.indexed === false ? (f.skipped || { reason: "not indexed", fix: "" }) : null;
  const skipped = (path) => skipOf(index && index.files.find((f) => f.path === path));
  const unindexed = (skip) => "Not indexed — " + skip.reason + (skip.fix ? " (" + skip.fix + ")" : "") + ": search does not find it.";

  const size = (n) => n < 1024 ? n + " B" : n < 1048576 ? (n / 1024).toFixed(1) + " KB" : (n / 1048576).toFixed(1) + " MB";

  async function openFile(path, start, end, terms) {
    if (!discard()) return false;
    say("memory-date-note", "");
    document.body.classList.add("file-open");
    $("memory-path").textContent = visible(path);
    say("memory-file-note", "loading…");
    let res;
    try { res = await H.call("memory.get", { path, agentId: agent() }); }
    catch (e) {
      const skip = skipped(path);
      say("memory-file-note", (skip ? unindexed(skip) + " It cannot be shown here: " : "") + e.message + (e.hint ? " — " + e.hint : ""), "bad");
      viewer.replaceChildren(); file = null; return false;
    }
    file = { path: res.path, text: res.text, sha256: res.sha256, editable: res.editable };
    $("memory-edit").hidden = !res.editable;
    $("memory-file-audience").hidden = !res.audience;
    $("memory-file-audience").textContent = res.audience ? audienceLabel(res.audience) : "";
    const lines = res.text.split("\n");
    if (lines.length > 1 && lines[lines.length - 1] === "") lines.pop();
    const skip = skipped(res.path);
    say("memory-file-note", (skip ? unindexed(skip) + " · " : "") + lines.length + " lines" +
        (start ? " · lines " + start + "–" + end + " found" : ""), skip ? "warn" : "");
    // Origin blocks as the server's parser found them: their lines are set apart and their markers tagged, so a
    // line that only looks like a marker (a note's own text) shows inside the block it belongs to.
    const inBlock = new Map();
    for (const b of res.blocks || []) for (let n = b.start; n <= b.end; n++) inBlock.set(n, b);
    viewer.replaceChildren(...lines.flatMap((text, i) => {
      const n = i + 1, b = inBlock.get(n), kind = b ? (b.owner ? " own" : " others") : "";
      const marker = b && (n === b.start || (n === b.end && b.closed));
      const line = el("div", {
        class: "line" + (start && n >= start && n <= end ? " hit" + (terms && hasTerm(text, terms) ? " term" : "") : "") + kind
               + (marker ? " marker" : ""),
        dataset: { line: n }, title: b ? b.from + " · " + audienceLabel(b.audience) : null,
      }, el("span", { class: "ln", text: String(n) }), el("span", { class: "tx", text: text || " " }));
      if (!b || n !== b.start) return [line];
      return [el("div", { class: "origin-tag" + kind }, el("span", { class: "badge", dataset: { audience: b.audience },
        text: (b.owner ? "your main session's note" : b.from) + " · " + audienceLabel(b.audience) })), line];
    }));
    const first = viewer.querySelector(".line.term") || viewer.querySelector(".line.hit");
    if (first) first.scrollIntoView({ block: "center" });
    else viewer.scrollTop = 0;
    for (const li of filesEl.querySelectorAll("li[data-path]")) li.classList.toggle("active", li.dataset.path === res.path);
    if (onePane()) $("memory-file").scrollIntoView({ block: "start" });
    return true;
  }

  // The view shows the list or the file, not both (a narrow view: style.css's container query): the ← is there.
  const onePane = () => getComputedStyle($("memory-back")).display !== "none";

  // Leaving an edit: asks first when it is unsaved; a discarded edit's draft goes with it.
  function discard() {
    if (unsaved() && !confirm(visible("Discard your changes to " + file.path + "?"))) return false;
    if (editing()) dropDraft(file.path);
    stopEditing();
    return true;
  }

  // ---- editing MEMORY.md and appending to today's log -----------------------------------------------------
  // An edit starts from the file, or from the draft kept for it: its base stays the version the draft was
  // made from, so saving over a file changed since is refused as a conflict, not silently overwritten.
  function startEditing() {
    if (!file || !file.editable) return;
    const draft = readDraft(file.path);
    editor.value = draft ? draft.text : file.text;
    file.base = draft ? draft.base : file.sha256 || null;
    if (draft) {
      say("memory-file-note", "Your unsaved edit, kept from before — Save or Cancel it", "ok");
    }
    document.body.classList.add("editing");
    editor.focus();
  }
  function stopEditing() { document.body.classList.remove("editing"); }

  async function save() {
    const content = $("memory-editor").value;
    if (new Blob([content]).size > 200000) { say("memory-file-note", "MEMORY.md is over 200 KB: edit it on disk", "bad"); return; }
    say("memory-file-note", "saving…");
    let res;
    try { res = await H.call("memory.write", { path: file.path, content, baseSha256: file.base, agentId: agent() }); }
    catch (e) { say("memory-file-note", failed(e), "bad"); return; }
    dropDraft(file.path);
    stopEditing();
    await openFile(file.path);
    say("memory-file-note", "Saved. " + (res.history ? "The previous version is kept in " + res.history : res.message), "ok");
    loadFiles();
  }

  async function append(e) {
    e.preventDefault();
    const text = $("memory-append-text").value;
    if (!text.trim()) return;
    const priv = $("memory-append-private").checked;
    say("memory-append-note", "appending…");
    let res;
    try { res = await H.call("memory.append", { text, private: priv, agentId: agent() }); }
    catch (err) { say("memory-append-note", failed(err) + " — your note is kept here", "bad"); return; }
    appendText.value = "";
    sessionStorage.removeItem(appendKey());
    $("memory-append-private").checked = true;  // each shared note is asked for anew: owner-only is the default
    const done = "Added to " + res.path + " (lines " + res.startLine + "–" + res.endLine + ", " + audienceLabel(res.audience) + ")";
    say("memory-append-note", done, "ok");
    await loadFiles();
    await openFile(res.path, res.startLine, res.endLine);
    say("memory-file-note", done, "ok");
  }

  function openDate() {
    const day = $("memory-date").value;
    if (!day || !index) return;
    const f = index.files.find((x) => x.date === day);
    // Said beside the date picker: on a phone the file pane is not shown until a file opens.
    if (f) openFile(f.path);
    else say("memory-date-note", "no daily log for " + day, "bad");
  }

  $("memory-search").addEventListener("submit", (e) => { e.preventDefault(); const q = $("memory-query").value.trim(); if (q) search(q); });
  $("memory-edit").addEventListener("click", startEditing);
  // Cancel asks first when the edit is unsaved (after a refused save the text is all the owner has of it).
  $("memory-cancel").addEventListener("click", discard);
  $("memory-save").addEventListener("click", save);
  $("memory-back").addEventListener("click", () => { if (discard()) document.body.classList.remove("file-open"); });
  $("memory-append").addEventListener("submit", append);
  $("memory-date").addEventListener("change", openDate);
  $("memory-editor").addEventListener("keydown", (e) => { if (e.key === "s" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); save(); } });

  // After a reload, an edit left unsaved opens again as it was (the first one found for this agent).
  let restored = false;
  async function restoreDrafts() {
    if (restored) return;
    restored = true;
    const saved = sessionStorage.getItem(appendKey());
    if (saved && !appendText.value) appendText.value = saved;
    const prefix = draftKey("");
    const key = Object.keys(sessionStorage).find((k) => k.startsWith(prefix));
    if (key && !file && await openFile(key.slice(prefix.length))) startEditing();
  }

  H.onView("memory", async (changed) => { if (changed || !index) await loadFiles(); restoreDrafts(); });
  window.HermitMemory = { search, openFile };
})();
