// The key page (/keys/<table>) and the changes page (/changes/<table>): plain DOM, text only
// through textContent. Every row of the changes is drawn the same way, whatever its kind.
"use strict";

const meta = (name) => document.querySelector(`meta[name="${name}"]`).content;
const TABLE = meta("table");
const T = encodeURIComponent(TABLE);
const $ = (id) => document.getElementById(id);

function cell(text) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined ? "" : String(text);
  return td;
}

function row(...texts) {
  const tr = document.createElement("tr");
  tr.append(...texts.map(cell));
  return tr;
}

async function post(path, body) {
  const response = await fetch(path, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-CSRF-Token": meta("csrf") },
    body: JSON.stringify(body),
  });
  $("answer").textContent = response.ok ? "" : await response.text();
  if (response.ok) await showKey();
  return response.ok;
}

async function showKey() {
  const response = await fetch(`/api/table/${T}/key`);
  if (!response.ok) { $("key-status").textContent = await response.text(); return; }
  const k = await response.json();
  $("key-status").textContent = k.enrolled
    ? `enrolled: ${k.enrolled_fingerprint.join(" ")}`
    : (k.seen ? "not enrolled" : "not enrolled: no checkpoint of this table heard yet");
  $("key-status").className = k.enrolled ? "ok" : "bad";
  const offerEnrol = k.may_act && k.seen && k.seen !== k.enrolled;
  $("enrol").hidden = !offerEnrol;
  $("revoke").hidden = !(k.may_act && k.enrolled);
  $("revoke").dataset.key = k.enrolled || "";
  if (k.seen) {
    $("seen-fingerprint").replaceChildren(...k.seen_fingerprint.map((g) => {
      const li = document.createElement("li");
      li.textContent = g;
      return li;
    }));
    $("confirm-group").textContent = String(k.confirm_group);
    $("enrol").dataset.key = k.seen;
  }
  $("record").replaceChildren(...k.record.slice().reverse().map((e) =>
    row(e.at, e.action, e.key, e.by, e.via, e.reason)));
}

function day(offset) {
  const d = new Date(Date.now() + offset * 86400000);
  return d.toISOString().slice(0, 10);
}

async function showChanges() {
  const range = `from=${$("from").value}&to=${$("to").value}`;
  $("export-csv").href = `/api/table/${T}/changes/export?${range}&format=csv`;
  $("export-json").href = `/api/table/${T}/changes/export?${range}&format=json`;
  const response = await fetch(`/api/table/${T}/changes?${range}`);
  if (!response.ok) { $("answer").textContent = await response.text(); return; }
  const c = await response.json();
  $("answer").textContent = `${c.changes.length} change(s) from ${c.from} to ${c.to}`;
  $("rows").replaceChildren(...c.changes.map((r) => {
    const tr = row(r.time, r.seq, r.kind, r.subject, r.by, r.summary);
    tr.dataset.kind = r.kind;
    tr.title = JSON.stringify(r.detail);
    return tr;
  }));
}

document.addEventListener("DOMContentLoaded", () => {
  $("table-name").textContent = TABLE;
  if ($("keys")) {
    $("enrol-button").addEventListener("click", () => post(`/api/table/${T}/key/enrol`, {
      key: $("enrol").dataset.key, group: $("enrol-group").value, reason: $("enrol-reason").value,
    }));
    $("revoke-button").addEventListener("click", () => post(`/api/table/${T}/key/revoke`, {
      key: $("revoke").dataset.key, reason: $("revoke-reason").value,
    }));
    showKey();
  } else {
    const query = new URLSearchParams(location.search);
    $("from").value = query.get("from") || day(-89);
    $("to").value = query.get("to") || day(0);
    $("range").addEventListener("submit", (event) => { event.preventDefault(); showChanges(); });
    showChanges();
  }
});
