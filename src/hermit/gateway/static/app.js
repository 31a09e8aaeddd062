// The Hermit web app's core: one WebSocket to the gateway (§15 frames, a handshake first), requests and events,
// the three views (chat, memory, operations), the sidebar drawer on narrow screens, and the error banner.
// No framework, no build step, nothing loaded from anywhere but the gateway.
"use strict";
(function () {
  const { el, visible } = window.HermitDom;
  const $ = (id) => document.getElementById(id);
  const statusEl = $("status"), bannerEl = $("banner"), signinEl = $("signin");

  // `hermit dashboard` opens `#ticket=…`: a one-time ticket (a fragment never reaches the server) that the
  // handshake below trades for the token, so the browser's history keeps only a used link. The token itself
  // may come as `#token=…` or `?token=…` typed by hand. Either is kept for this tab and taken out of the
  // address bar.
  const params = new URLSearchParams(location.search);
  const fragment = new URLSearchParams(location.hash.slice(1));
  if (fragment.has("ticket")) {
    sessionStorage.setItem("hermit.ticket", fragment.get("ticket"));
    history.replaceState(null, "", location.pathname + location.search);
  } else if (fragment.has("token")) {
    sessionStorage.setItem("hermit.token", fragment.get("token"));
    history.replaceState(null, "", location.pathname + location.search);
  }
  const inFragment = fragment.has("ticket") || fragment.has("token");
  if (params.has("token")) {
    if (!inFragment) sessionStorage.setItem("hermit.token", params.get("token"));
    history.replaceState(null, "", location.pathname + (inFragment ? "" : location.hash));
  }
  let token = sessionStorage.getItem("hermit.token") || "";
  let clientId = localStorage.getItem("hermit.clientId");
  if (!clientId) {
    clientId = "c" + Array.from(crypto.getRandomValues(new Uint8Array(12)), (b) => b.toString(16).padStart(2, "0")).join("");
    localStorage.setItem("hermit.clientId", clientId);
  }

  let ws = null, connected = false, nextId = 1, retry = 0, stopped = false, hello = null, retryTimer = 0;
  const pending = new Map();     // request id -> {resolve, reject}
  const listeners = new Map();   // event name -> [fn]
  const connectHooks = [];

  // The pill in the header stays a word or two (a sentence there squeezed the view's title to nothing on a
  // phone); what the owner has to do is said in full in the sign-in banner under the header.
  function setStatus(text, cls, say) {
    statusEl.textContent = visible(text);
    statusEl.className = "status " + (cls || "");
    statusEl.title = visible(say || text);
    signinEl.hidden = !say;
    signinEl.replaceChildren(...(say ? [el("span", { class: "banner-text", text: say })] : []));
  }

  // A page that is not signed in (a used or expired link, a wrong token, the plain address) will not become
  // signed in by waiting: it says what to run, and its forms are disabled — what was typed stays in them —
  // instead of taking text it can only drop.
  let signedOut = "";
  function signOut(say) {
    stopped = true;
    signedOut = say;
    setStatus("not signed in", "bad", say);
    document.body.classList.add("signed-out");
    for (const form of document.querySelectorAll("main form")) for (const c of form.elements) c.disabled = true;
    for (const id of ["new-session", "memory-edit", "memory-save", "ops-refresh"]) $(id).disabled = true;
    $("input").placeholder = "Not signed in — see above";
    // A web app opened from the home screen may not share the browser's storage (iOS keeps its own), and a QR code
    // opens the browser, not it: a sign-in link can be pasted here instead.
    const paste = $("paste-signin");
    for (const c of paste.elements) c.disabled = false;
    paste.hidden = false;
  }
  $("paste-signin").addEventListener("submit", (e) => {
    e.preventDefault();
    const found = /#ticket=([A-Za-z0-9_-]{16,128})\s*$/.exec($("paste-link").value.trim());
    if (!found) { $("paste-link").setCustomValidity("a sign-in link ends in #ticket=…"); $("paste-link").reportValidity(); return; }
    sessionStorage.setItem("hermit.ticket", found[1]);
    location.replace(location.pathname);
  });
  $("paste-link").addEventListener("input", () => $("paste-link").setCustomValidity(""));
  const newId = () => "r" + (nextId++) + "-" + Date.now().toString(36);

  class GatewayError extends Error {
    constructor(error) { super(error.message || "request failed"); this.code = error.code; this.hint = error.hint || ""; }
  }

  // One request; the promise rejects with a GatewayError (code, message, hint) or "not connected".
  function request(method, params, id) {
    return new Promise((resolve, reject) => {
      if (signedOut) {
        reject(new GatewayError({ code: "signed_out", message: "not signed in", hint: signedOut }));
        return;
      }
      if (!ws || ws.readyState !== WebSocket.OPEN || !connected) {
        reject(new GatewayError({ code: "offline", message: "not connected to the gateway", hint: "wait for it to reconnect" }));
        return;
      }
      id = id || newId();
      pending.set(id, { resolve, reject });
      ws.send(JSON.stringify({ type: "req", id, method, params: params || {} }));
    });
  }

  // A request whose failure is also shown in the banner (the caller may still show it in place). The banner
  // says what went wrong last: the next request that succeeds takes it away, as does moving to another view.
  async function call(method, params) {
    let res;
    try { res = await request(method, params); }
    catch (e) { banner(e.message, e.hint); throw e; }
    clearBanner();
    return res;
  }
  function clearBanner() { bannerEl.hidden = true; bannerEl.replaceChildren(); }

  function banner(message, hint) {
    bannerEl.replaceChildren(
      el("span", { class: "banner-text" }, el("strong", { text: "Error: " }), message, hint ? el("span", { class: "hint", text: " — " + hint }) : null),
      el("button", { type: "button", class: "banner-close", "aria-label": "dismiss", text: "×", onclick: () => { bannerEl.hidden = true; } }));
    bannerEl.hidden = false;
  }

  function on(event, fn) {
    if (!listeners.has(event)) listeners.set(event, []);
    listeners.get(event).push(fn);
  }

  // ---- views and the drawer --------------------------------------------------------------------------
  const VIEWS = { chat: "Chat", memory: "Memory", ops: "Operations" };
  const viewHooks = {};
  let current = null;

  function show(view) {
    if (!VIEWS[view]) view = "chat";
    for (const name of Object.keys(VIEWS)) {
      $("view-" + name).hidden = name !== view;
      const tab = document.querySelector(".tab[data-view='" + name + "']");
      tab.classList.toggle("active", name === view);
      tab.setAttribute("aria-current", name === view ? "page" : "false");
    }
    document.body.dataset.view = view;
    $("view-title").textContent = VIEWS[view];
    if (location.hash !== "#" + view) history.replaceState(null, "", "#" + view);
    const changed = current !== view;
    current = view;
    if (changed) clearBanner();
    closeDrawer();
    if (connected && viewHooks[view]) viewHooks[view](changed);
  }

  // On a phone the drawer covers the page: opened, the focus goes into it (to the open view's tab) and the page
  // behind it is inert, so a screen reader's swipes and a keyboard's Tab stay in the drawer; closed, the focus
  // that was in it comes back to ☰.
  function openDrawer() {
    document.body.classList.add("nav-open");
    $("menu").setAttribute("aria-expanded", "true");
    document.querySelector("main").inert = true;
    (document.querySelector(".tab.active") || document.querySelector(".tab")).focus();
  }
  function closeDrawer() {
    const wasOpen = document.body.classList.contains("nav-open");
    document.body.classList.remove("nav-open");
    $("menu").setAttribute("aria-expanded", "false");
    document.querySelector("main").inert = false;
    if (wasOpen && $("sidebar").contains(document.activeElement)) $("menu").focus();
  }

  // Turned or resized to where there is no drawer (a tablet sideways): an open one closes, or the page would stay inert.
  const drawerQuery = window.matchMedia("(max-width: 760px), (max-height: 480px)");
  drawerQuery.addEventListener("change", () => { if (!drawerQuery.matches) closeDrawer(); });
  $("menu").addEventListener("click", () => document.body.classList.contains("nav-open") ? closeDrawer() : openDrawer());
  $("scrim").addEventListener("click", closeDrawer);
  document.addEventListener("keydown", (e) => { if (e.key === "Escape") closeDrawer(); });
  for (const tab of document.querySelectorAll(".tab")) tab.addEventListener("click", () => show(tab.dataset.view));
  window.addEventListener("hashchange", () => {
    // A link pasted into this tab differs only in its fragment: no new page load, so load it again to sign in.
    if (/^#(ticket|token)=/.test(location.hash)) location.reload();
    else show(location.hash.slice(1));
  });

  // ---- the connection ---------------------------------------------------------------------------------
  // The gateway proves it holds the token before the page shows anything (connect.challenge: an HMAC over a
  // nonce of ours and one of its own, for this page's address), and the page answers with an HMAC, never the
  // token: while the gateway restarts, another local user's program may hold its port, and this tab keeps
  // reconnecting. Outside a secure context (plain http on a LAN address: no WebCrypto) the token is sent as
  // before — that connection is unencrypted anyway (docs/gateway.md: put TLS in front of it).
  // A page opened with a ticket does the same handshake keyed by the ticket (it names it by its SHA-256, never
  // sends it), and the gateway's `hello-ok` brings the token for the reconnects.
  const enc = new TextEncoder();
  const hex = (buf) => Array.from(new Uint8Array(buf), (b) => b.toString(16).padStart(2, "0")).join("");
  async function hmacHex(secret, text) {
    const key = await crypto.subtle.importKey("raw", enc.encode(secret), { name: "HMAC", hash: "SHA-256" },
                                              false, ["sign"]);
    return hex(await crypto.subtle.sign("HMAC", key, enc.encode(text)));
  }
  const sha256Hex = async (text) => hex(await crypto.subtle.digest("SHA-256", enc.encode(text)));
  const b64url = (buf) => btoa(String.fromCharCode(...new Uint8Array(buf))).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
  const unb64url = (text) => Uint8Array.from(atob(text.replace(/-/g, "+").replace(/_/g, "/")), (c) => c.charCodeAt(0));

  // ---- this device: signed in for good without the token (gateway/devices.py) ---------------------------
  // Signing in with a ticket, the page makes an ECDSA P-256 key pair that no script can read the private half of
  // (non-extractable) and gives the gateway the public half; the gateway records the device and gives it a secret
  // of its own, kept as a non-extractable HMAC key. IndexedDB keeps both for this origin only. Later, with no ticket
  // and no token, the page names its device: the gateway proves it holds the device's secret, the page signs the
  // gateway's fresh nonce. The token never comes to the page. Revoked (Operations → Devices, `hermit devices
  // revoke`) or unused for 30 days, the gateway says so with a proof, and the page forgets its keys.
  const DB = "hermit", STORE = "device";
  function idb(mode, fn) {
    return new Promise((resolve, reject) => {
      if (!window.indexedDB) { reject(new Error("no IndexedDB")); return; }
      const open = indexedDB.open(DB, 1);
      open.onupgradeneeded = () => open.result.createObjectStore(STORE);
      open.onerror = () => reject(open.error);
      open.onsuccess = () => {
        const db = open.result, tx = db.transaction(STORE, mode), req = fn(tx.objectStore(STORE));
        tx.oncomplete = () => { db.close(); resolve(req.result); };
        tx.onerror = tx.onabort = () => { db.close(); reject(tx.error); };
      };
    });
  }
  let device = null;  // {id, secret: CryptoKey, privateKey: CryptoKey, name}
  async function loadDevice() {
    if (device) return device;
    try { device = (await idb("readonly", (s) => s.get("this"))) || null; } catch (e) { device = null; }
    return device;
  }
  async function forgetDevice() {
    device = null;
    try { await idb("readwrite", (s) => s.delete("this")); } catch (e) { /* nothing kept, or not ours to keep */ }
  }
  function deviceName() {
    const ua = navigator.userAgent;
    const os = /iPhone/.test(ua) ? "iPhone" : /iPad/.test(ua) ? "iPad" : /Android/.test(ua) ? "Android" :
      /Mac OS X/.test(ua) ? "Mac" : /Windows/.test(ua) ? "Windows" : /CrOS/.test(ua) ? "ChromeOS" : /Linux/.test(ua) ? "Linux" : "a computer";
    const browser = /Edg\//.test(ua) ? "Edge" : /Firefox\//.test(ua) ? "Firefox" : /Chrome\//.test(ua) ? "Chrome" :
      /Safari\//.test(ua) ? "Safari" : "a browser";
    return browser + " on " + os;
  }
  const signs = (keys, text) => crypto.subtle.sign({ name: "ECDSA", hash: "SHA-256" }, keys, enc.encode(text)).then(b64url);
  async function hmacKeyHex(key, text) { return hex(await crypto.subtle.sign("HMAC", key, enc.encode(text))); }
  const DEVICE_OUT = "This device is signed out (revoked in Operations → Devices or by `hermit devices revoke`, or not " +
    "used for 30 days): sign it in again — on a phone, scan the code from Operations → Sign in a phone in the web app " +
    "on your computer (or `hermit dashboard --phone`); on a computer, run `hermit dashboard` and open the link it prints.";
  const sameText = (a, b) => typeof a === "string" && a.length === b.length &&
    Array.from(a).reduce((d, c, i) => d | (c.charCodeAt(0) ^ b.charCodeAt(i)), 0) === 0;

  // A ticket refused as used or expired. The page's own words: before the handshake, what answers has proven
  // nothing, and its text is not shown. The link may have come from `hermit dashboard` (this computer) or from
  // a QR code (a phone, where no command can be run): where to get a new one is said for both.
  const LINK_USED = "this link was already used or expired: get a new one — on a phone, from Operations → Sign in " +
    "a phone in the web app on your computer (or `hermit dashboard --phone`); on the computer, run `hermit dashboard` again";
  const PHONE_HOW = " On a phone: scan the code from Operations → Sign in a phone in the web app on your computer " +
    "(or `hermit dashboard --phone`).";

  async function connect() {
    retryTimer = 0;
    const ticket = sessionStorage.getItem("hermit.ticket") || "";
    const mutual = !!(window.isSecureContext && crypto.subtle);
    const dev = !ticket && !token && mutual ? await loadDevice() : null;  // the token of a tab comes first
    if (!token && !ticket && !dev) { signOut("This page is not signed in: run `hermit dashboard` and open the link it prints." + PHONE_HOW); return; }
    const secret = ticket || token;  // what the handshake is keyed by (for a device: its HMAC key)
    let keys = null;  // signing in with a ticket: this device's new key pair
    if (ticket && mutual) {
      try { keys = await crypto.subtle.generateKey({ name: "ECDSA", namedCurve: "P-256" }, false, ["sign", "verify"]); }
      catch (e) { keys = null; }  // no ECDSA here: the tab keeps the token, as before
    }
    const gatewayProof = (text) => dev ? hmacKeyHex(dev.secret, text) : hmacHex(secret, text);
    const proto = location.protocol === "https:" ? "wss:" : "ws:";
    const sock = ws = new WebSocket(proto + "//" + location.host + "/ws");
    const ours = hex(crypto.getRandomValues(new Uint8Array(24)));
    let proven = !mutual, impostor = false;  // the gateway showed it holds the token; something else did not
    let refused = null;  // the error the gateway gave before it closed the socket
    const send = (method, id, params) => sock.send(JSON.stringify({ type: "req", id, method, params }));
    const client = { clientId, client: "hermit-webapp/3" };
    sock.onopen = async () => {
      if (mutual) {
        const challenge = { nonce: ours, host: location.host };
        if (dev) challenge.deviceId = dev.id;
        else if (ticket) challenge.ticketId = await sha256Hex(ticket);
        send("connect.challenge", "challenge", challenge);
      } else send("connect", "connect", ticket ? { ticket, ...client } : { token, ...client });
    };
    sock.onmessage = async (msg) => {
      let f;
      try { f = JSON.parse(msg.data); } catch (e) { return; }
      if (!connected && !(f.type === "res" && (f.id === "challenge" || (f.id === "connect" && proven)))) return;
      if (f.id === "challenge" && !connected) {
        const p = f.ok && f.payload || {};
        if (!f.ok && f.error && f.error.code === "ticket_expired") {
          refused = f.error;  // nothing was sent: what answered only says it does not know this ticket
          sock.close();
          return;
        }
        if (dev && !f.ok && f.error && f.error.code === "device_signed_out" &&
            sameText(f.error.proof, await gatewayProof("hermit-gateway|" + location.host + "|" + ours + "|signed-out"))) {
          signOut(DEVICE_OUT);
          await forgetDevice();  // the gateway itself said so (a program on the port cannot make a phone forget)
          return;
        }
        if (dev && !f.ok && f.error && f.error.code === "devices_off" &&
            sameText(f.error.proof, await gatewayProof("hermit-gateway|" + location.host + "|" + ours + "|devices-off"))) {
          // gateway.remember_devices is off: not signed in now, but the key is kept — turned back on, it signs in again
          signOut(f.error.message + " — " + f.error.hint);
          return;
        }
        if (!f.ok || !sameText(p.proof, await gatewayProof("hermit-gateway|" + location.host + "|" + ours + "|" + p.nonce))) {
          impostor = true;
          sock.close();
          return;
        }
        proven = true;
        const signed = "hermit-device|" + location.origin + "|" + location.host + "|" + p.nonce + "|" + ours;
        if (dev) {
          send("connect", "connect", { signature: await signs(dev.privateKey, signed), ...client });
          return;
        }
        const proof = await hmacHex(secret, "hermit-client|" + location.host + "|" + p.nonce + "|" + ours);
        if (keys) {
          const key = b64url(await crypto.subtle.exportKey("spki", keys.publicKey));
          send("connect", "connect", { proof, device: { key, name: deviceName() }, signature: await signs(keys.privateKey, signed), ...client });
        } else send("connect", "connect", { proof, ...client });
        return;
      }
      if (f.type === "res" && f.id === "connect") {
        if (f.ok && ticket && keys && f.payload.device && typeof f.payload.device.secret === "string") {
          // Signed in for good as this device: its keys are what the page keeps (never the token).
          const secretKey = await crypto.subtle.importKey("raw", unb64url(f.payload.device.secret),
                                                          { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
          device = { id: f.payload.device.id, secret: secretKey, privateKey: keys.privateKey, name: f.payload.device.name };
          try { await idb("readwrite", (s) => s.put(device, "this")); } catch (e) { /* this tab only, then */ }
          sessionStorage.removeItem("hermit.ticket");
          delete f.payload.device;
        } else if (f.ok && ticket) {  // the ticket is used up: the token the gateway gave is what the tab keeps
          if (typeof f.payload.token === "string" && f.payload.token) {
            token = f.payload.token;
            sessionStorage.setItem("hermit.token", token);
          }
          sessionStorage.removeItem("hermit.ticket");
          delete f.payload.token;
        }
        if (f.ok) {
          connected = true; retry = 0; hello = f.payload;
          setStatus("connected", "ok");
          for (const hook of connectHooks) hook(hello);
          if (viewHooks[current]) viewHooks[current](true);
        } else {
          refused = f.error;
          setStatus("refused", "bad", f.error.message + " — " + f.error.hint);
        }
      } else if (f.type === "res") {
        const p = pending.get(f.id);
        if (p) {
          pending.delete(f.id);
          if (f.ok) p.resolve(f.payload); else p.reject(new GatewayError(f.error));
        } else if (!f.ok) {
          banner(f.error.message, f.error.hint);
        }
      } else if (f.type === "event" && f.event === "device.revoked") {
        signOut(DEVICE_OUT);
        await forgetDevice();  // the gateway said so on this signed-in socket: sign in again with a new code
      } else if (f.type === "event") {
        for (const fn of listeners.get(f.event) || []) fn(f.payload);
      }
    };
    sock.onclose = sock.lost = async (ev) => {
      connected = false;
      for (const p of pending.values()) p.reject(new GatewayError({ code: "offline", message: "connection lost" }));
      pending.clear();
      if (signedOut) return;  // said why already (this device signed out)
      if (ticket && refused && refused.code === "ticket_expired") {
        if (token || (mutual && await loadDevice())) {  // a used link opened in a tab signed in before: it stays signed in
          sessionStorage.removeItem("hermit.ticket");
          setTimeout(connect, 0);
        } else signOut(LINK_USED);
        return;
      }
      if (refused && refused.code === "device_link") {  // the gateway's own words (it proved itself first)
        signOut(refused.message + " — " + refused.hint);
        return;
      }
      if (dev && !proven && (ev.code === 4401 || ev.code === 1008)) {
        impostor = true;  // closed before the gateway proved itself: not its word (a program on the port), keep trying
      } else if (ev.code === 4401 || ev.code === 1008) {
        signOut(ev.code === 4401 ? (dev ? DEVICE_OUT : "refused: wrong token — run `hermit dashboard` and open the link it prints")
                                 : "refused: this page's origin may not use the gateway — open the link `hermit dashboard` prints");
        return;
      }
      if (stopped) return;
      const wait = Math.min(10000, 500 * Math.pow(2, retry++));
      if (impostor) setStatus("not your gateway?", "bad", "wrong token, or not your gateway: what answers here could " +
                              "not prove it holds this page's token, so nothing was sent to it — open the URL printed by " +
                              "`hermit dashboard` (trying again in " + Math.round(wait / 1000) + " s)." + PHONE_HOW);
      else setStatus("disconnected — reconnecting in " + Math.round(wait / 1000) + " s", "warn");
      retryTimer = setTimeout(connect, wait);
    };
  }

  // A phone back on the network, or the page back on screen (the app switched to again: a phone drops the socket of
  // a page in the background), reconnects now instead of when the backoff says — up to 10 s of "reconnecting".
  function reconnectNow() {
    if (!retryTimer || stopped || connected) return;  // only a page waiting for its next try
    clearTimeout(retryTimer);
    retry = 0;
    connect();
  }
  // A socket that still looks open may be dead: a phone that slept or changed networks gets no close, and what is
  // sent on it goes nowhere (Send did nothing, for minutes). Back on screen or on the network, the page asks the
  // gateway for a word; with no answer within 5 s it drops that socket and connects again.
  let probing = null;
  async function probe() {
    if (probing || !connected || !ws) return;
    const sock = probing = ws;
    const dead = setTimeout(() => {
      if (ws !== sock || sock.readyState !== WebSocket.OPEN) return;
      sock.onmessage = sock.onclose = null;
      try { sock.close(); } catch (e) { /* it is gone either way */ }
      sock.lost({ code: 1006 });  // as if it had closed: pending requests fail, and it reconnects
    }, 5000);
    try { await request("gateway.status"); } catch (e) { /* closed meanwhile: the reconnect is under way */ }
    finally { clearTimeout(dead); probing = null; }
  }
  const wake = () => { if (connected) probe(); else reconnectNow(); };
  window.addEventListener("online", wake);
  document.addEventListener("visibilitychange", () => { if (document.visibilityState === "visible") wake(); });
  window.addEventListener("pageshow", (e) => { if (e.persisted) wake(); });

  window.Hermit = {
    request, call, banner, clearBanner, on, show, el,
    onConnected: (fn) => connectHooks.push(fn),
    onView: (name, fn) => { const before = viewHooks[name]; viewHooks[name] = before ? (c) => { before(c); fn(c); } : fn; },
    deviceId: () => (hello && hello.deviceId) || null,
    isConnected: () => connected,
    signedOut: () => signedOut,
    hello: () => hello,
    view: () => current,
    closeDrawer,
    start: () => { show(location.hash.slice(1) || "chat"); connect(); },
  };
  window.hermitChat = { isConnected: () => connected };
})();
