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
//: Characters shown of an action's description, of a value in a confirmation or a summary.
const MAX_DESCRIPTION_CHARS = 240;
const MAX_SHOWN_CHARS = 60;
//: Characters shown of an interrupt id in the decided section (all of it on hover).
const SHORT_ID_CHARS = 8;
//: The decisions LangChain's HumanInTheLoopMiddleware knows (contract K3), in this order.
const DECISION_TYPES = ["approve", "edit", "reject", "respond"];
const CHOICE_LABELS = { approve: "Approve", edit: "Edit", reject: "Reject", respond: "Respond" };
//: How LangChain (snake_case) and LangChain.js (camelCase) write a batched request: its
//: actions, their review configs, and a config's action name, allowed decisions and argument
//: schema.
const SPELLINGS = [
  ["action_requests", "review_configs", "action_name", "allowed_decisions", "args_schema"],
  ["actionRequests", "reviewConfigs", "actionName", "allowedDecisions", "argsSchema"],
];

const state = {
  session: null,
  namespace: "",
  source: null,
  // gone: the pause's pending row was claimed (its run went on from it), so it no longer
  // waits for a decision even while the row stays to show how the resume ends.
  // searchText: what a search looks in, for the pending it was made of (searchedPending).
  rows: new Map(), // key(pending) -> row: {pending, claimed, gone, ui, element, searchText}
  decided: new Map(), // key(pending) -> {pending, claimed, element}
  live: false,
  lastContact: 0, // Date.now() of the stream's last message or open
  // A decided pause no worker has taken after this many seconds says which worker it needs.
  workerHintAfterS: 30,
  signedInOnce: false,
  namespaces: [], // [{name, pending}] from /api/namespaces
  replaceRows: false, // the next snapshot replaces the rows shown
  forms: 0, // numbers each row's form (the names of its radio groups)
  openRun: null, // the run in the run view: {execution_id, interrupt_id, graph}
  search: "", // the search box's text: pauses whose run id or context holds it are shown
  sort: "newest", // "newest" first, or "oldest" first (what has waited longest)
  view: "full", // "full" rows, or "compact": a pause a line
  focusKey: null, // key() of the pause j / k marked
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

function isObject(value) {
  return value !== null && typeof value === "object" && !Array.isArray(value);
}

// --- what a pause asks (contract K3) -----------------------------------------------------

// A fastaiagent pause takes a verdict ("verdict"); a LangChain HumanInTheLoopMiddleware pause
// one answer per action ("actions", with the actions); any other graph pause a verdict and,
// if a person gives one, the value interrupt() returns ("resume"). As the server reads it.
function pauseKind(pending) {
  if (!interruptId(pending)) return { kind: "verdict", actions: null };
  const actions = requestedActions(pending);
  if (actions === null) return { kind: "resume", actions: null };
  // A request with no action takes no answer: its verdict alone.
  return actions.length ? { kind: "actions", actions } : { kind: "verdict", actions: null };
}

// JSON text's value; null when it is not JSON.
function parsed(text) {
  try {
    return JSON.parse(text || "{}");
  } catch (error) {
    return null;
  }
}

function contextOf(pending) {
  return parsed(pending.context_json);
}

// The actions a middleware pause asks about, each with its name, arguments, description,
// allowed decisions and (per call) the JSON schema of its arguments; null for another pause.
function requestedActions(pending) {
  const context = contextOf(pending);
  if (!isObject(context)) return null;
  for (const [requests, configs, nameKey, allowedKey, schemaKey] of SPELLINGS) {
    if (!Array.isArray(context[requests])) continue;
    const byName = new Map();
    for (const config of Array.isArray(context[configs]) ? context[configs] : []) {
      // As the server reads it: a config names its action by a string, the last one counts.
      if (isObject(config) && typeof config[nameKey] === "string") byName.set(config[nameKey], config);
    }
    return context[requests].map((request) => {
      const r = isObject(request) ? request : {};
      const name = String(r.name ?? "");
      const config = byName.get(name) || {};
      return requestedAction(name, r.args, r.description, config[allowedKey], config[schemaKey]);
    });
  }
  if (context.type === "tool_approval") {
    const name = String(context.name ?? "");
    return [
      requestedAction(name, context.args, context.description, context.allowed_decisions, context.args_schema),
    ];
  }
  return null;
}

function requestedAction(name, args, description, allowed, schema) {
  return {
    name,
    args: isObject(args) ? args : {},
    description: typeof description === "string" ? description : "",
    // Unlisted: any decision (the server checks only what a pause lists).
    allowed: Array.isArray(allowed) ? DECISION_TYPES.filter((t) => allowed.includes(t)) : DECISION_TYPES,
    schema: isObject(schema) && isObject(schema.properties) ? schema : null,
  };
}

// The keys an edit offers: the schema's properties (per call), then any other argument the
// model sent (the middleware passes undeclared ones on).
function editKeys(action) {
  const declared = action.schema ? Object.keys(action.schema.properties) : [];
  return [...declared, ...Object.keys(action.args).filter((k) => !declared.includes(k))];
}

function schemaType(action, key) {
  const property = action.schema && action.schema.properties[key];
  return isObject(property) && typeof property.type === "string" ? property.type : "";
}

// "text" when the argument is a string (typed as is), else "json" (typed as JSON text).
function argMode(action, key) {
  const type = schemaType(action, key);
  if (type) return type === "string" ? "text" : "json";
  return typeof action.args[key] === "string" ? "text" : "json";
}

function argText(action, key) {
  const value = action.args[key];
  if (value === undefined) return "";
  return argMode(action, key) === "text" && typeof value === "string" ? value : JSON.stringify(value);
}

function hasNonFinite(value) {
  if (typeof value === "number") return !Number.isFinite(value);
  if (value !== null && typeof value === "object") return Object.values(value).some(hasNonFinite);
  return false;
}

// An integer past 2^53 that JSON.parse has already rounded (it would be sent changed).
function hasInexactInteger(value) {
  if (typeof value === "number") return Number.isInteger(value) && !Number.isSafeInteger(value);
  if (value !== null && typeof value === "object") return Object.values(value).some(hasInexactInteger);
  return false;
}

// JSON text as the server reads it; a FormError says what is wrong, in words.
function parseJson(text, what) {
  let value;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new FormError(
      `${what} is not JSON (${error.message}). Write text in quotes ("like this"), a number, ` +
        "true, false, null, a list [...] or an object {...}.",
    );
  }
  // JSON.parse reads 1e999 as Infinity, which JSON cannot carry: it would be sent as null.
  if (hasNonFinite(value)) throw new FormError(`${what} holds a number too large for JSON.`);
  if (hasInexactInteger(value)) {
    throw new FormError(`${what} holds an integer too large for this page to send exactly (over 2^53).`);
  }
  return value;
}

const TYPE_CHECKS = {
  integer: Number.isInteger,
  number: (v) => typeof v === "number",
  boolean: (v) => typeof v === "boolean",
  object: isObject,
  array: Array.isArray,
  null: (v) => v === null,
};

class FormError extends Error {
  constructor(message, focus) {
    super(message);
    this.focus = focus || "";
  }
}

// The arguments of an edit, from the texts typed for them.
function editedArgs(action, texts, index) {
  const required = action.schema && Array.isArray(action.schema.required) ? action.schema.required : [];
  const args = {};
  for (const key of editKeys(action)) {
    const text = texts[key] ?? "";
    const focus = argFocus(index, key);
    const absent = action.args[key] === undefined && !required.includes(key);
    if (argMode(action, key) === "text") {
      if (!(text === "" && absent)) args[key] = text;
      continue;
    }
    if (text.trim() === "") {
      if (required.includes(key)) throw new FormError(`${action.name}: ${key} is required.`, focus);
      continue; // left empty: not sent
    }
    let value;
    try {
      value = parseJson(text, `${action.name}: ${key}`);
    } catch (error) {
      error.focus = focus;
      throw error;
    }
    const type = schemaType(action, key);
    if (TYPE_CHECKS[type] && !TYPE_CHECKS[type](value)) {
      throw new FormError(`${action.name}: ${key} must be ${type === "integer" ? "an" : "a"} ${type}.`, focus);
    }
    args[key] = value;
  }
  return args;
}

function argFocus(index, key) {
  return `a${index}-arg-${key}`;
}

// The answers typed on a middleware pause's row, as the API takes them.
function builtActions(row, actions) {
  return actions.map((action, index) => {
    const answer = row.ui.answers[index];
    const where = `${action.name || `action ${index + 1}`}`;
    if (!answer.type) {
      throw new FormError(`Choose a decision for ${where} (action ${index + 1} of ${actions.length}).`, `a${index}-choice`);
    }
    if (answer.type === "edit") return { type: "edit", args: editedArgs(action, answer.args, index) };
    if (answer.type === "respond") {
      if (!answer.respond.trim()) {
        throw new FormError(`Write the answer for ${where}: it is returned to the model as the tool's result.`, `a${index}-respond`);
      }
      return { type: "respond", message: answer.respond };
    }
    if (answer.type === "reject") {
      return answer.reject.trim() ? { type: "reject", message: answer.reject.trim() } : { type: "reject" };
    }
    return { type: "approve" };
  });
}

function freshAnswers(actions) {
  return actions.map((action) => ({
    type: "",
    args: Object.fromEntries(editKeys(action).map((k) => [k, argText(action, k)])),
    reject: "",
    respond: "",
  }));
}

function actionType(answer) {
  return String(answer.type || "").replace("ACTION_DECISION_TYPE_", "").toLowerCase();
}

function sameJson(a, b) {
  return JSON.stringify(a) === JSON.stringify(b);
}

