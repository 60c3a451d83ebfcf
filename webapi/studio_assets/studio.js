/* Tome studio: a small client of Tome's own REST API (no framework, no build step).
 *
 * Security, in short:
 * - The API key lives in this tab's sessionStorage only and travels in the Authorization header, never in
 *   a URL (forms are POST and the CSP forbids submitting them anyway; every request is a fetch()).
 * - CSRF: the API authenticates by that header, not by cookies (fetches send credentials: "omit"). A page
 *   of another site cannot make the browser add the header, and the API answers no CORS preflight, so
 *   there is nothing a cross-site request could ride on.
 * - Everything shown comes from the API and is user input (voice names, transcripts, titles, chapter
 *   titles): it is only ever put into the page as text (el() below, textContent). The page's CSP enforces
 *   Trusted Types with no policy, so an innerHTML assignment would throw instead of parsing markup.
 * - <audio src> and <a href> cannot send the header, and the key must not go into a URL. The player gets
 *   a short-lived signed link to the book instead (POST /v1/jobs/{id}/files/{name}/link: a path of this
 *   origin that names the key's id, never the key, and expires; see docs/api.md), so the browser streams
 *   it with Range requests and plays before the whole book has arrived; an expired link is renewed where
 *   the player stopped. Where the server has no TOME_SECRET_KEY (no links: 409), and for subtitles and
 *   downloads, the file is fetched with the header and handed over as a blob: URL (same origin, revoked
 *   when the view changes), held in memory whole.
 */
"use strict";

