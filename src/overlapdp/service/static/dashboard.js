// The custodian's dashboard: reads the admin endpoints with the admin token (kept in this tab only)
// and refreshes every two seconds. Every value is written with textContent, never as HTML.
"use strict";
const state = { token: sessionStorage.getItem("overlapdp-admin") || "", seq: 0, rows: [], heatKey: "" };

async function api(path) {
  const res = await fetch(path, { headers: { Authorization: "Bearer " + state.token } });
  if (res.status === 401) throw new Error("the admin token was refused");
  if (!res.ok) throw new Error(path + ": HTTP " + res.status);
  return res;
}

function cell(row, text) {
  const td = document.createElement("td");
  td.textContent = text;
  row.appendChild(td);
  return td;
}

// A number for people (as overlapdp.display does in Python): at most six significant digits, rounded
// "up" for spends and guarantees and "down" for remaining budgets, so the page never shows less spent
// or more left than the service computed. A number whose shortest form already fits prints as such
// (0.2, 1e-6), so no float artefacts such as 0.19999999999999996 or 0.30000000000000004 appear.
function fmt(x, rounding = "nearest") {
  if (typeof x !== "number") return String(x ?? "");
  if (!Number.isFinite(x)) return String(x);
  const digits = 6;
  const plain = String(x);
  if (plain.replace(/^-/, "").replace(/e.*$/, "").replace(".", "").replace(/^0+/, "").length <= digits) {
    return plain;
  }
  let near = Number(x.toPrecision(digits));
  if (rounding !== "nearest" && near !== x && (near < x) === (rounding === "up")) {
    // one unit in the sixth digit towards the safe side (the nearest was on the other side)
    const step = Math.pow(10, Math.floor(Math.log10(Math.abs(near || x))) - (digits - 1));
    near = Number((rounding === "up" ? near + step : near - step).toPrecision(digits));
  }
  return String(near);
}

function bar(row, fraction) {
  const td = document.createElement("td");
  const outer = document.createElement("span");
  outer.className = "bar";
  const inner = document.createElement("span");
  inner.style.width = Math.max(0, Math.min(100, 100 * fraction)).toFixed(1) + "%";
  outer.appendChild(inner);
  td.appendChild(outer);
  row.appendChild(td);
}

function describeGuarantee(g) {
  if (!g || typeof g !== "object") return "";
  return Object.entries(g).map(([k, v]) => k + " " + fmt(v, "up")).join(", ");
}

async function refreshDatasets() {
  const names = await (await api("/v1/admin/datasets")).json();
  const body = document.querySelector("#datasets tbody");
  const rows = [];
  for (const item of names) {
    const name = typeof item === "string" ? item : item.name;
    const s = await (await api("/v1/admin/datasets/" + encodeURIComponent(name))).json();
    const tr = document.createElement("tr");
    tr.dataset.name = name;
    cell(tr, name);
    cell(tr, s.definition);
    cell(tr, fmt(s.budget));
    cell(tr, fmt(s.spent, "up"));
    cell(tr, fmt(s.remaining, "down"));
    cell(tr, describeGuarantee(s.guarantee));
    bar(tr, s.budget ? s.spent / s.budget : 0);
    rows.push([tr, s]);
  }
  body.replaceChildren(...rows.map(([tr]) => tr));
  const select = document.getElementById("heat-dataset");
  if (select.options.length !== rows.length) {
    select.replaceChildren(...rows.map(([, s]) => new Option(s.name, s.name)));
    fillAxes(rows.length ? rows[0][1] : null);
  }
  return rows.map(([, s]) => s);
}

function fillAxes(status) {
  const attrs = status && status.schema ? status.schema.attributes.map((a) => a.name) : [];
  for (const [id, pick] of [["heat-x", 0], ["heat-y", 1]]) {
    const sel = document.getElementById(id);
    sel.replaceChildren(...attrs.map((a) => new Option(a, a)));
    if (attrs.length > pick) sel.value = attrs[pick];
  }
}

async function refreshAnalysts() {
  const rows = await (await api("/v1/admin/analysts")).json();
  const body = document.querySelector("#analysts tbody");
  const out = [];
  for (const a of rows) {
    for (const [ds, v] of Object.entries(a.datasets || {})) {
      const tr = document.createElement("tr");
      tr.dataset.analyst = a.name;
      cell(tr, a.name);
      cell(tr, ds);
      cell(tr, fmt(v.quota));
      cell(tr, fmt(v.spent, "up"));
      cell(tr, fmt(v.remaining, "down"));
      cell(tr, a.revoked ? "yes" : "no");
      out.push(tr);
    }
  }
  body.replaceChildren(...out);
}

async function refreshLedger() {
  const fresh = await (await api("/v1/admin/ledger?after=" + state.seq + "&limit=500")).json();
  for (const r of fresh) state.seq = Math.max(state.seq, r.seq);
  state.rows = fresh.reverse().concat(state.rows).slice(0, 50);
  const body = document.querySelector("#ledger tbody");
  body.replaceChildren(
    ...state.rows.map((r) => {
      const tr = document.createElement("tr");
      cell(tr, r.seq);
      cell(tr, r.dataset);
      cell(tr, r.analyst);
      cell(tr, r.kind);
      cell(tr, r.query && r.query.text ? r.query.text : r.query ? JSON.stringify(r.query.conditions || r.query) : "(whole table)");
      cell(tr, r.cost ? fmt(r.cost.load ?? r.cost.epsilon ?? r.cost.rho ?? r.cost.mu ?? r.cost.epsilon_alpha, "up") : "");
      cell(tr, new Date(r.created_at * 1000).toLocaleTimeString());
      return tr;
    })
  );
  document.getElementById("ledger-count").textContent = "(" + state.seq + " charges)";
  return fresh.length;
}

async function refreshHeatmap(changed) {
  const ds = document.getElementById("heat-dataset").value;
  const x = document.getElementById("heat-x").value;
  const y = document.getElementById("heat-y").value;
  if (!ds || !x || !y || x === y) return;
  const key = [ds, x, y, state.seq].join("|");
  if (key === state.heatKey && !changed) return;
  state.heatKey = key;
  const path = "/v1/admin/datasets/" + encodeURIComponent(ds) + "/heatmap.png?x=" + encodeURIComponent(x) + "&y=" + encodeURIComponent(y);
  try {
    const blob = await (await api(path)).blob();
    const img = document.getElementById("heat-img");
    if (img.src) URL.revokeObjectURL(img.src);
    img.src = URL.createObjectURL(blob);
  } catch (e) {
    // The heat map is optional (a data set with a huge domain may not have one).
  }
}

async function refresh() {
  try {
    await refreshDatasets();
    await refreshAnalysts();
    await refreshLedger();
    await refreshHeatmap(false);
    document.getElementById("content").hidden = false;
    document.getElementById("status").textContent = "updated " + new Date().toLocaleTimeString();
    document.getElementById("error").textContent = "";
  } catch (e) {
    document.getElementById("error").textContent = e.message;
  }
}

document.getElementById("login").addEventListener("submit", (ev) => {
  ev.preventDefault();
  state.token = document.getElementById("token").value.trim();
  sessionStorage.setItem("overlapdp-admin", state.token);
  state.seq = 0;
  state.rows = [];
  refresh();
});
for (const id of ["heat-dataset", "heat-x", "heat-y"]) {
  document.getElementById(id).addEventListener("change", () => refreshHeatmap(true));
}
if (state.token) refresh();
setInterval(() => { if (state.token) refresh(); }, 2000);