// The arguments an edit changed, added or dropped (all of them when the request is unknown).
function changedKeys(action, args) {
  if (!action) return Object.keys(args);
  const keys = [...new Set([...Object.keys(action.args), ...Object.keys(args)])];
  return keys.filter((k) => !sameJson(action.args[k], args[k]));
}

function shown(value) {
  return truncate(typeof value === "string" ? value : JSON.stringify(value), MAX_SHOWN_CHARS);
}

// One answer in words: briefly (the decided list) or with its values (the confirmation).
function answerText(answer, action, full) {
  const type = actionType(answer);
  if (type === "edit") {
    let args = answer.args;
    if (args === undefined) args = parsed(answer.edited_args_json) || {};
    const changed = changedKeys(action, args);
    if (!full) return `edited: ${changed.join(", ") || "no change"}`;
    if (!changed.length) return "edit: run it with the arguments unchanged";
    const values = changed.map((k) => (k in args ? `${k} = ${shown(args[k])}` : `${k} removed`));
    return `edit: ${values.join(", ")}`;
  }
  if (type === "reject") {
    if (!answer.message) return full ? "reject (no message to the model)" : "rejected";
    return full ? `reject, telling the model “${answer.message}”` : `rejected: ${truncate(answer.message, MAX_SHOWN_CHARS)}`;
  }
  if (type === "respond") return full ? `respond for the tool: “${answer.message}”` : "responded";
  return full ? "approve" : "approved";
}

// A decision's typed answer with its values, one line per action.
function responseDetail(pending) {
  const response = pending.decision.response;
  if (response.resume_json !== undefined) return `resume value ${response.resume_json}`;
  const requested = requestedActions(pending) || [];
  return (response.actions || [])
    .map((answer, i) => `${requested[i] ? requested[i].name : `action ${i + 1}`}: ${answerText(answer, requested[i], true)}`)
    .join("\n");
}

// A decision's typed answer, compactly ("" when it has none).
function responseSummary(pending) {
  const response = pending.decision && pending.decision.response;
  if (!response) return "";
  if (response.resume_json !== undefined) return `resume value ${truncate(response.resume_json, MAX_SHOWN_CHARS)}`;
  const actions = response.actions || [];
  const requested = requestedActions(pending) || [];
  return actions
    .map((answer, i) => {
      const text = answerText(answer, requested[i], false);
      return actions.length > 1 && requested[i] ? `${requested[i].name} ${text}` : text;
    })
    .join("; ");
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
  $("search").addEventListener("input", (e) => {
    state.search = e.target.value;
    writeLink();
    render();
  });
  $("sort").addEventListener("change", (e) => {
    state.sort = e.target.value === "oldest" ? "oldest" : "newest";
    writeLink();
    render();
  });
  $("view").addEventListener("change", (e) => {
    setView(e.target.value);
    writeLink();
  });
  $("run-close").addEventListener("click", () => $("run-view").close());
  $("run-view").addEventListener("close", closedRun); // the Close button or Escape
  window.addEventListener("hashchange", followLink);
  document.addEventListener("keydown", onKey);
  $("help-button").addEventListener("click", () => $("help").showModal());
  $("help-close").addEventListener("click", () => $("help").close());
  wireRuns();
  setInterval(tick, 1000);
  showList(readLink());
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
  const link = readLink();
  const first = state.namespace === "";
  let namespace = state.namespace || link.namespace || input.value.trim() || "default";
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
    input.value = namespace;
    input.hidden = false;
  }
  switchNamespace(namespace);
  if (first) openLinkedRun(link);
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
  refreshRunSummary();
  runsDue();
}

// --- the stream ---------------------------------------------------------------------------

function closeStream() {
  if (state.source !== null) state.source.close();
  state.source = null;
}

function switchNamespace(namespace) {
  if (!namespace) return;
  state.namespace = namespace;
  if (state.openRun !== null) $("run-view").close(); // the run is the old namespace's
  writeLink();
  loadNamespaces();
  state.rows.clear();
  render();
  // The previous namespace's decisions go at once: the new one may have none to list.
  state.decided.clear();
  $("decided-error").textContent = "";
  renderDecided();
  connect();
  loadDecided();
  loadRuns(false);
}

// The namespaces that hold a run, a pause or a LangGraph thread (the first pages, up to
// NAMESPACES_LISTED), offered for the free-text box: a namespace whose runs are running or
// ended is picked as one that waits, and a typo should not look like an empty queue.
const NAMESPACES_LISTED = 1000;

