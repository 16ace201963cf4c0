// The approvals page: pending interrupts of one namespace, live from the server's event
// stream, the recent decisions with how far each was carried out, and the run behind a pause.
// Every value that comes from the store is untrusted: it is only ever written with
// textContent (or as an attribute's value), never parsed as HTML.
"use strict";

const CSRF_HEADER = "X-Checkpointd-Console";
const TYPE_PREFIX = "INTERRUPT_EVENT_TYPE_";
//: How long a resumed row stays (showing "resumed") before it leaves the inbox.
const RESUMED_LINGER_MS = 1500;
//: Top-level context fields shown on a row, and the characters shown of each value.
const MAX_FIELDS = 6;
const MAX_FIELD_CHARS = 80;
//: Decisions kept in the decided section.
const MAX_DECIDED = 50;

const state = {
  session: null,
  namespace: "",
  source: null,
  rows: new Map(), // key(pending) -> row: {pending, claimed, ui, element}
  decided: new Map(), // key(pending) -> {pending, claimed, element}
  live: false,
  lastContact: 0, // Date.now() of the stream's last message or open
  // A decided pause no worker has taken after this many seconds says which worker it needs.
  workerHintAfterS: 30,
  signedInOnce: false,
  namespaces: [], // [{name, pending}] from /api/namespaces
  replaceRows: false, // the next snapshot replaces the rows shown
};

function $(id) {
  return document.getElementById(id);
}

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = String(text);
  return node;
}

// A pause is one (execution, interrupt): a graph thread may wait on several interrupts.
function interruptId(pending) {
  return pending.interrupt_id || "";
}

function key(pending) {
  return `${pending.execution_id}\u0000${interruptId(pending)}`;
}

