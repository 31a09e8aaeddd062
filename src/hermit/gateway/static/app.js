// The Hermit web chat: one WebSocket to the gateway (§15 frames), streamed replies, tool activity,
// sessions, /new, reconnect with history reload. No framework, no build step, no network beyond the gateway.
"use strict";
(function () {
  const $ = (id) => document.getElementById(id);
  const messages = $("messages"), input = $("input"), statusEl = $("status"), sessionsEl = $("sessions");

  // The token arrives once in the URL; keep it for this tab and take it out of the address bar.
  const params = new URLSearchParams(location.search);
  if (params.has("token")) {
    sessionStorage.setItem("hermit.token", params.get("token"));
    history.replaceState(null, "", location.pathname);
  }
  const token = sessionStorage.getItem("hermit.token") || "";
  let clientId = localStorage.getItem("hermit.clientId");
  if (!clientId) {
    clientId = "c" + Array.from(crypto.getRandomValues(new Uint8Array(12)), (b) => b.toString(16).padStart(2, "0")).join("");
    localStorage.setItem("hermit.clientId", clientId);
  }

  let ws = null, connected = false, nextId = 1, retry = 0, stopped = false;
  let session = sessionStorage.getItem("hermit.session") || null;
  const pending = new Map();   // request id -> {resolve, reject}
  const turns = new Map();     // message id (replyTo) -> {bubble, body, text, tools}

  function setStatus(text, cls) { statusEl.textContent = text; statusEl.className = "status " + (cls || ""); }

  const newId = () => "r" + (nextId++) + "-" + Date.now().toString(36);

  // The request id of chat.send is also the message id its reply events carry (replyTo).
  function request(method, params, id) {
    return new Promise((resolve, reject) => {
      if (!ws || ws.readyState !== WebSocket.OPEN) { reject(new Error("not connected")); return; }
      id = id || newId();
      pending.set(id, { resolve, reject, method });
      ws.send(JSON.stringify({ type: "req", id, method, params: params || {} }));
    });
  }

  function bubble(role, text, opts) {
    const div = document.createElement("div");
    div.className = "msg " + role + (opts && opts.error ? " error" : "");
    const body = document.createElement("div");
    body.className = "body";
    if (role === "assistant") body.appendChild(window.HermitMarkdown.render(text || ""));
    else body.textContent = text || "";
    const tools = document.createElement("div");
    tools.className = "tools";
    div.appendChild(tools);
    div.appendChild(body);
    messages.appendChild(div);
    messages.scrollTop = messages.scrollHeight;
    return { bubble: div, body, tools, text: text || "", toolLines: new Map() };
  }

  function setText(turn, text) {
    turn.text = text;
    turn.body.replaceChildren(window.HermitMarkdown.render(text));
    messages.scrollTop = messages.scrollHeight;
  }

  function toolLine(turn, callId, name, status) {
    let line = turn.toolLines.get(callId);
    if (!line) {
      line = document.createElement("div");
      line.className = "tool";
      turn.tools.appendChild(line);
      turn.toolLines.set(callId, line);
    }
    line.dataset.status = status;
    line.dataset.name = name;
    const mark = status === "running" ? "⋯" : status === "done" ? "✓" : "✗";
    line.textContent = "▸ " + name + " " + mark + " " + status;
  }

  function notice(text, cls) {
    const div = document.createElement("div");
    div.className = "notice " + (cls || "");
    div.textContent = text;
    messages.appendChild(div);
    messages.scrollTop = messages.scrollHeight;
  }

  function onEvent(ev, p) {
    const turn = p && p.replyTo ? turns.get(p.replyTo) : null;
    if (ev === "chat.delta" && turn) setText(turn, turn.text + p.text);
    else if (ev === "chat.tool" && turn) toolLine(turn, p.callId, p.name, p.status);
    else if (ev === "chat.typing" && turn) turn.bubble.classList.toggle("typing", !!p.on);
    else if (ev === "chat.message") {
      if (turn && !turn.text) setText(turn, p.text); else notice(p.text);
    } else if (ev === "chat.error") {
      if (turn) { turn.bubble.classList.add("error"); setText(turn, p.text); } else notice(p.text, "error");
    } else if (ev === "chat.done" && turn) {
      turn.bubble.classList.remove("typing");
      turn.bubble.dataset.done = p.status;
      if (p.status === "silent" && !turn.text) turn.bubble.remove();
      if (p.status === "interrupted") notice("(the reply was interrupted: the gateway stopped)");
      turns.delete(p.replyTo);
      if (turn.after) turn.after();
      refreshSessions();
    }
  }

  async function send(text) {
    text = text.trim();
    if (!text) return;
    if (text === "/new" || text.startsWith("/new ") || text === "/reset") return newSession(text);
    bubble("user", text);
    const reply = bubble("assistant", "");
    reply.bubble.classList.add("typing");
    const id = newId();
    turns.set(id, reply);
    try {
      await request("chat.send", { text, sessionKey: session }, id);
    } catch (e) {
      turns.delete(id);
      reply.bubble.classList.add("error");
      setText(reply, "Not sent: " + e.message);
    }
  }

  async function newSession(text) {
    const id = newId();
    const turn = { bubble: document.createElement("div"), body: document.createElement("div"),
                   tools: document.createElement("div"), text: "", toolLines: new Map() };
    turn.after = () => loadHistory().then(() => { const rest = text.replace(/^\/(new|reset)\s*/, ""); if (rest) send(rest); });
    turns.set(id, turn);
    try {
      await request("sessions.new", { sessionKey: session }, id);
    } catch (e) { turns.delete(id); notice("Could not start a new session: " + e.message, "error"); }
  }

  async function loadHistory() {
    const res = await request("chat.history", { sessionKey: session });
    session = res.sessionKey;
    sessionStorage.setItem("hermit.session", session);
    $("session-title").textContent = session;
    messages.replaceChildren();
    for (const m of res.messages) {
      if (m.role === "notice") { notice(m.text); continue; }
      const b = bubble(m.role, m.text, { error: m.error });
      b.bubble.dataset.done = "history";
      for (const t of m.tools || []) toolLine(b, t.callId, t.name, t.status);
    }
    highlightSession();
  }

  function highlightSession() {
    for (const li of sessionsEl.children) li.classList.toggle("active", li.dataset.key === session);
  }

  async function refreshSessions() {
    let res;
    try { res = await request("sessions.list"); } catch (e) { return; }
    sessionsEl.replaceChildren();
    for (const s of res.sessions) {
      const li = document.createElement("li");
      li.dataset.key = s.key;
      li.textContent = (s.main ? "★ " : "") + s.key;
      li.title = "session " + s.sessionId + ", updated " + s.updatedAt;
      li.addEventListener("click", () => { session = s.key; loadHistory(); });
      sessionsEl.appendChild(li);
    }
    highlightSession();
  }

  function connect() {
    if (!token) { setStatus("no token: open the URL printed by `hermit dashboard`", "bad"); return; }
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    ws = new WebSocket(proto + "//" + location.host + "/ws");
    ws.onopen = () => {
      ws.send(JSON.stringify({ type: "req", id: "connect", method: "connect",
                               params: { token, clientId, client: "hermit-webchat/1" } }));
    };
    ws.onmessage = (msg) => {
      let f;
      try { f = JSON.parse(msg.data); } catch (e) { return; }
      if (f.type === "res" && f.id === "connect") {
        if (f.ok) {
          connected = true; retry = 0;
          setStatus("connected", "ok");
          if (!session) session = f.payload.mainSession;
          loadHistory().then(refreshSessions).catch((e) => notice("Could not load history: " + e.message, "error"));
        } else {
          setStatus(f.error.message + " — " + f.error.hint, "bad");
        }
      } else if (f.type === "res") {
        const p = pending.get(f.id);
        if (p) {
          pending.delete(f.id);
          if (f.ok) p.resolve(f.payload); else p.reject(new Error(f.error.message));
        } else if (!f.ok) {
          notice(f.error.message, "error");
        }
      } else if (f.type === "event") {
        onEvent(f.event, f.payload);
      }
    };
    ws.onclose = (ev) => {
      connected = false;
      for (const p of pending.values()) p.reject(new Error("connection lost"));
      pending.clear();
      if (ev.code === 4401 || ev.code === 1008) {
        stopped = true;
        setStatus(ev.code === 4401 ? "refused: wrong token — open the URL printed by `hermit dashboard`"
                                   : "refused: this page's origin may not use the gateway", "bad");
        return;
      }
      if (stopped) return;
      const wait = Math.min(10000, 500 * Math.pow(2, retry++));
      setStatus("disconnected — reconnecting in " + Math.round(wait / 1000) + " s", "warn");
      setTimeout(connect, wait);
    };
  }

  $("composer").addEventListener("submit", (e) => { e.preventDefault(); const t = input.value; input.value = ""; send(t); });
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && !e.shiftKey) { e.preventDefault(); $("composer").requestSubmit(); }
  });
  $("new-session").addEventListener("click", () => newSession("/new"));
  window.hermitChat = { isConnected: () => connected };
  connect();
})();
