// The scheduler's status page (GET /): one self-contained HTML document, no
// external assets (clusters are often offline). Its script polls
// /status.json every 2 s and draws the summary cards, the member table
// (#members) and one SVG chart per curve (path.line); see status_page.h.
// Private to status_page.cc.
#ifndef SHARDPS_SCHEDULER_STATUS_PAGE_HTML_H_
#define SHARDPS_SCHEDULER_STATUS_PAGE_HTML_H_

namespace shardps {

inline constexpr char kStatusHtml[] = R"html(<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>shardps job</title>
<style>
 body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;margin:0;background:#f4f6f9;color:#1d2330}
 header{background:#1d2b45;color:#fff;padding:14px 24px;display:flex;align-items:center;gap:16px}
 header h1{font-size:19px;margin:0;font-weight:600}
 .badge{padding:3px 10px;border-radius:12px;font-size:12px;font-weight:600;text-transform:uppercase;background:#667}
 .badge.running{background:#2d8a4e}.badge.recovering{background:#c05621}.badge.waiting{background:#b7791f}.badge.done{background:#2b6cb0}.badge.failed{background:#c53030}
 #elapsed{margin-left:auto;opacity:.8}
 main{padding:16px 24px}
 .cards{display:grid;grid-template-columns:repeat(6,1fr);gap:12px;margin-bottom:16px}
 .card{background:#fff;border-radius:8px;padding:10px 14px;box-shadow:0 1px 2px rgba(0,0,0,.08)}
 .card .v{font-size:22px;font-weight:600}.card .k{font-size:12px;color:#667;text-transform:uppercase}
 .charts{display:grid;grid-template-columns:repeat(2,1fr);gap:12px;margin-bottom:16px}
 .chart{background:#fff;border-radius:8px;padding:8px 12px;box-shadow:0 1px 2px rgba(0,0,0,.08)}
 .chart h2{font-size:13px;margin:0 0 4px;color:#445}
 svg{width:100%;height:150px;display:block}
 svg .axis{stroke:#ccd;stroke-width:1}svg .grid{stroke:#eef0f4;stroke-width:1}svg text{font-size:10px;fill:#778}
 svg .line{fill:none;stroke-width:2}svg .empty{font-size:12px;fill:#99a}
 table{width:100%;border-collapse:collapse;background:#fff;border-radius:8px;overflow:hidden;box-shadow:0 1px 2px rgba(0,0,0,.08)}
 th,td{text-align:left;padding:6px 12px;border-bottom:1px solid #eef}th{background:#e9edf3;font-size:12px;text-transform:uppercase;color:#556}
 td.state-alive{color:#2d8a4e;font-weight:600}td.state-dead{color:#c53030;font-weight:600}td.state-finished{color:#2b6cb0;font-weight:600}
 h3{font-size:14px;margin:18px 0 8px}#error{color:#c53030}
</style></head>
<body>
<header><h1 id="job">shardps job</h1><span id="state" class="badge">loading</span><span id="elapsed"></span></header>
<main>
<div id="error"></div>
<div class="cards" id="cards"></div>
<div class="charts">
 <div class="chart"><h2>Throughput (samples/s)</h2><svg id="chart-sps" viewBox="0 0 560 150"></svg></div>
 <div class="chart"><h2>Train loss</h2><svg id="chart-loss" viewBox="0 0 560 150"></svg></div>
 <div class="chart"><h2 id="auc-title">Eval AUC</h2><svg id="chart-auc" viewBox="0 0 560 150"></svg></div>
 <div class="chart"><h2>Clocks (min / max)</h2><svg id="chart-clock" viewBox="0 0 560 150"></svg></div>
</div>
<h3>Members</h3>
<table id="members"><thead><tr><th>Role</th><th>Index</th><th>Address</th><th>State</th><th>Clock</th><th>Lag</th><th>Last heartbeat</th></tr></thead><tbody></tbody></table>
<h3>Checkpoints</h3><div id="checkpoints">none</div>
<h3>Recoveries</h3>
<table id="recoveries"><thead><tr><th>Kind</th><th>Cause</th><th>Restarted at clock</th><th>Detect</th><th>Wait</th><th>Restore</th><th>Rewind</th><th>Total</th></tr></thead><tbody></tbody></table>
</main>
<script>
const NS = "http://www.w3.org/2000/svg";
function fmt(v, d) {
  if (v === null || v === undefined) return "\u2013";
  if (Math.abs(v) >= 1e6) return (v / 1e6).toFixed(2) + "M";
  if (Math.abs(v) >= 1e4) return (v / 1e3).toFixed(1) + "k";
  if (Number.isInteger(v)) return String(v);
  if (d === undefined) d = Math.abs(v) >= 1000 ? 0 : Math.abs(v) >= 10 ? 1 : 3;
  return v.toFixed(d);
}
function el(tag, attrs, text) {
  const e = document.createElementNS(NS, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
// Draws series [{ys, color, name}] over xs into an svg: axes, grid, min/max
// labels, one path each; `empty` is shown while there is no point; `unit`
// follows the x labels (seconds unless given).
function chart(id, xs, series, empty, unit = " s") {
  const svg = document.getElementById(id), W = 560, H = 150, L = 52, R = 8, T = 8, B = 20;
  svg.replaceChildren();
  let lo = Infinity, hi = -Infinity, x0 = Infinity, x1 = -Infinity;
  for (const s of series) s.ys.forEach((y, i) => {
    if (y === null) return;
    lo = Math.min(lo, y); hi = Math.max(hi, y);
    x0 = Math.min(x0, xs[i]); x1 = Math.max(x1, xs[i]);
  });
  svg.appendChild(el("line", {class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B}));
  svg.appendChild(el("line", {class: "axis", x1: L, y1: T, x2: L, y2: H - B}));
  if (lo === Infinity) {
    svg.appendChild(el("text", {class: "empty", x: W / 2, y: H / 2, "text-anchor": "middle"}, empty || "no data yet"));
    return;
  }
  if (hi === lo) { hi += Math.abs(hi) * 0.05 || 1; lo -= Math.abs(lo) * 0.05 || 1; }
  if (x1 === x0) x1 = x0 + 1;
  const sx = x => L + (x - x0) / (x1 - x0) * (W - L - R);
  const sy = y => H - B - (y - lo) / (hi - lo) * (H - T - B);
  for (const f of [0, 0.5]) {
    const y = T + f * (H - T - B);
    svg.appendChild(el("line", {class: "grid", x1: L, y1: y, x2: W - R, y2: y}));
  }
  svg.appendChild(el("text", {x: L - 4, y: T + 8, "text-anchor": "end"}, fmt(hi)));
  svg.appendChild(el("text", {x: L - 4, y: H - B, "text-anchor": "end"}, fmt(lo)));
  svg.appendChild(el("text", {x: L, y: H - 4}, fmt(x0, 0) + unit));
  svg.appendChild(el("text", {x: W - R, y: H - 4, "text-anchor": "end"}, fmt(x1, 0) + unit));
  for (const s of series) {
    let d = "", pen = "M";
    s.ys.forEach((y, i) => {
      if (y === null) { pen = "M"; return; }
      d += pen + sx(xs[i]).toFixed(1) + " " + sy(y).toFixed(1) + " "; pen = "L";
    });
    svg.appendChild(el("path", {class: "line", d: d.trim(), stroke: s.color}));
    const last = s.ys.map((y, i) => [y, i]).filter(p => p[0] !== null).pop();
    if (last) svg.appendChild(el("circle", {cx: sx(xs[last[1]]), cy: sy(last[0]), r: 3, fill: s.color}));
  }
  if (series.length > 1) series.forEach((s, i) => svg.appendChild(
      el("text", {x: L + 8 + 44 * i, y: T + 10, fill: s.color, style: "fill:" + s.color}, s.name)));
}
function render(s) {
  document.getElementById("job").textContent = "shardps \u00b7 " + (s.job || "job");
  const st = document.getElementById("state");
  st.textContent = s.state; st.className = "badge " + s.state.split(":")[0];
  document.getElementById("elapsed").textContent = "elapsed " + fmt(s.elapsed_sec, 1) + " s";
  const cards = [["samples/s", fmt(s.samples_per_sec, 0)], ["samples", fmt(s.total_samples)],
    ["train loss", fmt(s.train_loss, 4)], ["eval AUC", fmt(s.eval_auc, 4)],
    ["clock min / max", fmt(s.min_clock) + " / " + fmt(s.max_clock)],
    ["spread (max seen)", fmt(s.spread) + " (" + fmt(s.max_spread) + ")"],
    ["servers (map version)", fmt(s.map_servers) + " (" + fmt(s.map_version) + ")"],
    ["moves", s.reshards ? fmt(s.reshards) + ": " + fmt(s.partitions_moved) + " partitions, " +
      fmt(s.reshard_rows_moved) + " rows, " + fmt(s.reshard_bytes_moved) + " B; last " +
      fmt(s.last_reshard_sec, 2) + " s" : "none"]];
  document.getElementById("cards").innerHTML = cards.map(c =>
    '<div class="card"><div class="k">' + c[0] + '</div><div class="v">' + c[1] + "</div></div>").join("");
  const body = document.querySelector("#members tbody");
  body.replaceChildren();
  for (const m of s.members) {
    const tr = document.createElement("tr");
    const cells = [m.role, m.index, m.address || "\u2013", m.state,
      m.clock === undefined ? "" : m.clock, m.lag === undefined ? "" : m.lag,
      m.heartbeat_age_sec === null ? "\u2013" : fmt(m.heartbeat_age_sec, 1) + " s ago"];
    cells.forEach((c, i) => {
      const td = document.createElement("td"); td.textContent = c;
      if (i === 3) td.className = "state-" + m.state;
      tr.appendChild(td);
    });
    body.appendChild(tr);
  }
  const h = s.history;
  chart("chart-sps", h.t, [{ys: h.samples_per_sec, color: "#2b6cb0"}]);
  chart("chart-loss", h.t, [{ys: h.train_loss, color: "#d9480f"}]);
  const ev = s.evaluations || {clock: []};
  if (ev.clock.length) {  // Periodic evaluation: AUC by clock.
    document.getElementById("auc-title").textContent = "Eval AUC by clock (best: clock " +
      s.best_clock + ", AUC " + fmt(s.best_auc, 4) + ")" +
      (s.early_stopped_at ? " \u00b7 stopped early at clock " + s.early_stopped_at : "");
    chart("chart-auc", ev.clock, [{ys: ev.auc, color: "#2d8a4e"}], "", " (clock)");
  } else {
    chart("chart-auc", h.t, [{ys: h.eval_auc, color: "#2d8a4e"}],
          "evaluated on the held-out split when training ends");
  }
  chart("chart-clock", h.t, [{ys: h.max_clock, color: "#d53f8c", name: "max"},
                             {ys: h.min_clock, color: "#805ad5", name: "min"}]);
  document.getElementById("checkpoints").textContent =
    (s.checkpoints.length ? s.checkpoints.join(", ") : "none") +
    (s.checkpoint_hold_sec ? " \u00b7 last: workers held " + fmt(s.checkpoint_hold_sec, 3) +
     " s, written in " + fmt(s.checkpoint_write_sec, 3) + " s behind them" : "");
  const rec = document.querySelector("#recoveries tbody");
  rec.replaceChildren();
  for (const r of (s.recoveries || [])) {
    const tr = document.createElement("tr");
    const secs = v => fmt(v, 2) + " s";
    [r.kind, r.cause, r.initial ? "0 (initial values)" : r.clock, secs(r.detect_sec),
     secs(r.wait_sec), secs(r.restore_sec), secs(r.rewind_sec),
     r.complete ? secs(r.total_sec) : "in progress"].forEach(c => {
      const td = document.createElement("td"); td.textContent = c; tr.appendChild(td);
    });
    rec.appendChild(tr);
  }
}
async function refresh() {
  try {
    const r = await fetch("status.json", {cache: "no-store"});
    render(await r.json());
    document.getElementById("error").textContent = "";
  } catch (e) {
    document.getElementById("error").textContent = "cannot reach the scheduler: " + e;
  }
}
refresh();
setInterval(refresh, 2000);
</script>
</body></html>
)html";

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_STATUS_PAGE_HTML_H_
