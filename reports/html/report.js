// report.js: draws the figures of a bpbench HTML page (report.html, history.html, compare.html) as inline SVG
// from the JSON the page carries (the script element "bp-data"), and makes its tables sortable. The C++ side chooses
// and thins every number (reports/html/report_html.cpp); this file only draws, as reports/plot.py does for the
// PNGs. No library, nothing fetched: the page opens from file:// on a machine without network.
//
// Figures (<figure data-figure=NAME>, placed where report.md shows NAME.png):
//   peak_vs_seq_len   peak memory against T per strategy: estimate dotted, OOM as crosses, the budget dashed
//   partition_sweep   BP time, peak and FLOPs against the partition size, per sweep
//   train_loss        each training run's loss per step, and its difference from plain BP's
//   timeline          every timeline cell: live bytes stacked by category over time; hover for the time,
//                     the innermost phase and the bytes per category; a click on a phase zooms to it
//   history_METRIC    a metric over the runs of a history
// When drawing fails the figure says why and the error goes to the console: a page that draws nothing never
// looks fine. window.bpReady is true once every figure was tried (the browser test waits for it).
"use strict";

(function () {
  const SVG = "http://www.w3.org/2000/svg";
  const COLOURS = ["#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b2", "#937860", "#da8bc3", "#8c8c8c",
                   "#ccb974", "#64b5cd"];
  const CATEGORY_COLOURS = {params: "#4c72b0", grads: "#55a868", optimizer: "#937860", checkpoints: "#c44e52",
                            kv: "#8172b2", activations: "#ccb974", logits: "#dd8452", comm: "#64b5cd",
                            other: "#8c8c8c"};
  const KIB = 1024, MIB = KIB * 1024, GIB = MIB * 1024;

  // ---- formatting (report.md's conventions: GiB = 2^30, MiB = 2^20) -------------------------------------
  function bytes(b) {
    if (b === null || b === undefined) return "–";
    const a = Math.abs(b);
    if (a >= GIB) return (b / GIB).toFixed(2) + " GiB";
    if (a >= MIB) return (b / MIB).toFixed(1) + " MiB";
    if (a >= KIB) return (b / KIB).toFixed(1) + " KiB";
    return b + " B";
  }
  function exactBytes(b) {
    return b.toString().replace(/\B(?=(\d{3})+(?!\d))/g, ",") + " B";
  }
  // A number as short as its value allows: integers whole, others to 3 significant digits (or `digits`).
  function number(v, digits) {
    if (v === null || v === undefined) return "–";
    const a = Math.abs(v);
    if (Number.isInteger(v) && a < 1e7) return String(v);
    if (a !== 0 && (a >= 1e7 || a < 1e-3)) return v.toExponential(2);
    return String(parseFloat(v.toPrecision(digits || 3)));
  }
  function ms(t) {
    return t >= 5000 ? (t / 1000).toFixed(2) + " s" : t.toFixed(t >= 100 ? 1 : 2) + " ms";
  }
  const FORMATS = {
    bytes: {tick: (v, unit) => (v / unit.div).toFixed(unit.digits), unit: byteUnit, text: bytes},
    seconds: {tick: (v) => number(v), unit: () => ({label: "s"}), text: (v) => number(v) + " s"},
    flops: {tick: (v) => (v / 1e9).toFixed(2), unit: () => ({label: "GFLOP"}), text: (v) => (v / 1e9).toFixed(3) + " GFLOP"},
    plain: {tick: (v) => number(v), unit: () => ({label: ""}), text: (v) => number(v, 6)},
  };
  function byteUnit(max) {
    if (max >= GIB) return {div: GIB, label: "GiB", digits: max >= 10 * GIB ? 0 : 1};
    if (max >= MIB) return {div: MIB, label: "MiB", digits: max >= 10 * MIB ? 0 : 1};
    return {div: KIB, label: "KiB", digits: 0};
  }

  // ---- SVG and the tooltip ------------------------------------------------------------------------------
  function svgEl(tag, attrs, parent) {
    const e = document.createElementNS(SVG, tag);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function text(parent, x, y, s, attrs) {
    const t = svgEl("text", Object.assign({x: x, y: y}, attrs || {}), parent);
    t.textContent = s;
    return t;
  }
  let tip = null;
  function showTip(evt, html) {
    if (!tip) {
      tip = document.createElement("div");
      tip.id = "bp-tip";
      document.body.appendChild(tip);
    }
    tip.innerHTML = html;
    tip.style.display = "block";
    const pad = 14, w = tip.offsetWidth, h = tip.offsetHeight;
    let x = evt.clientX + pad, y = evt.clientY + pad;
    if (x + w > window.innerWidth) x = Math.max(0, evt.clientX - pad - w);
    if (y + h > window.innerHeight) y = Math.max(0, evt.clientY - pad - h);
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  }
  function hideTip() {
    if (tip) tip.style.display = "none";
  }
  function esc(s) {
    return String(s).replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
  }

  // ---- scales ---------------------------------------------------------------------------------------------
  function linear(d0, d1, r0, r1) {
    const s = (v) => r0 + (d1 === d0 ? 0.5 : (v - d0) / (d1 - d0)) * (r1 - r0);
    s.invert = (p) => d0 + ((p - r0) / (r1 - r0)) * (d1 - d0);
    s.ticks = () => niceTicks(d0, d1, 6);
    return s;
  }
  function log2(d0, d1, r0, r1, values) {
    const l0 = Math.log2(d0), l1 = Math.log2(d1);
    const s = (v) => r0 + (l1 === l0 ? 0.5 : (Math.log2(v) - l0) / (l1 - l0)) * (r1 - r0);
    s.ticks = () => {
      const u = Array.from(new Set(values)).sort((a, b) => a - b);
      if (u.length <= 8) return u;
      const out = [];
      for (let k = Math.floor(l0); k <= Math.ceil(l1); ++k) out.push(Math.pow(2, k));
      return out;
    };
    return s;
  }
  function niceTicks(lo, hi, n) {
    if (!(hi > lo)) return [lo];
    const raw = (hi - lo) / n, mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw);
    const out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(v);
    return out;
  }
  function byteTicks(hi) {
    // Ticks at round numbers of the axis' unit, so "512 MiB" reads as such.
    const unit = byteUnit(hi);
    return niceTicks(0, hi / unit.div, 5).map((v) => v * unit.div);
  }

  // ---- a line chart: several series of (x, y), hover on a point for its values -----------------------------
  // spec: {title, xLabel, yLabel, xLog2, y: "bytes"|"seconds"|"flops"|"plain", yZero, series: [{label, colour,
  //        dash, points: [{x, y}], markersOnly}], hlines: [{y, label}], crosses: [{x, label, colour}]}
  function lineChart(parent, spec) {
    const W = 640, H = 360, m = {l: 64, r: 16, t: 28, b: 48};
    const fmt = FORMATS[spec.y || "plain"];
    const svg = svgEl("svg", {viewBox: `0 0 ${W} ${H}`, class: "bp-chart", role: "img"}, parent);
    svgEl("title", {}, svg).textContent = spec.title || "";
    const xs = [], ys = [];
    for (const s of spec.series) for (const p of s.points) { xs.push(p.x); ys.push(p.y); }
    for (const c of spec.crosses || []) xs.push(c.x);
    for (const h of spec.hlines || []) ys.push(h.y);
    if (!xs.length) {
      text(svg, W / 2, H / 2, "no data", {"text-anchor": "middle", class: "bp-muted"});
      return svg;
    }
    const x0 = Math.min(...xs), x1 = Math.max(...xs);
    let y0 = spec.yZero === false ? Math.min(...ys) : Math.min(0, ...ys), y1 = Math.max(...ys);
    if (y1 === y0) y1 = y0 + (Math.abs(y0) || 1);
    y1 += (y1 - y0) * 0.08;
    const pad = spec.xLog2 ? 0 : (x1 - x0) * 0.02;
    const x = spec.xLog2 ? log2(x0, x1, m.l + 12, W - m.r - 12, xs) : linear(x0 - pad, x1 + pad, m.l, W - m.r);
    const y = linear(y0, y1, H - m.b, m.t);
    const unit = fmt.unit(y1);
    // Axes, grid, labels.
    const yt = spec.y === "bytes" ? byteTicks(y1) : y.ticks();
    for (const v of yt) {
      svgEl("line", {x1: m.l, x2: W - m.r, y1: y(v), y2: y(v), class: "bp-grid"}, svg);
      text(svg, m.l - 6, y(v) + 4, fmt.tick(v, unit), {"text-anchor": "end", class: "bp-tick"});
    }
    for (const v of x.ticks()) {
      svgEl("line", {x1: x(v), x2: x(v), y1: H - m.b, y2: H - m.b + 4, class: "bp-axis"}, svg);
      text(svg, x(v), H - m.b + 16, number(v), {"text-anchor": "middle", class: "bp-tick"});
    }
    svgEl("line", {x1: m.l, x2: W - m.r, y1: H - m.b, y2: H - m.b, class: "bp-axis"}, svg);
    svgEl("line", {x1: m.l, x2: m.l, y1: m.t, y2: H - m.b, class: "bp-axis"}, svg);
    text(svg, (m.l + W - m.r) / 2, H - 10, spec.xLabel || "", {"text-anchor": "middle", class: "bp-label"});
    text(svg, 14, (m.t + H - m.b) / 2, (spec.yLabel || "") + (unit.label ? ` (${unit.label})` : ""),
         {"text-anchor": "middle", class: "bp-label", transform: `rotate(-90 14 ${(m.t + H - m.b) / 2})`});
    text(svg, m.l, 18, spec.title || "", {class: "bp-title"});
    for (const h of spec.hlines || []) {
      svgEl("line", {x1: m.l, x2: W - m.r, y1: y(h.y), y2: y(h.y), class: "bp-hline"}, svg);
      text(svg, W - m.r - 4, y(h.y) - 4, `${h.label} ${fmt.text(h.y)}`, {"text-anchor": "end", class: "bp-tick"});
    }
    // Series: a path, then its points (each with its values on hover).
    spec.series.forEach((s, i) => {
      const colour = s.colour || COLOURS[i % COLOURS.length];
      const pts = s.points.slice().sort((a, b) => a.x - b.x);
      if (!s.markersOnly && pts.length > 1)
        svgEl("path", {d: pts.map((p, k) => `${k ? "L" : "M"}${x(p.x).toFixed(1)},${y(p.y).toFixed(1)}`).join(""),
                       stroke: colour, "stroke-dasharray": s.dash || "none", class: "bp-line"}, svg);
      for (const p of pts) {
        const dot = svgEl("circle", {cx: x(p.x), cy: y(p.y), r: s.dash ? 2.5 : 4, fill: colour, class: "bp-point"}, svg);
        const html = `<b>${esc(s.label)}</b><br>${esc(spec.xLabel || "x")}: ${number(p.x)}<br>` +
                     `${esc(spec.yLabel || "y")}: ${fmt.text(p.y)}` + (p.note ? `<br>${esc(p.note)}` : "");
        dot.addEventListener("mousemove", (e) => showTip(e, html));
        dot.addEventListener("mouseleave", hideTip);
      }
    });
    for (const c of spec.crosses || []) {
      const cx = x(c.x), cy = y(y1 / 1.08), r = 5;
      const g = svgEl("g", {class: "bp-cross", stroke: c.colour}, svg);
      svgEl("path", {d: `M${cx - r},${cy - r}L${cx + r},${cy + r}M${cx - r},${cy + r}L${cx + r},${cy - r}`}, g);
      const html = `<b>${esc(c.label)}</b><br>${esc(spec.xLabel || "x")}: ${number(c.x)}<br>out of memory`;
      g.addEventListener("mousemove", (e) => showTip(e, html));
      g.addEventListener("mouseleave", hideTip);
    }
    legend(parent, spec.series.map((s, i) => ({label: s.label, colour: s.colour || COLOURS[i % COLOURS.length],
                                              dash: s.dash})));
    return svg;
  }
  function legend(parent, items) {
    const div = document.createElement("div");
    div.className = "bp-legend";
    for (const it of items) {
      const span = document.createElement("span");
      span.innerHTML = `<svg width="22" height="10"><line x1="0" y1="5" x2="22" y2="5" stroke="${it.colour}" ` +
                       `stroke-width="${it.dash ? 1.5 : 3}" stroke-dasharray="${it.dash || "none"}"/></svg> ${esc(it.label)}`;
      div.appendChild(span);
    }
    parent.appendChild(div);
  }
  function panel(parent, title) {
    const div = document.createElement("div");
    div.className = "bp-panel";
    if (title) {
      const h = document.createElement("div");
      h.className = "bp-panel-title";
      h.textContent = title;
      div.appendChild(h);
    }
    parent.appendChild(div);
    return div;
  }
  const zip = (xs, ys) => xs.map((x, i) => ({x: x, y: ys[i]})).filter((p) => p.y !== null && p.y !== undefined);

  // ---- the figures ----------------------------------------------------------------------------------------
  const FIGURES = {
    peak_vs_seq_len(fig, d) {
      const impls = [];
      for (const p of d.panels) for (const s of p.series) { const n = s.label.split(" (")[0]; if (!impls.includes(n)) impls.push(n); }
      const colour = (label) => COLOURS[impls.indexOf(label.split(" (")[0]) % COLOURS.length];
      for (const p of d.panels) {
        const series = [];
        const crosses = [];
        for (const s of p.series) {
          series.push({label: s.label, colour: colour(s.label), points: zip(s.seq_len, s.peak_bytes)});
          if (s.estimate_bytes && s.estimate_bytes.length)
            series.push({label: s.label + " estimate", colour: colour(s.label), dash: "3 3",
                         points: zip(s.estimate_seq_len, s.estimate_bytes)});
          for (const t of s.oom_seq_len || []) crosses.push({x: t, label: s.label, colour: colour(s.label)});
        }
        lineChart(panel(fig), {title: p.title, xLabel: "sequence length (tokens)", yLabel: "peak BP memory",
                               xLog2: true, y: "bytes", series: series, crosses: crosses,
                               hlines: d.budget_bytes ? [{y: d.budget_bytes, label: "budget"}] : []});
      }
    },
    partition_sweep(fig, d) {
      for (const p of d.panels) {
        const box = panel(fig, p.title);
        const xLabel = p.xlabel || "partition size (tokens)";
        const of = (key) => p.series.map((s) => ({label: s.label, points: zip(s.partition, s[key] || [])}));
        lineChart(box, {title: "BP time", xLabel: xLabel, yLabel: "BP time", xLog2: true, y: "seconds", series: of("time_s")});
        lineChart(box, {title: "peak BP memory", xLabel: xLabel, yLabel: "peak", xLog2: true, y: "bytes", series: of("peak_bytes")});
        const flops = of("hardware_flops").map((s) => Object.assign(s, {label: s.label + " hardware"}))
          .concat(of("dense_attention_flops").map((s) => Object.assign(s, {label: s.label + " dense attention", dash: "2 3"})))
          .filter((s) => s.points.length);
        if (flops.length)
          lineChart(box, {title: "FLOPs per step", xLabel: xLabel, yLabel: "FLOPs", xLog2: true, y: "flops", series: flops});
      }
    },
    train_loss(fig, d) {
      for (const p of d.panels) {
        const box = panel(fig, p.title);
        const pts = (arr) => (arr || []).map((q) => ({x: q[0], y: q[1]}));
        const loss = [], diff = [];
        const base = p.series[0];
        const baseAt = (arr) => new Map((arr || []).map((q) => [q[0], q[1]]));
        const bs = baseAt(base.steps), be = baseAt(base.eval);
        p.series.forEach((s, k) => {
          const colour = COLOURS[k % COLOURS.length];
          loss.push({label: s.label, colour: colour, points: pts(s.steps)});
          if (s.eval && s.eval.length) loss.push({label: s.label + " held-out", colour: colour, markersOnly: true, points: pts(s.eval)});
          if (k === 0) return;
          diff.push({label: `${s.label} − ${base.label}`, colour: colour,
                     points: (s.steps || []).filter((q) => bs.has(q[0])).map((q) => ({x: q[0], y: q[1] - bs.get(q[0])}))});
          const held = (s.eval || []).filter((q) => be.has(q[0])).map((q) => ({x: q[0], y: q[1] - be.get(q[0])}));
          if (held.length) diff.push({label: `${s.label} − ${base.label} held-out`, colour: colour, markersOnly: true, points: held});
        });
        lineChart(box, {title: "loss (line: training batch, dots: held-out)", xLabel: "step", yLabel: "loss", yZero: false, series: loss});
        if (diff.length)
          lineChart(box, {title: `difference from ${base.label}`, xLabel: "step", yLabel: "loss difference", yZero: false,
                          series: diff, hlines: [{y: 0, label: ""}]});
      }
    },
    timeline(fig, d, data) {
      if (!data.timelines || !data.timelines.length) throw new Error("the page carries no timeline");
      for (const tl of data.timelines) timelineChart(panel(fig), tl);
    },
  };
  function historyFigure(fig, metric, data) {
    const panels = (data.figures.history && data.figures.history.panels || []).filter((p) => p.metric === metric);
    if (!panels.length) throw new Error(`no history panel for ${metric}`);
    for (const p of panels)
      lineChart(panel(fig), {title: p.title, xLabel: "run (in the order appended)", yLabel: metric,
                             y: metric === "peak_bytes" ? "bytes" : metric === "median_s" ? "seconds" : "plain",
                             yZero: false, series: p.series.map((s) => ({label: s.label, points: zip(s.x, s.y)}))});
  }

  // ---- the memory timeline --------------------------------------------------------------------------------
  // tl: {title, categories, t_ms, live, by_category, phases: [{name, begin_ms, end_ms, depth}], peak: {index,
  //      t_ms, bytes, phase}, estimate_bytes, budget_bytes, points_total, links: [{label, href}]}
  function timelineChart(box, tl) {
    const W = 1000, H = 420, rowH = 16, rows = Math.min(3, 1 + Math.max(0, ...tl.phases.map((p) => p.depth)));
    const m = {l: 64, r: 12, t: 30, b: 40 + rows * (rowH + 2)};
    const cats = tl.categories.filter((c) => tl.by_category[c].some((v) => v > 0));
    const t = tl.t_ms, n = t.length;
    // Cumulative bytes per category, bottom (longest-lived) first: level[k][i] = sum of categories 0..k.
    const level = [];
    cats.forEach((c, k) => level.push(tl.by_category[c].map((v, i) => v + (k ? level[k - 1][i] : 0))));
    const top = Math.max(tl.peak.bytes, tl.estimate_bytes || 0, tl.budget_bytes && tl.budget_bytes < 2 * tl.peak.bytes ? tl.budget_bytes : 0) * 1.1 || 1;
    const unit = byteUnit(top);
    const full = [t[0], t[n - 1] > t[0] ? t[n - 1] : t[0] + 1];
    let domain = full.slice();

    const head = document.createElement("div");
    head.className = "bp-panel-title";
    head.textContent = tl.title;
    box.appendChild(head);
    const svg = svgEl("svg", {viewBox: `0 0 ${W} ${H}`, class: "bp-chart bp-timeline", role: "img",
                              "data-cell": tl.cell}, box);
    svgEl("title", {}, svg).textContent = tl.title;
    const clipId = "clip-" + Math.random().toString(36).slice(2);
    svgEl("rect", {x: m.l, y: m.t, width: W - m.l - m.r, height: H - m.t - m.b}, svgEl("clipPath", {id: clipId}, svgEl("defs", {}, svg)));
    const layer = svgEl("g", {}, svg);
    const info = document.createElement("div");
    info.className = "bp-timeline-info";
    box.appendChild(info);

    function innermostPhase(at) {
      let best = null;
      for (const p of tl.phases)
        if (p.begin_ms <= at && at <= p.end_ms && (!best || p.depth > best.depth)) best = p;  // the first deepest, as report.md
      return best;
    }
    function pointAt(at) {  // the last point at or before `at` (live bytes hold until the next point)
      let lo = 0, hi = n - 1;
      while (lo < hi) { const mid = (lo + hi + 1) >> 1; if (t[mid] <= at) lo = mid; else hi = mid - 1; }
      return lo;
    }
    function draw() {
      layer.textContent = "";
      hideTip();
      const x = linear(domain[0], domain[1], m.l, W - m.r), y = linear(0, top, H - m.b, m.t);
      svg.dataset.domain = `${domain[0]},${domain[1]}`;
      for (const v of byteTicks(top)) {
        svgEl("line", {x1: m.l, x2: W - m.r, y1: y(v), y2: y(v), class: "bp-grid"}, layer);
        text(layer, m.l - 6, y(v) + 4, (v / unit.div).toFixed(unit.digits), {"text-anchor": "end", class: "bp-tick"});
      }
      for (const v of niceTicks(domain[0], domain[1], 8))
        if (x(v) <= W - m.r - 24)  // a label at the right edge would be cut
          text(layer, x(v), H - m.b + 14, ms(v), {"text-anchor": "middle", class: "bp-tick"});
      text(layer, 14, (m.t + H - m.b) / 2, `live memory (${unit.label})`,
           {"text-anchor": "middle", class: "bp-label", transform: `rotate(-90 14 ${(m.t + H - m.b) / 2})`});
      // The areas: each cumulative level filled down to zero, the highest first, so each band shows its own.
      const plot = svgEl("g", {"clip-path": `url(#${clipId})`}, layer);
      const first = Math.max(0, pointAt(domain[0])), last = Math.min(n - 1, pointAt(domain[1]) + 1);
      for (let k = cats.length - 1; k >= 0; --k) {
        let d = `M${x(t[first]).toFixed(1)},${y(0)}`;
        for (let i = first; i <= last; ++i) {
          const xi = x(t[i]).toFixed(1), yi = y(level[k][i]).toFixed(1);
          d += `L${xi},${i > first ? y(level[k][i - 1]).toFixed(1) : y(0)}L${xi},${yi}`;
        }
        d += `L${(W - m.r).toFixed(1)},${y(level[k][last]).toFixed(1)}L${(W - m.r).toFixed(1)},${y(0)}Z`;
        svgEl("path", {d: d, fill: CATEGORY_COLOURS[cats[k]] || COLOURS[k % COLOURS.length], class: "bp-area"}, plot);
      }
      // The peak, and the estimate beside it.
      const px = x(tl.peak.t_ms), py = y(tl.peak.bytes);
      svgEl("line", {x1: m.l, x2: W - m.r, y1: py, y2: py, class: "bp-peak-line"}, layer);
      if (px >= m.l && px <= W - m.r) svgEl("circle", {cx: px, cy: py, r: 5, class: "bp-peak"}, layer);
      text(layer, m.l + 4, py - 5, `peak ${bytes(tl.peak.bytes)}`, {class: "bp-tick bp-strong"});
      if (tl.estimate_bytes) {
        const ey = y(tl.estimate_bytes);
        svgEl("line", {x1: m.l, x2: W - m.r, y1: ey, y2: ey, class: "bp-estimate-line"}, layer);
        const off = tl.estimate_bytes - tl.peak.bytes;
        const against = off === 0 ? "equal to the peak" : `${off > 0 ? "+" : "−"}${bytes(Math.abs(off))} against the peak`;
        text(layer, W - m.r - 4, ey - 5, `estimate ${bytes(tl.estimate_bytes)} (${against})`,
             {"text-anchor": "end", class: "bp-tick"});
      }
      svgEl("line", {x1: m.l, x2: W - m.r, y1: H - m.b, y2: H - m.b, class: "bp-axis"}, layer);
      svgEl("line", {x1: m.l, x2: m.l, y1: m.t, y2: H - m.b, class: "bp-axis"}, layer);
      // Phase rows under the axis, outermost first; a click zooms to the phase.
      const rowsG = svgEl("g", {"clip-path": `url(#${clipId}-rows)`}, layer);
      svgEl("rect", {x: m.l, y: 0, width: W - m.l - m.r, height: H}, svgEl("clipPath", {id: `${clipId}-rows`}, layer));
      tl.phases.forEach((p, k) => {
        if (p.depth >= rows || p.end_ms < domain[0] || p.begin_ms > domain[1]) return;
        const x0 = Math.max(m.l, x(p.begin_ms)), x1 = Math.min(W - m.r, x(p.end_ms));
        const ry = H - m.b + 22 + p.depth * (rowH + 2);
        const r = svgEl("rect", {x: x0, y: ry, width: Math.max(1, x1 - x0), height: rowH,
                                 class: `bp-phase bp-phase-${(k + p.depth) % 2}`, "data-phase": p.name}, rowsG);
        if (x1 - x0 > 7 * p.name.length) text(rowsG, (x0 + x1) / 2, ry + 12, p.name, {"text-anchor": "middle", class: "bp-phase-label"});
        r.addEventListener("mousemove", (e) => showTip(e, `<b>${esc(p.name)}</b><br>${ms(p.begin_ms)} to ${ms(p.end_ms)}<br>click to zoom`));
        r.addEventListener("mouseleave", hideTip);
        r.addEventListener("click", () => { domain = [p.begin_ms, Math.max(p.end_ms, p.begin_ms + 1e-6)]; draw(); });
      });
      // Hover anywhere over the plot: a guide at the time, and what was live then. Near the peak it snaps
      // to the peak, the moment most readers look for.
      const guide = svgEl("line", {y1: m.t, y2: H - m.b, class: "bp-guide", visibility: "hidden"}, layer);
      const hit = svgEl("rect", {x: m.l, y: m.t, width: W - m.l - m.r, height: H - m.t - m.b, class: "bp-hit"}, layer);
      hit.addEventListener("mousemove", (e) => {
        const box = svg.getBoundingClientRect(), sx = ((e.clientX - box.left) / box.width) * W;
        let i = pointAt(x.invert(sx));
        if (Math.abs(sx - px) <= 4) i = tl.peak.index;
        const at = t[i], ph = innermostPhase(at);
        guide.setAttribute("x1", x(at)); guide.setAttribute("x2", x(at)); guide.setAttribute("visibility", "visible");
        let html = `<b>t = ${ms(at)}</b>${i === tl.peak.index ? " (the peak)" : ""}<br>phase: <b class="bp-tip-phase">${esc(ph ? ph.name : "(none)")}</b><table>`;
        for (let k = cats.length - 1; k >= 0; --k)
          html += `<tr><td><span class="bp-swatch" style="background:${CATEGORY_COLOURS[cats[k]] || COLOURS[k % COLOURS.length]}"></span>${esc(cats[k])}</td><td class="num">${bytes(tl.by_category[cats[k]][i])}</td></tr>`;
        html += `<tr class="bp-total"><td>total</td><td class="num">${bytes(tl.live[i])}</td></tr></table><span class="bp-muted">${exactBytes(tl.live[i])}</span>`;
        showTip(e, html);
      });
      hit.addEventListener("mouseleave", () => { hideTip(); guide.setAttribute("visibility", "hidden"); });
      const zoomed = domain[0] !== full[0] || domain[1] !== full[1];
      info.innerHTML = `${zoomed ? `zoomed to ${ms(domain[0])}–${ms(domain[1])} · ` : ""}` +
        `${tl.t_ms.length} of ${tl.points_total} points drawn (the lowest and highest of each pixel column, the peak exactly)` +
        `; peak ${bytes(tl.peak.bytes)} at ${ms(tl.peak.t_ms)}${tl.peak.phase ? ` in “${esc(tl.peak.phase)}”` : ""}` +
        (tl.links && tl.links.length ? " · " + tl.links.map((l) => `<a href="${esc(l.href)}">${esc(l.label)}</a>`).join(" · ") : "");
      if (zoomed) {
        const reset = document.createElement("button");
        reset.textContent = "show the whole step";
        reset.className = "bp-reset";
        reset.addEventListener("click", () => { domain = full.slice(); draw(); });
        info.prepend(reset);
      }
    }
    draw();
    legend(box, cats.map((c, k) => ({label: c, colour: CATEGORY_COLOURS[c] || COLOURS[k % COLOURS.length]})));
  }

  // ---- sortable tables ------------------------------------------------------------------------------------
  const UNITS = {B: 1, KiB: KIB, MiB: MIB, GiB: GIB, TiB: GIB * 1024, k: 1e3, M: 1e6, ms: 1e-3, s: 1, "%": 1, "×": 1, x: 1};
  function sortKey(s) {
    const m = /^\s*\**([-+−]?\d[\d,]*(?:\.\d+)?(?:e[-+]?\d+)?)\s*(B|KiB|MiB|GiB|TiB|k|M|ms|s|%|×|x)?/.exec(s);
    if (!m) return null;
    return parseFloat(m[1].replace(/,/g, "").replace("−", "-")) * (UNITS[m[2]] || 1);
  }
  function sortable(table) {
    const heads = table.tHead ? Array.from(table.tHead.rows[0].cells) : [];
    heads.forEach((th, col) => {
      th.classList.add("bp-sortable");
      th.title = "sort by this column";
      th.addEventListener("click", () => {
        const dir = th.getAttribute("aria-sort") === "ascending" ? -1 : 1;
        heads.forEach((h) => h.removeAttribute("aria-sort"));
        th.setAttribute("aria-sort", dir > 0 ? "ascending" : "descending");
        const body = table.tBodies[0];
        const rows = Array.from(body.rows).map((r, i) => ({r: r, i: i, text: r.cells[col] ? r.cells[col].textContent : ""}));
        rows.forEach((x) => { x.key = sortKey(x.text); });
        rows.sort((a, b) => {
          // Numbers before words; "–" (nothing measured) last either way.
          if ((a.text.trim() === "–") !== (b.text.trim() === "–")) return a.text.trim() === "–" ? 1 : -1;
          if ((a.key === null) !== (b.key === null)) return a.key === null ? 1 : -1;
          const c = a.key !== null ? a.key - b.key : a.text.localeCompare(b.text);
          return c ? c * dir : a.i - b.i;
        });
        for (const x of rows) body.appendChild(x.r);
      });
    });
  }

  // ---- the page -------------------------------------------------------------------------------------------
  function main() {
    const data = JSON.parse(document.getElementById("bp-data").textContent);
    document.querySelectorAll("table.bp-table").forEach(sortable);
    document.querySelectorAll("figure.bp-figure").forEach((fig) => {
      const name = fig.dataset.figure;
      try {
        if (name.startsWith("history_")) historyFigure(fig, name.slice("history_".length), data);
        else if (FIGURES[name] && (data.figures[name] || name === "timeline")) FIGURES[name](fig, data.figures[name], data);
        else throw new Error(`no data for the figure "${name}"`);
      } catch (err) {
        const p = document.createElement("p");
        p.className = "bp-error";
        p.textContent = `This figure could not be drawn: ${err.message}`;
        fig.appendChild(p);
        console.error(`bpbench: figure ${name}: ${err.stack || err}`);
      }
    });
    window.bpReady = true;
  }
  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", main);
  else main();
})();