(function () {
  const KEY_ITEM = "tome.apiKey";
  const UNFINISHED = new Set(["queued", "running", "stitching"]);
  const BUILDING = new Set(["pending", "processing"]);
  const PREVIEW_WAIT_MS = 600000; // how long a preview planned by a worker (EPUB, long script) is polled
  const STATUSES = new Set([
    "queued", "running", "stitching", "succeeded", "failed", "cancelled",
    "pending", "processing", "ready", "stale", "done",
  ]);
  const ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

  let key = null; // the API key while signed in (also in sessionStorage)
  let isAdmin = false;
  let generation = 0; // bumped on every view change: late answers for an old view are dropped
  let pollTimer = null;
  let viewBlobs = []; // blob: URLs of the current view, revoked when it changes

  // ---------- small helpers ----------

  const $ = (id) => document.getElementById(id);

  /* el("td", {className: "x"}, "text", node): an element whose string children become text nodes, never
     markup. Attribute values are set with setAttribute (also text); "on..." props add listeners. */
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [name, value] of Object.entries(props || {})) {
      if (value === undefined || value === null || value === false) continue;
      if (name === "className") node.className = value;
      else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
      else node.setAttribute(name, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child !== undefined && child !== null && child !== false) node.append(child);
    }
    return node;
  }

  function clear(node) {
    node.replaceChildren();
    return node;
  }

  const signatures = new WeakMap(); // row -> JSON of the data it shows

  /* One row per item (by id) across polls: a row is built again only when its data changed, so a poll
     neither takes the keyboard focus away nor resets a half-done action (a first press of Delete). */
  function syncRows(tbody, items, build) {
    const old = new Map(Array.from(tbody.rows, (row) => [row.dataset.id, row]));
    let previous = null;
    for (const item of items) {
      const signature = JSON.stringify(item);
      let row = old.get(item.id);
      if (!row || signatures.get(row) !== signature) {
        const fresh = build(item);
        fresh.dataset.id = item.id;
        signatures.set(fresh, signature);
        if (row) row.replaceWith(fresh);
        row = fresh;
      }
      old.delete(item.id);
      const expected = previous ? previous.nextSibling : tbody.firstChild;
      if (row !== expected) tbody.insertBefore(row, expected);
      previous = row;
    }
    for (const row of old.values()) row.remove();
  }

  function fmtSeconds(seconds) {
    if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return "–";
    const total = Math.round(seconds);
    const h = Math.floor(total / 3600);
    const m = Math.floor((total % 3600) / 60);
    const s = String(total % 60).padStart(2, "0");
    return h ? `${h}:${String(m).padStart(2, "0")}:${s}` : `${m}:${s}`;
  }

  function fmtBytes(bytes) {
    if (!Number.isFinite(bytes)) return "–";
    if (bytes < 1024) return `${bytes} B`;
    if (bytes < 1024 * 1024) return `${(bytes / 1024).toFixed(1)} KB`;
    return `${(bytes / 1024 / 1024).toFixed(1)} MB`;
  }

  function fmtDate(iso) {
    return iso ? new Date(iso).toLocaleString() : "–";
  }

  function badge(status) {
    const known = STATUSES.has(status) ? status : "other";
    return el("span", { className: `badge badge-${known}` }, String(status));
  }

  function newId() {
    const bytes = crypto.getRandomValues(new Uint8Array(16));
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  /* A URL the API gave us (output.url, files[].url, audio_url), checked to be on this origin before the
     key is sent to it. */
  function apiPath(url) {
    const parsed = new URL(String(url), location.origin);
    if (parsed.origin !== location.origin) throw new Error(`refused a URL of another origin: ${url}`);
    return parsed.pathname + parsed.search;
  }

  // ---------- messages ----------

  /* Messages are transient: open() clears those of an earlier view, a notice about a job's progress
     ("queued", "being rendered again") is cleared when the job page sees that work end, and the preview's
     summary when the form changes. */
  let messageView = 0; // the generation (view) the shown messages belong to
  let noticeJob = null; // {id, revision}: the job whose end (or new revision) clears the notice
  let noticePreview = false; // the notice sums up the preview shown

  /* A notice; with {carry: true} it survives the navigation that follows it (to the next view), with
     {job} it lasts until that job ends (or, given its revision, publishes a newer one), with
     {preview: true} until the preview is out of date. */
  function say(text, options = {}) {
    $("notice").textContent = text;
    $("problem").textContent = "";
    messageView = options.carry ? generation + 1 : generation;
    noticeJob = options.job ? { id: options.job.id, revision: options.revision ?? null } : null;
    noticePreview = Boolean(options.preview);
  }

  function problem(text, options = {}) {
    $("notice").textContent = "";
    $("problem").textContent = text;
    messageView = options.carry ? generation + 1 : generation;
    noticeJob = null;
    noticePreview = false;
  }

  function clearMessages() {
    $("notice").textContent = "";
    $("problem").textContent = "";
    noticeJob = null;
    noticePreview = false;
  }

  class ApiError extends Error {
    constructor(status, detail, retryAfter) {
      super((detail && detail.message) || `HTTP ${status}`);
      this.status = status;
      this.detail = detail || {};
      this.retryAfter = retryAfter;
    }
  }

  function describe(error) {
    if (!(error instanceof ApiError)) return String(error.message || error);
    const d = error.detail;
    let text = d.message || `HTTP ${error.status}`;
    if (d.field) text += ` (field ${d.field})`;
    if (d.line) text += ` at line ${d.line}${d.column ? `, column ${d.column}` : ""}`;
    if (error.status === 429 && error.retryAfter) text += `; try again in ${error.retryAfter} s`;
    return text;
  }

  function complain(error) {
    if (error instanceof ApiError && error.status === 401) {
      signOut("The API refused the key (unknown or revoked): sign in again.");
      return;
    }
    problem(describe(error));
  }

  // ---------- the API ----------

  /* One request with the key in the Authorization header. Resolves to the parsed JSON (null for 204), or
     the Response itself with {raw: true}; rejects with an ApiError carrying the API's error shape. */
  async function api(method, path, options = {}) {
    const headers = { Authorization: `Bearer ${key}`, ...(options.headers || {}) };
    let body;
    if (options.json !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(options.json);
    } else if (options.form) {
      body = options.form; // multipart: the browser sets the boundary
    }
    const response = await fetch(apiPath(path), {
      method, headers, body, credentials: "omit", cache: "no-store", redirect: "error",
    });
    if (!response.ok) {
      let detail = null;
      try {
        detail = (await response.json()).error;
      } catch (_) {
        detail = null;
      }
      throw new ApiError(response.status, detail, response.headers.get("Retry-After"));
    }
    if (options.raw) return response;
    return response.status === 204 ? null : response.json();
  }

  /* A file of the API as a blob: URL for <audio>, <track> or a download (see the note at the top). */
  async function blobUrl(path) {
    const response = await api("GET", path, { raw: true });
    const url = URL.createObjectURL(await response.blob());
    viewBlobs.push(url);
    return url;
  }

  // ---------- polling and views ----------

  /* Run fn after ms, unless the view changed meanwhile; while the tab is hidden, wait instead. */
  function poll(fn, ms) {
    clearTimeout(pollTimer);
    const gen = generation;
    pollTimer = setTimeout(function tick() {
      if (gen !== generation) return;
      if (document.hidden) {
        pollTimer = setTimeout(tick, ms);
        return;
      }
      fn(gen);
    }, ms);
  }

  const VIEWS = {
    signin: { section: "view-signin", show: () => $("api-key").focus() },
    voices: { section: "view-voices", show: showVoices },
    new: { section: "view-new", show: showNewJob },
    jobs: { section: "view-jobs", show: showJobs },
    job: { section: "view-job", show: showJob },
    admin: { section: "view-admin", show: showAdmin },
  };

  function route() {
    const [, name = "", arg = ""] = location.hash.match(/^#\/([a-z]+)\/?([^/]*)$/) || [];
    if (!key) return open("signin");
    if (name === "jobs" && ID.test(arg)) return open("job", arg);
    if (name === "admin" && !isAdmin) return open("voices");
    return open(VIEWS[name] && name !== "signin" && name !== "job" ? name : "voices");
  }

  function open(name, arg) {
    generation += 1;
    clearTimeout(pollTimer);
    if (messageView < generation) clearMessages();
    viewBlobs.forEach((url) => URL.revokeObjectURL(url));
    viewBlobs = [];
    for (const [other, view] of Object.entries(VIEWS)) $(view.section).hidden = other !== name;
    for (const link of document.querySelectorAll("#nav a")) {
      const current = link.dataset.view === name || (name === "job" && link.dataset.view === "jobs");
      if (current) link.setAttribute("aria-current", "page");
      else link.removeAttribute("aria-current");
    }
    const heading = document.querySelector(`#${VIEWS[name].section} h1`);
    document.title = `${heading.textContent || "Job"} · Tome studio`;
    if (name !== "signin") heading.focus();
    Promise.resolve(VIEWS[name].show(generation, arg)).catch(complain);
  }

  // ---------- signing in ----------

  /* Checks the key (GET /v1/usage names its owner) and whether it is an admin's (the admin API answers it
     200, any other key 403). Only a key the API accepted is kept. */
  async function signIn(candidate) {
    key = candidate;
    try {
      const usage = await api("GET", "/v1/usage");
      const probe = await fetch("/v1/admin/voices?limit=1", {
        headers: { Authorization: `Bearer ${candidate}` }, credentials: "omit", cache: "no-store",
      });
      isAdmin = probe.ok;
      sessionStorage.setItem(KEY_ITEM, candidate);
      $("who-text").textContent = `Signed in as ${usage.owner}${isAdmin ? " (admin)" : ""}`;
      $("who").hidden = false;
      $("nav").hidden = false;
      $("nav-admin").hidden = !isAdmin;
      return true;
    } catch (error) {
      key = null;
      if (error instanceof ApiError && error.status === 401) {
        problem("The API refused this key (unknown or revoked).");
      } else complain(error);
      return false;
    }
  }

  function signOut(message) {
    key = null;
    isAdmin = false;
    sessionStorage.removeItem(KEY_ITEM);
    $("who").hidden = true;
    $("nav").hidden = true;
    $("nav-admin").hidden = true;
    if (message) problem(message, { carry: true });
    else say("Signed out: the key is gone from this tab.", { carry: true });
    if (location.hash !== "#/signin") location.hash = "#/signin";
    else route();
  }

  // ---------- voices ----------

  let recorded = null; // a recording made in the browser, uploaded when no file is chosen

  async function showVoices(gen) {
    const { voices } = await api("GET", "/v1/voices?limit=500");
    if (gen !== generation) return;
    voiceNames = voices.map((voice) => voice.name);
    syncRows(document.querySelector("#voices-table tbody"), voices, voiceRow);
    $("voices-empty").hidden = voices.length > 0;
    $("voices-table").hidden = voices.length === 0;
    if (voices.some((v) => BUILDING.has(v.cache_status))) poll(showVoices, 1000);
  }

  function voiceRow(voice) {
    const state = el("td", {}, badge(voice.cache_status));
    if (voice.cache_error) state.append(el("p", { className: "problem-text" }, voice.cache_error));
    for (const warning of voice.warnings || []) state.append(el("p", { className: "warn" }, warning.message));
    const remove = el("button", { type: "button", "aria-label": `Delete voice ${voice.name}` }, "Delete");
    armed(remove, "Press again to delete", async () => {
      await api("DELETE", `/v1/voices/${encodeURIComponent(voice.id)}`);
      say(`Voice ${voice.name} deleted.`);
      await showVoices(generation);
    });
    return el("tr", {},
      el("th", { scope: "row" }, voice.name),
      el("td", {}, voice.language),
      el("td", {}, fmtSeconds(voice.audio_duration)),
      state,
      el("td", { className: "transcript" }, voice.ref_text),
      el("td", {}, remove));
  }

  /* A destructive button acts on its second press within 5 s (no blocking confirm() dialog). */
  function armed(button, prompt, action) {
    const label = button.textContent;
    let timer = null;
    button.addEventListener("click", async () => {
      if (!timer) {
        button.textContent = prompt;
        timer = setTimeout(() => { button.textContent = label; timer = null; }, 5000);
        return;
      }
      clearTimeout(timer);
      timer = null;
      button.textContent = label;
      button.disabled = true;
      try {
        await action();
      } catch (error) {
        complain(error);
      } finally {
        button.disabled = false;
      }
    });
  }

  async function uploadVoice(event) {
    event.preventDefault();
    const file = $("voice-audio").files[0] || recorded;
    if (!file) {
      problem("Choose a reference recording (or record one) first.");
      return;
    }
    const form = new FormData();
    form.append("name", $("voice-name").value.trim());
    form.append("language", $("voice-language").value.trim() || "en");
    form.append("ref_text", $("voice-text").value.trim());
    form.append("audio", file, file.name || "recording.webm");
    const button = event.submitter || $("voice-form").querySelector("button[type=submit]");
    button.disabled = true;
    try {
      const voice = await api("POST", "/v1/voices", { form });
      const warnings = (voice.warnings || []).map((w) => w.message).join("; ");
      const extra = warnings ? ` Warnings: ${warnings}` : "";
      say(`Voice ${voice.name} uploaded; its speaker prompt is being built.${extra}`);
      $("voice-form").reset();
      recorded = null;
      $("record-preview").hidden = true;
      $("record-state").textContent = "";
      await showVoices(generation);
    } catch (error) {
      complain(error);
    } finally {
      button.disabled = false;
    }
  }

  /* Optional: record a reference with the microphone (MediaRecorder: WebM/Opus or Ogg, which the API
     accepts). Browsers allow the microphone on https or localhost only; elsewhere this stays hidden. */
  function setUpRecorder() {
    if (!window.isSecureContext || !navigator.mediaDevices || !window.MediaRecorder) return;
    $("recorder").hidden = false;
    const button = $("record");
    let recorder = null;
    let previewUrl = null;
    button.addEventListener("click", async () => {
      if (recorder && recorder.state === "recording") {
        recorder.stop();
        return;
      }
      let stream;
      try {
        stream = await navigator.mediaDevices.getUserMedia({ audio: true });
      } catch (error) {
        problem(`The microphone could not be opened: ${error.message}`);
        return;
      }
      const parts = [];
      const started = Date.now();
      recorder = new MediaRecorder(stream);
      recorder.addEventListener("dataavailable", (e) => parts.push(e.data));
      recorder.addEventListener("stop", () => {
        stream.getTracks().forEach((track) => track.stop());
        const type = recorder.mimeType || "audio/webm";
        recorded = new File(parts, `recording.${type.includes("ogg") ? "ogg" : "webm"}`, { type });
        $("voice-audio").value = ""; // the recording is what will be uploaded
        if (previewUrl) URL.revokeObjectURL(previewUrl);
        previewUrl = URL.createObjectURL(recorded);
        $("record-preview").src = previewUrl;
        $("record-preview").hidden = false;
        button.textContent = "Record again";
        button.setAttribute("aria-pressed", "false");
        $("record-state").textContent =
          `Recorded ${fmtSeconds((Date.now() - started) / 1000)}: it is uploaded unless you choose a file.`;
      });
      recorder.start();
      button.textContent = "Stop recording";
      button.setAttribute("aria-pressed", "true");
      $("record-state").textContent = "Recording…";
    });
    $("voice-audio").addEventListener("change", () => {
      if ($("voice-audio").files.length) $("record-state").textContent = "The chosen file is uploaded.";
    });
  }

  // ---------- a new job ----------

  let epubFile = null; // an EPUB chosen as the script: sent as a file (multipart)
  let previewed = false; // Submit waits for a preview of exactly what is in the form
  let voiceNames = []; // the owner's voices, for the cast's pickers
  let castChoice = { voices: {}, lines: {} }; // the cast the next preview and the job ask for
  let idempotencyKey = null; // one per preview: a double click on Submit makes one job

  async function showNewJob(gen) {
    const { voices } = await api("GET", "/v1/voices?limit=500");
    if (gen !== generation) return;
    voiceNames = voices.map((voice) => voice.name);
    const narrator = $("job-voice");
    const other = $("job-switch-voice");
    const chosen = narrator.value;
    clear(narrator);
    clear(other);
    for (const voice of voices) {
      narrator.append(el("option", { value: voice.id }, `${voice.name} (${voice.cache_status})`));
      other.append(el("option", { value: voice.name }, voice.name));
    }
    if (chosen && voices.some((v) => v.id === chosen)) narrator.value = chosen;
    if (!voices.length) problem("Add a voice first (Voices): a job needs one.");
  }

  function invalidatePreview() {
    previewed = false;
    $("job-submit").disabled = true;
    $("preview").hidden = true;
    if (noticePreview) clearMessages();
    previewAsked += 1; // an answer still on its way is for the form as it was
  }

  const SCRIPT_FIELDS = new Set(["job-script", "job-script-format", "job-file"]);

  /* A change to the form; one to the script drops the cast's choices (other lines, other characters). */
  function formChanged(event) {
    if (SCRIPT_FIELDS.has(event.target.id)) castChoice = { voices: {}, lines: {} };
    if (event.target.id !== "job-file") invalidatePreview();
  }

  /* A voice or a speaker chosen in the cast panel: the panel stays, Submit waits for a new preview. */
  function castChanged() {
    previewed = false;
    $("job-submit").disabled = true;
    if (noticePreview) clearMessages();
    $("cast-status").textContent = "The cast changed: preview again to see its chunks, then submit.";
  }

  function castFields() {
    const voices = castChoice.voices;
    const lines = castChoice.lines;
    if (!Object.keys(voices).length && !Object.keys(lines).length) return null;
    return { voices: { ...voices }, lines: { ...lines } };
  }

  function kindOf(name) {
    const lower = name.toLowerCase();
    if (lower.endsWith(".epub")) return "epub";
    if (lower.endsWith(".md") || lower.endsWith(".markdown")) return "markdown";
    if (lower.endsWith(".ssml") || lower.endsWith(".xml")) return "ssml";
    return "plain";
  }

  /* A text file is loaded into the editor (to read and edit before sending); an EPUB is sent as it is. */
  async function chooseScriptFile() {
    const file = $("job-file").files[0];
    const note = $("job-file-note");
    epubFile = null;
    $("job-script").disabled = false;
    note.hidden = true;
    invalidatePreview();
    if (!file) return;
    const kind = kindOf(file.name);
    $("job-script-format").value = kind;
    if (kind === "epub") {
      epubFile = file;
      $("job-script").disabled = true;
      note.textContent = `The EPUB ${file.name} (${fmtBytes(file.size)}) is sent as a file; ` +
        "its table of contents makes the chapters.";
    } else {
      $("job-script").value = await file.text();
      note.textContent = `${file.name} is loaded into the editor above.`;
    }
    note.hidden = false;
  }

  function insertVoiceSwitch() {
    const name = $("job-switch-voice").value;
    if (!name) return;
    const area = $("job-script");
    const line = `<!-- voice: ${name} -->\n`;
    const at = area.selectionStart ?? area.value.length;
    const before = area.value.slice(0, at);
    const prefix = before && !before.endsWith("\n") ? "\n" : "";
    area.setRangeText(prefix + line, at, area.selectionEnd ?? at, "end");
    area.focus();
    invalidatePreview();
  }

  /* The job's fields as POST /v1/jobs and POST /v1/scripts/preview take them: JSON, or multipart with the
     EPUB as the file "script" and the other fields as JSON in "job". */
  function jobRequest() {
    const preset = $("job-preset").value;
    const fields = {
      voice: $("job-voice").value,
      script_format: $("job-script-format").value,
      output: { format: preset === "acx" ? "mp3" : $("job-format").value, preset },
    };
    if ($("job-split").checked) fields.output.split = "chapter";
    const deliver = deliverFields();
    if (deliver) fields.deliver = deliver;
    if ($("job-readalong").checked) fields.output.readalong = true;
    const cast = castFields();
    if (cast) fields.cast = cast;
    const title = $("job-title").value.trim();
    if (title) fields.title = title;
    if (epubFile && fields.script_format === "epub") {
      const form = new FormData();
      form.append("job", JSON.stringify(fields));
      form.append("script", epubFile, epubFile.name);
      return { form };
    }
    return { json: { ...fields, script: $("job-script").value } };
  }

  /* The job's "deliver": a library-layout ZIP, and an upload into Audiobookshelf when both ids are given. */
  function deliverFields() {
    const deliver = {};
    if ($("job-library-zip").checked) deliver.library_zip = true;
    const library = $("job-abs-library").value.trim();
    const folder = $("job-abs-folder").value.trim();
    if (library || folder) deliver.audiobookshelf = { library_id: library, folder_id: folder };
    return Object.keys(deliver).length ? deliver : null;
  }

  async function previewJob(event) {
    event.preventDefault();
    invalidatePreview();
    if (!$("job-voice").value) {
      problem("Choose a voice first.");
      return;
    }
    const gen = generation;
    const asked = ++previewAsked;
    const preview = await previewOf(jobRequest(), () => gen === generation && asked === previewAsked)
      .catch((error) => {
        complain(error);
        return null;
      });
    if (!preview || gen !== generation || asked !== previewAsked) return;
    renderPreview(preview);
    previewed = true;
    idempotencyKey = newId();
    $("job-submit").disabled = false;
    const { chapters, chunks } = preview;
    say(`Preview: ${chapters.length} chapters, ${chunks.length} chunks, ` +
      `about ${fmtSeconds(preview.estimated_seconds)}.`, { preview: true });
  }

  /* POST /v1/scripts/preview; an EPUB or a long script is planned by a worker (202): its Location is
     polled at the pace its Retry-After asks until it answers the preview or its error (thrown as an
     ApiError like any other), while still() holds (the view and the form are the ones that asked). */
  let previewAsked = 0;
  async function previewOf(request, still) {
    let response = await api("POST", "/v1/scripts/preview", { ...request, raw: true });
    const deadline = Date.now() + PREVIEW_WAIT_MS;
    while (response.status === 202) {
      const pending = await response.json();
      if (!still()) return null;
      if (Date.now() > deadline) throw new Error("The preview was not ready in time; try again.");
      say(`Planning the preview on a worker (${pending.status})…`);
      const seconds = Math.min(Math.max(Number(response.headers.get("Retry-After")) || 1, 0.2), 5);
      await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
      if (!still()) return null;
      response = await api("GET", response.headers.get("Location") || pending.url, { raw: true });
    }
    return response.json();
  }

  function renderPreview(preview) {
    const summary = clear($("preview-summary"));
    const facts = [
      ["Title", preview.title || "(none: give one above)"],
      ["Language", preview.language],
      ["Estimated length", fmtSeconds(preview.estimated_seconds)],
      ["Chapters", preview.chapters.length],
      ["Chunks", preview.chunks.length],
    ];
    if (preview.metadata && preview.metadata.author) facts.push(["Author", preview.metadata.author]);
    for (const [term, value] of facts) summary.append(el("dt", {}, term), el("dd", {}, String(value)));
    const warnings = clear($("preview-warning-list"));
    for (const warning of preview.warnings) warnings.append(el("li", {}, warning));
    $("preview-warnings").hidden = preview.warnings.length === 0;
    const chapters = clear(document.querySelector("#preview-chapters tbody"));
    for (const chapter of preview.chapters) {
      chapters.append(el("tr", {},
        el("td", {}, chapter.index + 1),
        el("th", { scope: "row" }, chapter.title || "(untitled)"),
        el("td", {}, chapter.chunks),
        el("td", {}, chapter.characters),
        el("td", {}, fmtSeconds(chapter.estimated_seconds))));
    }
    const SHOWN = 200;
    const chunks = clear($("preview-chunks"));
    for (const chunk of preview.chunks.slice(0, SHOWN)) {
      const item = el("li", {}, el("span", { className: "help" }, `Chapter ${chunk.chapter + 1}: `), chunk.text);
      if (chunk.written && chunk.written !== chunk.text) {
        item.append(el("span", { className: "help" }, ` (written: ${chunk.written})`));
      }
      chunks.append(item);
    }
    const more = preview.chunks.length > SHOWN ? `, the first ${SHOWN} shown` : "";
    $("preview-chunks-summary").textContent = `${preview.chunks.length} chunks${more}`;
    renderCast(preview);
    $("preview").hidden = false;
  }

  function picker(id, label, options, chosen, onChange) {
    const select = el("select", { id, "aria-label": label, onchange: (event) => onChange(event.target.value) });
    for (const [value, text] of options) {
      select.append(el("option", { value, selected: value === chosen }, text));
    }
    return select;
  }

  /* The Cast panel: each character with its lines, a sample and a voice picker; each line with its
     speaker, which can be corrected. Choices go into the next preview and the job (castChoice). */
  function renderCast(preview) {
    const characters = preview.cast.characters;
    $("cast").hidden = characters.length === 0 && preview.lines.length === 0;
    $("cast-status").textContent = castFields() ? "Chunks below are read by this cast." : "";
    const rows = clear(document.querySelector("#cast-characters tbody"));
    const voiceOptions = [["", "Narrator"], ...voiceNames.map((name) => [name, name])];
    characters.forEach((character, n) => {
      const chosen = castChoice.voices[character.name] || "";
      rows.append(el("tr", {},
        el("th", { scope: "row" }, character.name,
          character.aliases.length ? el("span", { className: "help" }, ` (${character.aliases.join(", ")})`) : null),
        el("td", {}, character.lines),
        el("td", {}, character.sample),
        el("td", {}, picker(`cast-voice-${n}`, `Voice of ${character.name}`, voiceOptions, chosen, (value) => {
          if (value) castChoice.voices[character.name] = value;
          else delete castChoice.voices[character.name];
          castChanged();
        }))));
    });
    const SHOWN = 200;
    const speakers = [["narrator", "Narrator"], ...characters.map((c) => [c.name, c.name])];
    const lines = clear($("cast-lines"));
    for (const line of preview.lines.slice(0, SHOWN)) {
      const options = speakers.some(([value]) => value === line.speaker)
        ? speakers : [...speakers, [line.speaker, line.speaker]];
      lines.append(el("li", { "data-index": line.index },
        picker(`cast-line-${line.index}`, `Speaker of line ${line.index + 1}`, options, line.speaker, (value) => {
          castChoice.lines[String(line.index)] = value;
          castChanged();
        }),
        " ", line.text,
        el("span", { className: "help" }, ` (${line.attribution}, ${Math.round(line.confidence * 100)}%)`)));
    }
    const more = preview.lines.length > SHOWN ? `, the first ${SHOWN} shown` : "";
    $("cast-lines-summary").textContent = `${preview.lines.length} lines${more}`;
  }

  async function submitJob() {
    if (!previewed) return;
    const button = $("job-submit");
    button.disabled = true;
    try {
      const request = jobRequest();
      request.headers = { "Idempotency-Key": idempotencyKey };
      const job = await api("POST", "/v1/jobs", request);
      say(`Job "${job.title}" queued.`, { carry: true, job });
      invalidatePreview();
      location.hash = `#/jobs/${job.id}`;
    } catch (error) {
      button.disabled = false;
      complain(error);
    }
  }

  // ---------- jobs ----------

  async function showJobs(gen) {
    const { jobs } = await api("GET", "/v1/jobs?limit=100");
    if (gen !== generation) return;
    syncRows(document.querySelector("#jobs-table tbody"), jobs, jobRow);
    $("jobs-empty").hidden = jobs.length > 0;
    $("jobs-table").hidden = jobs.length === 0;
    if (jobs.some((j) => UNFINISHED.has(j.status))) poll(showJobs, 1500);
  }

  function jobRow(job) {
    const actions = el("td", {});
    if (UNFINISHED.has(job.status)) {
      actions.append(el("button", {
        type: "button",
        "aria-label": `Cancel job ${job.title}`,
        onclick: () => cancelJob(job.id).then(() => showJobs(generation)),
      }, "Cancel"));
    }
    return el("tr", {},
      el("th", { scope: "row" }, el("a", { href: `#/jobs/${job.id}` }, job.title)),
      el("td", {}, badge(job.status)),
      el("td", {},
        el("progress", { max: 100, value: job.progress.percent, "aria-label": `Progress of ${job.title}` }),
        ` ${job.progress.chunks_done}/${job.progress.chunks_total}`),
      el("td", {}, fmtDate(job.created_at)),
      actions);
  }

  async function cancelJob(id) {
    try {
      const job = await api("POST", `/v1/jobs/${encodeURIComponent(id)}/cancel`);
      say(`Job "${job.title}" cancelled.`);
    } catch (error) {
      complain(error);
    }
  }

  // ---------- one job ----------

  let shown = null; // the job view's state: {id, revision loaded into the player, ready chapters seen, link}

  async function showJob(gen, id) {
    shown = { id, revision: null, readyChapters: -1, link: null };
    signatures.delete($("job-chapters"));
    for (const part of ["job-player", "job-chapters-section", "job-files-section", "job-qa-section"]) {
      $(part).hidden = true;
    }
    const audio = $("job-audio");
    audio.removeAttribute("src");
    audio.replaceChildren();
    audio.load();
    $("job-caption").textContent = "";
    $("job-title-heading").textContent = "Job";
    await refreshJob(gen);
  }

  /* Poll GET /v1/jobs/{id} (every second while it is unfinished); once it has succeeded, load the player,
     files and QA of that revision (a re-render makes a new revision, loaded when it is done). */
  async function refreshJob(gen) {
    const job = await api("GET", `/v1/jobs/${encodeURIComponent(shown.id)}`);
    if (gen !== generation) return;
    renderJobState(job);
    const ready = job.chapters.filter((c) => c.state === "ready").length;
    if (job.status === "succeeded" && job.revision !== shown.revision) {
      shown.revision = job.revision;
      shown.readyChapters = ready;
      await loadFinished(gen, job);
    } else if (job.status !== "succeeded" && ready !== shown.readyChapters && ready > 0) {
      shown.readyChapters = ready; // chapters downloadable while later ones still render
      await loadFiles(gen, job);
    }
    // A finished book's upload into Audiobookshelf goes on after it succeeds: followed until it ends.
    const shelf = job.delivery && job.delivery.audiobookshelf;
    const delivering = job.status === "succeeded" && Boolean(shelf) && shelf.state === "pending";
    if (gen === generation && (UNFINISHED.has(job.status) || delivering)) poll(refreshJob, delivering ? 2000 : 1000);
  }

  function renderJobState(job) {
    $("job-title-heading").textContent = job.title;
    document.title = `${job.title} · Tome studio`;
    const status = $("job-status");
    status.textContent = job.status;
    status.className = `badge badge-${STATUSES.has(job.status) ? job.status : "other"}`;
    const p = job.progress;
    let text = `${p.chunks_done} of ${p.chunks_total} chunks (${Math.round(p.percent)}%)`;
    if (p.chunks_reused) text += `, ${p.chunks_reused} reused`;
    if (p.eta_seconds && UNFINISHED.has(job.status)) text += `, about ${fmtSeconds(p.eta_seconds)} left`;
    if (job.revision) text += `; revision ${job.revision}`;
    $("job-progress-text").textContent = text;
    $("job-progress").value = p.percent;
    const error = $("job-error");
    const refused = job.rerender && job.rerender.state === "refused" ? job.rerender : null;
    error.hidden = !job.error && !refused;
    error.textContent = job.error
      || (refused ? `The re-render of chunk ${refused.seq} was refused, its previous take kept: ${refused.error}` : "");
    if (job.error_detail && job.error_detail.line) {
      error.textContent += ` (line ${job.error_detail.line}, column ${job.error_detail.column})`;
    }
    const shelf = job.delivery && job.delivery.audiobookshelf;
    const delivery = $("job-delivery");
    delivery.hidden = !shelf;
    delivery.textContent = shelf
      ? `Audiobookshelf: ${shelf.state}${shelf.attempts ? ` (attempts: ${shelf.attempts})` : ""}`
        + (shelf.error ? `: ${shelf.error}` : "")
      : "";
    const cancel = $("job-cancel");
    cancel.hidden = !UNFINISHED.has(job.status);
    if (noticeJob && noticeJob.id === job.id && !UNFINISHED.has(job.status)) {
      const rerender = job.rerender ? job.rerender.state : null;
      const over = noticeJob.revision === null || job.revision > noticeJob.revision
        || rerender === "refused" || rerender === "cancelled";
      if (over) clearMessages();
    }
    renderChapters(job);
  }

  function renderChapters(job) {
    const playable = Boolean($("job-audio").getAttribute("src")); // this or the previous revision
    const signature = JSON.stringify([job.status, playable, job.chapters]);
    if (signatures.get($("job-chapters")) === signature) return; // unchanged: keep the focus where it is
    signatures.set($("job-chapters"), signature);
    const list = clear($("job-chapters"));
    for (const chapter of job.chapters) {
      const title = chapter.title || `Chapter ${chapter.index + 1}`;
      const detail = [];
      if (chapter.start !== null && chapter.start !== undefined) detail.push(`starts at ${fmtSeconds(chapter.start)}`);
      if (chapter.duration) detail.push(`${fmtSeconds(chapter.duration)} long`);
      if (chapter.state && job.status !== "succeeded") detail.push(chapter.state);
      const canSeek = playable && chapter.start !== null && chapter.start !== undefined;
      list.append(el("li", {},
        el("button", {
          type: "button",
          className: "link",
          "data-start": canSeek ? chapter.start : null,
          disabled: !canSeek,
          onclick: () => seek(chapter.start),
        }, title),
        el("span", { className: "help" }, detail.length ? ` (${detail.join(", ")})` : "")));
    }
    $("job-chapters-section").hidden = job.chapters.length === 0;
  }

  /* Click on a chapter: the player jumps to its start (and keeps playing, or stays paused). */
  function seek(start) {
    const audio = $("job-audio");
    if (!audio.getAttribute("src")) return;
    audio.currentTime = start;
  }

  async function loadFinished(gen, job) {
    const files = await loadFiles(gen, job);
    if (gen !== generation) return;
    const audio = $("job-audio");
    const old = audio.getAttribute("src");
    const url = await playerSource(job, files);
    if (gen !== generation) return;
    audio.replaceChildren();
    audio.src = url;
    if (old && old.startsWith("blob:")) URL.revokeObjectURL(old);
    $("job-player").hidden = false;
    renderChapters(job);
    const vtt = (files || []).find((f) => f.kind === "subtitles" && f.format === "vtt");
    if (vtt) await addSubtitles(gen, audio, vtt);
    await loadQa(gen, job);
  }

  /* The book for the player: a signed link, which the browser streams with Range requests; where the
     server makes no links (409: no TOME_SECRET_KEY), the whole book as a blob: URL. */
  async function playerSource(job, files) {
    const book = (files || []).find((f) => f.kind === "book");
    if (book) {
      try {
        return await bookLink(job.id, book.name);
      } catch (error) {
        if (!(error instanceof ApiError && error.status === 409)) throw error;
      }
    }
    return blobUrl(job.output.url);
  }

  async function bookLink(jobId, name) {
    const path = `/v1/jobs/${encodeURIComponent(jobId)}/files/${encodeURIComponent(name)}/link`;
    const link = await api("POST", path);
    shown.link = { jobId, name };
    return apiPath(link.url); // checked to be of this origin, as every URL the API gives
  }

  /* A link expires (TOME_FILE_LINK_SECONDS): the next range the player asks for is refused and the element
     errs. A new link takes over where it stopped, playing if it played (at most once in 10 s, so that a
     file that is really gone does not loop). */
  let lastRenewal = 0;
  async function renewLink() {
    const audio = $("job-audio");
    if (!shown || !shown.link || !(audio.getAttribute("src") || "").startsWith("/v1/links/")) return;
    if (Date.now() - lastRenewal < 10000) return;
    lastRenewal = Date.now();
    const gen = generation;
    const at = audio.currentTime;
    const playing = !audio.paused;
    try {
      const url = await bookLink(shown.link.jobId, shown.link.name);
      if (gen !== generation) return;
      audio.src = url;
      audio.currentTime = at;
      if (playing) await audio.play();
    } catch (error) {
      complain(error);
    }
  }

  /* The job's WebVTT file as the player's text track; the cue being read is shown under the player. */
  async function addSubtitles(gen, audio, file) {
    const url = await blobUrl(file.url);
    if (gen !== generation) return;
    const track = el("track", { kind: "captions", label: "Transcript", src: url, default: true });
    audio.append(track);
    track.track.mode = "hidden"; // cues load and change; the text is shown below, not over audio
    track.track.addEventListener("cuechange", () => {
      const cues = Array.from(track.track.activeCues || []);
      $("job-caption").textContent = cues.map((cue) => cue.text).join(" ");
    });
  }

  async function loadFiles(gen, job) {
    let files;
    try {
      ({ files } = await api("GET", `/v1/jobs/${encodeURIComponent(job.id)}/files`));
    } catch (error) {
      if (error instanceof ApiError && (error.status === 409 || error.status === 410)) return [];
      throw error;
    }
    if (gen !== generation) return files;
    const body = clear(document.querySelector("#job-files tbody"));
    for (const file of files) {
      const button = el("button", { type: "button", "aria-label": `Download ${file.name}` }, "Download");
      button.addEventListener("click", () => download(file, button));
      body.append(el("tr", { "data-file": file.name },
        el("th", { scope: "row" }, file.name),
        el("td", {}, file.title ? `${file.kind}: ${file.title}` : file.kind),
        el("td", {}, fmtBytes(file.bytes)),
        el("td", {}, fmtSeconds(file.duration)),
        el("td", {}, button)));
    }
    $("job-files-section").hidden = files.length === 0;
    return files;
  }

  /* Fetched with the key, then saved from a blob: URL through a temporary <a download>. */
  async function download(file, button) {
    button.disabled = true;
    try {
      const url = await blobUrl(file.url);
      const link = el("a", { href: url, download: file.name, hidden: true });
      document.body.append(link);
      link.click();
      link.remove();
      say(`Downloaded ${file.name} (${fmtBytes(file.bytes)}).`);
    } catch (error) {
      complain(error);
    } finally {
      button.disabled = false;
    }
  }

  async function loadQa(gen, job) {
    const qa = await api("GET", `/v1/jobs/${encodeURIComponent(job.id)}/qa?flagged=true&limit=500`);
    if (gen !== generation) return;
    const total = job.progress.chunks_total;
    const again = `${qa.chunks_rerendered} rendered again`;
    $("qa-summary").textContent = qa.chunks_flagged
      ? `${qa.chunks_flagged} of ${total} chunks flagged (kept although they failed a check), ${again}. ` +
        "Listen to one, then render it again: a new take, or the text corrected."
      : `Every chunk passed its checks (${again}).`;
    const list = clear($("qa-flagged"));
    for (const chunk of qa.chunks) list.append(flaggedChunk(job, chunk));
    $("job-qa-section").hidden = false;
  }

  function flaggedChunk(job, chunk) {
    const item = el("li", { "data-seq": chunk.seq },
      el("h3", {}, `Chunk ${chunk.seq}, chapter ${chunk.chapter + 1}`),
      el("blockquote", {}, chunk.text),
      el("ul", { className: "reasons" }, chunk.reasons.map((reason) => el("li", {}, reason))));
    if (chunk.missing_words.length) item.append(el("p", {}, `Not heard: ${chunk.missing_words.join(", ")}`));
    const listen = el("button", { type: "button", disabled: !chunk.audio_url }, "Listen");
    const player = el("audio", { controls: true, hidden: true, "aria-label": `Chunk ${chunk.seq}` });
    listen.addEventListener("click", async () => {
      listen.disabled = true;
      try {
        player.src = await blobUrl(chunk.audio_url);
        player.hidden = false;
        player.focus();
      } catch (error) {
        listen.disabled = false;
        complain(error);
      }
    });
    const textId = `qa-text-${chunk.seq}`;
    const text = el("textarea", { id: textId, rows: 2 }, chunk.text);
    const again = el("button", { type: "button" }, "Re-render");
    again.addEventListener("click", async () => {
      again.disabled = true;
      const edited = text.value.trim();
      const body = edited && edited !== chunk.text ? { text: edited } : {};
      try {
        await api("POST", `/v1/jobs/${encodeURIComponent(job.id)}/chunks/${chunk.seq}/rerender`, { json: body });
        const how = body.text ? " with the new text" : " (a new take)";
        say(`Chunk ${chunk.seq} is being rendered again${how}.`, { job, revision: job.revision });
        await refreshJob(generation);
      } catch (error) {
        again.disabled = false;
        complain(error);
      }
    });
    item.append(
      el("div", { className: "actions" }, listen, player),
      el("label", { for: textId }, `Text of chunk ${chunk.seq} (edit it, or keep it for a new take)`),
      text,
      el("div", { className: "actions" }, again));
    return item;
  }

  // ---------- admin ----------

  async function showAdmin(gen) {
    const params = new URLSearchParams({ limit: "500" });
    if ($("admin-status").value) params.set("cache_status", $("admin-status").value);
    if ($("admin-owner").value.trim()) params.set("owner", $("admin-owner").value.trim());
    const { voices } = await api("GET", `/v1/admin/voices?${params}`);
    if (gen !== generation) return;
    syncRows(document.querySelector("#admin-table tbody"), voices, adminRow);
    $("admin-empty").hidden = voices.length > 0;
    $("admin-table").hidden = voices.length === 0;
    if (voices.some((v) => BUILDING.has(v.cache_status))) poll(showAdmin, 1500);
  }

  function adminRow(voice) {
    const state = el("td", {}, badge(voice.cache_status));
    if (voice.cache_error) state.append(el("p", { className: "problem-text" }, voice.cache_error));
    const who = `${voice.owner}/${voice.name}`;
    const rebuild = el("button", { type: "button", "aria-label": `Rebuild the cache of ${who}` }, "Rebuild");
    rebuild.addEventListener("click", async () => {
      rebuild.disabled = true;
      try {
        const path = `/v1/admin/voices/${encodeURIComponent(voice.id)}/cache`;
        const answer = await api("POST", path, { json: { force: true } });
        say(answer.queued ? `Rebuilding ${who}.` : `${who}: a build is already queued or running.`);
        await showAdmin(generation);
      } catch (error) {
        rebuild.disabled = false;
        complain(error);
      }
    });
    return el("tr", {},
      el("td", {}, voice.owner),
      el("th", { scope: "row" }, voice.name),
      state,
      el("td", {}, voice.cache_engine || "–"),
      el("td", {}, fmtDate(voice.cache_built_at)),
      el("td", {}, rebuild));
  }

  async function rebuildMany(body, what) {
    const answer = await api("POST", "/v1/admin/voice-caches/rebuild", { json: body });
    say(`${what}: ${answer.queued} of ${answer.matched} queued.`);
    await showAdmin(generation);
  }

  // ---------- start ----------

  function start() {
    $("signin-form").addEventListener("submit", async (event) => {
      event.preventDefault();
      const candidate = $("api-key").value.trim();
      if (!candidate) return;
      if (await signIn(candidate)) {
        $("api-key").value = "";
        say("Signed in.", { carry: true });
        if (location.hash.startsWith("#/") && location.hash !== "#/signin") route();
        else location.hash = "#/voices";
      }
    });
    $("sign-out").addEventListener("click", () => signOut());
    $("job-audio").addEventListener("error", renewLink);
    $("voice-form").addEventListener("submit", uploadVoice);
    setUpRecorder();
    const jobForm = $("job-form");
    jobForm.addEventListener("submit", previewJob);
    jobForm.addEventListener("input", formChanged);
    jobForm.addEventListener("change", formChanged);
    $("job-file").addEventListener("change", () => chooseScriptFile().catch(complain));
    $("job-script-format").addEventListener("change", () => {
      if ($("job-script-format").value !== "epub" && epubFile) {
        epubFile = null;
        $("job-file").value = "";
        $("job-script").disabled = false;
        $("job-file-note").hidden = true;
      }
    });
    $("job-preset").addEventListener("change", () => {
      const acx = $("job-preset").value === "acx";
      if (acx) $("job-format").value = "mp3";
      $("job-format").disabled = acx;
    });
    $("job-insert-switch").addEventListener("click", insertVoiceSwitch);
    $("job-submit").addEventListener("click", submitJob);
    $("job-cancel").addEventListener("click", async () => {
      await cancelJob(shown.id);
      await refreshJob(generation);
    });
    $("admin-filter").addEventListener("submit", (event) => {
      event.preventDefault();
      open("admin");
    });
    $("admin-status").addEventListener("change", () => open("admin"));
    $("admin-rebuild-failed").addEventListener("click", () =>
      rebuildMany({ status: ["failed"] }, "Failed caches").catch(complain));
    armed($("admin-rebuild-all"), "Press again to rebuild every cache", () =>
      rebuildMany({ all: true }, "Every cache"));
    window.addEventListener("hashchange", route);

    const saved = sessionStorage.getItem(KEY_ITEM);
    if (saved) signIn(saved).then(route);
    else route();
  }

  start();
})();
