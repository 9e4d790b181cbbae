"""A one-page dashboard at `/`: the tree with usage against quota, budgets, pending queues, credits, recent
preemptions.

The page is a static shell (inline CSS and vanilla JS, no external assets, works offline) that carries no data
itself; the data comes from the API with the caller's token. The token is read from the URL fragment
(`/#token=...`, never sent to the server nor logged) or typed into the page, and kept in sessionStorage.
"""

from __future__ import annotations

from aiohttp import web

PUBLIC_PATHS = frozenset({"/"})

PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>kuota</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{font-size:1.4em;margin:0 0 .5em} h2{font-size:1.1em;margin:1.5em 0 .5em}
table{border-collapse:collapse;background:#fff;min-width:40em}
td,th{border:1px solid #ddd;padding:.25em .6em;text-align:left}
th{background:#eee}
.bar{background:#e3e8ef;width:12em;height:.9em;display:inline-block;vertical-align:middle;position:relative}
.bar span{background:#3b82f6;height:100%;display:block} .bar span.over{background:#f59e0b}
#error{color:#b91c1c} .muted{color:#777} form{margin-bottom:1em}
</style></head><body>
<h1>kuota</h1>
<form id="login"><label>Token <input id="token" type="password" size="40" autocomplete="off"></label>
<button>Show</button> <span id="who" class="muted"></span></form>
<div id="error"></div>
<h2>Teams: usage against quota</h2><table id="teams"><thead><tr><th>team</th><th>parent</th><th>flavor</th>
<th>resource</th><th>usage</th><th>nominal</th><th></th><th>borrowed</th><th>lent</th><th>pending</th></tr></thead>
<tbody></tbody></table>
<h2>Budgets</h2><table id="budgets"><thead><tr><th>owner</th><th>resource</th><th>window</th><th>spent (h)</th>
<th>budget (h)</th><th></th><th>left (h)</th><th>when spent</th><th>state</th></tr></thead><tbody></tbody></table>
<h2>Pending queues</h2><table id="queues"><thead><tr><th>team</th><th>#team</th><th>#queue</th><th>workload</th>
<th>queue</th><th>priority</th><th>status</th><th>reason</th></tr></thead><tbody></tbody></table>
<h2>Fair-share credits</h2><table id="credits"><thead><tr><th>team</th><th>share S</th><th>usage U</th>
<th>factor F</th><th>credit</th></tr></thead><tbody></tbody></table>
<h2>Recent preemptions</h2><table id="preemptions"><thead><tr><th>issued</th><th>victim</th><th>team</th>
<th>preemptor</th><th>reason</th><th>checkpoint</th><th>lost GPU-s</th></tr></thead><tbody></tbody></table>
<script>
"use strict";
const store = window.sessionStorage;
const m = /token=([^&]+)/.exec(window.location.hash);
if (m) { store.setItem("kuota-token", decodeURIComponent(m[1])); history.replaceState(null, "", "/"); }
document.getElementById("login").addEventListener("submit", (e) => {
  e.preventDefault(); store.setItem("kuota-token", document.getElementById("token").value); load();
});
async function api(path) {
  const r = await fetch(path, {headers: {Authorization: "Bearer " + (store.getItem("kuota-token") || "")}});
  const body = await r.json();
  if (!r.ok) throw new Error(body.detail || r.statusText);
  return body;
}
function row(tbody, cells) {
  const tr = document.createElement("tr");
  for (const c of cells) { const td = document.createElement("td");
    if (c instanceof Node) td.appendChild(c); else td.textContent = c === null || c === undefined ? "" : String(c);
    tr.appendChild(td); }
  tbody.appendChild(tr);
}
function bar(used, quota) {
  const outer = document.createElement("span"); outer.className = "bar";
  const inner = document.createElement("span");
  const pct = quota > 0 ? Math.min(100, 100 * used / quota) : (used > 0 ? 100 : 0);
  inner.style.width = pct + "%"; if (used > quota) inner.className = "over";
  outer.title = quota > 0 ? Math.round(100 * used / quota) + "%" : ""; outer.appendChild(inner); return outer;
}
function clear(id) { const t = document.querySelector("#" + id + " tbody"); t.textContent = ""; return t; }
async function load() {
  document.getElementById("error").textContent = "";
  try {
    const who = await api("/api/v1/whoami");
    document.getElementById("who").textContent = "as " + who.name + " (" + who.role + ")";
    const [tree, queues, credits, budgets] = await Promise.all([api("/api/v1/tree"),
      api("/api/v1/queues?limit=50"), api("/api/v1/credits"), api("/api/v1/budgets")]);
    let t = clear("teams");
    for (const team of tree.teams) for (const r of team.resources)
      row(t, [team.name, team.parent, r.flavor, r.resource, r.usage.value, r.nominal.value,
              bar(r.usage.milli, r.nominal.milli), r.borrowed.value, r.lent.value, team.pending]);
    t = clear("budgets");
    for (const b of budgets.budgets)
      row(t, [b.owner + (b.scope === "cohort" ? " (cohort)" : ""), b.resource, b.window, b.spent_hours, b.limit_hours,
              bar(b.spent, b.limit), b.remaining_hours, b.on_exhausted, b.exhausted ? "spent" : b.percent + "%"]);
    t = clear("queues");
    for (const q of queues.teams) for (const w of q.workloads)
      row(t, [q.team, w.position_in_team, w.position_in_queue, w.name, w.queue, w.priority, w.status, w.reason]);
    t = clear("credits");
    for (const c of credits.teams)
      row(t, [c.team, Number(c.share).toFixed(3), Number(c.usage_share).toFixed(3), Number(c.factor).toFixed(3),
              Number(c.credit).toFixed(3)]);
    t = clear("preemptions");
    try {
      const p = await api("/api/v1/preemptions?limit=20");
      for (const x of p.items) row(t, [x.issued_at, x.victim, x.victim_team, x.preemptor, x.reason,
        x.checkpoint_acked_at ? "acked " + (x.checkpoint_id || "")
          : (x.checkpoint_timed_out_at ? "timed out" : "pending"),
        x.lost_gpu_seconds]);
    } catch (e) { row(t, ["(no ledger: " + e.message + ")"]); }
    document.body.dataset.loaded = "true";
  } catch (e) { document.getElementById("error").textContent = e.message; }
}
if (store.getItem("kuota-token")) load();
setInterval(() => { if (store.getItem("kuota-token")) load(); }, 15000);
</script></body></html>
"""


async def _page(request: web.Request) -> web.Response:
    response = web.Response(text=PAGE, content_type="text/html")
    # The page runs only its own inline script and talks only to this server.
    response.headers["Content-Security-Policy"] = (
        "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'"
    )
    response.headers["Cache-Control"] = "no-store"
    return response


def install(app: web.Application) -> None:
    app.router.add_get("/", _page)
