// The web UI's pages (docs/web-ui.md), served by tensorkeep-server on its
// --http-listen port and reading only its JSON API (docs/http-api.md):
//   /                     the trials, live
//   /trial/NAME           a trial: workers, rules, stop request, curves,
//                         per-layer reductions, distributions, one step's histogram
//   /compare?trials=A,B   two or more trials on the same plots
// Live updates come from /api/v1/events (server-sent events, read with fetch()
// so that the token can go in the Authorization header). With --auth-tokens
// the page asks for a token and keeps it in sessionStorage (this tab only).
// Everything from the collector is put in the page as text, never as HTML.
"use strict";
(function () {
  const TOKEN_KEY = "tensorkeep-token";
  const MAX_STREAMS = 4;  // of the collector's MAX_EVENT_STREAMS (8), per page
  const main = document.getElementById("main");
  const enc = encodeURIComponent;

  class AuthError extends Error {}

  // ---- DOM ------------------------------------------------------------------
  function el(tag, attrs, ...children) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "on") for (const [ev, f] of Object.entries(v)) e.addEventListener(ev, f);
      else if (k in e && typeof v !== "string") e[k] = v;
      else e.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      e.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return e;
  }
  const badge = (state, text) => el("span", {class: `badge s-${state}`}, text || state);
  const fmt = (x) => (x === null || x === undefined || x === -1 ? "–" : typeof x === "number" && !Number.isInteger(x)
    ? x.toPrecision(4) : String(x));
  const when = (unix) => (unix ? new Date(unix * 1000).toLocaleString() : "");
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  // ---- the API --------------------------------------------------------------
  function authHeaders(extra) {
    const h = Object.assign({}, extra || {});
    const t = sessionStorage.getItem(TOKEN_KEY);
    if (t) h.Authorization = `Bearer ${t}`;
    return h;
  }

  async function api(path, params) {
    const url = new URL(path, location.origin);
    for (const [k, v] of Object.entries(params || {})) {
      if (v !== undefined && v !== null && v !== "") url.searchParams.set(k, v);
    }
    const r = await fetch(url, {headers: authHeaders(), cache: "no-store"});
    const body = await r.json().catch(() => null);
    const msg = body && body.error ? body.error.message : `${r.status} ${r.statusText}`;
    if (r.status === 401) throw new AuthError(msg);
    if (!r.ok) throw new Error(msg);
    return body;
  }

  function askToken(message) {
    streams.closeAll();
    const form = document.getElementById("token-form").content.firstElementChild.cloneNode(true);
    if (sessionStorage.getItem(TOKEN_KEY)) {
      form.querySelector("#token-error").textContent = `The collector refused the token: ${message}`;
      sessionStorage.removeItem(TOKEN_KEY);
    }
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      sessionStorage.setItem(TOKEN_KEY, form.elements.token.value.trim());
      location.reload();
    });
    main.replaceChildren(form);
    document.body.dataset.state = "token";
    form.elements.token.focus();
  }

  // ---- live updates: server-sent events over fetch() --------------------------
  const streams = {
    open: new Set(),
    closeAll() { for (const s of this.open) s.close(); this.open.clear(); this.show(); },
    show() {
      const live = document.getElementById("live");
      let on = 0;
      for (const s of this.open) if (s.connected) on++;
      live.className = on ? "live on" : "live";
      live.textContent = on ? `live (${on})` : this.open.size ? "reconnecting…" : "";
    },
  };

  // Calls handlers[event](data) with each event of the stream at `path`
  // (/api/v1/events?trial=NAME: `trial`; /api/v1/events: `trials`, `trial`,
  // `removed`); reconnects after the server's `retry` (a stream ends after
  // 10 minutes), and a reconnected stream starts again with its snapshot.
  function listen(path, handlers) {
    const ctl = new AbortController();
    const s = {connected: false, close() { ctl.abort(); s.connected = false; }};
    streams.open.add(s);
    let retry = 2000;
    const handle = (block) => {
      let event = "message", data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith(":")) continue;
        const colon = line.indexOf(":");
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
        if (field === "event") event = value;
        else if (field === "data") data.push(value);
        else if (field === "retry" && /^\d+$/.test(value)) retry = Number(value);
      }
      if (handlers[event] && data.length) handlers[event](JSON.parse(data.join("\n")));
    };
    (async () => {
      while (!ctl.signal.aborted) {
        try {
          const r = await fetch(path, {
            headers: authHeaders({Accept: "text/event-stream"}), signal: ctl.signal, cache: "no-store"});
          if (r.status === 401) { askToken("401"); return; }
          if (r.ok) {
            s.connected = true; streams.show();
            const reader = r.body.getReader(), dec = new TextDecoder();
            let buf = "";
            for (;;) {
              const {value, done} = await reader.read();
              if (done) break;
              buf += dec.decode(value, {stream: true}).replace(/\r\n?/g, "\n");
              let i;
              while ((i = buf.indexOf("\n\n")) >= 0) { handle(buf.slice(0, i)); buf = buf.slice(i + 2); }
            }
          } else {
            await r.text();  // 429: too many streams; 404: trial gone
            if (r.status === 404) return;
          }
        } catch (e) {
          if (ctl.signal.aborted) return;
        }
        s.connected = false; streams.show();
        await sleep(r429Backoff(retry));
      }
    })();
    return s;
  }
  // One trial's events: onTrial(trial) at once and at each change.
  const watch = (trial, onTrial) => listen(`/api/v1/events?trial=${enc(trial)}`, {trial: onTrial});
  const r429Backoff = (retry) => Math.max(1000, Math.min(retry, 30000));

  // Runs fn at most once per `ms`, never twice at once; calls while it runs
  // queue one more run.
  function throttle(fn, ms) {
    let running = false, again = false, last = 0;
    const run = async () => {
      if (running) { again = true; return; }
      running = true;
      const wait = last + ms - Date.now();
      if (wait > 0) await sleep(wait);
      last = Date.now();
      try { await fn(); } finally {
        running = false;
        if (again) { again = false; run(); }
      }
    };
    return run;
  }

  // ---- pieces shared by the pages --------------------------------------------
  function workersText(t) {
    const by = {};
    for (const w of t.workers) by[w.state] = (by[w.state] || 0) + 1;
    return Object.entries(by).map(([s, n]) => badge(s, `${n} ${s}`));
  }
  function ruleBadges(t) {
    return t.rules.map((r) => badge(r.state, r.state === "ISSUES_FOUND"
      ? `${r.rule}: fired at step ${r.step}` : `${r.rule}: ${r.state.replace(/_/g, " ").toLowerCase()}`));
  }
  function stepsText(t) {
    return t.num_steps ? `${t.num_steps} steps, last ${t.last_step}` : "no steps yet";
  }

  function select(name, options, value, onChange) {
    const s = el("select", {name, on: {change: () => onChange(s.value)}},
      options.map((o) => (Array.isArray(o) ? el("option", {value: o[0]}, o[1]) : el("option", {value: o}, o))));
    s.value = value;
    return s;
  }
  function checkbox(name, label, checked, onChange) {
    const c = el("input", {type: "checkbox", name, checked, on: {change: () => onChange(c.checked)}});
    return el("label", {}, c, " ", label);
  }
  const REDUCTIONS = ["mean", "min", "max", "std", "variance", "l1", "l2", "sum"];

  // The step range every chart of a page shows: drag on a chart to zoom
  // (full resolution once the range holds fewer steps than points), reset.
  function zoomControls(state, refresh) {
    const from = el("input", {type: "number", min: 0, name: "from", placeholder: "first"});
    const to = el("input", {type: "number", min: 0, name: "to", placeholder: "last"});
    const sync = () => { from.value = state.from ?? ""; to.value = state.to ?? ""; };
    const apply = () => {
      state.from = from.value === "" ? null : Number(from.value);
      state.to = to.value === "" ? null : Number(to.value);
      refresh();
    };
    state.zoom = (a, b) => { state.from = a; state.to = b; sync(); refresh(); };
    return el("span", {class: "controls"}, el("label", {}, "steps from "), from, el("label", {}, " to "), to,
      el("button", {type: "button", on: {click: apply}}, "zoom"),
      el("button", {type: "button", on: {click: () => state.zoom(null, null)}}, "all steps"),
      el("span", {class: "note"}, "drag on a chart to zoom, double-click to reset"));
  }
  const range = (state) => ({from: state.from ?? undefined, to: state.to ?? undefined});

  function panel(title, ...children) {
    return el("section", {class: "card"}, el("h2", {}, title), ...children);
  }
  function failing(note, e) {
    if (e instanceof AuthError) throw e;
    note.textContent = e.message;
    note.className = "note error";
  }

  // ---- the trials -------------------------------------------------------------
  async function trialsPage() {
    document.title = "tensorkeep: trials";
    const {trials} = await api("/api/v1/trials");
    const rows = new Map();
    const body = el("tbody");
    const table = el("table", {id: "trials"}, el("thead", {}, el("tr", {},
      ["", "trial", "state", "workers", "steps", "rules", "stop"].map((h) => el("th", {}, h)))), body);
    const empty = el("p", {class: "muted", id: "no-trials"}, "No trials yet: push one (README, the tour).");
    const shown = () => { table.hidden = rows.size === 0; empty.hidden = rows.size > 0; };
    const row = (t) => {
      const tr = el("tr", {class: "trial", "data-trial": t.name, "data-last-step": t.last_step,
                           "data-state": t.state},
        el("td", {}, el("input", {type: "checkbox", name: "pick", value: t.name})),
        el("td", {}, el("a", {href: `/trial/${enc(t.name)}`}, t.name)),
        el("td", {}, badge(t.state)),
        el("td", {}, workersText(t)),
        el("td", {class: "steps"}, stepsText(t)),
        el("td", {}, t.rules.length ? ruleBadges(t) : el("span", {class: "muted"}, "none")),
        el("td", {}, t.stop_requested ? badge("STOP", `stop: ${t.stop_reason || "requested"}`) : ""));
      const old = rows.get(t.name);
      if (old) {
        tr.querySelector("input").checked = old.querySelector("input").checked;
        old.replaceWith(tr);
      } else {
        // In name order, as the collector lists them.
        const next = [...rows.keys()].filter((n) => n > t.name).sort()[0];
        body.insertBefore(tr, next === undefined ? null : rows.get(next));
      }
      rows.set(t.name, tr);
      shown();
    };
    const removed = ({name}) => {
      const tr = rows.get(name);
      if (tr) { tr.remove(); rows.delete(name); shown(); }
    };
    trials.forEach(row);
    shown();
    const compare = el("button", {type: "button", on: {click: () => {
      const picked = [...body.querySelectorAll("input[name=pick]:checked")].map((c) => c.value);
      if (picked.length >= 2) location.href = `/compare?trials=${picked.map(enc).join(",")}`;
      else alert("Pick two or more trials to compare.");
    }}}, "compare the picked trials");
    main.replaceChildren(el("h1", {}, "Trials"), el("section", {class: "card"}, table, empty, el("p", {}, compare)));
    // Live: one stream of every trial's changes (new trials, steps, workers,
    // rules, ends); its first event is the whole list again (after a reconnect
    // too), so rows of trials deleted meanwhile go.
    listen("/api/v1/events", {
      trials: ({trials: all}) => {
        const names = new Set(all.map((t) => t.name));
        for (const name of [...rows.keys()]) if (!names.has(name)) removed({name});
        all.forEach(row);
      },
      trial: row,
      removed,
    });
  }

  // A collection's save config (null: the hook's default) and reductions, as text.
  const MODES = ["TRAIN", "EVAL", "PREDICT", "GLOBAL"];
  function saveConfigText(sc) {
    if (!sc) return "hook's default";
    const one = (m) => [`every ${m.save_interval} from ${m.start_step}`,
      m.end_step === null ? "" : ` to ${m.end_step}`,
      m.save_steps.length ? `, and steps ${m.save_steps.join(", ")}` : ""].join("");
    const modes = MODES.filter((m) => sc[m]);
    const texts = modes.map((m) => one(sc[m]));
    if (modes.length === MODES.length && texts.every((t) => t === texts[0])) return `every mode: ${texts[0]}`;
    return modes.map((m, i) => `${m}: ${texts[i]}`).join("; ");
  }
  function reductionText(rc) {
    if (!rc) return "hook's default";
    const parts = [...rc.reductions, ...rc.norms.map((n) => `${n} norm`),
      ...rc.abs_reductions.map((r) => `abs ${r}`), ...rc.abs_norms.map((n) => `abs ${n} norm`)];
    return [parts.length ? parts.join(", ") : "none", rc.save_raw_tensor ? "; raw tensor saved" : "; raw tensor not saved",
      rc.save_shape ? "; shape saved" : ""].join("");
  }
  function collectionRow(c) {
    return el("tr", {class: "collection", "data-name": c.name, "data-tensors": c.tensors},
      el("td", {}, c.name), el("td", {}, c.tensors),
      el("td", {class: "regex"}, c.include_regex.length ? c.include_regex.join("  ") : "–"),
      el("td", {class: "save"}, c.configured ? saveConfigText(c.save_config) : "–"),
      el("td", {class: "reductions"}, c.configured ? reductionText(c.reduction_config) : "–"),
      el("td", {}, c.configured ? c.configured_by.join(", ") : el("span", {class: "muted"}, "not configured")));
  }

  // ---- one trial --------------------------------------------------------------
  async function trialPage(name) {
    document.title = `tensorkeep: ${name}`;
    const info = await api(`/api/v1/trials/${enc(name)}`);
    const base = `/api/v1/trials/${enc(name)}`;
    // The collections tensors were saved in (configured ones may be empty).
    const collections = info.collections.filter((c) => c.tensors > 0).map((c) => c.name);
    const state = {worker: "", mode: "", from: null, to: null, collection: collections.includes("gradients")
      ? "gradients" : collections[0] || "", reduction: "mean", abs: true, logY: true, tensor: "", step: null};
    let trial = info.trial;

    const header = el("div");
    const workers = el("tbody"), rules = el("tbody"), collectionRows = el("tbody");
    const showCollections = (list) => collectionRows.replaceChildren(...(list.length ? list.map(collectionRow)
      : [el("tr", {}, el("td", {colspan: 6, class: "muted"}, "No collection yet."))]));
    showCollections(info.collections);
    // Collections change as a job saves (and when its hook closes): read again with the steps.
    const drawCollections = throttle(async () => {
      try {
        showCollections((await api(base)).collections);
      } catch (e) {
        if (e instanceof AuthError) askToken(e.message);
      }
    }, 1000);
    const showTrial = (t) => {
      trial = t;
      header.replaceChildren(
        el("h1", {}, t.name, " ", badge(t.state)),
        el("p", {id: "trial-steps", "data-last-step": t.last_step, "data-complete": t.complete_through},
          `${stepsText(t)}, complete through ${t.complete_through ?? "–"}; ${t.num_workers} workers, `,
          `${t.num_tensors} tensors; modes ${t.modes.join(", ") || "–"}`),
        t.stop_requested ? el("section", {class: "card stop", id: "stop"}, el("strong", {}, "Stop requested: "),
          t.stop_reason || "(no reason given)") : "");
      workers.replaceChildren(...t.workers.map((w) => el("tr", {},
        el("td", {}, w.worker), el("td", {}, badge(w.state)), el("td", {}, fmt(w.last_step)),
        el("td", {}, fmt(w.committed_through)), el("td", {}, w.connected ? "yes" : "no"),
        el("td", {}, [w.reason ? `${w.reason} (since ${when(w.since_unix)})` : "",
          w.attempt ? `attempt ${w.attempt} (restarted ${when(w.restarts.at(-1)?.started_unix ?? 0)})` : ""]
          .filter(Boolean).join("; ")))));
      rules.replaceChildren(...(t.rules.length ? t.rules.map((r) => el("tr", {class: "rule"},
        el("td", {}, r.rule), el("td", {}, badge(r.state)),
        el("td", {}, r.state === "ISSUES_FOUND" ? `fired at step ${r.step}` : fmt(r.step)),
        el("td", {}, fmt(r.last_evaluated_step)), el("td", {}, r.action || ""),
        el("td", {}, r.message), el("td", {}, when(r.updated_unix))))
        : [el("tr", {}, el("td", {colspan: 7, class: "muted"}, "No rule reported on this trial."))]));
    };
    showTrial(trial);

    const charts = {};
    const canvas = (id, tall) => el("div", {class: tall ? "chart tall" : "chart"}, charts[id] = el("canvas", {id}));
    const notes = {scalars: el("p", {class: "note"}), layers: el("p", {class: "note"}),
                   dist: el("p", {class: "note"}), hist: el("p", {class: "note"})};

    const workerOptions = [["", "first worker (default)"], ...trial.workers.map((w) => w.worker), ["*", "every worker"]];
    const modeOptions = [["", "every mode"], ...trial.modes];
    const tensorSelect = el("select", {name: "tensor", on: {change: () => { state.tensor = tensorSelect.value; state.step = null; drawDistributions(); }}});
    const slider = el("input", {type: "range", name: "step", min: 0, max: 0, value: 0});
    const sliderLabel = el("span", {class: "muted"});
    const distBox = el("div", {id: "distributions"});

    main.replaceChildren(header,
      el("div", {class: "grid"},
        panel("Workers", el("table", {}, el("thead", {}, el("tr", {}, ["worker", "state", "last step",
          "committed through", "connected", "lost"].map((h) => el("th", {}, h)))), workers)),
        panel("Rules", el("table", {}, el("thead", {}, el("tr", {}, ["rule", "state", "step",
          "last evaluated", "action", "message", "updated"].map((h) => el("th", {}, h)))), rules))),
      panel("Collections", el("table", {id: "collections"}, el("thead", {}, el("tr", {}, ["collection", "tensors",
        "include_regex", "saved (steps of each mode)", "reductions", "configured by"].map((h) => el("th", {}, h)))),
        collectionRows)),
      el("section", {class: "card controls"},
        el("label", {}, "worker "), select("worker", workerOptions, "", (v) => { state.worker = v; refresh(); }),
        el("label", {}, "mode "), select("mode", modeOptions, "", (v) => { state.mode = v; refresh(); }),
        zoomControls(state, () => refresh())),
      el("div", {class: "grid"},
        panel("Scalars", canvas("scalars"), notes.scalars),
        panel("Per-layer reductions", el("div", {class: "controls"},
          el("label", {}, "collection "), select("collection", collections, state.collection, (v) => { state.collection = v; drawLayers(); }),
          el("label", {}, "reduction "), select("reduction", REDUCTIONS, state.reduction, (v) => { state.reduction = v; drawLayers(); }),
          checkbox("abs", "of |values|", state.abs, (v) => { state.abs = v; drawLayers(); }),
          checkbox("log", "log scale", state.logY, (v) => { state.logY = v; drawLayers(); })),
          canvas("layers"), notes.layers)),
      panel("Distributions over steps", el("div", {class: "controls"}, el("label", {}, "tensor "), tensorSelect),
        distBox, notes.dist),
      panel("One step's histogram", el("div", {class: "controls"}, sliderLabel), slider, canvas("histogram"), notes.hist));

    const common = () => Object.assign({mode: state.mode}, range(state));
    const label = (tensor, s) => (s.worker ? `${tensor} · ${s.worker}` : tensor);

    async function drawScalars() {
      try {
        let {tensors} = await api(`${base}/tensors`, {collection: collections.includes("losses") ? "losses" : undefined,
                                                      regex: collections.includes("losses") ? undefined : "loss"});
        tensors = tensors.slice(0, 8);
        const got = await Promise.all(tensors.map((t) => api(`${base}/scalars`,
          Object.assign({tensor: t, worker: state.worker, points: 800}, common()))));
        const lines = got.flatMap((r) => r.series.map((s) => ({label: label(r.tensor, s), series: s})));
        TK.curves(charts.scalars, lines, {onZoom: state.zoom});
        notes.scalars.className = "note";
        notes.scalars.textContent = tensors.length ? downsampledNote(got) : "No scalar tensor (collection 'losses') yet.";
      } catch (e) { failing(notes.scalars, e); }
    }
    async function drawLayers() {
      try {
        if (!state.collection) { notes.layers.textContent = "No collection yet."; return; }
        let {tensors} = await api(`${base}/tensors`, {collection: state.collection});
        const shown = tensors.slice(0, 24);
        const got = await Promise.all(shown.map((t) => api(`${base}/series`, Object.assign(
          {tensor: t, reduction: state.reduction, abs: state.abs ? 1 : 0, worker: state.worker, points: 500}, common()))));
        const lines = got.flatMap((r) => r.series.map((s) => ({label: label(r.tensor, s), series: s})));
        TK.curves(charts.layers, lines, {logY: state.logY, onZoom: state.zoom,
          yTitle: `${state.reduction}${state.abs ? " |x|" : ""}`});
        notes.layers.className = "note";
        notes.layers.textContent = `${downsampledNote(got)}${tensors.length > shown.length ? `; the first ${shown.length} of ${tensors.length} tensors` : ""}`;
      } catch (e) { failing(notes.layers, e); }
    }
    async function drawDistributions() {
      try {
        if (!tensorSelect.options.length) {
          const {tensors} = await api(`${base}/tensors`);
          const scalars = collections.includes("losses") ? (await api(`${base}/tensors`, {collection: "losses"})).tensors : [];
          const choices = tensors.filter((t) => !scalars.includes(t));
          const pref = state.collection ? (await api(`${base}/tensors`, {collection: state.collection})).tensors : [];
          tensorSelect.replaceChildren(...choices.map((t) => el("option", {value: t}, t)));
          state.tensor = pref.find((t) => choices.includes(t)) || choices[0] || "";
          tensorSelect.value = state.tensor;
        }
        if (!state.tensor) { notes.dist.textContent = "No tensor yet."; return; }
        // "every worker": one distribution per step over the union of the
        // workers' values, merged on the collector.
        const who = [state.worker];
        const got = await Promise.all(who.map((w) => api(`${base}/distributions`,
          Object.assign({tensor: state.tensor, worker: w, points: 200, bins: 30}, common()))));
        const boxes = got.map((d, i) => {
          const title = `${state.tensor}${who[i] === "*" ? " · every worker" : who[i] ? ` · ${who[i]}` : ""}`;
          const b = el("canvas", {class: "bands"}), r = el("canvas", {class: "ridges"});
          return {d, i, title, b, r, node: el("div", {class: "grid"}, el("div", {class: "chart"}, b), el("div", {class: "chart"}, r))};
        });
        distBox.replaceChildren(...boxes.map((x) => x.node));
        for (const x of boxes) {
          TK.bands(x.b, x.d, {title: `${x.title}: percentiles`, colorIndex: x.i, onZoom: state.zoom});
          TK.ridges(x.r, x.d, {title: `${x.title}: histograms by step`, colorIndex: x.i});
        }
        notes.dist.className = "note";
        notes.dist.textContent = got.length && got[0].downsampled
          ? `${got[0].total_steps} steps in ${got[0].step.length} buckets (an envelope: zoom for every step)`
          : `${got.length ? got[0].total_steps : 0} steps`;
        const steps = got.length ? got[0].step : [];
        slider.max = Math.max(0, steps.length - 1);
        slider.steps = steps;
        if (state.step === null || !steps.includes(state.step)) {
          state.step = steps.length ? steps[steps.length - 1] : null;
        }
        slider.value = Math.max(0, steps.indexOf(state.step));
        await drawHistogram();
      } catch (e) { failing(notes.dist, e); }
    }
    async function drawHistogram() {
      try {
        if (state.step === null) { notes.hist.textContent = "No step yet."; return; }
        const who = state.worker === "*" ? trial.workers.slice(0, 4).map((w) => w.worker) : [state.worker];
        sliderLabel.textContent = `${state.tensor} at step ${state.step}`;
        const hs = await Promise.all(who.map((w) => api(`${base}/histogram`,
          {tensor: state.tensor, step: state.step, worker: w, bins: 40})));
        TK.histogram(charts.histogram, hs.map((h, i) => ({label: who[i] || "first worker", h})));
        const nan = hs.reduce((a, h) => a + h.nan_count, 0);
        notes.hist.className = "note";
        notes.hist.textContent = nan ? `${nan} NaN elements left out` : "";
      } catch (e) { failing(notes.hist, e); }
    }
    slider.addEventListener("input", () => {
      const steps = slider.steps || [];
      state.step = steps[Number(slider.value)] ?? null;
      drawHistogram();
    });

    const refresh = throttle(async () => {
      await Promise.all([drawScalars(), drawLayers(), drawDistributions()]).catch((e) => {
        if (e instanceof AuthError) askToken(e.message);
      });
      document.body.dataset.drawn = String(Number(document.body.dataset.drawn || 0) + 1);
    }, 1000);
    await refresh();
    if (!trial.ended) {
      watch(name, (t) => {
        const grew = t.last_step !== trial.last_step || t.complete_through !== trial.complete_through;
        showTrial(t);
        if (grew) refresh();
        if (grew || t.ended) drawCollections();
      });
    }
  }

  function downsampledNote(got) {
    const s = got.flatMap((r) => r.series);
    const down = s.filter((x) => x.downsampled);
    const total = Math.max(0, ...s.map((x) => x.total_steps));
    return down.length ? `${total} steps downsampled to ${down[0].step.length} buckets (min/max envelope: spikes stay; zoom for every step)`
      : `${total} steps, every one shown`;
  }

  // ---- compare ----------------------------------------------------------------
  async function comparePage(names) {
    document.title = `tensorkeep: compare ${names.join(", ")}`;
    if (names.length < 2) throw new Error("compare needs two or more trials: /compare?trials=A,B");
    const infos = await Promise.all(names.map((n) => api(`/api/v1/trials/${enc(n)}`)));
    const lists = await Promise.all(names.map((n) => api(`/api/v1/trials/${enc(n)}/tensors`)));
    const common = lists.reduce((acc, l) => acc.filter((t) => l.tensors.includes(t)), lists[0].tensors);
    const losses = infos[0].collections.some((c) => c.name === "losses")
      ? (await api(`/api/v1/trials/${enc(names[0])}/tensors`, {collection: "losses"})).tensors : [];
    const grads = infos[0].collections.some((c) => c.name === "gradients")
      ? (await api(`/api/v1/trials/${enc(names[0])}/tensors`, {collection: "gradients"})).tensors : [];
    const state = {from: null, to: null};
    const panels = [];
    const zoom = zoomControls(state, () => refreshAll());

    function comparePanel(tensor, reduction, abs, logY) {
      const p = {tensor, reduction, abs, logY};
      const c = el("canvas", {class: "compare"}), note = el("p", {class: "note"});
      const draw = async () => {
        try {
          const got = await Promise.all(names.map((n) => (p.reduction === "value"
            ? api(`/api/v1/trials/${enc(n)}/scalars`, Object.assign({tensor: p.tensor, points: 800}, range(state)))
            : api(`/api/v1/trials/${enc(n)}/series`, Object.assign({tensor: p.tensor, reduction: p.reduction,
                abs: p.abs ? 1 : 0, points: 800}, range(state))))));
          TK.curves(c, got.map((r, i) => ({label: names[i], series: r.series[0]})),
            {logY: p.logY, onZoom: state.zoom, title: `${p.tensor}: ${p.reduction === "value" ? "value" : `${p.reduction}${p.abs ? " |x|" : ""}`}`});
          note.className = "note";
          note.textContent = downsampledNote(got);
        } catch (e) { failing(note, e); }
      };
      p.draw = draw;
      p.node = panel("", el("div", {class: "controls"},
        el("label", {}, "tensor "), select("tensor", common, tensor, (v) => { p.tensor = v; draw(); }),
        select("reduction", [["value", "value (scalars)"], ...REDUCTIONS], reduction, (v) => { p.reduction = v; draw(); }),
        checkbox("abs", "of |values|", abs, (v) => { p.abs = v; draw(); }),
        checkbox("log", "log scale", logY, (v) => { p.logY = v; draw(); })),
        el("div", {class: "chart tall"}, c), note);
      panels.push(p);
      return p.node;
    }
    const loss = losses.find((t) => common.includes(t));
    const grad = grads.find((t) => common.includes(t));
    const first = loss || common[0];
    main.replaceChildren(
      el("h1", {}, "Compare ", names.map((n, i) => [i ? " · " : "", el("a", {href: `/trial/${enc(n)}`,
        style: `color:${TK.color(i)}`}, n)])),
      el("section", {class: "card"}, el("table", {id: "compared"}, el("thead", {}, el("tr", {},
        ["trial", "state", "steps", "rules", "stop"].map((h) => el("th", {}, h)))),
        el("tbody", {}, infos.map(({trial: t}) => el("tr", {class: "trial", "data-trial": t.name},
          el("td", {}, t.name), el("td", {}, badge(t.state)), el("td", {}, stepsText(t)),
          el("td", {}, ruleBadges(t)), el("td", {}, t.stop_requested ? badge("STOP", t.stop_reason || "requested") : "")))))),
      el("section", {class: "card controls"}, zoom),
      common.length ? el("div", {class: "grid"},
        comparePanel(first, loss ? "value" : "mean", false, false),
        comparePanel(grad || first, "mean", true, true))
        : el("p", {class: "muted"}, "These trials have no tensor name in common."));
    const refreshAll = throttle(() => Promise.all(panels.map((p) => p.draw())), 1000);
    await refreshAll();
    infos.filter((i) => !i.trial.ended).slice(0, MAX_STREAMS).forEach((i) => watch(i.trial.name, () => refreshAll()));
  }

  // ---- routing ------------------------------------------------------------------
  async function route() {
    const logout = document.getElementById("logout");
    logout.hidden = !sessionStorage.getItem(TOKEN_KEY);
    logout.addEventListener("click", () => { sessionStorage.removeItem(TOKEN_KEY); location.reload(); });
    const path = location.pathname;
    try {
      if (path.startsWith("/trial/")) await trialPage(decodeURIComponent(path.slice("/trial/".length)));
      else if (path === "/compare") {
        await comparePage((new URLSearchParams(location.search).get("trials") || "").split(",").filter(Boolean));
      } else await trialsPage();
      document.body.dataset.state = "ready";
    } catch (e) {
      if (e instanceof AuthError) { askToken(e.message); return; }
      main.replaceChildren(el("section", {class: "card"}, el("h1", {}, "Cannot show this page"),
        el("p", {class: "error", id: "page-error"}, e.message), el("p", {}, el("a", {href: "/"}, "the trials"))));
      document.body.dataset.state = "error";
    }
  }
  route();
})();
