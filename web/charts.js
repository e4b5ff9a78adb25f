// Charts of the web UI on Chart.js 3 (Debian's libjs-chart.js, served by the
// collector): curves that keep the server's min/max envelope, percentile
// bands, histograms offset by step, one step's histogram. Every chart made is
// in window.tkCharts (the browser test counts them and their datasets).
"use strict";
(function () {
  const PALETTE = ["#2358c4", "#d9480f", "#2b8a3e", "#ae3ec9", "#e8590c", "#0b7285", "#c92a2a",
                   "#5f3dc4", "#862e9c", "#087f5b", "#a61e4d", "#364fc7", "#5c940d", "#e67700"];
  window.tkCharts = new Set();

  function color(i, alpha) {
    const c = PALETTE[i % PALETTE.length];
    if (alpha === undefined) return c;
    const n = parseInt(c.slice(1), 16);
    return `rgba(${n >> 16},${(n >> 8) & 255},${n & 255},${alpha})`;
  }

  // A series bucket keeps its lowest and highest value and their steps: draw
  // both, in step order, so a spike is never hidden by the downsampling.
  function envelopePoints(s, logY) {
    const pts = [];
    for (let i = 0; i < s.step.length; i++) {
      if (s.min[i] === null || s.max[i] === null) continue;
      const a = {x: s.min_step[i], y: s.min[i]}, b = {x: s.max_step[i], y: s.max[i]};
      if (a.x === b.x && a.y === b.y) pts.push(a);
      else if (a.x <= b.x) pts.push(a, b);
      else pts.push(b, a);
    }
    return logY ? pts.filter((p) => p.y > 0) : pts;
  }

  function make(canvas, config) {
    const old = Chart.getChart(canvas);
    if (old) { window.tkCharts.delete(old); old.destroy(); }
    config.options = Object.assign({animation: false, responsive: true, maintainAspectRatio: false,
                                    parsing: false, normalized: true}, config.options || {});
    const chart = new Chart(canvas, config);
    window.tkCharts.add(chart);
    return chart;
  }

  // Drag across a chart to zoom on a step range, double-click to reset. While
  // dragging, a box (div.zoom-box over the canvas, its data-from / data-to the
  // steps it spans) shows the range that will be fetched; Escape or leaving
  // the page's window cancels it.
  function dragZoom(canvas, onZoom) {
    if (!onZoom || canvas.dataset.zoom) return;
    canvas.dataset.zoom = "1";
    let start = null, box = null;
    const steps = (chart, a, b) => [Math.max(0, Math.floor(chart.scales.x.getValueForPixel(Math.min(a, b)))),
                                    Math.ceil(chart.scales.x.getValueForPixel(Math.max(a, b))) + 1];
    const clear = () => { start = null; if (box) { box.remove(); box = null; } };
    const inArea = (chart, x) => Math.min(Math.max(x, chart.chartArea.left), chart.chartArea.right);
    canvas.addEventListener("mousedown", (e) => {
      const chart = Chart.getChart(canvas);
      if (e.button !== 0 || !chart) return;
      clear();
      start = inArea(chart, e.offsetX);
    });
    canvas.addEventListener("mousemove", (e) => {
      const chart = Chart.getChart(canvas);
      if (start === null || !chart) return;
      const x = inArea(chart, e.offsetX);
      if (!box && Math.abs(x - start) < 3) return;
      if (!box) {
        box = document.createElement("div");
        box.className = "zoom-box";
        canvas.parentElement.append(box);
      }
      const area = chart.chartArea;
      const [from, to] = steps(chart, start, x);
      Object.assign(box.style, {left: `${canvas.offsetLeft + Math.min(start, x)}px`, width: `${Math.abs(x - start)}px`,
                                top: `${canvas.offsetTop + area.top}px`, height: `${area.bottom - area.top}px`});
      box.dataset.from = from;
      box.dataset.to = to;
      box.title = `steps ${from} to ${to - 1}`;
    });
    canvas.addEventListener("mouseup", (e) => {
      const chart = Chart.getChart(canvas);
      if (start === null || !chart) { clear(); return; }
      const x = inArea(chart, e.offsetX);
      const far = Math.abs(x - start) >= 6;
      const [from, to] = steps(chart, start, x);
      clear();
      if (far) onZoom(from, to);
    });
    canvas.addEventListener("mouseleave", (e) => { if (!(e.buttons & 1)) clear(); });
    window.addEventListener("keydown", (e) => { if (e.key === "Escape") clear(); });
    window.addEventListener("blur", clear);
    window.addEventListener("mouseup", () => { if (start !== null) clear(); });  // released elsewhere
    canvas.addEventListener("dblclick", () => onZoom(null, null));
  }

  // 1e-5 rather than 1.0000000000000E-5; linear ticks with as many decimals
  // as their spacing needs (2.2995, 2.3, 1234, 1.2e+6).
  function tick(v, ticks) {
    const a = Math.abs(v);
    if (a === 0) return "0";
    if (a < 1e-3 || a >= 1e5) return v.toExponential(1).replace(/\.0e/, "e");
    const gap = ticks && ticks.length > 1 ? Math.abs(ticks[1].value - ticks[0].value) : 0;
    const decimals = gap > 0 ? Math.min(8, Math.max(0, -Math.floor(Math.log10(gap)) + 1)) : 3;
    return String(Number(v.toFixed(decimals)));
  }
  // A log axis labels its powers of ten only (it has minor ticks between).
  const powerOfTen = (v) => v > 0 && Math.abs(Math.log10(v) - Math.round(Math.log10(v))) < 1e-9;
  const valueAxis = (type, title) => ({type, title: {display: !!title, text: title},
                                       ticks: {callback: (v, i, ticks) => (type === "linear" ? tick(Number(v), ticks)
                                         : powerOfTen(Number(v)) ? tick(Number(v)) : "")}});

  function stepAxis(title) {
    return {type: "linear", title: {display: true, text: title || "step"}, ticks: {precision: 0}};
  }

  // lines: [{label, series (an API series object)}]
  function curves(canvas, lines, opts) {
    opts = opts || {};
    const datasets = lines.map((l, i) => ({
      label: l.label, data: envelopePoints(l.series, opts.logY), borderColor: color(i),
      backgroundColor: color(i, 0.2), borderWidth: 1.5, tension: 0,
      spanGaps: true}));
    // A curve of a single step would not show without its point.
    for (const d of datasets) d.pointRadius = d.data.length < 2 ? 3 : 0;
    dragZoom(canvas, opts.onZoom);
    return make(canvas, {
      type: "line", data: {datasets},
      options: {
        interaction: {mode: "nearest", axis: "x", intersect: false},
        plugins: {legend: {display: lines.length > 1, position: "bottom", labels: {boxWidth: 12}},
                  title: {display: !!opts.title, text: opts.title}},
        scales: {x: stepAxis(), y: valueAxis(opts.logY ? "logarithmic" : "linear", opts.yTitle)}}});
  }

  // TensorBoard's Distributions: bands between symmetric percentiles, darker
  // toward the median, from the API's `bands`.
  function bands(canvas, d, opts) {
    opts = opts || {};
    const k = d.percentiles.length, mid = (k - 1) / 2, base = opts.colorIndex || 0;
    const datasets = [];
    for (let j = 0; j < k; j++) {
      datasets.push({
        label: `p${d.percentiles[j]}`,
        data: d.step.map((s, i) => ({x: s, y: d.bands[i][j]})).filter((p) => p.y !== null),
        borderColor: j === mid ? color(base) : color(base, 0.25), borderWidth: j === mid ? 1.5 : 0.5,
        pointRadius: d.step.length < 2 ? 2 : 0, fill: j === 0 ? false : "-1",
        // the band between percentiles j-1 and j: darker toward the median
        backgroundColor: color(base, 0.08 + 0.1 * Math.min(j, k - j))});
    }
    dragZoom(canvas, opts.onZoom);
    return make(canvas, {
      type: "line", data: {datasets},
      options: {plugins: {legend: {display: false}, title: {display: !!opts.title, text: opts.title},
                          tooltip: {mode: "index", intersect: false}},
                scales: {x: stepAxis(), y: valueAxis("linear", "value")}}});
  }

  // TensorBoard's Histograms: each step's histogram as a ridge offset by its
  // step (older further up), on the shared bins of the API's `edges`.
  function ridges(canvas, d, opts) {
    opts = opts || {};
    const n = d.step.length, stride = Math.max(1, Math.ceil(n / 25));
    const centres = d.edges.slice(0, -1).map((e, i) => (e + d.edges[i + 1]) / 2);
    let peak = 0;
    for (const h of d.histograms) for (const c of h) peak = Math.max(peak, c);
    const gap = peak > 0 ? peak * 0.35 : 1;
    const datasets = [];
    const picked = [];
    for (let i = 0; i < n; i += stride) picked.push(i);
    if (picked[picked.length - 1] !== n - 1 && n > 0) picked.push(n - 1);
    picked.forEach((i, r) => {
      const offset = (picked.length - 1 - r) * gap;
      const shade = 0.25 + 0.75 * (r / Math.max(1, picked.length - 1));
      datasets.push({
        label: `step ${d.step[i]}`, data: centres.map((x, b) => ({x, y: offset + d.histograms[i][b]})),
        borderColor: color(opts.colorIndex || 0, shade), borderWidth: 1, pointRadius: 0,
        fill: {value: offset}, backgroundColor: color(opts.colorIndex || 0, 0.08), tension: 0.2});
    });
    return make(canvas, {
      type: "line", data: {datasets},
      options: {plugins: {legend: {display: false}, title: {display: !!opts.title, text: opts.title},
                          tooltip: {callbacks: {label: (c) => c.dataset.label}}},
                scales: {x: valueAxis("linear", "value"), y: {display: false}}}});
  }

  // One step's histogram per worker: hs = [{label, h (API histogram)}].
  function histogram(canvas, hs, opts) {
    opts = opts || {};
    const datasets = hs.map((o, i) => {
      const e = o.h.edges;
      return {label: o.label, data: o.h.counts.map((c, b) => ({x: (e[b] + e[b + 1]) / 2, y: c})),
              backgroundColor: color(i, 0.55), borderColor: color(i), borderWidth: 1,
              barPercentage: 1, categoryPercentage: 1};
    });
    return make(canvas, {
      type: "bar", data: {datasets},
      options: {plugins: {legend: {display: hs.length > 1, position: "bottom"},
                          title: {display: !!opts.title, text: opts.title}},
                scales: {x: Object.assign(valueAxis("linear", "value"), {offset: false}),
                         y: {title: {display: true, text: "elements"}, beginAtZero: true}}}});
  }

  window.TK = {color, envelopePoints, curves, bands, ridges, histogram};
})();