class ApiError extends Error {
  constructor(message, reason, code) {
    super(message);
    this.reason = reason || "";
    this.code = code || "";
  }
}

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (method !== "GET") {
    headers[CSRF_HEADER] = "1";
    headers["Content-Type"] = "application/json";
  }
  let response;
  try {
    response = await fetch(path, {
      method,
      headers,
      credentials: "same-origin",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (error) {
    // The browser's own text ("Failed to fetch") says nothing to a person.
    throw new ApiError("the server could not be reached", "NETWORK", "UNAVAILABLE");
  }
  let data;
  try {
    data = await response.json();
  } catch (error) {
    throw new ApiError(`the server answered ${response.status} without a JSON body`, "", "");
  }
  if (!response.ok) {
    const e = data.error || {};
    throw new ApiError(e.message || response.statusText, e.reason, e.code);
  }
  return data;
}

// --- session ------------------------------------------------------------------------------

async function init() {
  $("login-form").addEventListener("submit", signIn);
  $("sign-out").addEventListener("click", signOut);
  $("namespace-select").addEventListener("change", (e) => switchNamespace(e.target.value));
  $("namespace-input").addEventListener("change", (e) => switchNamespace(e.target.value.trim()));
  $("chain-filter").addEventListener("change", render);
  $("reason-filter").addEventListener("change", render);
  $("run-close").addEventListener("click", () => $("run-view").close());
  setInterval(tick, 1000);
  const session = await api("GET", "/api/session");
  if (session.auth && !session.signed_in) showLogin("");
  else start(session);
}

function showLogin(why) {
  closeStream();
  state.session = null;
  $("console").hidden = true;
  $("sign-out").hidden = true;
  $("banner").hidden = true;
  $("who").textContent = "";
  $("connection").textContent = "";
  $("login-why").textContent = why;
  $("login").hidden = false;
  $("token").focus();
}

async function signIn(event) {
  event.preventDefault();
  $("login-error").textContent = "";
  try {
    const session = await api("POST", "/api/session", { token: $("token").value });
    $("token").value = "";
    start(session);
  } catch (error) {
    $("login-error").textContent = `Not signed in: ${error.message}`;
  }
}

async function signOut() {
  await api("DELETE", "/api/session");
  state.signedInOnce = false;
  showLogin("");
}

function canDecide() {
  return state.session !== null && state.session.role === "read-write";
}

function start(session) {
  state.session = session;
  state.signedInOnce = true;
  $("login").hidden = true;
  $("console").hidden = false;
  $("sign-out").hidden = !session.auth;
  $("who").textContent = session.token_name
    ? `${session.token_name} (${session.role})`
    : session.role;
  const select = $("namespace-select");
  const input = $("namespace-input");
  let namespace = state.namespace || input.value.trim() || "default";
  if (session.namespaces) {
    // Only what the token grants.
    select.replaceChildren(...session.namespaces.map((name) => el("option", "", name)));
    for (const option of select.options) option.value = option.textContent;
    if (!session.namespaces.includes(namespace)) namespace = session.namespaces[0];
    select.value = namespace;
    select.hidden = false;
    input.hidden = true;
  } else {
    select.hidden = true;
    input.hidden = false;
  }
  switchNamespace(namespace);
}

// --- the connection -----------------------------------------------------------------------

// "live" only while the stream is open and answering: every message (progress included, at
// least every watch progress interval) is contact; a longer silence is a lost stream.
function staleAfterMs() {
  const interval = (state.session && state.session.watch_progress_interval_s) || 10;
  return (2 * interval + 3) * 1000;
}

function contact() {
  state.lastContact = Date.now();
  if (!state.live) setLive(true, "");
}

function setLive(live, why) {
  state.live = live;
  const indicator = $("connection");
  indicator.textContent = live ? "live" : why;
  indicator.classList.toggle("down", !live);
  $("banner").hidden = live;
  updateBanner(why);
  for (const button of document.querySelectorAll("button.decide")) setDecideEnabled(button);
}

function updateBanner(why) {
  if (state.live) return;
  const since = state.lastContact
    ? `last contact ${Math.round((Date.now() - state.lastContact) / 1000)}s ago`
    : "no contact yet";
  const what = why || $("connection").textContent;
  $("banner").textContent =
    `Not connected to the server (${what}; ${since}). ` +
    "What is shown may be out of date; deciding waits until the connection is back.";
}

const OFFLINE_TITLE = "not connected to the server: deciding waits until the connection is back";

function setDecideEnabled(button) {
  const row = state.rows.get(button.dataset.key);
  const busy = row !== undefined && row.ui.inFlight;
  button.disabled = busy || !state.live;
  button.title = !state.live ? OFFLINE_TITLE : busy ? "the decision is being sent" : "";
}

function tick() {
  if (state.source !== null && state.live && Date.now() - state.lastContact > staleAfterMs()) {
    // Silent past its progress interval: the server or the network is gone; start again.
    setLive(false, "no contact");
    connect();
  }
  if (!state.live && state.session !== null) updateBanner("");
  refreshAges();
}

// --- the stream ---------------------------------------------------------------------------

function closeStream() {
  if (state.source !== null) state.source.close();
  state.source = null;
}

function switchNamespace(namespace) {
  if (!namespace) return;
  state.namespace = namespace;
  loadNamespaces();
  state.rows.clear();
  render();
  state.decided.clear();
  connect();
  loadDecided();
}

// The namespaces with pauses, offered for the free-text box: a typo should not look like an
// empty queue.
async function loadNamespaces() {
  let listed;
  try {
    listed = (await api("GET", "/api/namespaces")).namespaces;
  } catch (error) {
    return; // the box still takes any name
  }
  state.namespaces = listed;
  $("namespace-options").replaceChildren(
    ...listed.map((n) => {
      const option = el("option", "", `${n.pending} pending`);
      option.value = n.name;
      option.label = `${n.pending} pending`;
      return option;
    }),
  );
  namespaceHint();
}

function namespaceHint() {
  const hint = $("namespace-hint");
  const listed = state.namespaces || [];
  const known = listed.some((n) => n.name === state.namespace);
  const others = listed.map((n) => n.name).filter((name) => name !== state.namespace);
  hint.hidden = known || state.rows.size > 0 || others.length === 0 || $("namespace-input").hidden;
  hint.textContent =
    `Nothing is pending in “${state.namespace}”. Namespaces with pending pauses: ` +
    `${others.join(", ")}.`;
}

async function loadDecided() {
  const namespace = state.namespace;
  try {
    const reply = await api("GET", `/api/decisions?namespace=${encodeURIComponent(namespace)}`);
    if (namespace !== state.namespace) return;
    // Live events may have arrived first: they are newer than the listing.
    for (const pending of reply.decided.reverse()) {
      if (!state.decided.has(key(pending))) upsertDecided(pending, false);
    }
  } catch (error) {
    $("decided-error").textContent = `Recent decisions could not be read: ${error.message}`;
  }
}

// A fresh stream starts with a snapshot; the browser itself reconnects a dropped one from
// the last event id it saw (Last-Event-ID), so nothing is missed or shown twice.
function connect() {
  closeStream();
  // What is shown stays (marked out of date by the banner) until the new snapshot replaces it.
  state.replaceRows = true;
  const url = `/api/events?namespace=${encodeURIComponent(state.namespace)}`;
  const source = new EventSource(url);
  state.source = source;
  if (state.lastContact === 0) $("connection").textContent = "connecting…";
  const mine = (handler) => (e) => {
    if (state.source !== source) return;
    contact();
    if (state.replaceRows && (e.type === "snapshot" || e.type === "ready")) {
      state.replaceRows = false;
      state.rows.clear();
      render();
    }
    handler(e);
  };
  source.addEventListener("open", mine(() => {}));
  source.addEventListener("progress", mine(() => {}));
  source.addEventListener("snapshot", mine((e) => upsert(JSON.parse(e.data))));
  source.addEventListener("ready", mine(render));
  source.addEventListener("interrupt", mine((e) => onEvent(JSON.parse(e.data))));
  source.addEventListener("failure", (e) => {
    if (state.source !== source) return;
    const error = JSON.parse(e.data).error;
    setLive(false, `reconnecting (${error.reason || error.code})`);
    if (error.reason === "CURSOR_EXPIRED") connect(); // too far behind: snapshot again
  });
  source.addEventListener("error", () => {
    if (state.source !== source) return;
    if (source.readyState !== EventSource.CLOSED) {
      // The browser retries on its own; until it is back, nothing is live.
      if (state.live || !$("connection").classList.contains("down")) {
        setLive(false, "reconnecting");
      }
      return;
    }
    // Refused outright (signed out, namespace not granted, server gone): ask again.
    setLive(false, "disconnected");
    setTimeout(async () => {
      if (state.source !== source) return;
      try {
        const session = await api("GET", "/api/session");
        if (session.auth && !session.signed_in) {
          showLogin(
            state.signedInOnce
              ? "Your session has ended: sessions live in the server's memory, so a restart " +
                  "of the server (or signing out elsewhere) asks for the token again."
              : "",
          );
        } else connect();
      } catch (error) {
        connect();
      }
    }, 2000);
  });
}

function onEvent(event) {
  const type = String(event.type || "").replace(TYPE_PREFIX, "");
  const pending = event.pending || {};
  const id = key(pending);
  const row = state.rows.get(id);
  const known = state.decided.get(id);
  if (type === "ADDED" || type === "DECIDED") {
    upsert(pending);
  } else if (type === "CLAIMED") {
    // A resume worker took a decided pause: the run is resuming, the row stays until the
    // worker reports. A claim of an undecided pause (a resume in code) ends the wait.
    if (row && row.pending.decision) {
      row.claimed = true;
      rebuild(row);
    } else if (row) {
      remove(id);
    }
    if (known) upsertDecided(known.pending, true);
    return;
  } else if (type === "RESUMED") {
    if (row) {
      row.pending = pending;
      rebuild(row);
      setTimeout(() => {
        const now = state.rows.get(id);
        if (now && now.pending.decision && decisionStatus(now.pending.decision) === "resumed") {
          remove(id);
        }
      }, RESUMED_LINGER_MS);
    }
  } else if (type === "RESUME_FAILED") {
    if (row) {
      row.pending = pending;
      row.claimed = false;
      rebuild(row);
    }
  } else if (type === "REMOVED") {
    remove(id);
  }
  if (pending.decision) upsertDecided(pending, false);
}

function upsert(pending) {
  const id = key(pending);
  let row = state.rows.get(id);
  if (row === undefined) {
    row = { pending, claimed: false, element: null, ui: { confirm: null, inFlight: false, message: "" } };
    state.rows.set(id, row);
  }
  if (pending.decision === undefined || pending.checkpoint_id !== row.pending.checkpoint_id) {
    row.claimed = false; // a new pause of the same run
  }
  row.pending = pending;
  if (pending.decision) row.ui.confirm = null;
  rebuild(row);
  if (pending.decision) upsertDecided(pending, false);
}

function rebuild(row) {
  const previous = row.element;
  const focused = previous !== null && previous.contains(document.activeElement)
    ? document.activeElement.className
    : null;
  row.element = buildRow(row, previous);
  if (previous !== null) previous.replaceWith(row.element);
  render();
  if (focused) {
    const again = row.element.querySelector(`[class="${focused}"]`);
    if (again) again.focus();
  }
}

function remove(id) {
  if (state.rows.delete(id)) render();
}

// --- rendering ----------------------------------------------------------------------------

function age(iso) {
  const seconds = Math.max(0, Math.round((Date.now() - Date.parse(iso)) / 1000));
  if (seconds < 60) return `${seconds}s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)}h ago`;
  return `${Math.floor(seconds / 86400)}d ago`;
}

function ageNode(iso) {
  const node = el("time", "age", age(iso));
  node.dataset.at = iso;
  node.dateTime = iso;
  node.title = new Date(iso).toLocaleString();
  return node;
}

function refreshAges() {
  for (const node of document.querySelectorAll("time.age")) {
    node.textContent = age(node.dataset.at);
  }
  // A decision still waiting for a worker says so once it has waited a while.
  for (const entry of state.decided.values()) {
    const cell = entry.element && entry.element.querySelector(".resume");
    if (cell) setResumeCell(cell, entry.pending, entry.claimed);
  }
  for (const row of state.rows.values()) {
    const node = row.element && row.element.querySelector(".status");
    if (node && row.pending.decision) setStatus(node, row);
  }
}

function prettyContext(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch (error) {
    return String(text);
  }
}

function truncate(text, limit) {
  return text.length > limit ? `${text.slice(0, limit - 1)}…` : text;
}

// The context's top-level fields, as text: what is being approved at a glance.
function contextFields(text) {
  let value;
  try {
    value = JSON.parse(text || "{}");
  } catch (error) {
    return null;
  }
  if (value === null || typeof value !== "object" || Array.isArray(value)) return null;
  const entries = Object.entries(value);
  if (entries.length === 0) return null;
  const list = el("dl", "fields");
  for (const [name, field] of entries.slice(0, MAX_FIELDS)) {
    const full = typeof field === "string" ? field : JSON.stringify(field);
    const dd = el("dd", "", full === "" ? "—" : truncate(full, MAX_FIELD_CHARS));
    if (full.length > MAX_FIELD_CHARS) dd.title = full;
    const item = el("div", "field");
    item.dataset.field = name;
    item.append(el("dt", "", name), dd);
    list.append(item);
  }
  if (entries.length > MAX_FIELDS) {
    list.append(el("div", "field more", `+${entries.length - MAX_FIELDS} more in the context`));
  }
  return list;
}

function decisionStatus(decision) {
  return String(decision.status || "").replace("DECISION_STATUS_", "").toLowerCase();
}

// How far a decision has been carried out, in words, and its kind (for the style).
function resumeState(pending, claimed) {
  const decision = pending.decision;
  const status = decisionStatus(decision);
  if (status === "resumed") return ["resumed", "resumed"];
  if (status === "resume_failed") return [`resume failed: ${decision.error || "no error given"}`, "failed"];
  if (status === "resuming" || claimed) return ["resuming…", "resuming"];
  const waited = (Date.now() - Date.parse(decision.decided_at)) / 1000;
  if (waited >= state.workerHintAfterS) {
    return [
      `no worker has taken it for ${age(decision.decided_at).replace(" ago", "")}: ` +
        `waiting for a worker that runs chain “${pending.chain_name}”`,
      "stalled",
    ];
  }
  return ["waiting for a worker", "waiting"];
}

function verdictText(decision) {
  let text = `${decision.approved ? "approved" : "rejected"} by ${decision.decided_by}`;
  if (decision.reason) text += ` — “${decision.reason}”`;
  return text;
}

function setStatus(node, row) {
  const decision = row.pending.decision;
  if (!decision) {
    node.textContent = row.ui.inFlight ? "sending the decision…" : "";
    node.className = "status";
    return;
  }
  const [text, kind] = resumeState(row.pending, row.claimed);
  const full = `${verdictText(decision)} · ${text}`;
  if (node.textContent !== full) node.textContent = full;
  node.className = `status ${kind}`;
}

function runLink(pending) {
  const button = el("button", "open-run", "Open run");
  button.type = "button";
  button.title = `the checkpoints of run ${pending.execution_id}`;
  button.addEventListener("click", () => openRun(pending));
  return button;
}

function copyable(text, className) {
  const wrap = el("span", "copyable");
  const code = el("code", className, text);
  const button = el("button", "copy", "Copy");
  button.type = "button";
  button.title = "copy the run id";
  button.setAttribute("aria-label", `copy run id ${text}`);
  button.addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(text);
      button.textContent = "Copied";
    } catch (error) {
      // No clipboard (an insecure origin): select it for Ctrl+C instead.
      const range = document.createRange();
      range.selectNodeContents(code);
      const selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      button.textContent = "Selected";
    }
    setTimeout(() => (button.textContent = "Copy"), 1500);
  });
  wrap.append(code, button);
  return wrap;
}