async function loadNamespaces() {
  const listed = [];
  let token = "";
  try {
    do {
      const query = `page_size=200&page_token=${encodeURIComponent(token)}`;
      const reply = await api("GET", `/api/namespaces?${query}`);
      listed.push(...reply.namespaces);
      token = reply.next_page_token || "";
    } while (token && listed.length < NAMESPACES_LISTED);
  } catch (error) {
    if (listed.length === 0) return; // the box still takes any name
  }
  state.namespaces = listed;
  $("namespace-options").replaceChildren(
    ...listed.map((n) => {
      const label = n.pending ? `${n.pending} pending` : "nothing pending";
      const option = el("option", "", label);
      option.value = n.name;
      option.label = label;
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
    `Nothing is in “${state.namespace}”. Namespaces with runs: ` + `${others.join(", ")}.`;
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
    renderDecided();
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
  // A new snapshot (a first connection or a reconnection) may follow changes the runs list
  // has not seen.
  source.addEventListener("ready", mine(() => {
    render();
    runsChanged();
  }));
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
  runsChanged(); // a pause came, was decided, resumed or went: its run's status moves
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
      row.gone = true;
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
    row = { pending, claimed: false, gone: false, element: null, ui: freshUi(), searchedPending: null, searchText: "" };
    state.rows.set(id, row);
  }
  if (pending.checkpoint_id !== row.pending.checkpoint_id) {
    row.ui = freshUi(); // a new pause of the same run asks anew
    row.gone = false;
  }
  if (pending.decision === undefined || pending.checkpoint_id !== row.pending.checkpoint_id) {
    row.claimed = false; // a new pause of the same run
  }
  row.pending = pending;
  if (pending.decision) row.ui.confirm = null;
  rebuild(row);
  if (pending.decision) upsertDecided(pending, false);
}

// What a person is doing on a row: the confirmation open (null, true to approve, false to
// reject, "actions" to submit typed answers), a decision on its way, a refusal, the note, the
// answers typed on a middleware pause, the resume value typed on another graph pause.
function freshUi() {
  state.forms += 1;
  return {
    confirm: null,
    inFlight: false,
    message: "",
    note: "",
    answers: null,
    resumeText: "",
    response: null,
    formError: "",
    formFocus: "", // the data-focus of the control the form error is about
    formId: `form-${state.forms}`,
    expanded: false, // shown in full in the compact view
  };
}

function rebuild(row, focus) {
  const previous = row.element;
  const active = previous !== null && previous.contains(document.activeElement) ? document.activeElement : null;
  row.element = buildRow(row, previous);
  if (previous !== null) previous.replaceWith(row.element);
  render();
  // A form's controls are named by data-focus (an argument's key is untrusted text, so it is
  // compared, never put into a selector); other controls by their class.
  const wanted = focus || (active && active.dataset.focus) || "";
  const named = (name) => [...row.element.querySelectorAll("[data-focus]")].find((node) => node.dataset.focus === name);
  const invalid = row.ui.formError && row.ui.formFocus ? named(row.ui.formFocus) : null;
  if (invalid) invalid.setAttribute("aria-invalid", "true");
  let again = null;
  if (wanted) {
    again = named(wanted);
  } else if (active !== null && active === previous) {
    again = row.element; // the pause j / k marked
  } else if (active) {
    again = row.element.querySelector(`[class="${active.className}"]`);
  }
  if (again) again.focus();
}

// Back to one line in the compact view (a confirmation open is cancelled).
function collapseRow(row) {
  if (row.ui.inFlight) return;
  row.ui.expanded = false;
  row.ui.confirm = null;
  rebuild(row);
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
    if (cell) setResumeCell(cell, entry);
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
  const value = parsed(text);
  return isObject(value) ? fieldsList(value, "context") : null;
}

// An object's top-level fields as text (``what`` names where the rest is).
function fieldsList(value, what) {
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
    list.append(el("div", "field more", `+${entries.length - MAX_FIELDS} more in the ${what}`));
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
  if (status === "resumed") {
    // The run went on with a "no": a rejection done, not a success.
    return decision.approved ? ["resumed", "resumed"] : ["rejection carried out", "rejection-done"];
  }
  if (status === "resume_failed") {
    const failed = `resume failed: ${decision.error || "no error given"}`;
    const row = state.rows.get(key(pending));
    if (row !== undefined && !row.gone) return [`${failed} · the pause still waits: decide again`, "failed"];
    return [
      `${failed} · the run no longer waits at this pause, so it cannot be decided again: ` +
        "Open run shows where it stopped; start it again from the code that runs it",
      "failed",
    ];
  }
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

// A pause whose resume failed before its run went on still waits: the next decision takes
// the failed one's place (contract K3).
function decidesAgain(row) {
  return Boolean(row.pending.decision) && decisionStatus(row.pending.decision) === "resume_failed" && !row.gone;
}

function verdictText(pending) {
  const decision = pending.decision;
  let text = `${decision.approved ? "approved" : "rejected"} by ${decision.decided_by}`;
  const answered = responseSummary(pending);
  if (answered) text += ` (${answered})`;
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
  const full = `${verdictText(row.pending)} · ${text}`;
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

// A pause's article, a line or the whole pause: focusable by j / k, and carrying the pause's
// run, interrupt id and kind (asked: its pauseKind) and whether it is decided.
function pauseArticle(row, className, asked) {
  const p = row.pending;
  const article = el("article", className);
  article.tabIndex = -1; // j / k focus it
  article.dataset.executionId = p.execution_id;
  article.dataset.interruptId = interruptId(p);
  article.dataset.kind = asked.kind;
  article.classList.toggle("is-decided", Boolean(p.decision) && !decidesAgain(row));
  return article;
}

// Whether a row shows as one line: in the compact view, unless a person opened it (Decide…,
// More, or a confirmation on its way).
function isLine(row) {
  return state.view === "compact" && !row.ui.expanded && row.ui.confirm === null && !row.ui.inFlight;
}

// The compact view's line: run, node, reason, age, how far a decision went, and Approve /
// Reject, or Decide… for a pause that asks for typed answers; More shows the pause in full.
function buildLine(row) {
  const p = row.pending;
  const rowKey = key(p);
  const asked = pauseKind(p);
  const article = pauseArticle(row, "interrupt compact", asked);
  const run = el("code", "execution-id", p.execution_id);
  run.title = `run ${p.execution_id}` + (interruptId(p) ? ` · interrupt ${interruptId(p)}` : "");
  article.append(el("span", "chain", p.chain_name), run, el("span", "node", `node ${p.node_id}`));
  article.append(el("span", "reason", p.reason), ageNode(p.created_at));
  const status = el("span", "status");
  status.setAttribute("role", "status");
  setStatus(status, row);
  status.title = status.textContent;
  article.append(status);
  const buttons = el("span", "line-actions");
  const deciding = canDecide() && (!p.decision || decidesAgain(row));
  const expand = (label, title) => {
    const button = el("button", "expand", label);
    button.type = "button";
    button.title = title;
    button.addEventListener("click", () => {
      row.ui.expanded = true;
      rebuild(row);
      const first = row.element.querySelector("input, textarea, button.decide");
      if (first) first.focus();
    });
    return button;
  };
  if (deciding && asked.kind === "actions") {
    const n = asked.actions.length;
    buttons.append(expand("Decide…", `answer the ${n === 1 ? "action" : `${n} actions`} this pause asks about`));
  } else {
    if (deciding) {
      const approve = decideButton("approve", "Approve…", rowKey);
      const reject = decideButton("reject", "Reject…", rowKey);
      approve.addEventListener("click", () => confirmFromLine(row, true));
      reject.addEventListener("click", () => confirmFromLine(row, false));
      for (const button of [approve, reject]) setDecideEnabled(button);
      buttons.append(approve, reject);
    }
    buttons.append(expand("More", "the pause in full: its context, a note"));
  }
  buttons.append(runLink(p));
  article.append(buttons);
  if (row.ui.message) {
    const message = el("p", "error message", row.ui.message);
    message.setAttribute("role", "alert");
    article.append(message);
  }
  return article;
}

// Approve / Reject on a line ask first, as in the full view: the pause opens in full with
// the confirmation (Cancel leaves it open, to add a note).
function confirmFromLine(row, approved) {
  row.ui.expanded = true;
  row.ui.confirm = approved;
  row.ui.response = null;
  row.ui.note = "";
  row.ui.message = "";
  row.ui.formError = "";
  row.ui.formFocus = "";
  rebuild(row);
  const yes = row.element.querySelector("button.confirm");
  if (yes) yes.focus();
}

function buildRow(row, previous) {
  if (isLine(row)) return buildLine(row);
  if (previous !== null && previous.classList.contains("compact")) previous = null; // nothing typed on a line
  const p = row.pending;
  const rowKey = key(p);
  const asked = pauseKind(p);
  const article = pauseArticle(row, "interrupt", asked);
  const title = el("div", "title");
  title.append(el("span", "chain", p.chain_name), el("span", "reason", p.reason), ageNode(p.created_at));
  if (state.view === "compact") {
    const collapse = el("button", "collapse", "Show less");
    collapse.type = "button";
    collapse.title = "back to one line";
    collapse.disabled = row.ui.inFlight;
    collapse.addEventListener("click", () => collapseRow(row));
    title.append(collapse);
  }
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
  const deciding = canDecide() && (!p.decision || decidesAgain(row));
  if (asked.kind === "actions") {
    if (deciding && row.ui.answers === null) row.ui.answers = freshAnswers(asked.actions);
    article.append(buildActionList(row, asked.actions, deciding));
  } else {
    const fields = contextFields(p.context_json);
    if (fields) article.append(fields);
  }
  const details = el("details", "context");
  details.append(el("summary", "", "full context (JSON)"), el("pre", "context-json", prettyContext(p.context_json || "{}")));
  if (previous) details.open = previous.querySelector("details.context").open;
  article.append(details);
  const status = el("div", "status");
  status.setAttribute("role", "status");
  setStatus(status, row);
  article.append(status);
  if (deciding) article.append(buildActions(row, rowKey, previous, asked));
  // A refused decision says so even once the row shows someone else's decision.
  const message = el("p", "error message", row.ui.message);
  message.setAttribute("role", "alert");
  message.hidden = !row.ui.message;
  article.append(message);
  return article;
}

// The actions a middleware pause asks about, one item each (tool, description, arguments),
// with a choice among its allowed decisions when the person may decide.
function buildActionList(row, actions, deciding) {
  // (One action needs no number.)
  const list = el("ol", actions.length > 1 ? "hitl-actions" : "hitl-actions single");
  actions.forEach((action, index) => {
    const item = el("li", "hitl-action");
    item.dataset.index = String(index);
    item.dataset.name = action.name;
    const head = el("div", "action-head");
    head.append(el("span", "tool", action.name || "(no name)"));
    if (actions.length > 1) head.append(el("span", "action-number", `action ${index + 1} of ${actions.length}`));
    item.append(head);
    if (action.description) {
      const description = el("p", "description", truncate(action.description, MAX_DESCRIPTION_CHARS));
      if (action.description.length > MAX_DESCRIPTION_CHARS) description.title = action.description;
      item.append(description);
    }
    const args = Object.keys(action.args).length
      ? fieldsList(action.args, "arguments")
      : el("p", "empty", "no arguments");
    args.classList.add("args");
    item.append(args);
    if (deciding) item.append(buildChoices(row, action, index, actions.length));
    list.append(item);
  });
  return list;
}

function buildChoices(row, action, index, count) {
  const answer = row.ui.answers[index];
  const locked = row.ui.inFlight || row.ui.confirm !== null;
  const group = el("fieldset", "choices");
  group.append(el("legend", "", `Decision on ${action.name || "the action"}` + (count > 1 ? ` (action ${index + 1} of ${count})` : "")));
  const options = el("div", "choice-options");
  const panels = [];
  const showPanels = () => {
    for (const panel of panels) panel.hidden = panel.dataset.choice !== answer.type;
  };
  if (!action.allowed.length) options.append(el("span", "error", "the pause allows no decision this page knows"));
  action.allowed.forEach((type, position) => {
    const label = el("label", `choice choice-${type}`);
    const radio = el("input", "choice-input");
    radio.type = "radio";
    radio.name = `${row.ui.formId}-action-${index}`;
    radio.value = type;
    radio.checked = answer.type === type;
    radio.disabled = locked;
    // The chosen option (or the first) stands for the group when the form asks for a choice.
    const stands = answer.type ? answer.type === type : position === 0;
    radio.dataset.focus = stands ? `a${index}-choice` : `a${index}-choice-${type}`;
    radio.addEventListener("change", () => {
      answer.type = type;
      showPanels();
    });
    label.append(radio, document.createTextNode(` ${CHOICE_LABELS[type]}`));
    options.append(label);
  });
  group.append(options);
  if (action.allowed.includes("edit")) {
    const panel = el("div", "choice-panel edit-args");
    panel.dataset.choice = "edit";
    const keys = editKeys(action);
    if (!keys.length) panel.append(el("p", "empty", "The action has no arguments to edit."));
    for (const argKey of keys) {
      const mode = argMode(action, argKey);
      const type = schemaType(action, argKey);
      const label = el("label", "arg");
      const head = el("span", "arg-head");
      head.append(el("span", "arg-name", argKey), document.createTextNode(" "));
      head.append(el("span", "arg-type", mode === "text" ? "text" : type ? `${type}, as JSON` : "JSON"));
      label.append(head);
      const text = answer.args[argKey] ?? "";
      const long = text.length > MAX_SHOWN_CHARS || text.includes("\n");
      const input = long ? el("textarea", "arg-value") : el("input", "arg-value");
      if (long) input.rows = 3;
      input.value = text;
      input.spellcheck = false;
      input.disabled = locked;
      input.dataset.arg = argKey;
      input.dataset.focus = argFocus(index, argKey);
      input.addEventListener("input", () => {
        answer.args[argKey] = input.value;
      });
      label.append(input);
      panel.append(label);
    }
    panels.push(panel);
  }
  if (action.allowed.includes("reject")) {
    panels.push(messagePanel("reject", "Message to the model (optional)", "input", `a${index}-reject`, answer));
  }
  if (action.allowed.includes("respond")) {
    panels.push(messagePanel("respond", "The tool's answer, returned to the model", "textarea", `a${index}-respond`, answer));
  }
  for (const panel of panels) {
    for (const control of panel.querySelectorAll("input, textarea")) control.disabled = locked;
  }
  group.append(...panels);
  showPanels();
  return group;
}

// The text of a reject (optional) or a respond (required) answer.
function messagePanel(choice, text, tag, focus, answer) {
  const panel = el("div", `choice-panel ${choice}-message`);
  panel.dataset.choice = choice;
  const label = el("label", "message-label");
  label.append(el("span", "", text));
  const input = el(tag, `action-${choice}`);
  if (tag === "textarea") input.rows = 2;
  input.maxLength = 16384;
  input.value = answer[choice];
  input.dataset.focus = focus;
  input.addEventListener("input", () => {
    answer[choice] = input.value;
  });
  label.append(input);
  panel.append(label);
  return panel;
}

// The value interrupt() returns, for a graph pause that is not the middleware's.
function buildResumeField(row) {
  const label = el("label", "resume-value");
  label.append(el("span", "", "Resume with value (JSON, optional)"));
  const input = el("textarea", "resume-json");
  input.rows = 2;
  input.spellcheck = false;
  input.placeholder = 'the value interrupt() returns, e.g. {"amount": 40}';
  input.value = row.ui.resumeText;
  input.disabled = row.ui.inFlight || row.ui.confirm !== null;
  input.dataset.focus = "resume";
  input.addEventListener("input", () => {
    row.ui.resumeText = input.value;
  });
  label.append(input);
  return label;
}

function decideButton(className, label, rowKey) {
  const button = el("button", `decide ${className}`, label);
  button.type = "button";
  button.dataset.key = rowKey;
  return button;
}

// A form's mistake, said next to its buttons, with the focus on what to fix.
function formFailed(row, error) {
  row.ui.formError = error.message;
  row.ui.formFocus = error.focus || "";
  rebuild(row, row.ui.formFocus);
}

function buildActions(row, rowKey, previous, asked) {
  const p = row.pending;
  const holder = el("div", "decide-area");
  if (asked.kind === "resume") holder.append(buildResumeField(row));
  const actions = el("div", "actions");
  const note = el("input", "note");
  note.placeholder = "note (optional)";
  note.maxLength = 1024;
  note.setAttribute("aria-label", `note for run ${p.execution_id}`);
  const typed = previous && previous.querySelector("input.note");
  if (typed) note.value = typed.value;
  note.disabled = row.ui.inFlight || row.ui.confirm !== null;
  const open = (confirm, response) => {
    row.ui.confirm = confirm;
    row.ui.response = response;
    row.ui.note = note.value.trim();
    row.ui.message = "";
    row.ui.formError = "";
    row.ui.formFocus = "";
    rebuild(row);
    row.element.querySelector("button.confirm").focus();
  };
  const buttons = [];
  if (asked.kind === "actions") {
    const submit = decideButton("submit", "Submit decisions…", rowKey);
    submit.addEventListener("click", () => {
      let response;
      try {
        response = { actions: builtActions(row, asked.actions) };
      } catch (error) {
        if (!(error instanceof FormError)) throw error;
        formFailed(row, error);
        return;
      }
      open("actions", response);
    });
    buttons.push(submit);
  } else {
    const ask = (approved) => {
      let response = null;
      if (asked.kind === "resume" && row.ui.resumeText.trim()) {
        try {
          response = { resume: parseJson(row.ui.resumeText, "The resume value") };
        } catch (error) {
          if (!(error instanceof FormError)) throw error;
          error.focus = "resume";
          formFailed(row, error);
          return;
        }
      }
      open(approved, response);
    };
    const approve = decideButton("approve", "Approve…", rowKey);
    const reject = decideButton("reject", "Reject…", rowKey);
    approve.addEventListener("click", () => ask(true));
    reject.addEventListener("click", () => ask(false));
    buttons.push(approve, reject);
  }
  actions.append(note, ...buttons);
  for (const button of buttons) setDecideEnabled(button);
  holder.append(actions);
  if (row.ui.formError) {
    const problem = el("p", "error form-error", row.ui.formError);
    problem.setAttribute("role", "alert");
    holder.append(problem);
  }
  if (row.ui.confirm !== null) {
    for (const button of buttons) button.disabled = true;
    holder.append(buildConfirm(row, rowKey, asked));
  }
  return holder;
}

// The confirmation says exactly what is decided, with the note, before anything is sent.
function buildConfirm(row, rowKey, asked) {
  const p = row.pending;
  const confirm = row.ui.confirm;
  const typed = confirm === "actions";
  const panel = el("div", `confirm-panel ${typed ? "submitting" : confirm ? "approving" : "rejecting"}`);
  panel.setAttribute("role", "group");
  const verb = typed ? "Submit" : confirm ? "Approve" : "Reject";
  const run = `run ${p.execution_id} (${p.chain_name}, ${p.reason}, node ${p.node_id})`;
  const noted = row.ui.note ? ` with the note “${row.ui.note}”?` : " without a note?";
  const what = el("p", "confirm-text");
  const body = el("div", "confirm-body");
  body.append(what);
  if (typed) {
    const answers = row.ui.response.actions;
    const these = answers.length === 1 ? "this decision" : `these ${answers.length} decisions`;
    what.textContent = `Submit ${these} on ${run}${noted}`;
    const list = el("ol", "confirm-actions");
    answers.forEach((answer, i) => {
      const action = asked.actions[i];
      list.append(el("li", "", `${action.name}: ${answerText(answer, action, true)}`));
    });
    body.append(list);
  } else {
    const resume = row.ui.response ? `, resuming it with the value ${shown(row.ui.response.resume)},` : "";
    what.textContent = `${verb} ${run}${resume}${noted}`;
  }
  const kind = typed ? "submit-confirm" : confirm ? "approve-confirm" : "reject-confirm";
  const yes = decideButton(`confirm ${kind}`, `Yes, ${verb.toLowerCase()}`, rowKey);
  const cancel = el("button", "cancel", "Cancel");
  cancel.type = "button";
  cancel.disabled = row.ui.inFlight;
  setDecideEnabled(yes);
  const back = () => {
    row.ui.confirm = null;
    rebuild(row);
    const again = row.element.querySelector(typed ? "button.submit" : confirm ? "button.approve" : "button.reject");
    if (again) again.focus();
  };
  cancel.addEventListener("click", back);
  panel.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && !row.ui.inFlight) {
      e.preventDefault(); // handled: the page's own Escape leaves it
      back();
    }
  });
  // Typed answers carry their verdict: the server infers it (not approved when one rejects).
  yes.addEventListener("click", () => send(row, typed ? undefined : confirm, row.ui.response));
  panel.append(body, yes, cancel);
  return panel;
}

async function send(row, approved, response) {
  const p = row.pending;
  row.ui.inFlight = true;
  row.ui.message = "";
  rebuild(row);
  const body = { namespace: state.namespace, execution_id: p.execution_id };
  if (approved !== undefined) body.approved = approved;
  if (interruptId(p)) body.interrupt_id = interruptId(p);
  if (row.ui.note) body.reason = row.ui.note;
  if (response) body.response = response;
  try {
    const reply = await api("POST", "/api/decisions", body);
    row.ui.inFlight = false;
    row.ui.expanded = false; // decided: back to one line in the compact view
    if (state.rows.get(key(p)) === row) upsert(reply.pending);
  } catch (error) {
    row.ui.inFlight = false;
    row.ui.confirm = null;
    row.ui.message = decisionError(error, approved);
    if (state.rows.get(key(p)) === row) rebuild(row);
  }
}

function decisionError(error, approved) {
  const verb = approved === undefined ? "submit the decisions" : approved ? "approve" : "reject";
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

// The text a search looks in, lower-cased: the run id (a thread's id for a graph), the
// interrupt id, and the context as stored and as the page shows it (non-ASCII unescaped).
function searchText(row) {
  if (row.searchedPending !== row.pending) {
    const p = row.pending;
    const context = p.context_json || "";
    row.searchedPending = p;
    row.searchText = [p.execution_id, interruptId(p), context, prettyContext(context || "{}")]
      .join("\n")
      .toLowerCase();
  }
  return row.searchText;
}

// A pause matches when its text holds every word of the search, whatever the case. The
// search is only compared: it never becomes markup or a selector.
function matchesSearch(row, words) {
  const text = searchText(row);
  return words.every((word) => text.includes(word));
}

function searchWords() {
  return state.search.toLowerCase().split(/\s+/).filter(Boolean);
}

// The pauses shown, in the order chosen: the chain, reason and search filters applied.
function shownRows() {
  const chain = $("chain-filter").value;
  const reason = $("reason-filter").value;
  const words = searchWords();
  const oldestFirst = state.sort === "oldest";
  return [...state.rows.values()]
    .filter((r) => (!chain || r.pending.chain_name === chain) && (!reason || r.pending.reason === reason))
    .filter((r) => matchesSearch(r, words))
    .sort((a, b) => {
      const older = Date.parse(a.pending.created_at) - Date.parse(b.pending.created_at);
      return oldestFirst ? older : -older;
    });
}

function render() {
  const rows = [...state.rows.values()];
  refillFilter($("chain-filter"), new Set(rows.map((r) => r.pending.chain_name)));
  refillFilter($("reason-filter"), new Set(rows.map((r) => r.pending.reason)));
  const shown = shownRows();
  // Rows move only when the order changed: moving one takes the focus from what is in it.
  const holder = $("rows");
  const current = [...holder.children];
  if (current.length !== shown.length || shown.some((r, i) => current[i] !== r.element)) {
    holder.replaceChildren(...shown.map((r) => r.element));
  }
  $("empty").hidden = shown.length > 0;
  let empty = "Nothing is waiting.";
  if (rows.length) empty = searchWords().length ? "No pause matches the search." : "No pause matches the filters.";
  $("empty").textContent = empty;
  // Only what waits for a person counts as waiting.
  const waiting = shown.filter((r) => !r.pending.decision || decidesAgain(r)).length;
  const resuming = shown.length - waiting;
  namespaceHint();
  const of = shown.length < rows.length ? `${shown.length} of ${rows.length} shown · ` : "";
  $("count").textContent = `${of}${waiting} waiting` + (resuming ? ` · ${resuming} decided, not yet resumed` : "");
  for (const row of state.rows.values()) {
    if (row.element !== null) row.element.classList.toggle("is-focused", key(row.pending) === state.focusKey);
  }
  refreshRunSummary();
}

// --- the keyboard -------------------------------------------------------------------------

// A field one types in: keys there are text, never shortcuts.
function typingIn(target) {
  return target instanceof Element && (target.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(target.tagName));
}

function rowOf(node) {
  for (const row of state.rows.values()) {
    if (row.element !== null && row.element.contains(node)) return row;
  }
  return null;
}

function focusedRow() {
  return state.focusKey === null ? null : state.rows.get(state.focusKey) || null;
}

// j / k: the next or the previous pause shown is marked, and takes the focus (Tab goes on to
// its buttons).
function moveFocus(step) {
  const shown = shownRows();
  if (!shown.length) return;
  let at = shown.findIndex((r) => key(r.pending) === state.focusKey);
  if (at < 0) at = step > 0 ? 0 : shown.length - 1;
  else at = Math.min(shown.length - 1, Math.max(0, at + step));
  const row = shown[at];
  state.focusKey = key(row.pending);
  render();
  row.element.focus({ preventScroll: true });
  row.element.scrollIntoView({ block: "nearest" });
}

// Escape on a pause: its confirmation closes, else a pause opened in the compact view goes
// back to its line.
function closeOnRow(row) {
  if (row.ui.inFlight) return false;
  if (state.view === "compact" && row.ui.expanded) {
    collapseRow(row);
  } else if (row.ui.confirm !== null) {
    row.ui.confirm = null;
    rebuild(row);
  } else {
    return false;
  }
  if (row.element.isConnected) row.element.focus({ preventScroll: true });
  return true;
}

function onKey(e) {
  if (e.defaultPrevented || e.ctrlKey || e.metaKey || e.altKey || e.isComposing) return;
  if (state.session === null || $("console").hidden) return;
  const target = e.target;
  if (e.key === "Escape" && target === $("search")) {
    $("search").blur(); // the search stays; the keys work again
    e.preventDefault();
    return;
  }
  if (typingIn(target)) return;
  // The run or the help is open: the page behind it stays put (Escape closes the dialog).
  if (document.querySelector("dialog[open]")) return;
  if (e.key === "/") {
    e.preventDefault();
    $("search").focus();
    $("search").select();
  } else if (e.key === "?") {
    e.preventDefault();
    $("help").showModal();
  } else if (e.key === "j" || e.key === "k") {
    e.preventDefault();
    moveFocus(e.key === "j" ? 1 : -1);
  } else if (e.key === "Enter") {
    // A button or a link takes Enter itself; Enter on the pause marked (or none) opens its run.
    if (target !== document.body && !(target instanceof Element && target.matches("article.interrupt"))) return;
    const row = focusedRow();
    if (row && shownRows().includes(row)) {
      e.preventDefault();
      openRun(row.pending);
    }
  } else if (e.key === "Escape") {
    const row = rowOf(document.activeElement) || focusedRow();
    if (row && closeOnRow(row)) e.preventDefault();
  }
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
  // Which pause of the run: a graph thread may have decided several (parallel branches).
  const which = el("div", "pause");
  which.append(el("span", "node", `node ${p.node_id}`));
  if (interruptId(p)) {
    const id = interruptId(p);
    const short = el("code", "interrupt-id", id.length > SHORT_ID_CHARS + 1 ? `${id.slice(0, SHORT_ID_CHARS)}…` : id);
    short.title = `interrupt ${id}`;
    which.append(document.createTextNode(" · interrupt "), short);
  }
  run.append(which);
  const verdict = el("td", `verdict ${d.approved ? "approved" : "rejected"}`, d.approved ? "approved" : "rejected");
  const answers = recordedAnswers(p);
  if (answers) verdict.append(answers);
  const when = el("td", "when");
  when.append(ageNode(d.decided_at));
  const resume = el("td", "resume");
  setResumeCell(resume, entry);
  const open = el("td", "");
  open.append(runLink(p));
  tr.append(run, verdict, el("td", "by", d.decided_by), when, el("td", "note", d.reason || "—"), resume, open);
  return tr;
}

// One answer of a middleware pause as the record keeps it: what was decided, with the
// arguments an edit changed or the message a rejection or a response gave.
function recordedAnswer(answer, action) {
  const type = actionType(answer);
  if (type === "edit") {
    const args = parsed(answer.edited_args_json) || {};
    const changed = changedKeys(action, args);
    if (!changed.length) return "edited: no change";
    return `edited: ${changed.map((k) => (k in args ? `${k} = ${shown(args[k])}` : `${k} removed`)).join(", ")}`;
  }
  if (type === "reject") return answer.message ? `rejected: “${truncate(answer.message, MAX_SHOWN_CHARS)}”` : "rejected";
  if (type === "respond") return `responded: “${truncate(answer.message || "", MAX_SHOWN_CHARS)}”`;
  return "approved";
}

// A decision's typed answer, an item per action of a middleware pause (its tool, then the
// answer; the whole answer on hover) or the resume value; null for a verdict alone.
function recordedAnswers(pending) {
  const response = pending.decision.response;
  if (!response) return null;
  const list = el("ul", "answers");
  if (response.resume_json !== undefined) {
    const item = el("li", "answer", `resume value ${truncate(response.resume_json, MAX_SHOWN_CHARS)}`);
    item.dataset.type = "resume";
    item.title = prettyContext(response.resume_json);
    list.append(item);
    return list;
  }
  const requested = requestedActions(pending) || [];
  (response.actions || []).forEach((answer, i) => {
    const type = actionType(answer);
    const name = requested[i] ? requested[i].name : `action ${i + 1}`;
    const item = el("li", "answer");
    item.dataset.type = type;
    item.append(el("span", "tool", name), document.createTextNode(" "), el("span", "what", recordedAnswer(answer, requested[i])));
    item.title = type === "edit" ? `${name} run with ${prettyContext(answer.edited_args_json)}` : `${name}: ${answerText(answer, requested[i], true)}`;
    list.append(item);
  });
  return list;
}

function clock(iso) {
  return new Date(iso).toLocaleTimeString();
}

// What happened after a decision, for the record: the words of the pause's own status, with
// when it was resumed, the lease a worker holds, how many workers took it, the worker's error.
// [text, kind, detail (a list of strings and nodes), whether it may be decided again].
function decidedOutcome(entry) {
  const p = entry.pending;
  const d = p.decision;
  const status = decisionStatus(d);
  const attempts = Number(d.attempts || 0);
  const detail = [];
  if (status === "resumed") {
    const text = d.approved ? "resumed" : "rejection carried out";
    if (d.reported_at) detail.push(d.approved ? "resumed " : "carried out ", ageNode(d.reported_at));
    if (attempts > 1) detail.push(` · after ${attempts} attempts`);
    return [text, d.approved ? "resumed" : "rejection-done", detail, false];
  }
  if (status === "resume_failed") {
    const row = state.rows.get(key(p));
    const again = row !== undefined && !row.gone;
    if (d.reported_at) detail.push("failed ", ageNode(d.reported_at));
    if (attempts > 1) detail.push(` · after ${attempts} attempts`);
    detail.push(again ? " · the pause still waits" : " · the run no longer waits at this pause: Open run shows where it stopped; start it again from the code that runs it");
    return [`resume failed: ${d.error || "no error given"}`, "failed", detail, again && canDecide()];
  }
  const [text, kind] = resumeState(p, entry.claimed);
  if (status === "resuming") {
    detail.push(`attempt ${attempts}`);
    if (d.lease_expires_at) {
      const lapsed = Date.parse(d.lease_expires_at) <= Date.now();
      detail.push(lapsed ? ` · its lease ran out at ${clock(d.lease_expires_at)}: another worker may take it over` : ` · leased until ${clock(d.lease_expires_at)}`);
    }
  } else if (attempts > 0) {
    // Decided again after a lease ran out: a worker took it and went quiet.
    detail.push(`${attempts} ${attempts === 1 ? "attempt" : "attempts"} so far: the last worker's lease ran out`);
  }
  return [text, kind, detail, false];
}

// The outcome cell; rebuilt only when what it says changed (its ages tick in place), so its
// button keeps the focus and a click.
function setResumeCell(cell, entry) {
  const [text, kind, detail, again] = decidedOutcome(entry);
  const said = JSON.stringify([text, kind, again, detail.map((part) => (typeof part === "string" ? part : part.dataset.at))]);
  if (cell.dataset.said === said) return;
  cell.dataset.said = said;
  cell.className = `resume ${kind}`;
  const parts = [el("span", "outcome", text)];
  if (detail.length) {
    const more = el("div", "outcome-detail");
    more.append(...detail);
    parts.push(more);
  }
  if (again) {
    const button = el("button", "decide-again", "Decide again");
    button.type = "button";
    button.title = "go to the pause, which waits for a new decision";
    button.addEventListener("click", () => decideAgain(entry.pending));
    parts.push(button);
  }
  cell.replaceChildren(...parts);
}

// Decide again: the pause's row, shown, opened and focused (its form is where one decides).
function decideAgain(pending) {
  const row = state.rows.get(key(pending));
  if (row === undefined || !decidesAgain(row)) return;
  if (!shownRows().includes(row)) {
    // A filter hides it: show everything rather than leave the button doing nothing.
    $("chain-filter").value = "";
    $("reason-filter").value = "";
    state.search = "";
    $("search").value = "";
    writeLink();
  }
  row.ui.expanded = true;
  rebuild(row);
  state.focusKey = key(row.pending);
  render();
  row.element.scrollIntoView({ block: "center" });
  const first = row.element.querySelector("input, textarea, button.decide") || row.element;
  first.focus({ preventScroll: true });
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
  refreshRunSummary();
}

// --- the runs of the namespace -----------------------------------------------------------

// The runs list's paging: runs read per page, the next page's token, and which read is the
// newest (an older answer, or one for another namespace, is dropped). The list is live as
// the pauses are: every pause event reads it again (soon: one read for a burst of events),
// and so does the clock every everyMs while the page is live and in view, since a run moves
// on (a step, its end) without an event; readAt is when it was last asked for, runs what
// it shows, so a read that changed nothing leaves the rows (and the focus) alone.
const runsView = { pageSize: 50, token: "", asked: 0, readAt: 0, everyMs: 10000, soon: null, runs: [] };
const RUNS_SOON_MS = 250;

function runsChanged() {
  if (runsView.soon !== null) return;
  runsView.soon = setTimeout(() => {
    runsView.soon = null;
    loadRuns(false, true);
  }, RUNS_SOON_MS);
}

function runsDue() {
  if (!state.live || document.visibilityState === "hidden" || runsView.readAt === 0) return;
  if (Date.now() - runsView.readAt >= runsView.everyMs) loadRuns(false, true);
}

function wireRuns() {
  for (const id of ["runs-framework", "runs-status", "runs-chain"]) {
    $(id).addEventListener("change", () => loadRuns(false));
  }
  $("runs-refresh").addEventListener("click", () => loadRuns(false));
  $("runs-more").addEventListener("click", () => loadRuns(true));
}

function runsQuery(token, pageSize) {
  const params = new URLSearchParams({ namespace: state.namespace, page_size: String(pageSize) });
  for (const [name, id] of [["framework", "runs-framework"], ["status", "runs-status"], ["chain_name", "runs-chain"]]) {
    const value = $(id).value.trim();
    if (value) params.set(name, value);
  }
  if (token) params.set("page_token", token);
  return `/api/runs?${params}`;
}

// The namespace's runs, fastaiagent runs and LangGraph threads, newest activity first, as
// the filters ask: the first page, or (more) the page after those shown; or (again, a live
// update) as many from the first as are shown, so a page read with More stays.
async function loadRuns(more, again) {
  const asked = ++runsView.asked;
  const namespace = state.namespace;
  runsView.readAt = Date.now();
  const shown = $("runs-rows").children.length;
  const pageSize = again ? Math.min(1000, Math.max(runsView.pageSize, shown)) : runsView.pageSize;
  try {
    const page = await api("GET", runsQuery(more ? runsView.token : "", pageSize));
    if (asked !== runsView.asked || namespace !== state.namespace) return;
    $("runs-error").textContent = "";
    if (more) {
      $("runs-rows").append(...page.runs.map(runRow));
      runsView.runs = runsView.runs.concat(page.runs);
    } else if (JSON.stringify(page.runs) !== JSON.stringify(runsView.runs)) {
      replaceRuns(page.runs.map(runRow));
      runsView.runs = page.runs;
    }
    runsView.token = page.next_page_token;
  } catch (error) {
    if (asked !== runsView.asked) return;
    $("runs-error").textContent = `The runs could not be read: ${error.message}` + (error.reason ? ` (${error.reason})` : "");
    // A live update that failed leaves the rows as they were, the error saying why.
    if (!more && !again) {
      $("runs-rows").replaceChildren();
      runsView.token = "";
      runsView.runs = [];
    }
  }
  const count = $("runs-rows").children.length;
  $("runs-empty").hidden = count > 0;
  $("runs-table").hidden = count === 0;
  $("runs-more").hidden = !runsView.token;
}

// The runs list's rows replaced by ``rows``; the focus stays on the button of the run it
// was on, if that run is still listed.
function replaceRuns(rows) {
  const active = document.activeElement;
  const was = active && active.closest ? active.closest("tr.run-row") : null;
  $("runs-rows").replaceChildren(...rows);
  if (was === null) return;
  const again = rows.find((tr) => tr.dataset.executionId === was.dataset.executionId &&
    tr.dataset.framework === was.dataset.framework);
  const button = again && again.querySelector(`button.${active.className}`);
  if (button) button.focus();
}

function enumWord(value, prefix) {
  return String(value || "").replace(prefix, "").toLowerCase();
}

// One run: its id, framework, chain (a thread's graph), status, checkpoints, newest node,
// last activity, and Open run.
function runRow(run) {
  // A server older than the framework field lists fastaiagent runs only.
  const framework = enumWord(run.framework, "FRAMEWORK_") || "fastaiagent";
  const status = enumWord(run.status, "EXECUTION_STATUS_");
  const tr = el("tr", "run-row");
  tr.dataset.executionId = run.execution_id;
  tr.dataset.framework = framework;
  const id = el("td", "run");
  id.append(copyable(run.execution_id, "execution-id"));
  const when = el("td", "when");
  if (run.last_activity_at) when.append(ageNode(run.last_activity_at));
  const open = el("button", "open-run", "Open run");
  open.type = "button";
  open.title = `the checkpoints of run ${run.execution_id}`;
  open.addEventListener("click", () => openRun(runTarget(run.execution_id, framework)));
  const openCell = el("td", "");
  openCell.append(open);
  tr.append(
    id,
    el("td", "framework", framework === "langgraph" ? "LangGraph" : "fastaiagent"),
    el("td", "chain", run.chain_name || "—"),
    el("td", `run-status ${status}`, status),
    el("td", "count", run.checkpoint_count || "0"),
    el("td", "node", run.last_node_id || "—"),
    when,
    openCell,
  );
  return tr;
}

// What Open run is given for a run of the list, as a pause gives it: a thread takes the
// interrupt id of a pause of it the page knows (waiting or decided), whose word the run view
// shows; its framework says how the run is read.
function runTarget(executionId, framework) {
  let interrupt = "";
  if (framework === "langgraph") {
    const known = [...state.rows.values(), ...state.decided.values()]
      .map((entry) => entry.pending)
      .find((p) => p.execution_id === executionId && interruptId(p));
    if (known) interrupt = interruptId(known);
  }
  return { execution_id: executionId, interrupt_id: interrupt, framework };
}

// --- the run behind a pause ---------------------------------------------------------------

// The run open in the run view ({execution_id, interrupt_id}, or null): the address names it.
// A pause's run, or a run of the list: a LangGraph thread is told by its framework, or by
// its pause's interrupt id (a fastaiagent pause has none).
function openRun(target) {
  const interrupt = interruptId(target);
  showRun(target.execution_id, interrupt, target.framework === "langgraph" || Boolean(interrupt));
}

async function showRun(executionId, interrupt, graph) {
  const dialog = $("run-view");
  const shownRun = { execution_id: executionId, interrupt_id: interrupt || "", graph };
  state.openRun = shownRun;
  writeLink();
  $("run-title").textContent = `Run ${executionId}`;
  $("run-error").textContent = "";
  $("run-checkpoints").replaceChildren();
  resetThreadView(graph);
  refreshRunSummary();
  if (!dialog.open) dialog.showModal();
  const namespace = encodeURIComponent(state.namespace);
  const id = encodeURIComponent(executionId);
  try {
    if (graph) {
      // A LangGraph thread: its checkpoints, oldest first.
      const found = [];
      let token = "";
      do {
        const page = await api(
          "GET",
          `/api/graph-checkpoints?namespace=${namespace}&thread_id=${id}&page_token=${encodeURIComponent(token)}`,
        );
        if (state.openRun !== shownRun) return;
        found.push(...page.checkpoints);
        token = page.next_page_token;
      } while (token);
      showThread(found.reverse(), shownRun);
      return;
    }
    let token = "";
    do {
      const page = await api(
        "GET",
        `/api/checkpoints?namespace=${namespace}&execution_id=${id}&page_token=${encodeURIComponent(token)}`,
      );
      if (state.openRun !== shownRun) return; // another run was opened meanwhile
      $("run-checkpoints").append(...page.checkpoints.map(checkpointRow));
      token = page.next_page_token;
    } while (token);
  } catch (error) {
    if (state.openRun !== shownRun) return;
    $("run-error").textContent = `The run's checkpoints could not be read: ${error.message}` +
      (error.reason ? ` (${error.reason})` : "");
  }
}

// The newest word on the open run's pause: the decided section and the rows follow it live
// (a run opened from a link is shown before the page has read its pause).
function refreshRunSummary() {
  const open = state.openRun;
  if (open === null) return;
  const id = key(open);
  const known = state.decided.get(id);
  const row = state.rows.get(id);
  let text = "";
  if (known) {
    text = `${verdictText(known.pending)} · ${resumeState(known.pending, known.claimed)[0]}`;
  } else if (row && row.pending.decision) {
    text = `${verdictText(row.pending)} · ${resumeState(row.pending, row.claimed)[0]}`;
  } else if (row) {
    text = `waiting for a decision (${row.pending.chain_name}, ${row.pending.reason})`;
  }
  if ($("run-summary").textContent !== text) $("run-summary").textContent = text;
}

function closedRun() {
  state.openRun = null;
  writeLink();
}

// --- the address: the namespace shown and the run open, so a pause can be linked --------

// What the address asks for: #namespace=N&run=E[&interrupt=I][&graph=1][&q=S][&sort=oldest]
// (graph=1: a LangGraph thread opened without a pause). Its
// values are only ever compared, sent URL-encoded, or shown as text (a form field's value).
function readLink() {
  const params = new URLSearchParams(window.location.hash.replace(/^#/, ""));
  return {
    namespace: (params.get("namespace") || "").trim(),
    run: params.get("run") || "",
    interrupt: params.get("interrupt") || "",
    graph: params.get("graph") === "1" || Boolean(params.get("interrupt")),
    q: params.get("q") || "",
    sort: params.get("sort") === "oldest" ? "oldest" : "newest",
    view: params.get("view") === "compact" ? "compact" : "full",
  };
}

// How the address asks the list to be shown: the search and the order.
function showList(link) {
  state.search = link.q;
  if ($("search").value !== link.q) $("search").value = link.q;
  state.sort = link.sort;
  $("sort").value = link.sort;
  setView(link.view);
}

// The full view or the compact one; the rows are built again in the view chosen.
function setView(view) {
  const chosen = view === "compact" ? "compact" : "full";
  $("view").value = chosen;
  if (state.view === chosen) return;
  state.view = chosen;
  for (const row of state.rows.values()) {
    row.ui.expanded = false;
    if (row.element !== null) rebuild(row);
  }
}

function writeLink() {
  const params = new URLSearchParams();
  if (state.namespace) params.set("namespace", state.namespace);
  if (state.openRun !== null) {
    params.set("run", state.openRun.execution_id);
    if (state.openRun.interrupt_id) params.set("interrupt", state.openRun.interrupt_id);
    else if (state.openRun.graph) params.set("graph", "1");
  }
  if (state.search) params.set("q", state.search);
  if (state.sort === "oldest") params.set("sort", "oldest");
  if (state.view === "compact") params.set("view", "compact");
  const hash = `#${params}`;
  if (window.location.hash !== hash) history.replaceState(null, "", hash);
}

// A link pasted into the open page: its namespace, then its run.
function followLink() {
  const link = readLink();
  showList(link);
  render();
  if (state.session === null) return;
  if (link.namespace && link.namespace !== state.namespace) {
    const select = $("namespace-select");
    const input = $("namespace-input");
    if (!select.hidden) {
      if ([...select.options].some((option) => option.value === link.namespace)) {
        select.value = link.namespace;
        switchNamespace(link.namespace);
      }
    } else {
      input.value = link.namespace;
      switchNamespace(link.namespace);
    }
  }
  openLinkedRun(link);
}

function openLinkedRun(link) {
  const open = state.openRun;
  if (!link.run) {
    if (open !== null) $("run-view").close();
    return;
  }
  if (
    open === null ||
    open.execution_id !== link.run ||
    open.interrupt_id !== link.interrupt ||
    open.graph !== link.graph
  ) {
    showRun(link.run, link.interrupt, link.graph);
  }
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

// --- a LangGraph thread in the run view: its history as a tree, a step's state, its pauses --

// The thread shown: its checkpoints by key, and the step whose state is shown.
const threadView = {
  run: null, // state.openRun when it was read
  byKey: new Map(), // checkpointKey(c) -> {checkpoint, position, row}
  selected: null, // checkpointKey of the step shown
  reading: 0, // numbers the reads of a step's state: only the newest is shown
};

function checkpointKey(c) {
  return `${c.checkpoint_ns || ""}\u0000${c.checkpoint_id}`;
}

// Hides what a thread shows (a fastaiagent run shows its checkpoints' table only).
function resetThreadView(isThread) {
  threadView.run = null;
  threadView.byKey = new Map();
  threadView.selected = null;
  threadView.reading += 1;
  $("run-view").classList.toggle("thread", isThread);
  $("run-pauses").hidden = true;
  $("run-pause-list").replaceChildren();
  $("run-state").hidden = true;
  $("run-state-body").replaceChildren();
}

// Where each checkpoint goes in the tree, in the order shown: each checkpoint namespace's
// checkpoints follow their parents (the step before); a checkpoint with several children is
// a fork, each child starting a branch one level in; a subgraph's checkpoints come after the
// checkpoint of the graph that called it, one level in. ``ordered`` is oldest first.
function threadTree(ordered) {
  const byNs = new Map();
  for (const c of ordered) {
    const ns = c.checkpoint_ns || "";
    if (!byNs.has(ns)) byNs.set(ns, []);
    byNs.get(ns).push(c);
  }
  const ids = new Set(ordered.map((c) => c.checkpoint_id));
  // A subgraph's namespace hangs from the checkpoint of the namespace that called it.
  const anchored = new Map(); // checkpoint id -> [ns]
  const loose = [];
  for (const [ns, list] of byNs) {
    if (!ns) continue;
    const outer = ns.includes("|") ? ns.slice(0, ns.lastIndexOf("|")) : "";
    const parents = list[0].parents || {};
    const anchor = typeof parents[outer] === "string" ? parents[outer] : "";
    if (anchor && ids.has(anchor)) {
      if (!anchored.has(anchor)) anchored.set(anchor, []);
      anchored.get(anchor).push(ns);
    } else {
      loose.push(ns);
    }
  }
  const placed = [];
  const emitNs = (ns, level) => {
    const list = byNs.get(ns) || [];
    const inNs = new Set(list.map((c) => c.checkpoint_id));
    const children = new Map();
    const roots = [];
    for (const c of list) {
      const parent = c.parent_checkpoint_id || "";
      if (parent && inNs.has(parent)) {
        if (!children.has(parent)) children.set(parent, []);
        children.get(parent).push(c);
      } else {
        roots.push(c);
      }
    }
    if (ns) placed.push({ group: ns, level, first: list[0] });
    // Depth first without recursion: a long thread is thousands of steps.
    const stack = roots.map((c) => ({ c, level: ns ? level + 1 : level, branch: "" })).reverse();
    while (stack.length) {
      const { c, level: at, branch } = stack.pop();
      const kids = children.get(c.checkpoint_id) || [];
      placed.push({ checkpoint: c, level: at, branch, children: kids.length });
      for (const sub of anchored.get(c.checkpoint_id) || []) emitNs(sub, at + 1);
      const next = kids.length === 1
        ? [{ c: kids[0], level: at, branch: "" }]
        : kids.map((k, i) => ({ c: k, level: at + 1, branch: `branch ${i + 1} of ${kids.length}` }));
      stack.push(...next.reverse());
    }
  };
  emitNs("", 0);
  for (const ns of loose) emitNs(ns, 0);
  return placed;
}

// The thread's history as a tree, then its pauses; the newest step's state is shown.
function showThread(ordered, shownRun) {
  threadView.run = shownRun;
  let position = 0;
  const rows = threadTree(ordered).map((place) => {
    if (place.group !== undefined) return subgraphRow(place);
    position += 1;
    const row = graphCheckpointRow(place.checkpoint, position - 1, place);
    const entry = { checkpoint: place.checkpoint, position, row, children: place.children };
    threadView.byKey.set(checkpointKey(place.checkpoint), entry);
    return row;
  });
  $("run-checkpoints").append(...rows);
  loadPauses(shownRun);
  const newest = ordered.filter((c) => !c.checkpoint_ns).pop() || ordered[ordered.length - 1];
  if (newest) selectStep(checkpointKey(newest), false);
}

// The heading of a subgraph's checkpoints: its checkpoint namespace, and where it was called.
function subgraphRow(place) {
  const tr = el("tr", "graph-namespace");
  tr.dataset.checkpointNs = place.group;
  tr.dataset.level = String(place.level);
  const cell = el("td", "subgraph");
  cell.colSpan = 5;
  cell.style.setProperty("--level", String(place.level));
  cell.append(el("span", "subgraph-label", "subgraph "), el("code", "", place.group));
  tr.append(cell);
  return tr;
}

// One checkpoint of a LangGraph thread: its step (a button that shows its state), the nodes
// whose tasks wrote on it (the step run from it), its source and pauses, when its id says it
// was made, its step and subgraph, and where it stands in the tree (``place``: its level,
// the branch it starts, its children).
function graphCheckpointRow(c, position, place) {
  const tr = el("tr", "checkpoint graph-checkpoint");
  tr.dataset.checkpointId = c.checkpoint_id;
  tr.dataset.checkpointNs = c.checkpoint_ns || "";
  tr.dataset.parentId = c.parent_checkpoint_id || "";
  tr.dataset.level = String(place.level);
  tr.dataset.children = String(place.children);
  if (place.branch) tr.dataset.branch = place.branch;
  if (c.interrupts) tr.classList.add("paused");
  if (place.children > 1) tr.classList.add("fork");
  let tasks = c.tasks.length ? c.tasks.join(", ") : (c.wrote.join(", ") || "-");
  if (tasks === "-" && c.source === "update") tasks = "state edited"; // update_state: a fork
  const index = el("td", "index");
  const step = el("button", "step", String(position + 1));
  step.type = "button";
  step.setAttribute("aria-pressed", "false");
  step.setAttribute("aria-label", `Show the state at checkpoint ${position + 1} (${tasks})`);
  step.addEventListener("click", () => selectStep(checkpointKey(c), true));
  index.append(step);
  const node = el("td", "node");
  node.style.setProperty("--level", String(place.level));
  if (place.branch) node.append(el("span", "branch-mark", "↳ "));
  node.append(el("span", "tasks", tasks));
  const source = el("td", "cp-status", c.source || "-");
  if (c.interrupts) source.append(el("span", "pause-mark", " · paused"));
  const when = el("td", "time");
  if (c.created_at) when.append(ageNode(c.created_at));
  const stepText = c.step === null || c.step === undefined ? "-" : `step ${c.step}`;
  let where = stepText; // a subgraph's checkpoints are under its heading
  if (place.branch) where += ` · ${place.branch}`;
  if (place.children > 1) where += ` · fork: ${place.children} branches`;
  tr.append(index, node, source, when, el("td", "state", where));
  tr.addEventListener("click", (event) => {
    if (event.target.closest("button, a, time")) return;
    selectStep(checkpointKey(c), false);
  });
  return tr;
}

// Shows the state of the step ``stepKey``: its values and what changed from the step before.
async function selectStep(stepKey, focus) {
  const entry = threadView.byKey.get(stepKey);
  const shownRun = threadView.run;
  if (!entry || shownRun === null) return;
  threadView.selected = stepKey;
  for (const [k, other] of threadView.byKey) {
    const chosen = k === stepKey;
    other.row.classList.toggle("selected", chosen);
    other.row.querySelector("button.step").setAttribute("aria-pressed", String(chosen));
  }
  if (focus) entry.row.querySelector("button.step").focus();
  const reading = ++threadView.reading;
  const c = entry.checkpoint;
  const panel = $("run-state");
  panel.hidden = false;
  panel.dataset.checkpointId = c.checkpoint_id;
  $("run-state-title").textContent = `State at checkpoint ${entry.position}`;
  $("run-state-note").textContent = "reading…";
  $("run-state-body").replaceChildren();
  const query = new URLSearchParams({
    namespace: state.namespace,
    thread_id: shownRun.execution_id,
    checkpoint_ns: c.checkpoint_ns || "",
    checkpoint_id: c.checkpoint_id,
  });
  let shown;
  try {
    shown = await api("GET", `/api/graph-state?${query}`);
  } catch (error) {
    if (reading !== threadView.reading) return;
    $("run-state-note").textContent = `The state could not be read: ${error.message}` +
      (error.reason ? ` (${error.reason})` : "");
    return;
  }
  if (reading !== threadView.reading || state.openRun !== shownRun) return;
  $("run-state-note").textContent = stepNote(shown, entry);
  $("run-state-body").append(...stateSections(shown));
}

// The step in words: its node(s), source and step, and which step it follows.
function stepNote(shown, entry) {
  const c = shown.checkpoint;
  const parts = [`step ${c.step ?? "-"}`, c.source || "-"];
  const tasks = c.tasks.length ? c.tasks : c.wrote;
  if (tasks.length) parts.push(`then ${tasks.join(", ")}`);
  if (c.checkpoint_ns) parts.push(`subgraph ${c.checkpoint_ns}`);
  const parent = shown.parent && threadView.byKey.get(checkpointKey(shown.parent));
  if (parent) parts.push(`after checkpoint ${parent.position}`);
  else if (shown.parent_missing) parts.push("its parent checkpoint is gone");
  else parts.push("the thread's first checkpoint");
  return parts.join(" · ");
}

// What changed, the values, the pending writes, and what the size limits cut.
function stateSections(shown) {
  const sections = [];
  const changes = el("section", "state-changes");
  changes.append(el("h4", "", "Changed from the step before"));
  const ownChanges = shown.changes.filter((c) => !isInternalChannel(c.channel));
  const internalChanges = shown.changes.filter((c) => isInternalChannel(c.channel));
  if (!ownChanges.length) changes.append(el("p", "empty", "No value of the graph's state changed."));
  for (const change of ownChanges) changes.append(changeItem(change));
  if (internalChanges.length) {
    const details = el("details", "internal");
    details.append(el("summary", "", `LangGraph's channels changed (${internalChanges.length})`), ...internalChanges.map(changeItem));
    changes.append(details);
  }
  sections.push(changes);

  const values = el("section", "state-values");
  values.append(el("h4", "", "State"));
  const names = Object.keys(shown.values);
  const internal = names.filter(isInternalChannel);
  const own = names.filter((name) => !isInternalChannel(name));
  if (!own.length) values.append(el("p", "empty", "No values."));
  values.append(channelList(shown.values, own));
  if (internal.length) {
    const details = el("details", "internal");
    details.append(el("summary", "", `LangGraph's channels (${internal.length})`), channelList(shown.values, internal));
    values.append(details);
  }
  sections.push(values);

  if (shown.pending_writes.length) {
    const writes = el("section", "state-writes");
    writes.append(el("h4", "", "Pending writes (the step run from here)"));
    const list = el("ul", "writes");
    for (const write of shown.pending_writes) {
      const item = el("li", "write");
      item.dataset.channel = write.channel;
      item.append(el("span", "write-head", `${write.node || write.task_id} → ${write.channel}`), viewBlock(write.value));
      list.append(item);
    }
    writes.append(list);
    sections.push(writes);
  }
  const cut = Object.entries(shown.cut);
  if (cut.length) {
    sections.push(el("p", "cut", `Cut for size: ${cut.map(([where, what]) => `${where} (${what.join("; ")})`).join(", ")}`));
  }
  return sections;
}

// LangGraph's own channels (the start, branches, pending sends), not the graph's state.
function isInternalChannel(name) {
  return name.startsWith("__") || name.startsWith("branch:");
}

function channelList(values, names) {
  const list = el("dl", "channels");
  for (const name of names) {
    const entry = el("div", "channel");
    entry.dataset.channel = name;
    entry.append(el("dt", "", name), el("dd", "", ""));
    entry.lastChild.append(viewBlock(values[name]));
    list.append(entry);
  }
  return list;
}

// One channel's change: added, removed, or changed (what a list appended, else before and
// after).
function changeItem(change) {
  const item = el("div", `change ${change.change}`);
  item.dataset.channel = change.channel;
  item.dataset.change = change.change;
  const head = el("p", "change-head");
  head.append(el("code", "", change.channel), el("span", "change-kind", ` ${change.change}`));
  item.append(head);
  if (change.appended) {
    head.lastChild.textContent += `: ${change.appended.length} appended`;
    item.append(labelled("appended", change.appended, "appended"));
  } else {
    if (change.change !== "added") item.append(labelled("before", change.before, "before"));
    if (change.change !== "removed") item.append(labelled("after", change.after, "after"));
  }
  return item;
}

function labelled(label, value, className) {
  const box = el("div", `view ${className}`);
  box.append(el("span", "view-label", label), viewBlock(value));
  return box;
}

// A decoded value as text (never markup): its JSON view, indented.
function viewBlock(value) {
  return el("pre", "value", JSON.stringify(value === undefined ? null : value, null, 2));
}

// The thread's pauses, oldest first: what each asked and what was decided.
async function loadPauses(shownRun) {
  const query = new URLSearchParams({ namespace: state.namespace, thread_id: shownRun.execution_id });
  let found;
  try {
    found = await api("GET", `/api/graph-pauses?${query}`);
  } catch (error) {
    if (state.openRun !== shownRun) return;
    $("run-pauses").hidden = false;
    $("run-pause-list").replaceChildren(el("li", "error", `The pauses could not be read: ${error.message}`));
    return;
  }
  if (state.openRun !== shownRun) return;
  $("run-pauses").hidden = found.pauses.length === 0;
  $("run-pause-list").replaceChildren(...found.pauses.map(pauseItem));
}

function pauseItem(pending) {
  const item = el("li", "run-pause");
  item.dataset.interruptId = interruptId(pending);
  const head = el("div", "pause-head");
  head.append(el("span", "node", pending.node_id ? `node ${pending.node_id}` : "pause"));
  const short = el("code", "interrupt-id", `${interruptId(pending).slice(0, SHORT_ID_CHARS)}…`);
  short.title = `interrupt ${interruptId(pending)}`;
  head.append(short);
  if (pending.created_at) {
    head.append(el("span", "asked", "asked "), ageNode(pending.created_at));
  }
  const at = threadView.byKey.get(checkpointKey({ checkpoint_ns: pending.checkpoint_ns, checkpoint_id: pending.checkpoint_id }));
  if (at) {
    const go = el("button", "pause-step", `checkpoint ${at.position}`);
    go.type = "button";
    go.title = "show the state where it paused";
    go.addEventListener("click", () => selectStep(checkpointKey(at.checkpoint), true));
    head.append(go);
  }
  item.append(head, pauseRequest(pending), pauseDecision(pending));
  return item;
}

// What the pause asked: each action of a middleware pause, or the value interrupt() was given.
function pauseRequest(pending) {
  const box = el("div", "request");
  const actions = requestedActions(pending);
  if (actions !== null && actions.length) {
    const list = el("ul", "requested");
    for (const action of actions) {
      list.append(el("li", "", `${action.name}(${truncate(JSON.stringify(action.args), 200)})`));
    }
    box.append(el("span", "view-label", "asked"), list);
    return box;
  }
  box.append(el("span", "view-label", "asked"), el("pre", "value", prettyContext(pending.context_json || "null")));
  return box;
}

// Who decided what, when, and how far it was carried out; or that it waits.
function pauseDecision(pending) {
  const decision = pending.decision;
  if (!decision) return el("p", "decision waiting", "waiting for a decision");
  const line = el("p", `decision ${decision.approved ? "approved" : "rejected"}`);
  line.append(el("span", "verdict", verdictText(pending)));
  if (decision.decided_at) line.append(el("span", "", " · "), ageNode(decision.decided_at));
  line.append(el("span", "outcome", ` · ${pauseOutcome(pending)}`));
  return line;
}

// How far the decision went: the inbox's word, unless the thread went on from the pause's
// checkpoint without a worker saying so (its graph was invoked again in code).
function pauseOutcome(pending) {
  const status = decisionStatus(pending.decision);
  const at = threadView.byKey.get(checkpointKey({ checkpoint_ns: pending.checkpoint_ns, checkpoint_id: pending.checkpoint_id }));
  if ((status === "decided" || status === "") && at && at.children > 0) return "the thread went on from here";
  return resumeState(pending, false)[0];
}

document.addEventListener("DOMContentLoaded", () => {
  init().catch((error) => {
    $("connection").textContent = `error: ${error.message}`;
  });
});
