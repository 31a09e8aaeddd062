// Files sent with a chat message: the attach button (a phone offers its camera and photos), a preview of each file
// that will go, removable, and the upload in pieces (chat.upload) before chat.send names them. A file too big,
// or one too many, is said at once and not taken; a send that fails keeps the files (and the text) to send
// again. What a file is the gateway decides from its bytes; the page's type is used only to try a preview, and
// to make a smaller copy of a photo larger than a model is shown (a phone's camera makes 3-12 MB photos; the
// assistant sees one of at most 3.75 MiB): drawn again at most 2048 px on its long side as a JPEG, as
// Telegram and WhatsApp send photos. The copy is what goes, and the preview says so.
// Images are drawn from data: URLs, the only images the page's CSP allows besides its own files.
"use strict";
(function () {
  const H = window.Hermit, { el, visible } = window.HermitDom;
  const $ = (id) => document.getElementById(id);
  const button = $("attach"), picker = $("attach-input"), strip = $("attachments"), note = $("attach-note");
  // The gateway's limits (hello-ok `uploads`), these until it says.
  let limits = { maxBytes: 10 * 1024 * 1024, maxFiles: 4, chunkBytes: 144 * 1024, imageBytes: 3932160 };
  const LONG_SIDE = 2048;
  H.onConnected((hello) => { if (hello && hello.uploads) limits = hello.uploads; });
  let chosen = [];  // {file, url (a data: URL of an image, or ""), item (its preview)}

  const mb = (n) => (n / 1024 / 1024).toFixed(n < 10 * 1024 * 1024 ? 1 : 0) + " MB";
  const size = (n) => n < 1024 * 1024 ? Math.max(1, Math.round(n / 1024)) + " kB" : mb(n);

  function say(text) {
    note.textContent = visible(text);
    note.hidden = !text;
  }

  function draw() {
    strip.hidden = chosen.length === 0;
    strip.replaceChildren(...chosen.map((c) => c.item));
  }

  function preview(c) {
    const name = c.file.name || "file";
    const remove = el("button", { type: "button", class: "attachment-remove", "aria-label": "Remove " + name,
                                  title: "Remove " + name, text: "×", onclick: () => take(c) });
    const label = el("span", { class: "attachment-text" },
                     el("span", { class: "attachment-name", text: name + " · " + size(c.file.size) }),
                     c.from ? el("span", { class: "attachment-copy", text: "a smaller copy of " + mb(c.from) +
                                           ", so the assistant can see it" }) : null);
    const item = el("div", { class: "attachment", role: "group", "aria-label": "to send: " + name }, label, remove);
    if (c.file.type.startsWith("image/")) {
      const reader = new FileReader();
      reader.onload = () => {
        if (!chosen.includes(c) || !/^data:image\//.test(String(reader.result))) return;
        const img = document.createElement("img");
        img.alt = visible(name);
        img.onerror = () => img.remove();  // a type the browser cannot draw (HEIC): the name alone
        img.src = String(reader.result);
        c.url = img.src;
        item.classList.add("image");
        item.prepend(img);
      };
      reader.readAsDataURL(c.file);
    }
    return item;
  }

  // A photo over what a model is shown, drawn again smaller as a JPEG; the file itself when that cannot be done
  // (a type the browser cannot draw, or a copy no smaller).
  async function smaller(file) {
    if (!/^image\/(jpeg|png|webp)$/.test(file.type) || file.size <= limits.imageBytes) return file;
    try {
      const bitmap = await createImageBitmap(file);  // turned as the camera said (EXIF orientation)
      const scale = Math.min(1, LONG_SIDE / Math.max(bitmap.width, bitmap.height));
      const canvas = document.createElement("canvas");
      canvas.width = Math.max(1, Math.round(bitmap.width * scale));
      canvas.height = Math.max(1, Math.round(bitmap.height * scale));
      canvas.getContext("2d").drawImage(bitmap, 0, 0, canvas.width, canvas.height);
      bitmap.close();
      const blob = await new Promise((done) => canvas.toBlob(done, "image/jpeg", 0.85));
      if (!blob || blob.size >= file.size) return file;
      return new File([blob], file.name.replace(/\.[^.]*$/, "") + ".jpg", { type: "image/jpeg" });
    } catch (e) {
      return file;
    }
  }

  async function add(files) {
    const problems = [];
    for (const picked of files) {
      const file = chosen.length < limits.maxFiles ? await smaller(picked) : picked;
      const total = chosen.reduce((n, c) => n + c.file.size, 0);
      if (chosen.length >= limits.maxFiles) problems.push(picked.name + ": at most " + limits.maxFiles + " files go with one message");
      else if (file.size === 0) problems.push(picked.name + " is empty");
      else if (file.size > limits.maxBytes) {
        problems.push(picked.name + " is " + mb(file.size) + ": a message takes at most " + mb(limits.maxBytes) +
                      " of files. Share a smaller copy (a phone's \"share\" usually makes one)");
      } else if (total + file.size > limits.maxBytes) {
        problems.push(picked.name + " (" + mb(file.size) + ") would make this message's files more than " +
                      mb(limits.maxBytes) + ": send it with the next one");
      } else {
        const c = { file, url: "", item: null, from: file === picked ? 0 : picked.size };
        c.item = preview(c);
        chosen.push(c);
      }
    }
    say(problems.length ? "Not attached: " + problems.join("; ") + "." : "");
    draw();
  }

  function take(c) {
    chosen = chosen.filter((x) => x !== c);
    say("");
    draw();
    (chosen.length ? strip.querySelector(".attachment-remove") : button).focus();
  }

  button.addEventListener("click", () => picker.click());
  picker.addEventListener("change", () => { add([...picker.files]); picker.value = ""; });
  // On a desktop: a file dropped on the chat, or an image pasted into the box, is attached the same way.
  const view = $("view-chat"), input = $("input");
  const carries = (e) => !button.disabled && e.dataTransfer && [...e.dataTransfer.types].includes("Files");
  view.addEventListener("dragover", (e) => { if (carries(e)) { e.preventDefault(); view.classList.add("dropping"); } });
  view.addEventListener("dragleave", (e) => { if (e.target === view || !view.contains(e.relatedTarget)) view.classList.remove("dropping"); });
  view.addEventListener("drop", (e) => {
    view.classList.remove("dropping");
    if (!carries(e)) return;
    e.preventDefault();
    add([...e.dataTransfer.files]);
  });
  input.addEventListener("paste", (e) => {
    const files = e.clipboardData ? [...e.clipboardData.files] : [];
    if (!files.length || button.disabled) return;
    e.preventDefault();  // the file, not its name as text
    add(files);
  });

  // base64 of a piece, a slice at a time (String.fromCharCode takes a bounded number of arguments).
  function base64(bytes) {
    let s = "";
    for (let i = 0; i < bytes.length; i += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
    return btoa(s);
  }

  // Upload every chosen file; `progress(fraction)` as pieces go. Resolves to the upload ids for chat.send.
  async function upload(files, progress) {
    const total = files.reduce((n, c) => n + c.file.size, 0) || 1;
    let sent = 0;
    const ids = [];
    for (const c of files) {
      const id = "f" + Date.now().toString(36) + Math.random().toString(36).slice(2, 8);
      const bytes = new Uint8Array(await c.file.arrayBuffer());
      for (let at = 0; at < bytes.length; at += limits.chunkBytes) {
        const piece = bytes.subarray(at, at + limits.chunkBytes);
        const params = { uploadId: id, offset: at, data: base64(piece), done: at + piece.length >= bytes.length };
        if (at === 0) params.name = c.file.name || "file";
        await H.request("chat.upload", params);
        sent += piece.length;
        progress(sent / total);
      }
      ids.push(id);
    }
    return ids;
  }

  function clear(files) {
    chosen = chosen.filter((c) => !files.includes(c));
    say("");
    draw();
  }

  function enable(on) { button.disabled = !on; }

  // A file picked but not sent is lost with the page (a File cannot be kept for a reload, as the text is: the
  // browser gives it to this page only), so leaving then is asked about first.
  window.addEventListener("beforeunload", (e) => {
    if (!chosen.length) return;
    e.preventDefault();
    e.returnValue = "";  // older browsers ask only when this is set
  });

  // A message's images drawn small in its bubble (live: the previews; history: chat.history's `images`). One to
  // be brought (`load`: a promise of its URL) shows "loading photo…" until it is drawn.
  function image(p, url) {
    const img = document.createElement("img");
    img.alt = visible(p.alt || "photo");
    img.src = url;
    img.addEventListener("click", () => img.classList.toggle("big"));
    return img;
  }
  // Brought when it comes near the chat's view (a long history's older photos only if scrolled to).
  const near = "IntersectionObserver" in window ? new IntersectionObserver((seen) => {
    for (const e of seen) {
      if (!e.isIntersecting || !loads.has(e.target)) continue;
      near.unobserve(e.target);
      const go = loads.get(e.target);
      loads.delete(e.target);
      go();
    }
  }, { root: $("messages"), rootMargin: "800px 0px" }) : null;
  const loads = new WeakMap();  // placeholder -> what brings its photo
  function pictures(items) {
    if (!items.length) return null;
    return el("div", { class: "pics" }, items.map((p) => {
      if (p.load) {
        const wait = el("span", { class: "pic-file loading", text: "loading photo…" });
        const go = () => p.load().then((url) => {
          const img = image(p, url);
          img.onload = () => wait.replaceWith(img);  // drawn whole, or not at all
          img.onerror = () => { wait.textContent = "(a photo the browser could not draw)"; };
        }, (e) => { wait.textContent = visible("(the photo could not be loaded: " + e.message + ")"); });
        if (near) { loads.set(wait, go); near.observe(wait); } else go();
        return wait;
      }
      if (!p.url) return el("span", { class: "pic-file", text: p.text });
      return image(p, p.url);
    }));
  }

  window.HermitAttach = { chosen: () => chosen.slice(), upload, clear, enable, pictures, say };
})();