function buildRow(row, previous) {
  const p = row.pending;
  const rowKey = key(p);
  const article = el("article", "interrupt");
  article.dataset.executionId = p.execution_id;
  article.dataset.interruptId = interruptId(p);
  article.classList.toggle("is-decided", Boolean(p.decision));
  const title = el("div", "title");
  title.append(el("span", "chain", p.chain_name), el("span", "reason", p.reason), ageNode(p.created_at));
  article.append(title);
  const meta = el("div", "meta");
  meta.append(el("span", "node", `node ${p.node_id}`), document.createTextNode(" · "));
  meta.append(el("span", "agent-path", `agent ${p.agent_path || "—"}`), document.createTextNode(" · run "));
  meta.append(copyable(p.execution_id, "execution-id"));
  if (interruptId(p)) {
    meta.append(document.createTextNode(" · interrupt "), el("code", "interrupt-id", interruptId(p)));
  }
  meta.append(document.createTextNode(" "), runLink(p));
  article.append(meta);
  const fields = contextFields(p.context_json);
  if (fields) article.append(fields);
  const details = el("details", "context");
  details.append(el("summary", "", "full context (JSON)"), el("pre", "context-json", prettyContext(p.context_json || "{}")));
  if (previous) details.open = previous.querySelector("details.context").open;
  article.append(details);
  const status = el("div", "status");
  status.setAttribute("role", "status");
  setStatus(status, row);
  article.append(status);
  if (canDecide() && !p.decision) article.append(buildActions(row, rowKey, previous));
  // A refused decision says so even once the row shows someone else's decision.
  const message = el("p", "error message", row.ui.message);
  message.setAttribute("role", "alert");
  message.hidden = !row.ui.message;
  article.append(message);
  return article;
}

