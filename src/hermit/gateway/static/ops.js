// The operations view: cron jobs (next runs, run now, enable/disable, run log, add, remove), the heartbeat,
// channels' status, pending pairing requests (approve/deny) and approved contacts, and the gateway log.
// Refreshed every few seconds while it is open. "Sign in a phone" asks the gateway for a new one-time sign-in
// link each time it is opened (tickets.create) and shows it as a QR code (an SVG data: URI the gateway drew).
"use strict";
(function () {
  const H = window.Hermit, { el, when, stamp, visible, swap: put } = window.HermitDom;
  const $ = (id) => document.getElementById(id);
  const openRuns = new Set();   // job ids whose run log is unfolded
  let timer = null;

  function say(where, text, cls) { const n = $(where); n.textContent = visible(text || ""); n.className = "say " + (cls || ""); }

  async function act(method, params, where, done) {
    try {
      const res = await H.call(method, params);
      // A warning (a job aimed at someone not let in: its runs are skipped) is said with what was done.
      if (where) say(where, (done ? done(res) : "done") + (res && res.warning ? " — warning: " + res.warning : ""), res && res.warning ? "warn" : "ok");
      await refresh();
      return res;
    } catch (e) {
      if (where) say(where, e.message + (e.hint ? " — " + e.hint : ""), "bad");
      return null;
    }
  }

  // ---- scheduler and cron jobs -----------------------------------------------------------------------
  async function loadScheduler() {
    let st;
    try { st = await H.request("cron.status"); } catch (e) { say("heartbeat", e.message, "bad"); return; }
    const sched = st.scheduler;
    if (typeof sched !== "object") { $("heartbeat").replaceChildren(el("span", { text: String(sched) })); return; }
    const rows = Object.entries(sched.agents || {}).map(([agent, a]) => {
      const hb = a.heartbeat;
      const last = hb.last ? "last " + hb.last.status + " " + when(hb.last.at) + (hb.last.reason ? " (" + hb.last.reason + ")" : "") : "no beat yet";
      return el("div", { class: "kv", dataset: { agent } },
        el("span", { class: "k", text: "heartbeat · " + agent }),
        el("span", { class: "v", text: hb.every_minutes ? "every " + hb.every_minutes + " min · next " + (hb.next ? when(hb.next) + " (" + stamp(hb.next) + ")" : "—")
          + (hb.active_hours ? " · active " + hb.active_hours : "") + " · " + last : "off (heartbeat.every_minutes: 0)" }));
    });
    rows.push(el("div", { class: "kv" }, el("span", { class: "k", text: "scheduler" }),
      el("span", { class: "v", text: sched.ticker + " · " + st.jobs + " job(s), " + st.enabled + " enabled"
        + (st.next ? " · next: " + (st.next.name || st.next.id) + " " + when(st.next.at) : "") })));
    $("heartbeat").replaceChildren(...rows);
  }

  async function loadJobs() {
    let res;
    try { res = await H.request("cron.list"); } catch (e) { say("cron-note", e.message, "bad"); return; }
    const cards = [];
    for (const j of res.jobs) {
      const runs = el("ol", { class: "runs", hidden: !openRuns.has(j.id) });
      cards.push(el("li", { class: "job" + (j.enabled ? "" : " disabled"), dataset: { job: j.id } },
        el("div", { class: "j-head" },
          el("strong", { text: j.name || j.id }), j.name ? el("span", { class: "muted", text: " " + j.id }) : null,
          el("span", { class: "badge", text: j.enabled ? "enabled" : "disabled" }),
          j.running ? el("span", { class: "badge live", text: "running" }) : null),
        el("div", { class: "j-line", text: j.schedule_text + " · " + j.timezone + " · " + (j.session_target === "main" ? "main session" : "own session cron:" + j.id)
          + (j.delivery_text !== "none" ? " · delivers to " + j.delivery_text : "") }),
        el("div", { class: "j-line", text: "next: " + (j.next_runs.length ? j.next_runs.map(stamp).join(" · ") : "—") }),
        el("div", { class: "j-line", text: "last: " + (j.last_run_at ? (j.last_status || "?") + " " + when(j.last_run_at) : "never")
          + (j.last_error ? " — " + j.last_error : "") + (j.run_requested ? " · run queued" : "") }),
        j.warning ? el("div", { class: "j-warning say warn", role: "note", text: "⚠ " + j.warning }) : null,
        el("div", { class: "actions" },
          el("button", { type: "button", class: "run-now", text: "Run now", onclick: () => { openRuns.add(j.id); act("cron.run", { id: j.id }, "cron-note", (r) => j.id + ": " + r.note); } }),
          el("button", { type: "button", class: "toggle", text: j.enabled ? "Disable" : "Enable", onclick: () => act("cron.update", { id: j.id, enabled: !j.enabled }, "cron-note", () => j.id + (j.enabled ? " disabled" : " enabled")) }),
          el("button", { type: "button", class: "show-runs", text: openRuns.has(j.id) ? "Hide runs" : "Runs", onclick: () => { if (openRuns.has(j.id)) openRuns.delete(j.id); else openRuns.add(j.id); loadJobs(); } }),
          el("button", { type: "button", class: "remove danger", text: "Remove", onclick: () => { if (confirm(visible("Remove job " + j.id + "?"))) act("cron.remove", { id: j.id }, "cron-note", () => j.id + " removed"); } })),
        runs));
      if (openRuns.has(j.id)) loadRuns(j.id, runs);
    }
    for (const bad of res.invalid || []) cards.push(el("li", { class: "job invalid", text: "invalid job #" + bad.index + ": " + bad.error }));
    put($("jobs"), cards.length ? cards : [el("li", { class: "empty", text: "no cron jobs — add one below, or with `hermit cron add`" })]);
  }

  async function loadRuns(id, list) {
    let res;
    try { res = await H.request("cron.runs", { id, limit: 10 }); } catch (e) { list.replaceChildren(el("li", { text: e.message })); return; }
    list.replaceChildren(...(res.runs.length ? res.runs.map((r) => el("li", { class: "run", dataset: { status: r.status, trigger: r.trigger } },
      el("span", { class: "badge", dataset: { status: r.status }, text: r.status }),
      el("span", { text: " " + r.trigger + " · " + stamp(r.started_at) + (r.delivered ? " · delivered" : "") }),
      r.error ? el("div", { class: "run-error", text: r.error }) : null,
      r.reply ? el("div", { class: "run-reply", text: r.reply }) : null)) : [el("li", { class: "empty", text: "no runs yet" })]));
  }

  async function addJob(e) {
    e.preventDefault();
    const kind = $("job-kind").value, value = $("job-when").value.trim();
    const schedule = kind === "cron" ? { kind, expr: value }
      : kind === "every" ? { kind, every_ms: Math.round(parseFloat(value) * 60000) } : { kind, at: value };
    const job = { name: $("job-name").value.trim(), message: $("job-message").value.trim(), schedule,
                  agent_id: (H.hello() || {}).defaultAgent || "main" };
    const res = await act("cron.add", { job }, "job-add-note", (r) => "added " + r.job.id + (r.next_runs.length ? " · first run " + stamp(r.next_runs[0]) : ""));
    if (res) $("job-add").reset();
  }

  // ---- channels, pairing, log ----------------------------------------------------------------------------
  async function loadChannels() {
    let res;
    try { res = await H.request("channels.status"); } catch (e) { return; }
    put($("channels"), res.channels.map((c) => el("li", { class: "channel", dataset: { channel: c.channel, account: c.account_id } },
      el("span", { class: "dot " + (c.connected ? "on" : "off"), title: c.connected ? "connected" : "disconnected" }),
      el("strong", { text: c.channel + "/" + c.account_id }),
      el("span", { text: " " + (c.connected ? "connected" : "disconnected") + " · in " + c.messages_in + " · out " + c.messages_out }),
      c.last_error ? el("div", { class: "run-error", text: "last error: " + c.last_error }) : null)));
  }

  async function loadPairing() {
    let res;
    try { res = await H.request("pairing.list"); } catch (e) { return; }
    // A name and a username are the sender's own words (cleaned by the server: letters, digits, spaces and a
    // few marks), so they are shown apart from what the gateway says about the request, muted and quoted.
    const who = (r) => r.senderId + (r.senderName ? " “" + r.senderName + "”" : "");
    const chosen = (r) => r.senderName || r.senderUsername ? el("div", { class: "pair-name muted" }, "name they chose: ",
      r.senderName ? ["“", el("span", { class: "chosen", text: r.senderName }), "”"] : "none",
      r.senderUsername ? [" · username: “", el("span", { class: "chosen", text: "@" + r.senderUsername }), "”"] : null) : null;
    put($("pairing"), (res.pending.length ? res.pending.map((r) => el("li", { class: "pair", dataset: { code: r.code, channel: r.channel } },
      el("div", {}, el("strong", { class: "pair-id", text: r.senderId }), el("span", { text: " on " + r.channel + "/" + r.accountId })),
      chosen(r),
      el("div", { class: "j-line" }, el("code", { text: r.code }), r.denied ? " · denied" : " · expires in " + r.expiresInMinutes + " min"),
      r.denied ? null : el("div", { class: "actions" },
        el("button", { type: "button", class: "approve", text: "Approve as contact", onclick: () => act("pairing.approve", { channel: r.channel, code: r.code }, "pairing-note", (x) => who(r) + " " + x.message) }),
        el("button", { type: "button", class: "deny danger", text: "Deny", onclick: () => act("pairing.deny", { channel: r.channel, code: r.code }, "pairing-note", (x) => who(r) + ": " + x.message) }))))
      : [el("li", { class: "empty", text: "no pending pairing requests" })]));
    put($("contacts"), (res.approved.length ? res.approved.map((a) => el("li", { class: "contact", dataset: { sender: a.senderId } },
      el("span", { text: a.label + " · " + a.channel + "/" + a.accountId + (a.approvedAt ? " · since " + stamp(a.approvedAt) : "") }),
      el("button", { type: "button", class: "revoke danger", text: "Revoke", onclick: () => { if (confirm(visible("Revoke " + a.label + "?"))) act("pairing.revoke", { channel: a.channel, sender: a.senderId, accountId: a.accountId }, "pairing-note", () => a.label + " revoked"); } })))
      : [el("li", { class: "empty", text: "no approved contacts" })]));
  }

  async function loadLog() {
    let res;
    try { res = await H.request("logs.tail", { lines: 200 }); } catch (e) { return; }
    const box = $("log"), atEnd = box.scrollTop + box.clientHeight >= box.scrollHeight - 20;
    box.replaceChildren(...(res.entries.length ? res.entries.map((e) => el("div", { class: "log-line", dataset: { level: e.level || "" } },
      el("span", { class: "muted", text: (e.ts || "") + " " }), el("span", { class: "lvl", text: (e.level || "").toUpperCase() + " " }),
      el("span", { class: "muted", text: (e.logger || "") + ": " }), el("span", { class: "log-msg", text: e.msg || "" }),
      e.exc ? el("pre", { text: e.exc }) : null))
      : [el("div", { class: "empty", text: res.note || "the log is empty" })]));
    $("log-path").textContent = visible(res.path);
    if (atEnd) box.scrollTop = box.scrollHeight;
  }

  async function refresh() {
    if (!H.isConnected()) return;
    // A job's run may have opened its session: the sidebar's list follows.
    await Promise.all([loadScheduler(), loadJobs(), loadChannels(), loadPairing(), loadLog(),
                       window.HermitSessions.refresh()]);
  }

  // ---- signing a phone in ------------------------------------------------------------------------------
  let phoneAsk = 0;  // which opening of the panel an answer belongs to: a late one for a closed panel is dropped
  function phoneShown(link, qr, warning) {
    const img = $("phone-qr");
    if (qr) img.src = qr; else img.removeAttribute("src");
    img.hidden = !qr;
    $("phone-link").textContent = visible(link || "");
    say("phone-warning", warning || "", "warn");
  }
  async function phoneOpen() {
    const ask = ++phoneAsk;
    $("phone-panel").hidden = false;
    $("phone-open").setAttribute("aria-expanded", "true");
    phoneShown("", "", "");
    say("phone-note", "making a one-time link…");
    let res;
    try { res = await H.request("tickets.create"); } catch (e) {
      if (ask === phoneAsk) say("phone-note", e.message + (e.hint ? " — " + e.hint : ""), "bad");
      return;
    }
    if (ask !== phoneAsk) return;
    if (typeof res.qr !== "string" || !res.qr.startsWith("data:image/svg+xml")) {
      say("phone-note", "the gateway sent no QR code", "bad");
      return;
    }
    // What the phone's page keeps: at an https address a device of its own (its keys, never the token; gateway/
    // devices.py), listed under Devices; over plain http it cannot (no secure context), and only its tab holds the token.
    const kept = res.remember === false  // gateway.remember_devices off: no phone keeps a device
      ? ", for as long as that tab stays open: this gateway keeps no browser signed in (gateway.remember_devices is off)."
      : String(res.link).startsWith("https://")
      ? "; that browser then stays signed in until you revoke it under Devices below (or it goes unused for 30 days)."
      : ", for as long as that tab stays open: only at an https address does a phone stay signed in, listed under " +
        "Devices below.";
    say("phone-note", "Scan this with the phone's camera. It signs one browser in, once, within "
      + Math.round(res.expiresIn / 60) + " minutes" + kept + " Open this again for another.");
    phoneShown(res.link, res.qr, res.warning);
  }
  function phoneClose() {
    phoneAsk++;
    phoneShown("", "", "");
    say("phone-note", "");
    $("phone-panel").hidden = true;
    $("phone-open").setAttribute("aria-expanded", "false");
  }
  $("phone-open").addEventListener("click", () => { if ($("phone-panel").hidden) phoneOpen(); else phoneClose(); });
  $("phone-close").addEventListener("click", phoneClose);

  $("job-add").addEventListener("submit", addJob);
  $("job-kind").addEventListener("change", () => {
    $("job-when").placeholder = { cron: "0 9 * * 1-5", every: "minutes, e.g. 60", at: "2026-06-01T09:30" }[$("job-kind").value];
  });
  $("ops-refresh").addEventListener("click", refresh);
  H.onView("ops", () => {
    refresh();
    clearInterval(timer);
    timer = setInterval(() => { if (H.view() === "ops" && !document.hidden) refresh(); else clearInterval(timer); }, 4000);
  });
  window.HermitOps = { refresh };
})();
