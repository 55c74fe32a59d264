// jmsgateway console: pages drawn from the JSON API under ./api/ (no framework, no build step).
// Every POST sends JSON with X-Requested-With (the admin endpoint refuses anything else) and only
// after the operator confirmed it in the page's dialog.
"use strict";

const API = "api/";
const REFRESH_MS = 2000;
let page = "overview";
let timer = null;
let browsing = null; // the queue whose messages the panel shows
let you = {login: null, role: null}; // who is logged in, with which role (the overview says)
let actionsOf = {}; // queue -> the actions the API says you may do on it
// table id -> {filter, column, descending}: kept across the redraw every REFRESH_MS
const tableState = {};
const LONG_TEXT = 120; // longer texts (a Java stack trace as a bridge's last error) are collapsed
// Only the buttons of what you may do are shown; the endpoint refuses the rest anyway (403).
const mayAct = () => you.role === "operator" || you.role === "administrator";

// -- DOM helpers (text only: data never becomes markup) ----------------------

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function badge(text, cls) { return el("span", {class: "badge " + (cls || text)}, text); }
function num(value, field) { return el("td", {class: "num", "data-field": field}, value); }
function cell(value, field) { return el("td", {"data-field": field}, value); }

function table(headers, rows, attrs) {
  return el("table", attrs || {},
    el("thead", {}, el("tr", {}, headers.map(([text, cls]) => el("th", {class: cls || ""}, text)))),
    el("tbody", {}, rows.length ? rows : [el("tr", {}, el("td", {colspan: headers.length, class: "muted"}, "none"))]));
}

// A table with a search box filtering its rows (case-insensitive, on every cell's text) and headers that sort
// it (click again: descending); numbers sort as numbers. Its state survives the page's redraws.
function dataTable(id, label, headers, rows) {
  const state = tableState[id] || (tableState[id] = {filter: "", column: null, descending: false});
  const body = el("tbody", {});
  const count = el("span", {class: "muted count", "data-count": id});
  const heads = headers.map(([text, cls], index) => (cls || "").includes("nosort") || !text ? el("th", {class: cls || ""}, text) : el("th", {
    class: (cls || "") + " sortable", "data-column": index, title: "sort by " + text,
    "aria-sort": state.column === index ? (state.descending ? "descending" : "ascending") : null,
    onclick: () => {
      state.descending = state.column === index ? !state.descending : false;
      state.column = index;
      for (const th of heads) th.removeAttribute("aria-sort");
      heads[index].setAttribute("aria-sort", state.descending ? "descending" : "ascending");
      arrange();
    }}, text));
  const search = el("input", {type: "search", class: "search", placeholder: `Filter ${label}…`, "data-search": id,
    "aria-label": `Filter ${label}`, value: state.filter,
    oninput: event => { state.filter = event.target.value; arrange(); }});
  function arrange() {
    const wanted = state.filter.trim().toLowerCase();
    const sorted = rows.slice();
    if (state.column !== null) {
      const key = row => { const c = row.children[state.column]; return c ? (c.dataset.sort ?? c.textContent) : ""; };
      sorted.sort((a, b) => {
        const x = key(a), y = key(b), nx = Number(x), ny = Number(y);
        const order = x !== "" && y !== "" && !isNaN(nx) && !isNaN(ny) ? nx - ny : x.localeCompare(y, undefined, {numeric: true});
        return state.descending ? -order : order;
      });
    }
    let shown = 0;
    for (const row of sorted) {
      row.hidden = wanted !== "" && !row.textContent.toLowerCase().includes(wanted);
      if (!row.hidden) shown++;
    }
    body.replaceChildren(...(rows.length ? sorted : [el("tr", {}, el("td", {colspan: headers.length, class: "muted"}, "none"))]));
    count.textContent = wanted ? `${shown} of ${rows.length} shown` : `${rows.length}`;
  }
  arrange();
  return el("div", {class: "data-table"},
    el("div", {class: "table-tools"}, search, count),
    el("div", {class: "scroll"}, el("table", {id}, el("thead", {}, el("tr", {}, heads)), body)));
}

