// The floor's page: renders the floor map, the rulings queue or one table's page from the
// floor service's JSON, and keeps it live over server-sent events (/events). Plain DOM, no
// framework, no external resources. Text always goes in through textContent, never as HTML.
"use strict";

const meta = (name) => document.querySelector(`meta[name="${name}"]`).content;
const CSRF = meta("csrf");
const MAY = new Set(JSON.parse(meta("may")));
const state = { tables: new Map(), rulings: [] };
// the table's last answer to this page's action on each ruling, kept across re-renders (an
// update of the queue may rebuild the row before or after the answer comes)
const answers = new Map();

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
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

function age(seconds) {
  if (seconds === null || seconds === undefined) return "–";
  if (seconds < 60) return `${Math.round(seconds)} s`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min`;
  return `${Math.floor(seconds / 3600)} h ${Math.floor((seconds % 3600) / 60)} min`;
}

function money(cents) {
  return cents === null || cents === undefined ? null : `$${(cents / 100).toFixed(2)}`;
}

// -- the floor map --------------------------------------------------------------------------

function deviceLine(name, device) {
  const bad = device.connection !== "connected" || device.fault;
  return el("li", { class: bad ? "device bad" : "device" },
    el("span", { class: "name" }, name), " ",
    el("span", { class: `conn ${device.connection}` }, device.connection),
    device.fault ? el("span", { class: "fault" }, ` fault: ${device.fault}`) : null);
}

function tile(t) {
  const classes = ["tile", t.status];
  if (t.open_rulings) classes.push("has-rulings");
  if (t.halted) classes.push("halted");
  if (t.unverified) classes.push("unverified");
  const gaps = t.completeness && t.completeness.gaps;
  return el("article", { class: classes.join(" "), "data-table": t.table },
    el("h2", {}, el("a", { href: `/table/${encodeURIComponent(t.table)}` }, t.table),
      unverifiedMark(t.unverified)),
    el("p", { class: "status" },
      el("span", { class: `badge ${t.status}` }, t.status),
      t.status_since ? el("small", {}, ` since ${t.status_since.slice(11, 19)}`) : null),
    el("p", { class: "game" }, t.game || "game unknown",
      t.phase ? ` · ${t.phase}` : "", t.round !== null && t.round !== undefined ? ` · round ${t.round}` : ""),
    t.meter_cents !== null && t.meter_cents !== undefined
      ? el("p", { class: "meter" }, `meter ${money(t.meter_cents)}`) : null,
    el("ul", { class: "devices" }, Object.entries(t.devices).map(([n, d]) => deviceLine(n, d))),
    el("p", { class: "rulings" },
      t.open_rulings
        ? el("strong", {}, `${t.open_rulings} open ruling${t.open_rulings > 1 ? "s" : ""}, oldest ${age(t.oldest_ruling_age_s)}`)
        : "no open rulings",
      t.escalated ? el("span", { class: "escalated" }, ` · ${t.escalated} escalated`) : null,
      t.halted ? el("span", { class: "halt" }, " · dealing halted") : null),
    el("p", { class: "seq" }, `seq ${t.highest_seq}`,
      gaps === undefined ? "" : gaps.length ? el("span", { class: "bad" }, ` · ${t.completeness.missing} missing`) : " · complete",
      withheldCount(t.completeness),
      proofLine(t.completeness)),
    undeliveredLine(t.undelivered),
    clockLine(t.clock),
    staleLines(t.withheld_state),
    softwareLine(t.software));
}

// the table's software: its version, its manifest (short), flagged when not approved or when
// the table's own check failed (docs/software.md)
function softwareLine(s) {
  if (!s) return el("p", { class: "software" }, "software: not reported");
  return el("p", { class: s.flag ? "software bad" : "software", title: s.manifest_sha256 || "" },
    `tableside ${s.version}`, s.manifest_short ? ` · manifest ${s.manifest_short}` : "",
    s.flag ? el("strong", { class: "software-flag" }, ` · ${s.flag.toUpperCase()}`) : " · approved");
}

// the table's word that it does not trust its wall clock (its clock record)
function clockLine(c) {
  return c ? el("p", { class: "clock bad", role: "status", "data-seq": c.seq }, c.text) : null;
}

// a retained state (table, status, a device's) whose newest record was too large for the broker
function staleLines(stale) {
  return (stale || []).map((w) => el("p", { class: "withheld stale", "data-seq": w.seq }, w.text));
}

// the table's word that its broker refuses one of its records (its status's undelivered)
function undeliveredLine(u) {
  return u ? el("p", { class: "undelivered bad", role: "status" }, u.text) : null;
}

// records the store holds only as withheld stand-ins (too large for the broker)
function withheldCount(c) {
  const n = c && c.withheld_count;
  return n ? el("span", { class: "withheld", title: "records larger than the broker's limit: linked by the chain, their content in the table's journal" }, ` · ${n} withheld`) : null;
}

// a table whose checkpoints are not signed by its enrolled key: said wherever it appears
function unverifiedMark(unverified) {
  return unverified ? el("span", { class: "unverified-mark", title: "no key enrolled, or its checkpoints are not signed by it" }, " UNVERIFIED") : null;
}

function proofLine(c) {
  if (!c || c.verified === undefined) return null;
  if (!c.verified) return el("span", { class: "bad" }, " · CHAIN BROKEN");
  if (c.flagged) return el("span", { class: "bad" }, c.key_enrolled ? " · FLAGGED" : " · key not enrolled");
  return ` · verified to ${c.verified_upto ?? "–"}, signed to ${c.signed_upto ?? "–"}`;
}

function renderFloor(main) {
  const tables = [...state.tables.values()].sort((a, b) => a.table.localeCompare(b.table));
  main.replaceChildren(
    el("h1", {}, "Floor map"),
    tables.length ? el("section", { class: "tiles", "aria-label": "tables" }, tables.map(tile))
      : el("p", {}, "No table heard from yet."));
}

// -- rulings --------------------------------------------------------------------------------

async function act(ruling, verb, body) {
  const response = await fetch(
    `/api/table/${encodeURIComponent(ruling.table)}/rulings/${encodeURIComponent(ruling.id)}/${verb}`,
    { method: "POST", headers: { "Content-Type": "application/json", "X-CSRF-Token": CSRF },
      body: JSON.stringify(body || {}) });
  const text = await response.text();
  let answer;
  try { answer = JSON.parse(text); } catch { answer = { ok: false, error: text }; }
  answers.set(ruling.id, answer.ok ? `${verb}d` : `refused: ${answer.error}`);
  const status = document.getElementById(`ruling-${ruling.id}-status`);
  if (status) status.textContent = answers.get(ruling.id);
  return answer;
}

function resolveDialog(ruling) {
  const dialog = document.getElementById("resolve-dialog");
  document.getElementById("resolve-what").textContent = `${ruling.table}: ${ruling.clause}`;
  const select = document.getElementById("resolve-action");
  select.replaceChildren(...ruling.actions.map((a) => el("option", { value: a }, a.replaceAll("_", " "))));
  document.getElementById("resolve-note").value = "";
  const form = document.getElementById("resolve-form");
  form.onsubmit = async (event) => {
    event.preventDefault();
    dialog.close();
    await act(ruling, "resolve", { action: select.value, note: document.getElementById("resolve-note").value });
  };
  document.getElementById("resolve-cancel").onclick = () => dialog.close();
  dialog.showModal();
  select.focus();
}

function rulingRow(r, withTable = true) {
  const buttons = [];
  if (r.state !== "resolved") {
    if (MAY.has("acknowledge_ruling") && r.state !== "acknowledged")
      buttons.push(el("button", { type: "button", class: "ack", onclick: () => act(r, "acknowledge") }, "Acknowledge"));
    if (MAY.has("resolve_ruling"))
      buttons.push(el("button", { type: "button", class: "resolve", onclick: () => resolveDialog(r) }, "Resolve…"));
  }
  return el("tr", { class: `ruling ${r.state}${r.unverified ? " unverified" : ""}`, "data-ruling": r.id },
    withTable ? el("td", {}, el("a", { href: `/table/${encodeURIComponent(r.table)}` }, r.table)) : null,
    el("td", { class: "clause" }, el("strong", {}, r.clause), unverifiedMark(r.unverified),
      el("p", { class: "words" }, r.words),
      el("p", { class: "summary" }, r.summary)),
    el("td", {}, r.actions.map((a) => a.replaceAll("_", " ")).join(", ")),
    el("td", {}, r.affected.join(", ")),
    el("td", { class: "age" }, age(r.age_s)),
    el("td", { class: `state ${r.state}` }, r.state,
      r.acknowledged_by ? el("small", {}, ` by ${r.acknowledged_by}`) : null,
      r.resolution ? el("small", {}, ` · ${r.resolution.replaceAll("_", " ")}${r.note ? `: ${r.note}` : ""}`) : null),
    el("td", {}, buttons, el("span", { id: `ruling-${r.id}-status`, class: "result", role: "status" },
      answers.get(r.id) || "")));
}

function rulingTable(rulings, withTable = true) {
  return el("table", { class: "rulings" },
    el("thead", {}, el("tr", {}, withTable ? el("th", {}, "Table") : null, el("th", {}, "Clause"),
      el("th", {}, "Required"), el("th", {}, "Hands"), el("th", {}, "Open for"), el("th", {}, "State"), el("th", {}, ""))),
    el("tbody", {}, rulings.map((r) => rulingRow(r, withTable))));
}

function renderRulings(main) {
  main.replaceChildren(el("h1", {}, "Open rulings, oldest first"),
    state.rulings.length ? rulingTable(state.rulings) : el("p", {}, "No open rulings."));
}

// -- one table ------------------------------------------------------------------------------

const SVG = "http://www.w3.org/2000/svg";

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  for (const child of children.flat()) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

// each test's level (its CUSUM as a share of its alert threshold: 1 alerts) over the shuffles
function levelPlot(history, order) {
  const w = 640, h = 180, pad = 28, top = 1.2;
  const n = history.length;
  const x = (i) => pad + (n > 1 ? (i * (w - 2 * pad)) / (n - 1) : 0);
  const y = (v) => h - pad - (Math.min(v, top) * (h - 2 * pad)) / top;
  const seen = new Set(history.flatMap((p) => Object.keys(p.levels)));
  const tests = order.filter((t) => seen.has(t));
  const lines = tests.map((test, k) => svg("polyline", {
    class: `level c${k % 10}`, "data-test": test, fill: "none",
    points: history.map((p, i) => `${x(i).toFixed(1)},${y(p.levels[test] ?? 0).toFixed(1)}`).join(" "),
  }, svg("title", {}, test)));
  return svg("svg", { class: "plot", viewBox: `0 0 ${w} ${h}`, role: "img",
    "aria-label": "each test's level over the tested shuffles; 1 is an alert" },
    svg("line", { class: "threshold", x1: pad, x2: w - pad, y1: y(1), y2: y(1) }),
    svg("text", { x: w - pad, y: y(1) - 4, "text-anchor": "end" }, "alert"),
    svg("line", { class: "axis", x1: pad, x2: w - pad, y1: y(0), y2: y(0) }),
    svg("text", { x: pad, y: h - 6 }, n ? `shuffle ${history[0].shuffles}` : ""),
    svg("text", { x: w - pad, y: h - 6, "text-anchor": "end" }, n ? `shuffle ${history[n - 1].shuffles}` : ""),
    lines);
}

function shufflerPanel(name, s) {
  const per = (v) => (v === null || v === undefined ? "–" : `${v} per 1,000`);
  return el("section", { class: "shuffler", "data-shuffler": name },
    el("h3", {}, `Shuffler ${name}`),
    el("table", { class: "health" }, el("tbody", {},
      el("tr", {}, el("th", {}, "Shuffles"), el("td", {}, String(s.shuffles)),
        el("th", {}, "Unsuccessful"), el("td", {}, `${s.unsuccessful} (${per(s.unsuccessful_per_1000)})`)),
      el("tr", {}, el("th", {}, "Count errors"), el("td", {}, `${s.count_errors} (${per(s.count_errors_per_1000)})`),
        el("th", {}, "Cards per shuffle"), el("td", {}, s.cards_per_shuffle ?? "–")),
      el("tr", {}, el("th", {}, "Firmware changes"), el("td", { colspan: 3 },
        s.firmware.length ? s.firmware.map((f) => `${(f.ts || "").slice(0, 19)} ${f.part || "device"} ${f.previous} → ${f.current}`).join("; ") : "none")))),
    el("h4", {}, `Integrity: ${s.tested} shuffles tested, ${s.with_input} with the order fed`),
    s.alerts.length ? el("ul", { class: "alerts" }, s.alerts.map((a) => el("li", { class: "bad" },
      `${(a.ts || "").slice(0, 19)} ${a.test} over ${a.shuffles} shuffles, p = ${Number(a.p_value).toExponential(2)}: ${a.detail}`)))
      : el("p", { class: "no-alerts" }, "No integrity alert."),
    s.history.length ? levelPlot(s.history, s.tests.map((t) => t.test)) : null,
    s.tests.length ? el("table", { class: "tests" },
      el("thead", {}, el("tr", {}, ["Test", "Shuffles", "Mean", "Fair", "Level", "Highest"].map((h) => el("th", {}, h)))),
      el("tbody", {}, s.tests.map((t, k) => el("tr", { class: t.high >= 1 ? "bad" : "" },
        el("td", {}, el("span", { class: `swatch c${k % 10}`, "aria-hidden": "true" }), ` ${t.test}`), el("td", {}, t.shuffles), el("td", {}, t.mean), el("td", {}, t.expected),
        el("td", {}, el("meter", { min: 0, max: 1, value: Math.min(t.level, 1) }), ` ${t.level}`),
        el("td", {}, t.high))))) : null);
}

async function renderTable(main, name) {
  const response = await fetch(`/api/table/${encodeURIComponent(name)}`);
  if (!response.ok) {
    main.replaceChildren(el("h1", {}, name), el("p", {}, await response.text()));
    return;
  }
  const page = await response.json();
  const t = page.tile;
  const devices = Object.entries(page.devices).map(([n, d]) => el("tr", {},
    el("td", {}, n), el("td", {}, d.device_class || ""), el("td", { class: `conn ${d.connection}` }, d.connection),
    el("td", {}, d.fault || ""),
    el("td", {}, d.identity ? `${d.identity.vendor} ${d.identity.model} #${d.identity.serial} fw ${d.identity.firmware_version}` : "–"),
    el("td", { class: "hash" }, d.identity ? d.identity.firmware_sha256 : "")));
  const c = t.completeness || {};
  main.replaceChildren(
    el("h1", {}, `Table ${t.table}`, unverifiedMark(t.unverified)),
    el("p", {}, el("span", { class: `badge ${t.status}` }, t.status), ` ${t.game || ""} · ${t.phase || "–"} · round ${t.round ?? "–"}`,
      t.meter_cents !== null && t.meter_cents !== undefined ? ` · meter ${money(t.meter_cents)}` : ""),
    el("p", { class: "seq" }, `highest seq ${t.highest_seq}`,
      c.gaps !== undefined ? ` · gaps: ${c.gaps.length ? c.gaps.map((g) => `${g[0]}–${g[1]}`).join(", ") : "none"}` : "",
      c.withheld && c.withheld.length ? ` · withheld: ${c.withheld.join(", ")}` : "",
      proofLine(c),
      c.flagged ? el("p", { class: "bad" }, c.flagged) : null,
      " · ", el("a", { href: `/api/table/${encodeURIComponent(t.table)}/export` }, "export"),
      " · ", el("a", { href: `/changes/${encodeURIComponent(t.table)}` }, "changes"),
      " · ", el("a", { href: `/keys/${encodeURIComponent(t.table)}` }, "key")),
    undeliveredLine(t.undelivered),
    clockLine(t.clock),
    staleLines(t.withheld_state),
    softwareLine(t.software),
    page.withheld.length ? el("section", { class: "withheld" }, el("h2", {}, "Withheld records"),
      el("ul", {}, page.withheld.map((w) => el("li", { "data-seq": w.seq }, w.text)))) : null,
    el("h2", {}, "Devices"),
    el("table", { class: "devices" }, el("thead", {}, el("tr", {}, ["Device", "Class", "Link", "Fault", "Identity", "Firmware SHA-256"].map((h) => el("th", {}, h)))),
      el("tbody", {}, devices)),
    el("p", { class: "pace" }, page.pace.rounds_per_hour !== null
      ? `Pace: ${page.pace.rounds_per_hour} rounds an hour (${page.pace.rounds} rounds over ${age(page.pace.over_s)})`
      : "Pace: –"),
    Object.keys(page.shufflers).length ? el("div", { class: "shufflers" }, el("h2", {}, "Shufflers"),
      Object.entries(page.shufflers).map(([n, s]) => shufflerPanel(n, s))) : null,
    el("h2", {}, "Rulings"),
    page.rulings.length ? rulingTable(page.rulings, false) : el("p", {}, "No rulings."),
    el("h2", {}, "Last events"),
    el("ol", { class: "events" }, page.events.map((e) => el("li", {},
      el("code", {}, `#${e.seq}`), ` ${(e.ts || "").slice(11, 23)} ${e.what} `,
      el("small", {}, typeof e.detail === "object" ? JSON.stringify(e.detail) : e.detail ?? "")))));
}