function decideButton(className, label, rowKey) {
  const button = el("button", `decide ${className}`, label);
  button.type = "button";
  button.dataset.key = rowKey;
  return button;
}

function buildActions(row, rowKey, previous) {
  const p = row.pending;
  const actions = el("div", "actions");
  const note = el("input", "note");
  note.placeholder = "note (optional)";
  note.maxLength = 1024;
  note.setAttribute("aria-label", `note for run ${p.execution_id}`);
  const typed = previous && previous.querySelector("input.note");
  if (typed) note.value = typed.value;
  note.disabled = row.ui.inFlight || row.ui.confirm !== null;
  const approve = decideButton("approve", "Approve…", rowKey);
  const reject = decideButton("reject", "Reject…", rowKey);
  const ask = (approved) => {
    row.ui.confirm = approved;
    row.ui.note = note.value.trim();
    row.ui.message = "";
    rebuild(row);
    row.element.querySelector("button.confirm").focus();
  };
  approve.addEventListener("click", () => ask(true));
  reject.addEventListener("click", () => ask(false));
  actions.append(note, approve, reject);
  for (const button of [approve, reject]) setDecideEnabled(button);
  const holder = el("div", "decide-area");
  holder.append(actions);
  if (row.ui.confirm !== null) {
    approve.disabled = reject.disabled = true;
    holder.append(buildConfirm(row, rowKey));
  }
  return holder;
}