// A text shown in full when short; else its first line, cut, with the rest behind a click (a <details>).
function longText(text, field) {
  const value = text === null || text === undefined ? "" : String(text);
  const cls = "long-text";
  if (value.length <= LONG_TEXT && !value.includes("\n")) return el("td", {class: cls, "data-field": field}, value);
  const first = value.split("\n", 1)[0];
  const summary = first.length > LONG_TEXT ? first.slice(0, LONG_TEXT) + "…" : first + " …";
  return el("td", {class: cls, "data-field": field, "data-sort": value},
    el("details", {class: "error-text"}, el("summary", {}, summary), el("pre", {}, value)));
}

function duration(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  const s = Math.floor(seconds), d = Math.floor(s / 86400), h = Math.floor(s % 86400 / 3600);
  const m = Math.floor(s % 3600 / 60);
  if (d) return `${d}d ${h}h`;
  if (h) return `${h}h ${m}m`;
  if (m) return `${m}m ${s % 60}s`;
  return `${s}s`;
}

function time(ms) { return ms ? new Date(ms).toISOString().replace("T", " ").replace("Z", "") : "–"; }

// -- talking to the gateway ----------------------------------------------------

async function api(path) {
  const response = await fetch(API + path, {credentials: "same-origin", headers: {accept: "application/json"}});
  const document_ = await response.json();
  if (!response.ok) throw new Error(document_.error || response.statusText);
  return document_;
}

async function post(action, body) {
  const response = await fetch(API + action, {
    method: "POST", credentials: "same-origin",
    headers: {"content-type": "application/json", "x-requested-with": "jmsgateway-console"},
    body: JSON.stringify(body),
  });
  const answer = await response.json();
  if (!response.ok) throw new Error(answer.error || response.statusText);
  return answer.result;
}

function notice(text, error) {
  const box = document.getElementById("notice");
  box.textContent = text;
  box.className = error ? "error" : "";
  box.hidden = false;
}

function confirmAction(title, text) {
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-title").textContent = title;
  document.getElementById("confirm-text").textContent = text;
  return new Promise(resolve => {
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), {once: true});
    dialog.returnValue = "";
    dialog.showModal();
  });
}

// Ask, post, say what happened, redraw.
async function act(title, text, action, body, done) {
  if (!await confirmAction(title, text)) { notice(`${title}: cancelled`); return; }
  try {
    const result = await post(action, body);
    notice(done(result));
  } catch (error) {
    notice(`${title} failed: ${error.message}`, true);
  }
  await refresh();
  if (browsing) await showBrowse(browsing);
}

// -- the rate chart (canvas) ---------------------------------------------------

function drawChart(canvas, history) {
  const ratio = window.devicePixelRatio || 1;
  const width = canvas.clientWidth, height = canvas.clientHeight;
  canvas.width = width * ratio; canvas.height = height * ratio;
  const g = canvas.getContext("2d");
  g.scale(ratio, ratio);
  g.clearRect(0, 0, width, height);
  const left = 48, right = 10, top = 10, bottom = 22;
  const samples = history.samples;
  const end = samples.length ? samples[samples.length - 1][0] : 0;
  const start = end - history.span;
  let max = 1;
  for (const [, rin, rout] of samples) max = Math.max(max, rin, rout);
  max = niceCeiling(max);
  const x = t => left + (t - start) / history.span * (width - left - right);
  const y = v => top + (1 - v / max) * (height - top - bottom);
  g.font = "11px system-ui, sans-serif";
  g.strokeStyle = "#e5e7eb"; g.fillStyle = "#6b7483"; g.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const v = max * i / 4, yy = Math.round(y(v)) + 0.5;
    g.beginPath(); g.moveTo(left, yy); g.lineTo(width - right, yy); g.stroke();
    g.fillText(formatRate(v), 4, yy + 4);
  }
  const minutes = Math.round(history.span / 60);
  for (let i = 0; i <= minutes; i += Math.max(1, Math.round(minutes / 5))) {
    const xx = x(end - i * 60);
    g.fillText(i ? `-${i}m` : "now", xx - (i ? 10 : 22), height - 6);
  }
  for (const [index, color] of [[1, "#2563eb"], [2, "#16a34a"]]) {
    g.strokeStyle = color; g.lineWidth = 2; g.beginPath();
    samples.forEach((sample, i) => {
      const px = x(sample[0]), py = y(sample[index]);
      if (i === 0) g.moveTo(px, py); else g.lineTo(px, py);
    });
    g.stroke();
  }
  canvas.dataset.points = String(samples.length);
}

