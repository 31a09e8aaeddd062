// The chat view: streamed replies with tool lines, /new, read-only sessions (an ended one with when and why it
// ended), a long history a page at a time, and failed turns shown with their reason (live and after a reload).
// The session list is sessions.js; files sent with a message (the attach button, previews, uploads) attach.js.
// Every text is shown through HermitDom.visible (el() does it; the rest here says so).
"use strict";
(function () {
  const H = window.Hermit, A = window.HermitAttach, { el, stamp, visible } = window.HermitDom;
  const $ = (id) => document.getElementById(id);
  const messages = $("messages"), input = $("input");
  const PAGE = 200, MOST = 2000;  // history items drawn at first, and at the most (chat.history's limit)

  // The open session: {key, agentId, sessionId, ended, mode, why, kind, label}; kept per tab across reloads.
  // `ended`: a past session of the key (sessionId names it), read-only.
  let session = JSON.parse(sessionStorage.getItem("hermit.session2") || "null");
  let limit = PAGE;  // how many of the newest history items are drawn
  const turns = new Map();     // message id (replyTo) -> {bubble, body, tools, text, toolLines, frame}
  // A streamed reply is drawn at most once a frame, however many deltas arrived; past PLAIN_AFTER characters
  // it is drawn as plain text while it streams (appending only what came since), and as Markdown once, when
  // it is done: rebuilding a long reply's Markdown on every delta froze the tab (133k characters in 16k
  // deltas: minutes).
  const PLAIN_AFTER = 20000;

  function remember() { sessionStorage.setItem("hermit.session2", JSON.stringify(session)); }
  // What is typed is kept per session in this tab's sessionStorage as it is typed, so a reload (a phone's
  // pull-to-refresh, a tab the browser discarded) or a switch to another session and back brings it back. It
  // goes when the gateway has the message.
  const draftKey = () => session ? "hermit.draft.chat:" + session.agentId + ":" + session.key : "";
  function keepDraft() {
    if (!draftKey() || input.disabled) return;
    if (input.value) sessionStorage.setItem(draftKey(), input.value); else sessionStorage.removeItem(draftKey());
  }
  // The box holds the open session's draft: another session's comes in with it; what was typed before the
  // first connection is kept as this one's.
  let boxFor = null;
  function showDraft(readOnly) {
    const key = draftKey();
    if (readOnly) input.value = "";
    else if (boxFor === null && input.value) keepDraft();
    else if (key !== boxFor || !input.value) input.value = sessionStorage.getItem(key) || "";
    boxFor = key;
  }
  // On a touch screen Return starts a new line (a phone has no Shift+Return) and the Send button sends; with a
  // keyboard, Enter sends and Shift+Enter starts a new line. Ctrl/⌘+Enter sends on both.
  const touch = window.matchMedia("(hover: none) and (pointer: coarse)").matches;
  input.title = touch ? "Return starts a new line, Send sends; /new starts a fresh session"
                      : "Enter sends, Shift+Enter starts a new line, /new starts a fresh session";
  input.setAttribute("enterkeyhint", touch ? "enter" : "send");
  // The conversation follows the newest message while it is scrolled to the bottom; scrolled up (reading a long
  // reply while it streams, an earlier message), it stays where it is and "↓ Newest" takes it back down. A page
  // that gets shorter (a phone's keyboard coming up, turned sideways) keeps the newest in sight when it followed.
  let follow = true, lastTop = 0;
  const jump = $("jump");
  const fromBottom = () => messages.scrollHeight - messages.scrollTop - messages.clientHeight;
  function scrollDown(force) {
    if (force) follow = true;
    if (follow) messages.scrollTop = messages.scrollHeight;
    jump.hidden = follow || fromBottom() < 80;
  }
  messages.addEventListener("scroll", () => {
    if (fromBottom() < 80) follow = true;
    else if (messages.scrollTop < lastTop - 1) follow = false;  // the reader went up (a redraw only adds below)
    lastTop = messages.scrollTop;
    jump.hidden = follow || fromBottom() < 80;
  }, { passive: true });
  new ResizeObserver(() => { if (follow) messages.scrollTop = messages.scrollHeight; }).observe(messages);
  jump.addEventListener("click", () => scrollDown(true));

  // The line Hermit adds to a user turn for each file filed with it (gateway/attachments.py `described`). It is drawn
  // as Hermit's note only for a file the gateway recorded with the message (chat.history's `files`), each once,
  // from the end: a contact can type a look-alike line, and that stays their text.
  const FILE_LINE = /^\(file received with this message: (inbox\/[^ ]+) — /;

  function fileNotes(text, filed) {
    const all = text.split("\n"), unclaimed = [...(filed || [])], notes = [];
    while (all.length) {
      const m = FILE_LINE.exec(all[all.length - 1]);
      const at = m ? unclaimed.indexOf(m[1]) : -1;
      if (at < 0) break;
      unclaimed.splice(at, 1);
      notes.unshift(all.pop());
    }
    return { text: all.join("\n"), notes };
  }

  function bubble(role, text, opts) {
    for (const n of messages.querySelectorAll(".notice.placeholder")) n.remove();
    const body = el("div", { class: "body" });
    let lines = [];
    if (role === "assistant") body.appendChild(window.HermitMarkdown.render(text || ""));
    else {
      const split = fileNotes(text || "", opts && opts.filed);
      lines = split.notes;
      body.textContent = visible(split.text);
    }
    const tools = el("div", { class: "tools" });
    // In a group, who wrote the message (chat.history's sender label: the name cleaned, the id, the owner mark).
    const who = opts && opts.sender ? [el("div", { class: "who" }, opts.sender)] : [];
    const pics = A.pictures((opts && opts.files) || []);
    const said = lines.map((line) => el("div", { class: "file-line", text: line }));
    const div = el("div", { class: "msg " + role + (opts && opts.error ? " error" : "") }, ...who, tools, pics, body, ...said);
    messages.appendChild(div);
    scrollDown();
    return { bubble: div, body, tools, text: text || "", toolLines: new Map(), frame: 0 };
  }

  // The whole text as Markdown, now (a final reply, an error, a message that came whole).
  function setText(turn, text) {
    unwait(turn.bubble);
    if (turn.frame) cancelAnimationFrame(turn.frame);
    turn.frame = 0;
    turn.text = text;
    turn.plain = null;
    turn.body.dataset.render = "markdown";
    turn.body.replaceChildren(window.HermitMarkdown.render(text));
    scrollDown();
  }

  function streamed(turn, delta) {
    unwait(turn.bubble);  // it runs
    turn.text += delta;
    if (!turn.frame) turn.frame = requestAnimationFrame(() => draw(turn));
  }

  function draw(turn) {
    turn.frame = 0;
    if (turn.text.length <= PLAIN_AFTER) {
      turn.body.dataset.render = "markdown";
      turn.body.replaceChildren(window.HermitMarkdown.render(turn.text));
    } else {
      if (!turn.plain) {  // from here on, only what arrived since the last frame is added
        turn.plain = { node: document.createTextNode(""), upTo: 0 };
        turn.body.dataset.render = "plain";
        turn.body.replaceChildren(el("div", { class: "md plain" }, turn.plain.node));
      }
      turn.plain.node.appendData(visible(turn.text.slice(turn.plain.upTo)));
      turn.plain.upTo = turn.text.length;
    }
    scrollDown();
  }

  function failure(turn, why, hint) {
    turn.bubble.classList.add("error");
    let line = turn.bubble.querySelector(".error-detail");
    if (!line) { line = el("div", { class: "error-detail" }); turn.bubble.appendChild(line); }
    line.textContent = visible("⚠ " + why);
    if (hint) turn.bubble.appendChild(el("div", { class: "error-hint", text: "What to do: " + hint }));
    scrollDown();
  }

  function toolLine(turn, callId, name, status) {
    unwait(turn.bubble);
    let line = turn.toolLines.get(callId);
    if (!line) {
      line = el("div", { class: "tool" });
      turn.tools.appendChild(line);
      turn.toolLines.set(callId, line);
    }
    line.dataset.status = status;
    line.dataset.name = name;
    // Only the tool's name and state reach the page (chat.tool), so the line promises nothing more: no ▸.
    const mark = status === "running" ? "⋯" : status === "done" ? "✓" : "✗";
    line.textContent = visible(name + " " + mark + " " + status);
    line.title = "a tool the assistant used";
  }

  function notice(text, cls) {
    messages.appendChild(el("div", { class: "notice " + (cls || ""), text }));
    scrollDown();
  }

  // ---- live events ------------------------------------------------------------------------------------
  const turnOf = (p) => (p && p.replyTo ? turns.get(p.replyTo) : null);
  H.on("chat.delta", (p) => { const t = turnOf(p); if (t) streamed(t, p.text); });
  H.on("chat.tool", (p) => { const t = turnOf(p); if (t) toolLine(t, p.callId, p.name, p.status); });
  H.on("chat.typing", (p) => { const t = turnOf(p); if (t) t.bubble.classList.toggle("typing", !!p.on); });
  H.on("chat.message", (p) => { const t = turnOf(p); if (t && !t.text) setText(t, p.text); else notice(p.text); });
  H.on("chat.error", (p) => {
    const t = turnOf(p);
    if (t) { t.bubble.classList.add("error"); setText(t, p.text); } else notice(p.text, "error");
  });
  H.on("chat.done", (p) => {
    const turn = turnOf(p);
    if (!turn) return;
    turn.bubble.classList.remove("typing");
    turn.body.removeAttribute("aria-busy");  // whole now: a screen reader reads it once
    unwait(turn.bubble);
    if (turn.frame || turn.plain) setText(turn, turn.text);  // the last deltas, and Markdown once at the end
    turn.bubble.dataset.done = p.status;
    if (p.status === "silent" && !turn.text) turn.bubble.remove();
    if (p.status === "interrupted") notice("(the reply was interrupted: the gateway stopped)");
    if (p.status === "error") explainFailure(turn, p.hint);
    turns.delete(p.replyTo);
    if (turn.after) turn.after();
    else sync();
    window.HermitSessions.refresh();
  });

  // The apology a channel gets says nothing useful to the owner; the transcript keeps the reason.
  // The hint (a key refused: the command that stores a new one; a server not running: how to start it) is
  // the gateway's, live: the transcript keeps the reason only.
  async function explainFailure(turn, hint) {
    try {
      const res = await H.request("chat.history", { sessionKey: session.key, agentId: session.agentId, limit: 3 });
      const last = res.messages.filter((m) => m.role === "assistant" && m.error).pop();
      failure(turn, "The reply failed: " + (last ? last.error : "see the gateway log (Operations → Log)"), hint);
    } catch (e) {
      failure(turn, "The reply failed (" + e.message + ")", hint);
    }
  }

  // ---- sending ---------------------------------------------------------------------------------------
  // Nothing typed is lost: the text stays in the box until the gateway has acknowledged the message (then it
  // goes, unless it was changed meanwhile); refused or not connected, it stays there with a note that says why,
  // to be sent again with Send — never queued to go by itself later, when it may no longer be meant.
  // Files chosen (attach.js) go first, in pieces, then the message naming them; refused, they stay with the text.
  async function send(text) {
    text = text.trim();
    const files = A.chosen();
    if (!text && !files.length) return true;
    if (!session) return unsent({ message: "not connected to the gateway yet", hint: H.signedOut() || "wait for it to connect" });
    if (!files.length && (text === "/new" || text.startsWith("/new ") || text === "/reset")) return newSession(text);
    for (const n of messages.querySelectorAll(".msg.elsewhere")) n.remove();  // this tab's turn now
    follow = true;  // what is sent, and its reply, are the newest: the view goes down to them
    const mine = bubble("user", text, { files: files.map((c) => ({ url: c.url, alt: c.file.name, text: "attached: " + c.file.name })) });
    const reply = bubble("assistant", "");
    reply.bubble.classList.add("typing");
    // Redrawn at every frame while it streams: a screen reader waits for the whole reply (the conversation is a
    // role=log, which would read each redrawn frame as new text).
    reply.body.setAttribute("aria-busy", "true");
    reply.mine = mine.bubble;
    reply.chat = session.agentId + "\n" + session.key;
    const id = "m" + Date.now().toString(36) + Math.random().toString(36).slice(2, 6);
    turns.set(id, reply);
    epoch++;
    try {
      let ids = [];
      if (files.length) {
        const bar = el("div", { class: "upload-progress", role: "status" });
        mine.bubble.appendChild(bar);
        const what = files.length === 1 ? "the file" : files.length + " files";
        ids = await A.upload(files, (f) => { bar.textContent = "sending " + what + "… " + Math.floor(f * 100) + "%"; });
        bar.remove();
      }
      await H.request("chat.send", { text, files: ids.length ? ids : undefined, sessionKey: session.key,
                                     agentId: session.agentId, sessionId: session.sessionId || undefined }, id);
      A.clear(files);
      own += 2;  // its message and the reply, drawn here live
      reply.acked = true;
      return true;
    } catch (e) {
      turns.delete(id);
      mine.bubble.remove();
      reply.bubble.remove();
      // The session ended meanwhile (/new in another tab): its current one is opened, the text kept to send there.
      if (e.code === "read_only" && !session.ended) await loadHistory();
      return unsent(e);
    }
  }

  function unsent(e) {
    for (const n of messages.querySelectorAll(".notice.unsent")) n.remove();
    notice("Not sent: " + e.message + (e.hint ? " — " + e.hint : "") + ". Your message is still in the box: send it again.",
           "error unsent");
    return false;
  }

  async function newSession(text) {
    if (!session) return unsent({ message: "not connected to the gateway yet", hint: H.signedOut() || "wait for it to connect" });
    const id = "n" + Date.now().toString(36);
    const turn = { bubble: el("div"), body: el("div"), tools: el("div"), text: "", toolLines: new Map(), frame: 0 };
    turn.after = () => loadHistory().then(() => { const rest = text.replace(/^\/(new|reset)\s*/, ""); if (rest) send(rest); });
    turns.set(id, turn);
    epoch++;
    try {
      await H.request("sessions.new", { sessionKey: session.key, agentId: session.agentId, sessionId: session.sessionId || undefined }, id);
      return true;
    } catch (e) { turns.delete(id); notice("Could not start a new session: " + e.message, "error"); H.banner(e.message, e.hint); return false; }
  }

  // ---- history and sessions ----------------------------------------------------------------------------
  // `images`: with the photos of the owner's turns, asked for only when the history is drawn: named by their
  // SHA-256 (`imageRefs`), each brought once by chat.image and kept for the tab's life (photo() below); from a
  // gateway that has no chat.image (hello-ok without `imageRefs`), sent whole each time, as it sends them.
  function fetchHistory(images) {
    const params = { sessionKey: session.key, agentId: session.agentId, limit };
    const hello = H.hello();
    if (images && hello && hello.imageRefs) params.imageRefs = true; else params.images = !!images;
    if (session.ended) params.sessionId = session.sessionId;
    return H.request("chat.history", params);
  }

  async function loadHistory() {
    let res;
    try {
      res = await fetchHistory(true);
    } catch (e) {
      messages.replaceChildren();
      notice("Could not open " + session.key + ": " + e.message, "error");
      H.banner(e.message, e.hint);
      const hello = H.hello();
      if (e.code === "bad_params" && hello && (session.ended || session.key !== hello.mainSession)) {
        session = { key: hello.mainSession, agentId: hello.defaultAgent };  // gone (an agent removed): back home
        remember();
        return loadHistory();
      }
      return;
    }
    render(res);
  }

  // What is drawn of the open session: its id, how many history items and the last one, so a change seen
  // elsewhere is drawn only when there is something new (a tab's own turn is drawn live already).
  let drawn = null;
  const lastOf = (res) => {
    const m = res.messages[res.messages.length - 1];
    if (!m) return "null";
    const { images, ...rest } = m;  // compared without its photos (a look for changes asks for none)
    return JSON.stringify(rest);
  };
  const drawnOf = (res) => ({ sessionId: res.sessionId, total: res.total, last: lastOf(res) });

  function render(res) {
    drawn = drawnOf(res);
    busyElsewhere = !!res.busy;
    waitingSlot = !!res.waiting;
    const ended = res.ended || null;
    session = { key: res.sessionKey, agentId: res.agentId, sessionId: res.sessionId, ended: !!ended, mode: res.mode,
                why: res.why || "", kind: res.kind, label: res.label };
    remember();
    $("session-title").textContent = visible(res.label + (ended ? " — ended session" : ""));
    $("session-title").title = visible(res.sessionKey + (res.sessionId ? " · session " + res.sessionId : ""));
    $("session-kind").textContent = window.HermitSessions.KIND[res.kind] || res.kind;
    $("session-kind").dataset.kind = res.kind;
    const readOnly = res.mode !== "chat";
    document.body.classList.toggle("read-only", readOnly);
    document.body.classList.toggle("ended-session", !!ended);
    readOnlyNote(readOnly, res, ended);
    input.disabled = readOnly;
    $("send").disabled = readOnly;
    A.enable(!readOnly);
    $("new-session").disabled = readOnly;
    input.placeholder = ended ? "This session has ended: read-only" : readOnly ? "Read-only in the web app" : "Message Hermit";
    showDraft(readOnly);
    // A turn of this tab's own sent before this history came (the page had only just connected) stays drawn
    // after it: the gateway answers a socket's requests in order, so the history holds none of it yet.
    const live = res.ended ? [] : [...turns.values()].filter((t) => t.mine && t.mine.isConnected &&
                                                               t.chat === res.agentId + "\n" + res.sessionKey);
    follow = true;  // a session drawn afresh opens at its newest message
    messages.replaceChildren();
    const more = (res.total || 0) - res.messages.length;
    if (more > 0) {
      messages.appendChild(el("button", {
        type: "button", class: "earlier-messages", disabled: limit >= MOST,
        text: limit >= MOST ? more + " earlier messages are not shown here (hermit sessions show has them all)"
                            : "Show earlier messages (" + more + " more)",
        onclick: () => { limit = Math.min(MOST, limit + PAGE * Math.ceil(limit / PAGE)); loadHistory().then(() => { messages.scrollTop = 0; }); },
      }));
    }
    for (const m of res.messages) {
      if (m.role === "notice") { notice(m.text); continue; }
      const failed = m.role === "assistant" && m.error;
      const b = bubble(m.role, m.text || (failed ? "Sorry — this reply failed." : ""),
        { error: failed, sender: m.sender && m.sender.label, files: (m.images || []).map((p) => picture(p, res)),
          filed: m.files });
      b.bubble.dataset.done = "history";
      for (const t of m.tools || []) toolLine(b, t.callId, t.name, t.status);
      if (failed) failure(b, "The reply failed: " + m.error);
    }
    for (const t of live) messages.append(t.mine, t.bubble);
    own = 2 * live.filter((t) => t.acked).length;
    if (live.length) scrollDown();
    else if (!res.messages.length) notice(readOnly ? "No messages yet." : "No messages yet — say hello.", "placeholder");
    replying();
    window.HermitSessions.highlight();
  }

  // A user turn's image as chat.history gives it (the owner's own sessions of `res`): named (`sha256`: brought
  // by photo()), or whole; drawn from a data: URL of a type an <img> draws.
  function picture(p, res) {
    const alt = "photo sent with this message";
    if (p.omitted || !/^image\/(jpeg|png|gif|webp)$/.test(p.mediaType)) {
      return { url: "", text: "(an earlier photo, not loaded with the history: too many images to send at once)" };
    }
    if (p.sha256) {
      const url = kept(p.sha256);
      return url ? { alt, url } : { alt, load: () => photo(p.sha256, res) };
    }
    return { url: "data:" + p.mediaType + ";base64," + p.data, alt };
  }

  // The photos brought so far, by the SHA-256 of their bytes (a data: URL), in this tab's memory only — a photo
  // is private, and gone when the tab is. At most PHOTO_CACHE bytes of them are kept (a week of photos on a
  // phone would otherwise stay in the tab until the browser kills it): the least recently drawn go first, and
  // are asked for again if drawn again. One that failed is asked for again when next drawn.
  const PHOTO_CACHE = Number(localStorage.getItem("hermit.photoCacheBytes")) || 32 * 1024 * 1024;
  const photos = { asked: new Map(), ready: new Map(), bytes: 0 };  // sha256 -> the request under way; -> its URL
  function kept(sha256) {
    const url = photos.ready.get(sha256);
    if (url) { photos.ready.delete(sha256); photos.ready.set(sha256, url); }  // the most recently drawn: last
    return url;
  }
  function keep(sha256, url) {
    if (photos.ready.has(sha256)) photos.bytes -= photos.ready.get(sha256).length;
    photos.ready.delete(sha256);
    photos.ready.set(sha256, url);
    photos.bytes += url.length;
    for (const [old, u] of photos.ready) {  // oldest first; the one just brought stays, however big
      if (photos.bytes <= PHOTO_CACHE || old === sha256) break;
      photos.ready.delete(old);
      photos.bytes -= u.length;
    }
  }
  function photo(sha256, res) {
    let got = photos.asked.get(sha256);
    if (!got) {
      const params = { sessionKey: res.sessionKey, agentId: res.agentId, sha256 };
      if (res.ended) params.sessionId = res.sessionId;
      got = H.request("chat.image", params).then((p) => {
        const url = "data:" + p.mediaType + ";base64," + p.data;
        keep(sha256, url);
        return url;
      });
      got.finally(() => photos.asked.delete(sha256)).catch(() => {});
      photos.asked.set(sha256, got);
    }
    return got;
  }

  // ---- the open session changed elsewhere (another tab, `hermit chat`, a channel) ---------------------------
  // The gateway says `session.changed` when the open session's transcript differs from what this tab last
  // loaded; the tab takes the history again and draws it if it holds more than what is drawn. A turn of the
  // tab's own is drawn live: `own` counts the items it added (its message and the reply), so at its end the
  // history matches without a redraw — no duplicate; `epoch` counts own turns started, so a look that began
  // before one never draws over it. `busy`: a turn runs there now (a "…" reply to come). `waiting`: the session's
  // next turn waits for one of its agent's turn slots (the agent runs as many turns as it may at once, the owner's
  // first): its reply, this tab's or another's, says "waiting for a free turn…" instead of "…" until it starts.
  let busyElsewhere = false, waitingSlot = false, syncing = false, again = false, own = 0, epoch = 0;
  const ownTurn = () => turns.size > 0;

  function replying() {
    for (const n of messages.querySelectorAll(".msg.elsewhere")) n.remove();
    if ((busyElsewhere || waitingSlot) && !ownTurn() && session && !session.ended) {
      const b = bubble("assistant", "");
      b.bubble.classList.add("typing", "elsewhere");
      b.bubble.title = "a reply is being written (sent from elsewhere)";
    }
    waits();
  }

  // The reply still to start (an empty "typing" bubble: the first one, as the session's turns go in order) says
  // it waits while the session's turn does.
  function waits() {
    const next = waitingSlot ? [...messages.querySelectorAll(".msg.assistant.typing")]
      .find((b) => !b.querySelector(".body").textContent && !b.querySelector(".tool")) : null;
    for (const b of messages.querySelectorAll(".msg.assistant.waiting")) if (b !== next) unwait(b);
    if (next && !next.classList.contains("waiting")) {
      next.classList.add("waiting");
      next.appendChild(el("div", { class: "wait-note", role: "status",
                                   text: "waiting for a free turn… (the assistant is busy with other chats)" }));
    }
  }
  function unwait(b) {
    b.classList.remove("waiting");
    for (const n of b.querySelectorAll(".wait-note")) n.remove();
  }

  async function sync() {
    if (syncing) { again = true; return; }
    syncing = true;
    try {
      do {
        again = false;
        if (!session || session.ended || ownTurn()) break;  // the turn's end looks again
        const at = epoch;
        const res = await fetchHistory();
        if (ownTurn() || epoch !== at || session.ended || res.sessionKey !== session.key) continue;
        const now = drawnOf(res);
        const same = drawn && (now.sessionId === drawn.sessionId || (!drawn.sessionId && own > 0));
        if (same && now.total === drawn.total + own && (own > 0 || now.last === drawn.last)) {
          drawn = now;  // all of it is drawn already
          own = 0;
          busyElsewhere = !!res.busy;
          waitingSlot = !!res.waiting;
          replying();
        } else {
          const full = await fetchHistory(true);  // something new to draw: with its photos
          if (ownTurn() || epoch !== at || session.ended || full.sessionKey !== session.key) continue;
          const bottom = messages.scrollHeight - messages.scrollTop - messages.clientHeight < 80;
          const top = messages.scrollTop;
          render(full);
          if (!bottom) { messages.scrollTop = top; follow = false; jump.hidden = false; }  // reading further up: stay there
        }
      } while (again);
    } catch (e) {  // offline: the reconnect loads the history again
    } finally { syncing = false; }
  }

  H.on("session.changed", (p) => {
    if (!session || session.ended || p.sessionKey !== session.key || p.agentId !== session.agentId) return;
    busyElsewhere = !!p.busy;
    waitingSlot = !!p.waiting;
    if (!ownTurn()) sync(); else waits();
  });
  let listSoon = 0;
  H.on("sessions.changed", () => {
    clearTimeout(listSoon);
    listSoon = setTimeout(() => window.HermitSessions.refresh(), 200);
  });

  // Why the open session takes no message: an ended one says when and why it ended and offers the chat's current
  // session; another read-only one says whose chat it is.
  function readOnlyNote(readOnly, res, ended) {
    const note = $("readonly-note");
    note.hidden = !readOnly;
    if (!readOnly) { note.replaceChildren(); return; }
    if (!ended) { note.replaceChildren(el("span", { text: "Read-only here — " + res.why })); return; }
    note.replaceChildren(
      el("span", { class: "ended-label", text: "Ended session" }), " ",
      el("span", { class: "ended-why", text: "This session ended on " + stamp(ended.endedAt) + " (" + ended.reason + "); it started " +
                         stamp(ended.startedAt) + ". It is kept as it was: nothing more can be added to it." }), " ",
      el("button", { type: "button", id: "open-current", text: "Open the current session",
                     onclick: () => open({ key: res.sessionKey, agentId: res.agentId }) }));
  }

  function open(s) {
    session = { key: s.key, agentId: s.agentId, sessionId: s.sessionId, ended: !!s.ended };
    limit = PAGE;
    H.show("chat");
    loadHistory();
  }

  let sending = false;
  $("composer").addEventListener("submit", async (e) => {
    e.preventDefault();
    const t = input.value;
    if (sending || (!t.trim() && !A.chosen().length)) return;
    sending = true;
    let ok = false;
    try { ok = await send(t); } finally { sending = false; }
    if (ok && input.value === t) { input.value = ""; keepDraft(); }
    if (ok) for (const n of messages.querySelectorAll(".notice.unsent")) n.remove();
  });
  input.addEventListener("input", keepDraft);
  input.addEventListener("keydown", (e) => {
    if (e.key !== "Enter" || e.isComposing) return;
    if (e.ctrlKey || e.metaKey || (!e.shiftKey && !touch)) { e.preventDefault(); $("composer").requestSubmit(); }
  });
  $("new-session").addEventListener("click", () => { H.show("chat"); newSession("/new"); });

  H.onConnected((hello) => {
    if (!session) session = { key: hello.mainSession, agentId: hello.defaultAgent };
    loadHistory().then(window.HermitSessions.refresh);
  });
  H.onView("chat", () => {});
  window.HermitChat = { loadHistory, open, current: () => session,
                        photoCache: () => ({ count: photos.ready.size, bytes: photos.bytes, cap: PHOTO_CACHE }) };
})();