// -- routing and the live stream ------------------------------------------------------------

function render() {
  const main = document.getElementById("main");
  document.getElementById("ruling-count").textContent = String(state.rulings.length);
  const path = location.pathname;
  if (path === "/rulings") renderRulings(main);
  else if (path.startsWith("/table/")) renderTable(main, decodeURIComponent(path.slice(7)));
  else renderFloor(main);
}

function follow() {
  const live = document.getElementById("live");
  const source = new EventSource("/events");
  source.addEventListener("snapshot", (event) => {
    const floor = JSON.parse(event.data);
    state.tables = new Map(floor.tables.map((t) => [t.table, t]));
    state.rulings = floor.rulings;
    live.textContent = "live";
    live.className = "live on";
    render();
  });
  source.addEventListener("table", (event) => {
    const update = JSON.parse(event.data);
    state.tables.set(update.tile.table, update.tile);
    // an update carries its own table's open rulings: the others' stay as they were
    state.rulings = state.rulings.filter((r) => r.table !== update.tile.table).concat(update.rulings)
      .sort((a, b) => (a.ts < b.ts ? -1 : a.ts > b.ts ? 1 : a.seq - b.seq));
    const path = location.pathname;
    if (!path.startsWith("/table/") || decodeURIComponent(path.slice(7)) === update.tile.table) render();
    else document.getElementById("ruling-count").textContent = String(state.rulings.length);
  });
  source.addEventListener("gone", (event) => {
    const { table } = JSON.parse(event.data);  // capped or expired from the live view
    state.tables.delete(table);
    state.rulings = state.rulings.filter((r) => r.table !== table);
    if (!location.pathname.startsWith("/table/")) render();
  });
  source.onerror = () => {
    // closed for good: the floor answered other than a stream (401: the session ended)
    if (source.readyState === EventSource.CLOSED) location.assign("/login");
    live.textContent = "reconnecting…"; live.className = "live off";
  };
}

document.getElementById("logout").addEventListener("click", async () => {
  await fetch("/logout", { method: "POST", headers: { "X-CSRF-Token": CSRF } });
  location.assign("/login");
});
follow();