function niceCeiling(v) {
  const power = Math.pow(10, Math.floor(Math.log10(v)));
  for (const step of [1, 2, 5, 10]) if (v <= step * power) return step * power;
  return 10 * power;
}

function formatRate(v) { return v >= 100 ? v.toFixed(0) : v >= 10 ? v.toFixed(1) : v.toFixed(2).replace(/\.?0+$/, "") || "0"; }

// -- pages ------------------------------------------------------------------------

// The last takeover of a standby (gateway.ha): when, how long, how many messages it recovered.
const takeover = t => t === null ? "none" :
  `${new Date(t.at * 1000).toLocaleString()}: ${t.duration_seconds}s, ${t.recovered_messages} recovered messages`;

const pages = {
  async overview() {
    const o = await api("overview");
    const card = (label, value, field) => el("div", {class: "card"},
      el("div", {class: "label"}, label), el("div", {class: "value", "data-field": field}, value));
    const canvas = el("canvas", {id: "rate-chart"});
    const view = el("div", {},
      el("h1", {}, "Overview"),
      el("div", {class: "cards"},
        card("Status", badge(o.status), "status"),
        card("Connections", o.connections, "connections"),
        card("In (msg/s)", o.rates.in, "rate-in"),
        card("Out (msg/s)", o.rates.out, "rate-out"),
        card("Received", o.messages.received, "received"),
        card("Sent", o.messages.sent, "sent"),
        card("Uptime", duration(o.uptime_seconds), "uptime"),
        card("Role", badge(o.ha.role), "ha-role"),
        card("Last takeover", takeover(o.ha.last_takeover), "ha-takeover")),
      el("div", {class: "chart"},
        el("div", {class: "legend"}, el("span", {class: "in"}, "messages in / s (SEND)"),
          el("span", {class: "out"}, "messages out / s (MESSAGE)"),
          el("span", {class: "muted"}, `last ${Math.round(o.history.span / 60)} minutes, every ${o.history.interval}s`)),
        canvas),
      el("h2", {}, "Connectors"),
      table([["Name"], ["Health"], ["Detail"]], o.connectors.map(c =>
        el("tr", {"data-connector": c.name}, cell(c.name, "name"), cell(badge(c.status), "status"), longText(c.detail, "detail"))),
        {id: "connectors"}),
      el("h2", {}, "Bridges"),
      table([["Name"], ["State"], ["Health"], ["Detail"]], o.bridges.map(b =>
        el("tr", {"data-bridge": b.name}, cell(b.name, "name"), cell(badge(b.state), "state"),
          cell(badge(b.status), "status"), longText(b.detail, "detail"))), {id: "overview-bridges"}));
    return [view, () => drawChart(canvas, o.history)];
  },

  async destinations() {
    const d = await api("destinations");
    actionsOf = Object.fromEntries(d.queues.map(q => [q.name, q.actions || []]));
    const may = (q, action) => (q.actions || []).includes(action);
    const queueRow = q => el("tr", {"data-queue": q.name},
      cell([q.name, q.dead_letter ? badge("DLQ", "dlq") : null], "name"),
      num(q.pending, "pending"), num(q.consumers, "consumers"), num(q.inflight, "inflight"),
      num(q.enqueued, "enqueued"), num(q.dequeued, "dequeued"),
      el("td", {class: "actions"},
        may(q, "browse") ? el("button", {"data-action": "browse", onclick: () => showBrowse(q.name)}, "Browse") : null,
        may(q, "send") ? el("button", {"data-action": "send", onclick: () => showSend(q.name)}, "Send") : null,
        !may(q, "purge") ? null : el("button", {"data-action": "purge", class: "danger", onclick: () => act(
          "Purge " + q.name, `Drop the ${q.pending} pending message(s) of ${q.name}? Persistent ones are deleted from the store too.`,
          "purge", {destination: q.name}, n => `Purged ${q.name}: ${n} message(s) dropped`)}, "Purge"),
        q.dead_letter && may(q, "move") ? el("button", {"data-action": "move", onclick: () => act(
          "Move dead letters of " + q.name, `Send the pending messages of ${q.name} back to the destinations they came from?`,
          "move", {destination: q.name}, n => `Moved ${n} message(s) from ${q.name} back to their origin`)}, "Move to origin") : null,
        !may(q, "delete_queue") ? null : el("button", {"data-action": "delete-queue", class: "danger", onclick: () => act(
          "Delete queue " + q.name, `Delete the queue ${q.name} and its ${q.pending} pending message(s)? Persistent ones are deleted from the store too. A queue with consumers is not deleted.`,
          "remove", {destination: q.name}, n => `Deleted queue ${q.name}: ${n} message(s) dropped`)}, "Delete queue")));
    return [el("div", {},
      el("h1", {}, "Queues & topics ", el("span", {class: "muted"}, "(embedded broker)")),
      mayAct() ? el("div", {class: "toolbar"},
        el("button", {class: "primary", "data-action": "send-new", onclick: () => showSend("")}, "Send a test message…"),
        el("button", {"data-action": "create-queue", onclick: showCreate}, "New queue…")) : null,
      el("h2", {}, "Queues"),
      dataTable("queues", "queues", [["Queue"], ["Pending", "num"], ["Consumers", "num"], ["In flight", "num"], ["Enqueued", "num"],
             ["Dequeued", "num"], ["Actions", "nosort"]], d.queues.map(queueRow)),
      el("p", {class: "muted"}, `Dead-letter queues (DLQ) are the queues named ${d.dead_letter_prefix}…; "Move to origin" sends their messages back.`),
      el("h2", {}, "Topics"),
      dataTable("topics", "topics", [["Topic"], ["Subscribers", "num"], ["Durable subscriptions", "num"], ["Pending", "num"]],
        d.topics.map(t => el("tr", {"data-topic": t.name}, cell(t.name, "name"), num(t.subscribers, "subscribers"),
          num(t.durable_subscriptions, "durables"), num(t.pending, "pending")))),
      el("h2", {}, "Durable subscriptions"),
      dataTable("durables", "durable subscriptions", [["Subscription"], ["Topic"], ["Active"], ["Pending", "num"], ["In flight", "num"], ["Enqueued", "num"], ["Dequeued", "num"]],
        d.durables.map(s => el("tr", {"data-durable": s.key}, cell(s.key, "key"), cell(s.topic, "topic"),
          cell(s.active ? "yes" : "no", "active"), num(s.pending, "pending"), num(s.inflight, "inflight"),
          num(s.enqueued, "enqueued"), num(s.dequeued, "dequeued")))))];
  },

  async connections() {
    const rows = await api("connections");
    return [el("div", {},
      el("h1", {}, `Connections (${rows.length})`),
      dataTable("connections", "connections", [["Id"], ["Client address"], ["Login"], ["Client id"], ["STOMP"], ["Heart-beats"], ["Connected"],
             ["In", "num"], ["Out", "num"], ["Subscriptions"], [""]],
        rows.map(c => el("tr", {"data-connection": c.id},
          cell(c.id, "id"), cell(c.peer, "peer"), cell(c.login || "–", "login"), cell(c.client_id || "–", "client_id"),
          cell(c.version, "version"),
          cell(`send ${c.heartbeat.send_ms} ms / expect ${c.heartbeat.expect_ms} ms`, "heartbeat"),
          el("td", {"data-field": "connected", "data-sort": c.connected_seconds}, duration(c.connected_seconds)),
          num(c.messages_in, "messages_in"), num(c.messages_out, "messages_out"),
          cell(el("ul", {class: "subs"}, c.subscriptions.map(s =>
            el("li", {"data-subscription": s.destination}, `${s.destination} (id ${s.id}, ack ${s.ack}, ${s.unacked} unacked)`))),
            "subscriptions"),
          el("td", {}, c.may_close ? el("button", {class: "danger", "data-action": "close", onclick: () => act(
            "Close connection " + c.id, `Close the STOMP connection of ${c.peer} (login ${c.login || "anonymous"})? It gets an ERROR frame.`,
            "close", {id: c.id}, r => `Closed ${r.id} (${r.peer})`)}, "Close") : null)))))];
  },

  async routes() {
    const r = await api("routes");
    if (!r.configured) return [el("div", {}, el("h1", {}, "Kafka routes"),
      el("p", {class: "muted", id: "no-routing"}, "No Kafka routing is configured ([routing] in the configuration)."))];
    return [el("div", {},
      el("h1", {}, "Kafka routes ", el("span", {class: "muted"}, `(connector ${r.connector})`)),
      r.stopped ? el("p", {class: "badge DOWN"}, "routing stopped: " + r.stopped) : null,
      table([["Route"], ["Kafka topic"], ["State"], ["Routed", "num"], ["Failures", "num"], ["Dead-lettered", "num"],
             ["Skipped", "num"], ["Detail"]],
        r.routes.map(x => el("tr", {"data-route": x.name}, cell(x.name, "name"), cell(x.topic, "topic"),
          cell(badge(x.state, x.state === "running" ? "running" : "DOWN"), "state"), num(x.routed, "routed"),
          num(x.failures, "failures"), num(x.dead_lettered, "dead_lettered"), num(x.skipped, "skipped"),
          cell(x.detail, "detail"))), {id: "routes"}),
      el("h2", {}, "Kafka connector"),
      keyValues("kafka-status", r.kafka))];
  },

  async bridges() {
    const rows = await api("bridges");
    const button = (b, action) => el("button", {"data-action": action, onclick: () => act(
      `${action[0].toUpperCase()}${action.slice(1)} bridge ${b.name}`, `${action} the bridge ${b.name} (${b.source} → ${b.target})?`,
      "bridge", {name: b.name, action}, s => `Bridge ${s.name} is ${s.state}`)}, action);
    return [el("div", {},
      el("h1", {}, "Bridges"),
      dataTable("bridges", "bridges", [["Bridge"], ["State"], ["Health"], ["QoS"], ["Source"], ["Target"], ["Forwarded", "num"], ["Retries", "num"],
             ["Pending", "num"], ["Last error"], ["Control", "nosort"]],
        rows.map(b => el("tr", {"data-bridge": b.name}, cell(b.name, "name"), cell(badge(b.state), "state"),
          cell(badge(b.health.status), "health"), cell(b.qos, "qos"), cell(b.source, "source"), cell(b.target, "target"),
          num(b.forwarded, "forwarded"), num(b.retries, "retries"), num(b.pending, "pending"),
          longText(b.last_error || "", "last_error"),
          el("td", {class: "actions"}, you.role === "administrator" ? ["start", "stop", "pause", "resume"].map(a => button(b, a)) : [])
        ))))];
  },
};