// The confirmation says exactly what is decided, with the note, before anything is sent.
function buildConfirm(row, rowKey) {
  const p = row.pending;
  const approved = row.ui.confirm;
  const panel = el("div", `confirm-panel ${approved ? "approving" : "rejecting"}`);
  panel.setAttribute("role", "group");
  const verb = approved ? "Approve" : "Reject";
  const what = el("p", "confirm-text");
  what.textContent =
    `${verb} run ${p.execution_id} (${p.chain_name}, ${p.reason}, node ${p.node_id})` +
    (row.ui.note ? ` with the note “${row.ui.note}”?` : " without a note?");
  const confirm = decideButton(`confirm ${approved ? "approve-confirm" : "reject-confirm"}`, `Yes, ${verb.toLowerCase()}`, rowKey);
  const cancel = el("button", "cancel", "Cancel");
  cancel.type = "button";
  cancel.disabled = row.ui.inFlight;
  setDecideEnabled(confirm);
  const back = () => {
    row.ui.confirm = null;
    rebuild(row);
    const again = row.element.querySelector(approved ? "button.approve" : "button.reject");
    if (again) again.focus();
  };
  cancel.addEventListener("click", back);
  panel.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && !row.ui.inFlight) back();
  });
  confirm.addEventListener("click", () => send(row, approved));
  panel.append(what, confirm, cancel);
  return panel;
}

