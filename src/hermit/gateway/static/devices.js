// Operations → Devices: the browsers signed in for good (gateway/devices.py) — each one's name, where and when it
// signed in, when it was last seen — and Revoke, which signs it out at once (its open pages are told and closed).
// This device is marked; revoking it asks first.
"use strict";
(function () {
  const H = window.Hermit, { el, when, stamp, swap } = window.HermitDom;
  const $ = (id) => document.getElementById(id);

  function say(text, cls) { const n = $("devices-note"); n.textContent = text; n.className = "say " + (cls || ""); }

  async function revoke(d) {
    if (d.current && !window.confirm("Sign this device out? You will need a new sign-in link or QR code to use it again.")) return;
    try {
      await H.call("devices.revoke", { id: d.id });
      say("signed out: " + d.name + " — its open pages were closed", "ok");
      await load();
    } catch (e) { say(e.message + (e.hint ? " — " + e.hint : ""), "bad"); }
  }

  async function load() {
    let res;
    try { res = await H.request("devices.list"); } catch (e) { if (e.code !== "offline") say(e.message, "bad"); return; }
    if (res.remember === false) {  // devices are off (gateway/device_policy.py): no browser is kept signed in; why, and how on
      const text = res.why ? res.why + (res.hint ? " — to keep browsers signed in: " + res.hint : "")
        : "off — set gateway.remember_devices: true to keep browsers signed in";
      swap($("devices"), [el("li", { class: "empty", text })]);
      return;
    }
    const rows = res.devices.map((d) => el("li", { class: "device" + (d.current ? " current" : ""), dataset: { device: d.id } },
      el("div", { class: "d-main" },
        el("span", { class: "d-name", text: d.name }),
        d.current ? el("span", { class: "badge", text: "this device" }) : null,
        el("div", { class: "d-line muted", text: d.origin + " · id " + d.id.slice(0, 12) }),
        el("div", { class: "d-line", text: "added " + stamp(d.added) + " · last seen " + when(d.lastSeen) }),
      ),
      el("button", { type: "button", class: "danger d-revoke", text: "Revoke", "aria-label": "revoke " + d.name, onclick: () => revoke(d) })));
    swap($("devices"), rows.length ? rows : [el("li", { class: "empty", text: "no devices signed in — sign one in with Sign in a phone (or `hermit dashboard`)" })]);
  }

  H.onView("ops", () => { load(); });
  H.onConnected(() => { if (H.view() === "ops") load(); });
  $("ops-refresh").addEventListener("click", load);
  window.HermitDevices = { load };
})();