// A status object as a two-column table: one row a key (nested objects' keys joined with "."), lists joined.
function keyValues(id, status) {
  const rows = [];
  const walk = (prefix, value) => {
    if (value !== null && typeof value === "object" && !Array.isArray(value) && Object.keys(value).length) {
      for (const [key, inner] of Object.entries(value)) walk(prefix ? `${prefix}.${key}` : key, inner);
    } else {
      const shown = Array.isArray(value) ? (value.length ? value.join(", ") : "–")
        : value === null || value === undefined ? "–" : typeof value === "object" ? "–" : String(value);
      rows.push(el("tr", {"data-key": prefix}, el("th", {scope: "row"}, prefix), longText(shown, "value")));
    }
  };
  walk("", status || {});
  return el("table", {id, class: "key-values"}, el("tbody", {}, rows.length ? rows
    : [el("tr", {}, el("td", {class: "muted"}, "no status"))]));
}

// -- panels: browse a queue, send a test message, create a queue ------------------------

function closePanel() {
  browsing = null;
  const panel = document.getElementById("panel");
  panel.hidden = true;
  panel.replaceChildren();
}

async function showBrowse(destination) {
  browsing = destination;
  const panel = document.getElementById("panel");
  let b;
  try {
    b = await api("browse?destination=" + encodeURIComponent(destination) + "&limit=200");
  } catch (error) {
    notice(`Browse ${destination} failed: ${error.message}`, true);
    closePanel();
    return;
  }
  const allowed = actionsOf[destination] || [];
  const rows = b.messages.map(m => el("tr", {"data-message": m.message_id},
    el("td", {}, el("div", {"data-field": "message_id"}, m.message_id),
      el("div", {class: "props"}, `${m.persistent ? "persistent" : "non-persistent"}, priority ${m.priority}`
        + (m.redelivered ? `, redelivered (${m.redelivery_count})` : "")),
      el("div", {class: "props"}, time(m.timestamp))),
    cell(m.type, "type"),
    el("td", {class: "props", "data-field": "headers"},
      m.correlation_id ? el("div", {}, "correlation-id: " + m.correlation_id) : null,
      m.reply_to ? el("div", {}, "reply-to: " + m.reply_to) : null,
      m.jms_type ? el("div", {}, "type: " + m.jms_type) : null,
      Object.entries(m.properties).map(([k, v]) => el("div", {}, `${k}: ${v}`))),
    el("td", {}, el("pre", {class: "body", "data-field": "body"}, m.body_preview),
      el("div", {class: "props"}, `${m.body_size} bytes${m.body_truncated ? " (preview)" : ""}`)),
    el("td", {},
      !allowed.includes("delete") ? null : el("button", {class: "danger", "data-action": "delete", onclick: () => act(
        "Delete message", `Delete ${m.message_id} from ${destination}?`, "delete",
        {destination, message_id: m.message_id}, () => `Deleted ${m.message_id} from ${destination}`)}, "Delete"),
      b.dead_letter && m.origin && allowed.includes("move") ? el("button", {"data-action": "move-one", onclick: () => act(
        "Move message back", `Send ${m.message_id} back to ${m.origin}?`, "move",
        {destination, message_ids: [m.message_id]}, n => `Moved ${n} message(s) back to ${m.origin}`)}, "Move to " + m.origin) : null)));
  panel.replaceChildren(
    el("div", {class: "head"},
      el("h2", {id: "browse-title"}, `Messages of ${destination}: ${b.pending} pending, ${b.inflight} in flight (not consumed by browsing)`),
      el("button", {onclick: closePanel}, "Close")),
    table([["Message"], ["Type"], ["Headers & properties"], ["Body"], [""]], rows, {id: "browse"}));
  panel.hidden = false;
}