async function send(row, approved) {
  const p = row.pending;
  row.ui.inFlight = true;
  row.ui.message = "";
  rebuild(row);
  const body = { namespace: state.namespace, execution_id: p.execution_id, approved };
  if (interruptId(p)) body.interrupt_id = interruptId(p);
  if (row.ui.note) body.reason = row.ui.note;
  try {
    const reply = await api("POST", "/api/decisions", body);
    row.ui.inFlight = false;
    if (state.rows.get(key(p)) === row) upsert(reply.pending);
  } catch (error) {
    row.ui.inFlight = false;
    row.ui.confirm = null;
    row.ui.message = decisionError(error, approved);
    if (state.rows.get(key(p)) === row) rebuild(row);
  }
}

function decisionError(error, approved) {
  const verb = approved ? "approve" : "reject";
  if (error.reason === "NETWORK") {
    return `Could not ${verb}: the server could not be reached, so the decision may not ` +
      "have been recorded. It shows here once the connection is back; otherwise try again.";
  }
  const reason = error.reason ? ` (${error.reason})` : "";
  return `Could not ${verb}: ${error.message}${reason}.`;
}

function refillFilter(select, values) {
  const chosen = select.value;
  const options = [el("option", "", "all")];
  options[0].value = "";
  for (const value of [...values].sort()) {
    const option = el("option", "", value);
    option.value = value;
    options.push(option);
  }
  select.replaceChildren(...options);
  select.value = values.has(chosen) ? chosen : "";
}

function render() {
  const rows = [...state.rows.values()];
  refillFilter($("chain-filter"), new Set(rows.map((r) => r.pending.chain_name)));
  refillFilter($("reason-filter"), new Set(rows.map((r) => r.pending.reason)));
  const chain = $("chain-filter").value;
  const reason = $("reason-filter").value;
  const shown = rows
    .filter((r) => (!chain || r.pending.chain_name === chain) && (!reason || r.pending.reason === reason))
    .sort((a, b) => Date.parse(b.pending.created_at) - Date.parse(a.pending.created_at));
  $("rows").replaceChildren(...shown.map((r) => r.element));
  $("empty").hidden = shown.length > 0;
  // Only what waits for a person counts as waiting.
  const waiting = shown.filter((r) => !r.pending.decision).length;
  const resuming = shown.length - waiting;
  namespaceHint();
  $("count").textContent = `${waiting} waiting` + (resuming ? ` · ${resuming} decided, not yet resumed` : "");
}

// --- the decided section ------------------------------------------------------------------

function upsertDecided(pending, claimed) {
  const id = key(pending);
  const entry = state.decided.get(id) || { pending, claimed: false, element: null };
  if (entry.pending.checkpoint_id !== pending.checkpoint_id) entry.claimed = false;
  entry.pending = pending;
  entry.claimed = entry.claimed || claimed;
  const previous = entry.element;
  entry.element = buildDecided(entry);
  if (previous) previous.replaceWith(entry.element);
  state.decided.set(id, entry);
  renderDecided();
}

