// The approvals page: pending interrupts of one namespace, live from the server's event
// stream. Every value that comes from the store is untrusted: it is only ever written with
// textContent, never parsed as HTML.
"use strict";

const CSRF_HEADER = "X-Checkpointd-Console";
const TYPE_PREFIX = "INTERRUPT_EVENT_TYPE_";

const state = {
  session: null,
  namespace: "",
  source: null,
  rows: new Map(), // rowKey(pending) -> {pending, status, element}
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

async function api(method, path, body) {
  const headers = { Accept: "application/json" };
  if (method !== "GET") {
    headers[CSRF_HEADER] = "1";
    headers["Content-Type"] = "application/json";
  }
  const response = await fetch(path, {
    method,
    headers,
    credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await response.json();
  if (!response.ok) {
    const error = new Error(data.error ? data.error.message : response.statusText);
    error.reason = data.error ? data.error.reason : "";
    throw error;
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
  setInterval(refreshAges, 1000);
  const session = await api("GET", "/api/session");
  if (session.auth && !session.signed_in) showLogin();
  else start(session);
}

function showLogin() {
  closeStream();
  $("console").hidden = true;
  $("sign-out").hidden = true;
  $("who").textContent = "";
  $("connection").textContent = "";
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
    $("login-error").textContent = error.message;
  }
}

async function signOut() {
  await api("DELETE", "/api/session");
  showLogin();
}

function canDecide() {
  return state.session !== null && state.session.role === "read-write";
}

function start(session) {
  state.session = session;
  $("login").hidden = true;
  $("console").hidden = false;
  $("sign-out").hidden = !session.auth;
  $("who").textContent = session.token_name
    ? `${session.token_name} (${session.role})`
    : session.role;
  const select = $("namespace-select");
  const input = $("namespace-input");
  let namespace = input.value.trim() || "default";
  if (session.namespaces) {
    // Only what the token grants.
    select.replaceChildren(...session.namespaces.map((name) => el("option", "", name)));
    for (const option of select.options) option.value = option.textContent;
    namespace = session.namespaces[0];
    select.value = namespace;
    select.hidden = false;
    input.hidden = true;
  } else {
    select.hidden = true;
    input.hidden = false;
  }
  switchNamespace(namespace);
}

// --- the stream ---------------------------------------------------------------------------

function closeStream() {
  if (state.source !== null) state.source.close();
  state.source = null;
}

function switchNamespace(namespace) {
  if (!namespace) return;
  state.namespace = namespace;
  connect();
}

// A fresh stream starts with a snapshot; the browser itself reconnects a dropped one from
// the last event id it saw (Last-Event-ID), so nothing is missed or shown twice.
function connect() {
  closeStream();
  state.rows.clear();
  render();
  const url = `/api/events?namespace=${encodeURIComponent(state.namespace)}`;
  const source = new EventSource(url);
  state.source = source;
  $("connection").textContent = "connecting…";
  source.addEventListener("snapshot", (e) => upsert(JSON.parse(e.data), null));
  source.addEventListener("ready", () => {
    $("connection").textContent = "live";
    render();
  });
  source.addEventListener("interrupt", (e) => onEvent(JSON.parse(e.data)));
  source.addEventListener("failure", (e) => {
    const error = JSON.parse(e.data).error;
    $("connection").textContent = `reconnecting (${error.reason || error.code})`;
    if (error.reason === "CURSOR_EXPIRED") connect(); // too far behind: snapshot again
  });
  source.addEventListener("open", () => {
    if (state.rows.size > 0) $("connection").textContent = "live";
  });
  source.addEventListener("error", () => {
    if (source.readyState === EventSource.CLOSED && state.source === source) {
      // Refused outright (signed out, namespace not granted, server gone): ask again.
      $("connection").textContent = "disconnected";
      setTimeout(async () => {
        if (state.source !== source) return;
        try {
          const session = await api("GET", "/api/session");
          if (session.auth && !session.signed_in) showLogin();
          else connect();
        } catch (error) {
          connect();
        }
      }, 2000);
    }
  });
}

// A pause is an execution and, for a graph thread's pauses, an interrupt id (absent on a
// fastaiagent run's one pause).
function rowKey(pending) {
  return `${pending.execution_id}\u0000${pending.interrupt_id || ""}`;
}

function onEvent(event) {
  const type = String(event.type || "").replace(TYPE_PREFIX, "");
  const pending = event.pending || {};
  const id = rowKey(pending);
  const row = state.rows.get(id);
  if (type === "ADDED" || type === "DECIDED") {
    upsert(pending, null);
  } else if (type === "CLAIMED") {
    if (pending.decision) upsert(pending, "resuming…");
    else remove(id);
  } else if (type === "RESUMED") {
    if (row) {
      upsert(pending, "resumed");
      setTimeout(() => remove(id), 1500); // shown, then gone: the run went on
    }
  } else if (type === "RESUME_FAILED") {
    upsert(pending, null);
  } else if (type === "REMOVED") {
    remove(id);
  }
}

function upsert(pending, note) {
  const id = rowKey(pending);
  const row = state.rows.get(id) || { pending: null, note: null, element: null };
  row.pending = pending;
  row.note = note;
  const previous = row.element;
  row.element = buildRow(row);
  if (previous !== null) {
    // Keep what the person was doing: the open context and a half-typed note.
    row.element.querySelector("details").open = previous.querySelector("details").open;
    const typed = previous.querySelector("input.note");
    const input = row.element.querySelector("input.note");
    if (typed && input) input.value = typed.value;
    previous.replaceWith(row.element);
  }
  state.rows.set(id, row);
  render();
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

function refreshAges() {
  for (const node of document.querySelectorAll(".interrupt .age")) {
    node.textContent = age(node.dataset.createdAt);
  }
}

function prettyContext(text) {
  try {
    return JSON.stringify(JSON.parse(text), null, 2);
  } catch (error) {
    return String(text);
  }
}

function statusText(row) {
  const decision = row.pending.decision;
  if (row.note === "resumed") return ["resumed", "resumed"];
  if (!decision) return row.note ? [row.note, "decided"] : ["", ""];
  const verdict = decision.approved ? "approved" : "rejected";
  const status = String(decision.status || "").replace("DECISION_STATUS_", "").toLowerCase();
  let text = `${verdict} by ${decision.decided_by}`;
  if (decision.reason) text += ` — “${decision.reason}”`;
  if (status === "resume_failed") return [`${text} · resume failed: ${decision.error || ""}`, "failed"];
  if (status === "resumed") return [`${text} · resumed`, "resumed"];
  if (row.note) return [`${text} · ${row.note}`, "decided"];
  return [text, "decided"];
}

function buildRow(row) {
  const p = row.pending;
  const article = el("article", "interrupt");
  article.dataset.executionId = p.execution_id;
  if (p.interrupt_id) article.dataset.interruptId = p.interrupt_id;
  const title = el("div", "title");
  title.append(el("span", "chain", p.chain_name), el("span", "reason", p.reason));
  const ageNode = el("span", "age", age(p.created_at));
  ageNode.dataset.createdAt = p.created_at;
  title.append(ageNode);
  article.append(title);
  const meta = el("div", "meta");
  meta.append(
    el("span", "node", `node ${p.node_id}`),
    document.createTextNode(" · "),
    el("span", "agent-path", `agent ${p.agent_path || "—"}`),
    document.createTextNode(" · "),
    el("span", "execution-id", `run ${p.execution_id}`),
  );
  article.append(meta);
  const details = el("details", "context");
  details.append(el("summary", "", "context"), el("pre", "context-json", prettyContext(p.context_json || "{}")));
  article.append(details);
  const [text, kind] = statusText(row);
  article.append(el("div", `status ${kind}`, text));
  if (canDecide() && !p.decision) {
    const actions = el("div", "actions");
    const note = el("input", "note");
    note.placeholder = "note (optional)";
    note.maxLength = 1024;
    const approve = el("button", "approve", "Approve");
    const reject = el("button", "reject", "Reject");
    approve.type = reject.type = "button";
    const message = el("span", "error message");
    const decide = async (approved) => {
      approve.disabled = reject.disabled = true;
      message.textContent = "";
      try {
        const body = { namespace: state.namespace, execution_id: p.execution_id, approved };
        if (p.interrupt_id) body.interrupt_id = p.interrupt_id;
        if (note.value.trim()) body.reason = note.value.trim();
        const reply = await api("POST", "/api/decisions", body);
        if (state.rows.has(rowKey(p))) upsert(reply.pending, null);
      } catch (error) {
        message.textContent = error.message;
        approve.disabled = reject.disabled = false;
      }
    };
    approve.addEventListener("click", () => decide(true));
    reject.addEventListener("click", () => decide(false));
    actions.append(note, approve, reject, message);
    article.append(actions);
  }
  return article;
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
  $("count").textContent = `${shown.length} waiting`;
}

document.addEventListener("DOMContentLoaded", () => {
  init().catch((error) => {
    $("connection").textContent = `error: ${error.message}`;
  });
});