function showCreate() {
  browsing = null;
  const panel = document.getElementById("panel");
  const name = el("input", {type: "text", id: "create-destination", value: "/queue/"});
  panel.replaceChildren(
    el("div", {class: "head"}, el("h2", {}, "New queue (embedded broker)"), el("button", {onclick: closePanel}, "Close")),
    el("label", {for: "create-destination"}, "Queue (/queue/…)"), name,
    el("p", {class: "muted"}, "An empty queue is not remembered across a restart (as one a SEND makes)."),
    el("p", {}, el("button", {class: "primary", id: "create-submit", onclick: () => act(
      "Create queue", `Create the queue ${name.value}?`, "create", {destination: name.value},
      made => made ? `Created queue ${name.value}` : `Queue ${name.value} exists already`)}, "Create")));
  panel.hidden = false;
}

function showSend(destination) {
  browsing = null;
  const panel = document.getElementById("panel");
  const target = el("input", {type: "text", id: "send-destination", value: destination || "/queue/"});
  const body = el("textarea", {id: "send-body"}, "test message");
  const persistent = el("input", {type: "checkbox", id: "send-persistent", checked: true});
  panel.replaceChildren(
    el("div", {class: "head"}, el("h2", {}, "Send a test message (text)"), el("button", {onclick: closePanel}, "Close")),
    el("label", {for: "send-destination"}, "Destination (/queue/… or /topic/…)"), target,
    el("label", {for: "send-body"}, "Body"), body,
    el("label", {}, persistent, " persistent"),
    el("p", {}, el("button", {class: "primary", id: "send-submit", onclick: () => act(
      "Send a test message", `Send this text message to ${target.value}?`, "send",
      {destination: target.value, body: body.value, persistent: persistent.checked},
      r => `Sent ${r.message_id} to ${target.value}`)}, "Send")));
  panel.hidden = false;
}