function buildDecided(entry) {
  const p = entry.pending;
  const d = p.decision;
  const tr = el("tr", "decision");
  tr.dataset.executionId = p.execution_id;
  tr.dataset.interruptId = interruptId(p);
  const run = el("td", "run");
  run.append(el("span", "chain", p.chain_name), document.createTextNode(" "), copyable(p.execution_id, "execution-id"));
  const verdict = el("td", `verdict ${d.approved ? "approved" : "rejected"}`, d.approved ? "approved" : "rejected");
  const when = el("td", "when");
  when.append(ageNode(d.decided_at));
  const resume = el("td", "resume");
  setResumeCell(resume, p, entry.claimed);
  const open = el("td", "");
  open.append(runLink(p));
  tr.append(run, verdict, el("td", "by", d.decided_by), when, el("td", "note", d.reason || "—"), resume, open);
  return tr;
}

function setResumeCell(cell, pending, claimed) {
  const [text, kind] = resumeState(pending, claimed);
  if (cell.textContent !== text) cell.textContent = text;
  cell.className = `resume ${kind}`;
}

function renderDecided() {
  const entries = [...state.decided.values()].sort(
    (a, b) => Date.parse(b.pending.decision.decided_at) - Date.parse(a.pending.decision.decided_at),
  );
  for (const old of entries.slice(MAX_DECIDED)) state.decided.delete(key(old.pending));
  const kept = entries.slice(0, MAX_DECIDED);
  $("decided-rows").replaceChildren(...kept.map((e) => e.element));
  $("decided-empty").hidden = kept.length > 0;
  $("decided-table").hidden = kept.length === 0;
}

// --- the run behind a pause ---------------------------------------------------------------

async function openRun(pending) {
  const dialog = $("run-view");
  $("run-title").textContent = `Run ${pending.execution_id}`;
  $("run-summary").textContent = pending.decision
    ? `${verdictText(pending.decision)} · ${resumeState(pending, false)[0]}`
    : `waiting for a decision (${pending.chain_name}, ${pending.reason})`;
  $("run-error").textContent = "";
  $("run-checkpoints").replaceChildren();
  if (!dialog.open) dialog.showModal();
  const namespace = encodeURIComponent(state.namespace);
  const id = encodeURIComponent(pending.execution_id);
  try {
    let token = "";
    do {
      const page = await api(
        "GET",
        `/api/checkpoints?namespace=${namespace}&execution_id=${id}&page_token=${encodeURIComponent(token)}`,
      );
      $("run-checkpoints").append(...page.checkpoints.map(checkpointRow));
      token = page.next_page_token;
    } while (token);
  } catch (error) {
    $("run-error").textContent = `The run's checkpoints could not be read: ${error.message}` +
      (error.reason ? ` (${error.reason})` : "");
  }
  // The newest word on the decision: the decided section follows it live.
  const known = state.decided.get(key(pending));
  if (known) $("run-summary").textContent = `${verdictText(known.pending.decision)} · ${resumeState(known.pending, known.claimed)[0]}`;
}

function checkpointRow(c) {
  const tr = el("tr", "checkpoint");
  tr.dataset.checkpointId = c.checkpoint_id;
  const status = String(c.status || "").replace("CHECKPOINT_STATUS_", "").toLowerCase();
  const stateCell = el("td", "state");
  const details = el("details", "");
  details.append(el("summary", "", truncate(c.state_snapshot_json || "{}", 60)), el("pre", "", prettyContext(c.state_snapshot_json || "{}")));
  stateCell.append(details);
  const statusText = status === "interrupted" && c.interrupt_reason ? `interrupted (${c.interrupt_reason})` : status;
  const when = el("td", "time");
  when.append(ageNode(c.created_at));
  tr.append(el("td", "index", c.node_index || "0"), el("td", "node", c.node_id), el("td", `cp-status ${status}`, statusText), when, stateCell);
  return tr;
}

document.addEventListener("DOMContentLoaded", () => {
  init().catch((error) => {
    $("connection").textContent = `error: ${error.message}`;
  });
});
