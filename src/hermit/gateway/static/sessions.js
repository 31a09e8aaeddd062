// The session list in the sidebar: every chat's current session (kind, last activity, read-only or not), under
// it the chat's earlier sessions — ended by /new, a daily or idle reset, a cron job's next run — behind
// "Earlier sessions (N)", newest first with when each started and ended, why and its size, and a dot on a
// session that changed since this tab last showed it. An ended session opens read-only (chat.js).
"use strict";
(function () {
  const H = window.Hermit, { el, when, stamp } = window.HermitDom;
  const sessionsEl = document.getElementById("sessions");
  const KIND = { main: "main", dm: "DM", group: "group", cron: "cron", subagent: "sub-agent", cli: "CLI" };
  const ORPHANS = "\n(other)";   // the ended sessions of chats that have no current session
  const chatOf = (s) => s.agentId + "\n" + s.key;
  const expanded = new Set();    // chats whose earlier sessions are shown (kept across refreshes)
  const seen = new Map();        // chat -> the updatedAt this tab last saw of its current session
  const unread = new Set();      // chats whose current session changed while another one was open
  let lists = 0;                 // ids of the ended-session lists, for their toggles' aria-controls

  const current = () => window.HermitChat.current() || {};
  const isOpen = (s) => { const c = current(); return !c.ended && c.key === s.key && c.agentId === s.agentId; };

  function size(e) {
    const kb = e.bytes >= 1048576 ? (e.bytes / 1048576).toFixed(1) + " MB" : Math.max(1, Math.round(e.bytes / 1024)) + " KB";
    return e.messages + (e.messages === 1 ? " message" : " messages") + " · " + kb;
  }

  // Enter or Space on a row that is a button (a li, to keep the list a list).
  const keys = (fn) => (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); fn(); } };

  function row(s) {
    const open = () => window.HermitChat.open({ key: s.key, agentId: s.agentId });
    return el("li", {
      dataset: { key: s.key, agent: s.agentId, kind: s.kind, mode: s.mode },
      class: unread.has(chatOf(s)) ? "unread" : null,
      title: s.key + " · session " + s.sessionId + (s.mode !== "chat" ? " · read-only" : ""),
      tabindex: "0", role: "button", onclick: open, onkeydown: keys(open),
    }, el("span", { class: "s-label", text: s.label }),
       el("span", { class: "s-meta" },
          el("span", { class: "badge", dataset: { kind: s.kind }, text: KIND[s.kind] || s.kind }),
          s.mode !== "chat" ? el("span", { class: "badge ro", text: "read-only" }) : null,
          unread.has(chatOf(s)) ? el("span", { class: "badge new", text: "new", title: "changed since you looked" }) : null,
          el("span", { class: "s-when", text: s.unstarted ? "no messages yet" : when(s.updatedAt) })));
  }

  // Each agent's main session, also before its first message: with several agents, how the web app reaches one
  // that nobody has talked to yet (its row says so; the first message starts it). Its key is the gateway's
  // (hello-ok `mainSessions`); a gateway that does not say has the key scheme built here.
  const mainOf = (hello, a) => (hello.mainSessions && hello.mainSessions[a]) ||
    (a === hello.defaultAgent ? hello.mainSession : "agent:" + a + ":main");
  function unstarted(sessions) {
    const hello = H.hello();
    if (!hello || !hello.agents) return [];
    const mains = hello.agents.map((a) => ({
      key: mainOf(hello, a), agentId: a, kind: "main", mode: "chat",
      label: a === hello.defaultAgent ? "Main session" : "Main session (" + a + ")", sessionId: "not started",
      updatedAt: null, unstarted: true }));
    return mains.filter((m) => !sessions.some((s) => s.agentId === m.agentId && s.key === m.key));
  }

  function endedRow(e, withLabel) {
    const open = () => window.HermitChat.open({ key: e.key, agentId: e.agentId, sessionId: e.sessionId, ended: true });
    return el("li", {
      class: "ended", dataset: { endedKey: e.key, agent: e.agentId, sessionId: e.sessionId },
      title: e.key + " · session " + e.sessionId + " · ended, read-only",
      tabindex: "0", role: "button", onclick: open, onkeydown: keys(open),
    }, el("span", { class: "s-label", text: (withLabel ? e.label + " — ended " : "Ended ") + stamp(e.endedAt) + " (" + e.reason + ")" }),
       el("span", { class: "s-meta", text: "started " + stamp(e.startedAt) + " · " + size(e) }));
  }

  function earlier(chat, list, title, withLabels) {
    const open = expanded.has(chat), id = "ended-" + (++lists);
    const items = el("ul", { class: "ended-list", id, hidden: !open, "aria-label": title },
                     list.map((e) => endedRow(e, withLabels)));
    const toggle = el("button", {
      type: "button", class: "earlier-toggle", "aria-expanded": open ? "true" : "false", "aria-controls": id,
      text: (open ? "▾ " : "▸ ") + title + " (" + list.length + ")",
      onclick: () => {
        if (expanded.has(chat)) expanded.delete(chat); else expanded.add(chat);
        const now = expanded.has(chat);
        items.hidden = !now;
        toggle.setAttribute("aria-expanded", now ? "true" : "false");
        toggle.textContent = (now ? "▾ " : "▸ ") + title + " (" + list.length + ")";
      },
    });
    return el("li", { class: "earlier", dataset: { forKey: chat } }, toggle, items);
  }

  async function refresh() {
    let res;
    try { res = await H.request("sessions.list", { all: true }); } catch (e) { return; }
    const byChat = new Map();
    for (const e of res.ended || []) {
      const chat = chatOf(e);
      if (!byChat.has(chat)) byChat.set(chat, []);
      byChat.get(chat).push(e);
    }
    const rows = [];
    for (const s of res.sessions) {
      const chat = chatOf(s), before = seen.get(chat);
      if (isOpen(s)) unread.delete(chat);
      else if (before !== undefined && s.updatedAt !== before) unread.add(chat);
      seen.set(chat, s.updatedAt);
      rows.push(row(s));
      const past = byChat.get(chat);
      byChat.delete(chat);
      if (past) rows.push(earlier(chat, past, "Earlier sessions", false));
    }
    rows.push(...unstarted(res.sessions).map(row));
    const orphans = [].concat(...byChat.values());
    if (orphans.length) rows.push(earlier(ORPHANS, orphans, "Other ended sessions", true));
    window.HermitDom.swap(sessionsEl, rows);
    highlight();
  }

  function highlight() {
    const c = current();
    for (const li of sessionsEl.querySelectorAll("li[data-key], li.ended")) {
      const on = li.classList.contains("ended") ? !!c.ended && li.dataset.sessionId === c.sessionId
        : !c.ended && li.dataset.key === c.key && li.dataset.agent === c.agentId;
      li.classList.toggle("active", on);
      li.setAttribute("aria-current", on ? "true" : "false");
      if (on && li.classList.contains("unread")) {  // looked at now
        unread.delete(li.dataset.agent + "\n" + li.dataset.key);
        li.classList.remove("unread");
        for (const b of li.querySelectorAll(".badge.new")) b.remove();
      }
      if (on && li.classList.contains("ended")) {  // an ended session opened (after a reload too): its list shown
        const group = li.closest("li.earlier");
        if (group && !expanded.has(group.dataset.forKey)) group.querySelector(".earlier-toggle").click();
      }
    }
  }

  window.HermitSessions = { refresh, highlight, KIND };
})();