// -- navigation and refresh ---------------------------------------------------------

async function refresh() {
  const shown = page;
  try {
    const [view, after] = await pages[shown]();
    if (shown !== page) return;
    const typing = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.search : null;
    const caret = typing ? document.activeElement.selectionStart : null;
    document.getElementById("view").replaceChildren(view);
    if (typing) { // the redraw keeps the search box the operator is typing in
      const box = view.querySelector(`[data-search="${typing}"]`);
      if (box) { box.focus(); box.setSelectionRange(caret, caret); }
    }
    if (after) after();
    document.body.dataset.loaded = shown;
  } catch (error) {
    notice(`Could not load ${shown}: ${error.message}`, true);
  }
  try {
    const o = await api("overview");
    if (o.you) showRole(o.you);
    document.getElementById("gateway-id").textContent = o.id;
    document.getElementById("version").textContent = "jmsgateway " + o.version;
    const health = document.getElementById("health");
    health.textContent = o.status;
    health.className = "badge " + o.status;
  } catch (error) { /* shown above */ }
}

function showRole(who) {
  const changed = who.role !== you.role;
  you = who;
  document.body.dataset.role = who.role || "";
  document.getElementById("you").textContent = who.login ? `${who.login} (${who.role})` : "";
  document.getElementById("logout").hidden = !who.login; // without [auth] logins there is nothing to log out of
  // bridges are an administrator's: others see none, so no tab
  document.querySelector('nav a[data-page="bridges"]').hidden = who.role !== "administrator";
  if (changed && page !== "overview") refresh();
}

function schedule() {
  clearTimeout(timer);
  timer = setTimeout(async () => {
    if (!document.getElementById("confirm").open) await refresh();
    schedule();
  }, REFRESH_MS);
}

function navigate() {
  const wanted = (location.hash || "#overview").slice(1);
  page = Object.hasOwn(pages, wanted) ? wanted : "overview";
  for (const link of document.querySelectorAll("nav a")) link.classList.toggle("active", link.dataset.page === page);
  document.getElementById("notice").hidden = true;
  closePanel();
  refresh();
  schedule();
}

window.addEventListener("hashchange", navigate);
navigate();
