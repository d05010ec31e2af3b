/* servesize explorer. The form is drawn from GET /api/catalogue (the Scenario's declaration); every
   number comes from the JSON API. This file holds no formula, bound, default or catalogue constant:
   it sends what the controls hold and draws what comes back. */
"use strict";

const App = {
  cat: null,             // GET /api/catalogue
  view: "plan",
  plan: {},              // view 2: the fields given explicitly (what a share link carries)
  fit: {},               // view 1
  planSeq: 0,            // every plan request gets the next number; only the latest is drawn
  shownSeq: 0,
  draftBusy: false, draftAgain: false,
  heavy: null,           // AbortController of the panels computed after a verdict
  last: null,            // the last full plan view
  fitSeq: 0, lastFit: null, fitSort: { key: null, dir: -1 },
  fleet: {},             // view 3: the fleet query's fields given explicitly
  fleetSeq: 0, fleetCtl: null, lastFleet: null,
  teams: {},             // the plan view's teams panel: team and priority, as the fleet's fields
  teamsSeq: 0, teamsCtl: null,
  check: null, disagg: null,   // AbortControllers of the on-demand engine check and prefill-and-decode comparison
  timings: [],           // control change -> verdict drawn, ms (benchmarks/bench_web.py reads them)
};
window.servesize = App;

// -- small helpers ----------------------------------------------------------------------------------

function $(sel, root) { return (root || document).querySelector(sel); }
function $$(sel, root) { return Array.from((root || document).querySelectorAll(sel)); }

function h(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(e.dataset, v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const kid of kids.flat()) if (kid !== null && kid !== undefined) e.appendChild(typeof kid === "string" ? document.createTextNode(kid) : kid);
  return e;
}

async function post(path, body, signal, headers) {
  const res = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json", ...(headers || {}) },
    body: JSON.stringify(body), signal });
  let data = null;
  try { data = await res.json(); } catch (e) {
    if (signal && signal.aborted) throw e;   // cancelled while the body was read: the caller's abort path, not an answer
    data = { error: `the server answered ${res.status} without JSON` };
  }
  return { ok: res.ok, status: res.status, data };
}

function banner(text) {
  const b = $("#banner");
  b.textContent = text || "";
  b.hidden = !text;
}

// kinds the server reads as token counts (vLLM's rule: 64k = 64,000) and as whole numbers
const TOKEN_KINDS = new Set(["tokens", "vllm_len"]);
const WHOLE_KINDS = new Set(["int", "vllm_int"]);

// a value as a control shows it: 31000 -> "31k" for token fields, 0.8100000001 -> "0.81"
function showValue(spec, v) {
  if (v === null || v === undefined || v === "") return "";
  if (typeof v === "boolean") return v ? "on" : "off";
  if (typeof v === "string" && /^-?\d+(\.\d+)?$/.test(v.trim())) v = Number(v);   // a share link's plain number
  if (typeof v === "number") {
    if (spec && TOKEN_KINDS.has(spec.kind) && v >= 1000 && v % 1000 === 0) return (v / 1000) + "k";
    if (Number.isInteger(v)) return String(v);
    return String(+v.toPrecision(4));
  }
  return String(v);
}

// -- the form, generated from the declaration ------------------------------------------------------------

// a control's companion ids: f-x -> v-x (its value) / r-x (its slider); fit-x -> fitv-x; fl-x -> flv-x
function idFor(pfx, kind) {
  if (pfx === "f-") return kind + "-";
  return pfx.slice(0, -1) + kind + "-";
}

function fieldBox(spec, extra, pfx) {
  pfx = pfx || "f-";
  const label = h("label", { class: "flabel", for: pfx + spec.name, title: spec.help },
    h("span", { class: "tip", text: spec.label || spec.name.replaceAll("_", " ") }),
    h("span", { class: "val", id: idFor(pfx, "v") + spec.name }));
  const box = h("div", { class: "field", dataset: { field: spec.name } }, label, extra,
    h("div", { class: "hint", text: [spec.default_text, spec.range_text ? "bounds " + spec.range_text : ""].filter(Boolean).join(" · ") }),
    h("div", { class: "err", dataset: { errFor: spec.name } }));
  // a control with no element of the label's id (the GPUs, the split, a file, check boxes): the label names
  // the first control inside, and the box is a group named by it, so every control has a name
  if (!extra.querySelector || (!(extra.id === pfx + spec.name) && !extra.querySelector("#" + CSS.escape(pfx + spec.name)))) {
    const first = extra.matches && extra.matches("input, select, textarea") ? extra : extra.querySelector && extra.querySelector("input, select, textarea");
    const labelId = idFor(pfx, "l") + spec.name;
    label.id = labelId;
    if (first && first.id) label.setAttribute("for", first.id); else label.removeAttribute("for");
    box.setAttribute("role", "group");
    box.setAttribute("aria-labelledby", labelId);
  }
  return box;
}

function toPos(s, v) {
  if (!isFinite(v)) return 0;
  const t = s.scale === "log" ? Math.log(Math.max(v, s.min) / s.min) / Math.log(s.max / s.min) : (v - s.min) / (s.max - s.min);
  return Math.round(Math.min(1, Math.max(0, t)) * 1000);
}

function fromPos(spec, pos) {
  const s = spec.slider, t = pos / 1000;
  let v = s.scale === "log" ? s.min * Math.pow(s.max / s.min, t) : s.min + t * (s.max - s.min);
  if (s.step > 0) v = Math.round(v / s.step) * s.step;
  else v = +v.toPrecision(s.scale === "log" ? 3 : 4);
  if (TOKEN_KINDS.has(spec.kind) || WHOLE_KINDS.has(spec.kind)) v = Math.round(v);
  return +v.toPrecision(12);
}

const VIEW_OF = { "f-": "plan", "fit-": "fit", "fl-": "fleet" };   // a control's id prefix -> its view's fields

function makeControl(spec, store, changed, pfx) {
  pfx = pfx || "f-";
  const set = (v, draft) => {
    if (v === "" || v === null || v === undefined) delete store[spec.name]; else store[spec.name] = v;
    changed(spec.name, draft);
  };
  switch (spec.widget) {
    case "slider": {
      const range = h("input", { type: "range", min: 0, max: 1000, step: 1, id: idFor(pfx, "r") + spec.name,
        "aria-label": (spec.label || spec.name.replaceAll("_", " ")) + " (slider)" });
      const text = h("input", { type: "text", class: "num", id: pfx + spec.name, autocomplete: "off", spellcheck: "false" });
      // the thumb goes where the server reads the text ('45k' = 45,000, '16K' = 16,384: the field's own
      // declaration, servesize.units); the page holds no units rule. Only the latest reading is placed.
      let asked = 0, last = null;
      const place = n => { range.value = toPos(spec.slider, n); range.dataset.value = String(n); range.setAttribute("aria-valuetext", showValue(spec, n)); };
      const readText = async t => {
        const seq = ++asked;
        if (last && last.text === t) { place(last.value); return; }
        let res;
        try { res = await post("/api/value", { view: VIEW_OF[pfx], field: spec.name, text: t }); } catch (e) { return; }
        if (seq !== asked || !res.ok || typeof res.data.value !== "number") return;   // a refused text leaves the thumb; the verdict names why
        last = { text: t, value: res.data.value };
        place(res.data.value);
      };
      range.addEventListener("input", () => { asked++; const v = fromPos(spec, +range.value); text.value = showValue(spec, v); place(v); set(v, true); });
      range.addEventListener("change", () => { asked++; const v = fromPos(spec, +range.value); place(v); set(v, false); });
      text.addEventListener("change", () => { const t = text.value.trim(); if (t) readText(t); set(t, false); });
      const box = fieldBox(spec, h("div", { class: "slider-row" }, range, text), pfx);
      box.sync = v => {
        if (document.activeElement !== text) text.value = showValue(spec, v);
        if (typeof v === "number" && isFinite(v)) { asked++; place(v); } else if (typeof v === "string" && v.trim()) readText(v.trim());
      };
      return box;
    }
    case "select": {
      const sel = h("select", { id: pfx + spec.name });
      if (!spec.required) sel.appendChild(h("option", { value: "", text: "default" + (spec.default !== null && spec.default !== undefined ? ` (${showValue(spec, spec.default)})` : "") }));
      for (const c of spec.choices) sel.appendChild(h("option", { value: c, text: c }));
      sel.addEventListener("change", () => set(sel.value, false));
      const box = fieldBox(spec, sel, pfx);
      box.sync = (v, explicit) => { sel.value = explicit ? String(v) : ""; };
      return box;
    }
    case "toggle": {
      const cb = h("input", { type: "checkbox", id: pfx + spec.name });
      cb.addEventListener("change", () => set(cb.checked, false));
      const box = fieldBox(spec, h("label", { class: "toggle" }, cb, h("span", { class: "track" }), h("span", { text: spec.help })), pfx);
      box.sync = v => { cb.checked = v === true || v === "true"; };
      return box;
    }
    default: {
      const text = h("input", { type: "text", id: pfx + spec.name, autocomplete: "off", spellcheck: "false",
        placeholder: spec.default_text || "" });
      text.addEventListener("change", () => set(text.value.trim(), false));
      const box = fieldBox(spec, text, pfx);
      box.sync = (v, explicit) => { if (document.activeElement !== text) { text.value = explicit ? showValue(spec, v) : ""; text.placeholder = showValue(spec, v) || spec.default_text || ""; } };
      return box;
    }
  }
}

function modelControl(spec, store, changed) {
  const list = h("datalist", { id: "model-list" });
  for (const m of App.cat.models.rows) list.appendChild(h("option", { value: m.key, text: m.display }));
  const input = h("input", { type: "text", id: "f-model", list: "model-list", autocomplete: "off", spellcheck: "false",
    placeholder: "search the catalogue" });
  input.addEventListener("change", () => { if (input.value.trim()) { store.model = input.value.trim(); changed("model", false); } });
  const file = h("input", { type: "file", id: "f-model-file", accept: ".json,application/json" });
  file.addEventListener("change", async () => {
    const f = file.files[0];
    if (!f) return;
    try { store.model = JSON.parse(await f.text()); } catch (e) { showError("model", `${f.name} is not JSON: ${e.message}`); return; }
    input.value = "";
    changed("model", false);
  });
  const about = h("div", { class: "muted small", id: "model-about" });
  const box = fieldBox(spec, h("div", {}, input, list, h("label", { class: "upload" }, "or upload a config.json ", file), about));
  box.sync = () => {
    const m = store.model;
    if (m && typeof m === "object") { about.textContent = "uploaded config.json (" + (m._name_or_path || m.model_type || "unnamed") + "): parsed on the server, never stored"; return; }
    if (document.activeElement !== input) input.value = m || "";
    const row = App.cat.models.rows.find(r => r.key === m);
    // the catalogue's KV per token is at the checkpoint's dtype; the plan's, as it stores it, beside it (the server's text)
    about.textContent = row ? `${row.display} · ${row.text.params} · ${row.layers} · KV ${row.text.kv_per_token}/token` : "";
    if (row && App.kvText) about.append(h("span", { class: "hint-more", id: "model-kv-planned", text: ` · ${App.kvText}` }));
  };
  return box;
}

function gpusControl(spec, store, changed, counts, pfx) {
  pfx = pfx || "f-";
  const parse = () => { const m = /^(\d+)\s*x\s*(.+)$/i.exec(store.gpus || ""); return m ? [+m[1], m[2]] : [1, store.gpus || ""]; };
  const sel = h("select", { id: pfx + "gpus-type" });
  for (const g of App.cat.gpus) sel.appendChild(h("option", { value: g.key, text: `${g.key} · ${g.memory_text}` }));
  const range = h("input", { type: "range", id: pfx + "gpus-range", min: counts[0], max: counts[1], step: 1, "aria-label": "GPU count" });
  const num = h("input", { type: "text", class: "num", id: pfx + "gpus-count", autocomplete: "off", "aria-label": "GPU count (text)" });
  const write = draft => {
    const n = num.value.trim() || "1";
    store.gpus = `${n}x${sel.value}`;
    if (pfx === "f-" && /^\d+$/.test(n)) {   // a new count: the split picked for the old one no longer holds
      // as `servesize plan --gpus N` does: a TP the visitor picked is kept where it divides the GPUs (the server makes
      // DP the rest); otherwise the server chooses the split. The page sends only what the visitor chose.
      const tp = +(store.tensor_parallel_size || 1);
      if (tp <= 1 || +n % tp) delete store.tensor_parallel_size;
      delete store.data_parallel_size;
    }
    changed("gpus", draft);
  };
  sel.addEventListener("change", () => write(false));
  range.addEventListener("input", () => { num.value = range.value; write(true); });
  range.addEventListener("change", () => write(false));
  num.addEventListener("change", () => { range.value = num.value; write(false); });
  const box = fieldBox(spec, h("div", {}, sel, h("div", { class: "slider-row" }, range, num)), pfx);
  box.sync = () => {
    const [n, type] = parse();
    const g = App.cat.gpus.find(x => x.key.toLowerCase() === String(type).toLowerCase() || x.key.toLowerCase().startsWith(String(type).toLowerCase() + "-"));
    if (g) sel.value = g.key;
    if (document.activeElement !== num) num.value = n;
    range.value = n;
  };
  return box;
}

function splitControl(spec, store, changed) {
  const seg = h("div", { class: "seg", id: "seg-split" });
  const box = fieldBox({ ...spec, default_text: "replicas × GPUs per replica", range_text: "" }, seg);
  box.sync = () => {};
  box.draw = splits => {
    seg.textContent = "";
    for (const s of splits || []) {
      const b = h("button", { type: "button", "aria-pressed": s.current ? "true" : "false", title: s.fits ? `DP ${s.dp} × TP ${s.tp}` : s.reason,
        class: s.fits ? "" : "nofit", disabled: !s.fits && !s.current, dataset: { dp: s.dp, tp: s.tp }, text: `DP ${s.dp} × TP ${s.tp}` });
      b.addEventListener("click", () => {
        store.tensor_parallel_size = s.tp; store.data_parallel_size = s.dp;
        if (s.tp === 1) delete store.tensor_parallel_size;
        if (s.dp === 1) delete store.data_parallel_size;
        changed("split", false);
      });
      seg.appendChild(b);
    }
  };
  return box;
}

function workloadControl(spec, store, changed) {
  const file = h("input", { type: "file", id: "f-workload-file", accept: ".json,application/json" });
  const about = h("div", { class: "muted small" });
  const clear = h("button", { type: "button", class: "btn small", text: "use the fields instead", hidden: true });
  file.addEventListener("change", async () => {
    const f = file.files[0];
    if (!f) return;
    try { store.workload = JSON.parse(await f.text()); } catch (e) { showError("workload", `${f.name} is not JSON: ${e.message}`); return; }
    changed("workload", false);
  });
  clear.addEventListener("click", () => { delete store.workload; file.value = ""; changed("workload", false); });
  const box = fieldBox({ ...spec, label: "workload file" }, h("div", {}, h("label", { class: "upload" }, "upload a workload (servesize workload fit --out, JSON) ", file), clear, about));
  box.sync = () => { const on = !!store.workload; clear.hidden = !on; about.textContent = on ? "an uploaded workload: the fields above override it" : ""; };
  return box;
}

const LABELS = {
  users: "Users to serve", team: "Teams", gpus_from: "GPU types to search (none ticked: every GPU with a price)",
  max_gpus: "Most GPUs in one fleet", tensor_parallel_size: "GPUs per replica (TP list)", top: "Fleets to list",
  gpu_hour_price: "Your GPU-hour prices (GPU=PRICE, comma separated)", price_includes_power: "Prices include power",
  model: "Model", gpus: "GPUs", split: "Split (DP × TP)", quantization: "Weights", kv_cache_dtype: "KV cache dtype",
  mamba_ssm_cache_dtype: "Recurrent-state dtype", mtp_speedup: "MTP decode speed-up (×)", cpu_offload_gib: "CPU offload (GiB)",
  max_model_len: "max_model_len (tokens)", median: "User prompt median (tokens)", sigma: "User prompt sigma",
  subagent_median: "Subagent prompt median (tokens)", subagent_sigma: "Subagent prompt sigma", subagent_ratio: "Subagent ratio",
  subagents_share_prefix: "Subagents share the user prefix", prefix: "System / shared prefix (tokens)",
  load_users: "Concurrent users (your load)", think_time: "Think time (s)", warm_turn_tokens: "Warm turn (tokens)",
  ttft_limit: "TTFT budget (s)", invalidation: "Cache-miss rate", burst: "Cold burst (misses at once)",
  electricity_price: "Electricity price per kWh", currency: "Currency", pue: "Facility PUE", preset: "Workload preset",
  gpu_memory_utilization: "GPU memory utilisation", precision: "Precisions", min_concurrency: "Minimum concurrency",
  all_placements: "Every placement", models: "Models", vllm_version: "vLLM version", budget: "Budget",
};

const PRESETS_AFTER = { workload: "workload", burst: "burst", pue: "pue" };  // which preset row follows which control

// the stores are the objects the controls write into: replaced in place, never re-bound
function replaceStore(store, values) {
  for (const k of Object.keys(store)) delete store[k];
  Object.assign(store, values);
}

function buildPlanForm() {
  const side = $("#planControls");
  const fields = App.cat.form.plan.fields;
  App.planBoxes = {};
  const changed = (name, draft) => onPlanChange(name, draft);
  for (const sec of App.cat.form.plan.sections) {
    const grid = h("div", { class: "ctl-grid" });
    const panel = sec.collapsed
      ? h("details", { class: "panel controls fold", id: "sec-" + sec.id }, h("summary", { text: sec.title }), h("p", { class: "lede", text: sec.lede }), grid)
      : h("div", { class: "panel controls", id: "sec-" + sec.id }, h("div", { class: "section-h", text: (sec.act ? sec.act + " · " : "") + sec.title }), h("p", { class: "lede", text: sec.lede }), grid);
    for (const name of sec.fields) {
      const spec = { ...fields[name], label: LABELS[name] };
      let box;
      if (spec.widget === "model") box = modelControl(spec, App.plan, changed);
      else if (spec.widget === "gpus") box = gpusControl(spec, App.plan, changed, [1, 8]);
      else if (spec.widget === "split") box = splitControl(spec, App.plan, changed);
      else if (spec.widget === "workload") box = workloadControl(spec, App.plan, changed);
      else box = makeControl(spec, App.plan, changed);
      App.planBoxes[name] = box;
      grid.appendChild(box);
      const presets = App.cat.presets[PRESETS_AFTER[name]];
      if (presets) grid.appendChild(presetRow(presets, App.plan, changed));
    }
    if (sec.collapsed) grid.appendChild(presetRow(App.cat.presets.assumptions, App.plan, changed));
    side.appendChild(panel);
  }
}

function presetRow(presets, store, changed) {
  return h("div", { class: "preset" }, h("span", { class: "plab", text: "presets" }),
    presets.map(p => h("button", { type: "button", text: p.label, onclick: () => {
      for (const [k, v] of Object.entries(p.values)) { if (v === null) delete store[k]; else store[k] = v; }
      changed(Object.keys(p.values)[0], false);
    } })));
}

function buildFitForm() {
  const grid = $("#fitFields");
  const fields = App.cat.form.fit.fields;
  App.fitBoxes = {};
  const changed = (name, draft) => scheduleFit(draft);
  for (const name of App.cat.form.fit.order) {
    const spec = { ...fields[name], label: LABELS[name] };
    let box;
    if (name === "gpus") box = gpusControl(spec, App.fit, changed, [1, 64], "fit-");
    else if (spec.widget === "multi") box = multiControl(spec, App.fit, changed, "fit-");
    else box = makeControl(spec, App.fit, changed, "fit-");
    App.fitBoxes[name] = box;
    grid.appendChild(box);
  }
}

function multiControl(spec, store, changed, pfx, showDefault) {
  const wrap = h("div", { class: "checks" });
  // each box named with its field ("Weights fp8", "KV cache dtype fp8"): two fields may offer the same choice
  const boxes = spec.choices.map(c => h("label", {}, h("input", { type: "checkbox", value: c, "aria-label": `${spec.label || spec.name} ${c}` }), " " + c));
  boxes.forEach(b => wrap.appendChild(b));
  wrap.addEventListener("change", () => {
    const on = boxes.map(b => b.firstChild).filter(c => c.checked).map(c => c.value);
    if (on.length) store[spec.name] = on.join(","); else delete store[spec.name];
    changed(spec.name, false);
  });
  const box = fieldBox(spec, wrap, pfx);
  box.sync = () => {
    const value = store[spec.name] !== undefined ? store[spec.name] : (showDefault ? spec.default || "" : "");
    const on = String(value).split(",").map(x => x.trim());
    boxes.forEach(b => { b.firstChild.checked = on.includes(b.firstChild.value); });
  };
  return box;
}

// -- errors beside the control -------------------------------------------------------------------------

const FIELD_BOX = { tensor_parallel_size: "split", data_parallel_size: "split" };

function clearErrors(root) {
  for (const e of $$(".err", root)) e.textContent = "";
  for (const f of $$(".field.bad", root)) f.classList.remove("bad");
}

function showError(field, message, root) {
  const name = FIELD_BOX[field] || field;
  const target = name ? $(`[data-err-for="${CSS.escape(name)}"]`, root) : null;
  if (!target) { banner(message); return; }
  target.textContent = message;
  const box = target.closest(".field");
  if (box) box.classList.add("bad");
  const fold = target.closest("details");
  if (fold) fold.open = true;
}

// -- view 2: the plan --------------------------------------------------------------------------------------

function planBody(draft) { return { ...App.plan, ...(draft ? { draft: true } : {}) }; }

function onPlanChange(name, draft) {
  App.changedAt = performance.now();
  if (!draft) { cancelAnimationFrame(App.draftFrame); App.draftFrame = 0; requestPlan(false); return; }
  // a drag: one draft per frame at most, and none when the release (a click, a key) follows at once
  if (!App.draftFrame) App.draftFrame = requestAnimationFrame(() => { App.draftFrame = 0; requestDraft(); });
}

function requestDraft() {
  if (App.draftBusy) { App.draftAgain = true; return; }
  App.draftBusy = true;
  requestPlan(true).finally(() => {
    App.draftBusy = false;
    if (App.draftAgain) { App.draftAgain = false; requestDraft(); }
  });
}

async function requestPlan(draft) {
  const seq = ++App.planSeq;
  const started = App.changedAt || performance.now();
  if (App.check) { App.check.abort(); App.check = null; }   // an engine check of the old settings answers nothing now
  if (App.disagg) { App.disagg.abort(); App.disagg = null; }  // nor a comparison of prefill and decode apart
  if (!draft) {
    App.draftAgain = false;                  // the full answer supersedes any draft still to send
    if (App.heavy) { App.heavy.abort(); App.heavy = null; }
  }
  const verdict = $("#verdict");
  verdict.dataset.pending = "true";
  let res;
  try { res = await post("/api/plan", planBody(draft)); } catch (e) { banner("the server did not answer: " + e.message); return; }
  if (seq !== App.planSeq) return;           // a newer request is on its way: draw that one
  verdict.dataset.pending = "false";
  clearErrors($("#view-plan"));
  banner("");
  if (!res.ok) {
    verdict.dataset.state = "error";
    verdict.dataset.seq = seq;
    showError(res.data.field, res.data.error, $("#view-plan"));
    syncPlanControls(App.last);
    if (res.data.splits) App.planBoxes.split.draw(res.data.splits);
    if (App.last) markStale(res.data.error); else drawRefused(res.data);   // a link refused on opening: no answer to keep
    return;
  }
  App.drawn = { seq, body: planBody(draft) };   // what an opened "why?" asks /api/explain about
  drawPlan(res.data, seq, draft);
  if (!draft) {
    App.timings.push(performance.now() - started);
    App.last = res.data;
    writeHash();
    scheduleHeavy(seq);
    if (App.teams.team) requestTeams();
  }
}

function unstale() { $("#verdict").classList.remove("stale"); $("#view-plan .main").classList.remove("stale"); }

function syncPlanControls(view) {
  const eff = view ? view.effective : {};
  if (view) App.kvText = view.kv_text;
  for (const [name, box] of Object.entries(App.planBoxes)) {
    const explicit = Object.prototype.hasOwnProperty.call(App.plan, name);
    const value = explicit ? App.plan[name] : eff[name];
    if (box.sync) box.sync(value, explicit);
    const v = $("#v-" + name);
    if (v) v.textContent = explicit ? "" : (value !== undefined && value !== null ? "now " + showValue(App.cat.form.plan.fields[name], value) : "");
  }
  if (view) App.planBoxes.split.draw(view.splits);
}

function drawPlan(view, seq, draft) {
  syncPlanControls(view);
  drawVerdict(view, seq, draft);
  drawTiles(view.tiles);
  drawMemory(view.memory);
  drawLengths(view.lengths);
  if (!draft) {
    drawRecipe(view.recipe);
    drawBill(view.bill);
    drawTest(view.test);
  }
}

function markStale(message) {
  const box = $("#verdict");
  for (const old of $$(".v-stale", box)) old.remove();
  box.classList.add("stale");
  $("#view-plan .main").classList.add("stale");
  box.prepend(h("p", { class: "v-stale", id: "verdictStale", text: "Not updated, the last change was refused: " + message
    + (App.last ? " The figures below are the last answer." : "") }));
}

// the first request was refused (a bad share link): the verdict says so, names the field and leads to it
function drawRefused(err) {
  unstale();
  const box = $("#verdict");
  box.textContent = "";
  const name = FIELD_BOX[err.field] || err.field;
  const label = name ? (LABELS[name] || name.replaceAll("_", " ")) : null;
  box.dataset.field = err.field || "";
  box.append(h("p", { class: "v-title", text: "No verdict: this configuration was refused" }),
    h("h2", { class: "v-head crit", id: "verdictHead", text: label ? `Check “${label}” (${err.field})` : "Check the request" }),
    h("p", { class: "v-why", id: "verdictError", text: err.error }));
  const control = name ? $(`#view-plan [data-field="${CSS.escape(name)}"] :is(input, select, button)`) : null;
  box.appendChild(h("p", { class: "v-next" }, control
    ? h("button", { type: "button", class: "btn", id: "verdictGoTo", text: `Go to ${label}`, onclick: () => { control.scrollIntoView({ block: "center" }); control.focus(); } })
    : null, control ? " — change it, or remove it from the link, and the verdict follows." : "Change the link or the controls, and the verdict follows."));
  for (const id of ["#sensRows", "#frontier"]) $(id).textContent = "";
}

function drawVerdict(view, seq, draft) {
  unstale();
  const v = view.verdict, box = $("#verdict");
  box.textContent = "";
  box.dataset.state = draft ? "draft" : "full";
  box.dataset.seq = seq;
  box.dataset.binding = v.binding;
  box.dataset.users = v.users;
  box.append(...[   // beforeAfter is null on the first verdict: append would print "null"
    h("p", { class: "v-title", text: view.title + (draft ? " · draft (fewer fills while you drag)" : "") }),
    // one headline: the library's verdict line, its first words large (plan.verdict_headline), the rest beneath
    h("div", { class: "v-sentence", id: "verdictSentence" },
      h("h2", { class: "v-head", id: "verdictHead" }, h("span", { class: "big", dataset: { value: v.users }, text: v.users_text }),
        ` users: `, h("span", { class: "bind c-" + v.binding, text: v.binding }), " binds first"),
      h("p", { class: "v-detail", id: "verdictDetail", text: v.detail })),
    beforeAfter(App.last && App.last.verdict, v),
    h("p", { class: "v-why", text: v.why }),
    h("p", { class: "v-next", text: v.next.text })].filter(Boolean));
  if (v.load) box.appendChild(h("p", { class: "v-load " + (v.load.fits ? "good" : "crit"), id: "verdictLoad", text: v.load.text }));
  if (v.offload) box.appendChild(h("p", { class: "v-why", id: "verdictOffload", text: "CPU offload: " + v.offload }));
  // a figure over its limit is named here, with why it binds or does not (planning.limits.limits_over)
  for (const l of v.limits || [])
    box.appendChild(h("p", { class: "v-why warn v-limit", dataset: { limit: l.limit }, text: "Over its limit: " + l.text }));   // the library's sentence, as the CLI prints it
  if (view.placement_text) box.appendChild(h("p", { class: "v-why", id: "verdictPlacement", text: view.placement_text }));
  const max = Math.max(...v.ceilings.map(c => c.users || 0)) || 1;
  const bars = h("div", { class: "ceil-bars", id: "ceilingBars" });
  for (const c of v.ceilings) {
    const fill = h("span", { class: "fill bg-" + c.name });
    fill.style.width = Math.max(1, 100 * (c.users || 0) / max) + "%";
    bars.appendChild(h("div", { class: "ceil" + (c.binding ? " binding" : ""), dataset: { ceiling: c.name, value: c.users } },
      h("span", { class: "cname", text: c.name }), h("span", { class: "track" }, fill),
      h("span", { class: "cval", text: c.text + " users" }), h("span", { class: "cmeans muted", text: c.means })));
  }
  box.appendChild(bars);
  drawEngineCheck(draft);
  drawDisagg(draft);
  box.appendChild(explainBox("the whole derivation, as servesize plan --explain prints it", ["all"], "explainSteps"));
}

// the engine check: the engine simulator run on these settings on demand (servesize plan --engine-check), with its
// own status line and Cancel; its users beside the plan's and, where they differ, the reason (the server's text)
function drawEngineCheck(draft) {
  const button = h("button", { type: "button", class: "btn small", id: "engineCheckRun", disabled: draft,
    text: "Check with the engine simulator", onclick: () => runEngineCheck() });
  $("#engineCheck").replaceChildren(
    h("p", { class: "v-why" }, button, " ",
      h("span", { class: "muted small hint", text: "replays this workload through a vLLM-like scheduler step by step: seconds to a minute" })),
    h("p", { id: "engineCheckProgress", class: "muted small", hidden: true }),
    h("p", { class: "v-why", id: "engineCheckResult" }));
}

async function runEngineCheck() {
  const out = $("#engineCheckResult");
  out.textContent = "";
  delete out.dataset.agree;
  const res = await onDemand("check", "/api/engine-check", $("#engineCheckRun"), $("#engineCheckProgress"),
    "running the engine simulator on these settings");
  if (!res) return;
  if (!res.ok) { out.textContent = res.data.error; out.dataset.agree = "error"; return; }
  const d = res.data;
  out.dataset.agree = String(d.agree);
  out.dataset.engineUsers = d.engine_users;
  out.className = "v-why " + (d.agree ? "good" : "warn");
  out.append(h("span", { text: d.text }),
    d.disagreement ? h("span", { id: "engineCheckWhy", text: " Why they differ: " + d.disagreement }) : "",
    h("br"), h("code", { class: "small", id: "engineCheckCommand", text: d.command }));
}

// one on-demand panel's request (the engine check, prefill and decode apart): the panel's previous request cancelled,
// its button disabled while it runs, its status line with Cancel (postWatched); null when it failed, was cancelled,
// or the settings changed while it ran (its answer is for the old ones)
async function onDemand(key, path, run, progress, what) {
  if (App[key]) App[key].abort();
  const ctl = new AbortController(), seq = App.planSeq;
  App[key] = ctl;
  run.disabled = true;
  let res;
  try {
    res = await postWatched(path, planBody(false), ctl, progress, what);
  } catch (e) {
    if (!ctl.signal.aborted) banner("the server did not answer: " + e.message);
    if (seq === App.planSeq) run.disabled = false;
    return null;
  } finally { if (App[key] === ctl) App[key] = null; }
  if (seq !== App.planSeq) return null;
  run.disabled = false;
  return res;
}

// prefill and decode apart on these GPUs, on demand (servesize plan --prefill-instances X --decode-instances Y):
// every xPyD layout beside the aggregated plan, the line that says which serves more, and the command; every figure
// and word is the server's
function drawDisagg(draft) {
  const button = h("button", { type: "button", class: "btn small", id: "disaggRun", disabled: draft,
    text: "Compare prefill and decode apart", onclick: () => runDisagg() });
  $("#disagg").replaceChildren(
    h("p", { class: "v-why" }, button, " ",
      h("span", { class: "muted small hint", text: "every split of these GPUs into prefill and decode instances, "
        + "joined by a KV connector, beside this plan: a few seconds" })),
    h("p", { id: "disaggProgress", class: "muted small", hidden: true }),
    h("div", { id: "disaggResult" }));
}

async function runDisagg() {
  const out = $("#disaggResult");
  out.replaceChildren();
  delete out.dataset.more;
  const res = await onDemand("disagg", "/api/disaggregated", $("#disaggRun"), $("#disaggProgress"),
    "planning every split of these GPUs into prefill and decode");
  if (!res) return;
  if (!res.ok) { out.replaceChildren(h("p", { class: "v-why warn", id: "disaggError", text: res.data.error })); return; }
  const d = res.data;
  out.dataset.more = d.more;
  const head = h("tr", {}, ...["layout", "users", "binds first", "where", "a warm turn's pull", "handover"]
    .map(t => h("th", { scope: "col", text: t })));
  const body = d.rows.map(r => h("tr", { dataset: { layout: r.layout, users: r.users_text, aggregated: String(r.aggregated) } },
    h("th", { scope: "row", text: r.layout }), h("td", { text: r.users_text }), h("td", { text: r.binding }),
    h("td", { text: r.pool }), h("td", { text: r.warm_pull_text }), h("td", { text: r.handover_text })));
  out.append(
    h("table", { class: "data small", id: "disaggTable" },
      h("caption", { text: "Aggregated and disaggregated on these GPUs, over " + d.link
        + (d.link_assumed ? " (" + d.link_assumed + ")" : "") }),
      h("thead", {}, head), h("tbody", {}, ...body)),
    h("p", { class: "v-why", id: "disaggComparison", text: d.comparison }),
    h("code", { class: "small", id: "disaggCommand", text: d.command }));
}

// before/after: the last full answer's headline beside this one, and each ceiling whose figure changed
// (old and new as the API wrote them: nothing computed here). Shown until the next change replaces it.
function beforeAfter(old, v) {
  if (!old) return null;
  const head = x => `${x.users_text} users, ${x.binding} binds first`;
  const was = Object.fromEntries(old.ceilings.map(c => [c.name, c.text]));
  const moved = v.ceilings.filter(c => was[c.name] !== undefined && was[c.name] !== c.text)
    .map(c => `${c.name} ${was[c.name]} → ${c.text} users`);
  const text = `Before this change: ${head(old)}. Now: ${head(v)}. `
    + (moved.length ? "Moved: " + moved.join("; ") + "." : "No ceiling moved.");
  return h("p", { class: "v-before", id: "verdictBefore", dataset: { before: old.users_text, after: v.users_text,
    moved: v.ceilings.filter(c => was[c.name] !== undefined && was[c.name] !== c.text).map(c => c.name).join(",") }, text });
}

// -- derivations on demand: fetched once per drawn plan, when a "why?" is first opened -------------------

function explainBox(summary, sections, id, name) {   // name: what a screen reader hears (which number's "why?")
  const pre = h("pre", { class: "steps", id, text: "computing the derivation…" });
  const box = h("details", { class: "why", dataset: { explain: sections.join(",") } }, h("summary", { text: summary, "aria-label": name }), pre);
  box.addEventListener("toggle", () => { if (box.open) fillExplain(box, pre); });
  return box;
}

async function fillExplain(box, pre) {
  const drawn = App.drawn;
  if (!App.explain || App.explain.seq !== drawn.seq) {
    App.explain = { seq: drawn.seq, answer: post("/api/explain", drawn.body) };
  }
  const res = await App.explain.answer;
  if (!res.ok) { pre.textContent = res.data.error; return; }
  pre.textContent = box.dataset.explain.split(",").flatMap(k => res.data.sections[k] || []).map(x => x.text).join("\n") || "given";
  box.dataset.filled = String(drawn.seq);
}

function drawTiles(tiles) {
  const box = $("#tiles");
  box.textContent = "";
  for (const t of tiles) {
    const why = explainBox("why? (the derivation)", t.explain, undefined, `Why ${t.label}: the derivation`);
    box.appendChild(h("div", { class: "tile" + (t.big ? " big" : "") + (t.status ? " st-" + t.status : ""), dataset: { tile: t.id, value: t.value } },
      h("div", { class: "tl", text: t.label }),
      h("div", { class: "tv" }, t.text, t.status ? h("span", { class: "badge", text: t.status }) : null),
      h("div", { class: "ts", text: t.sub }),
      why,
      h("div", { class: "refute", text: "Proved wrong if: " + t.refuted_by })));
  }
}

function drawMemory(m, box, caption) {
  box = box || $("#memoryBar");
  box.textContent = "";
  if (!m) return;
  (caption || $("#memoryCaption")).textContent = m.caption;
  const bar = h("div", { class: "membar", role: "img", "aria-label": m.segments.map(s => `${s.label} ${s.text}`).join(", ") });
  for (const s of m.segments) {
    const seg = h("span", { class: "mseg m-" + s.id, title: `${s.label}: ${s.text}`, dataset: { seg: s.id, bytes: s.bytes } });
    seg.style.width = (100 * s.share) + "%";
    bar.appendChild(seg);
  }
  box.append(bar, h("div", { class: "legend" }, m.segments.map(s => h("span", { class: "li" }, h("span", { class: "sw m-" + s.id }), `${s.label} ${s.text}`))));
  if (m.log_lines.length) box.appendChild(h("p", { class: "small" }, "vLLM will log: ", h("code", { text: m.log_lines.join(" · ") })));
  for (const w of m.warnings) box.appendChild(h("p", { class: "small warn", text: w }));
  box.appendChild(m.steps.length
    ? h("details", { class: "why" }, h("summary", { text: "the memory derivation" }), h("pre", { class: "steps", text: m.steps.map(s => s.text).join("\n") }))
    : explainBox("the memory derivation", ["memory"]));
}

function drawLengths(a) {
  $("#capA").textContent = a.series.map(s => s.text).join(" · ");
  Charts.line($("#chartA"), {
    title: a.description, xlog: true, xLabel: "prompt length (tokens)", yLabel: "share per ln(length)",
    series: a.series.map((s, i) => ({ name: s.name, x: a.x, y: s.y, cls: i ? "c2" : "c1", dash: i ? "long" : null })),
    vlines: [{ x: a.cap, label: a.cap_text, cls: "crit" }],
  });
}

function drawRecipe(r) {
  $("#recipe").textContent = r.command;
  const ul = $("#recipeNotes");
  ul.textContent = "";
  for (const n of r.notes) ul.appendChild(h("li", { text: n }));
}

function drawBill(b) {
  const box = $("#bill");
  box.textContent = "";
  if (!b.available) { box.appendChild(h("p", { class: "muted", text: b.note })); return; }
  box.append(h("div", { class: "bill-grid" },
    h("div", { class: "bill-main", dataset: { value: b.cost_per_month } }, h("span", { class: "big", text: b.text.month }), h("span", { class: "muted", text: ` (price ${b.price_per_kwh} ${b.currency}/kWh, PUE ${b.pue})` })),
    h("div", { text: b.text.kw }), h("div", { text: b.text.user }), h("div", { text: b.text.tokens })),
    h("p", { class: "small muted", text: b.note + "; prefill busy " + (100 * b.duty.prefill_duty).toFixed(0) + "%, decoding " + (100 * b.duty.decode_duty).toFixed(0) + "%, idle " + (100 * b.duty.idle_fraction).toFixed(0) + "% of the time" }),
    explainBox("the bill's derivation", ["power"]));
}

function download(name, content) {
  const text = typeof content === "string" ? content : JSON.stringify(content, null, 2) + "\n";
  const a = h("a", { href: URL.createObjectURL(new Blob([text], { type: "application/json" })), download: name });
  document.body.appendChild(a);
  a.click();
  setTimeout(() => { URL.revokeObjectURL(a.href); a.remove(); }, 1000);
}

function drawTest(t) {
  const box = $("#testBody");
  box.textContent = "";
  const list = h("ol", { class: "hyp", id: "hypotheses" });
  for (const x of t.hypotheses) list.appendChild(h("li", { dataset: { hyp: x.id } }, h("b", { text: x.claim }),
    h("div", { class: "small", text: "measured by: " + x.measured_by }), h("div", { class: "small refute", text: "proved wrong if: " + x.refuted_if })));
  const files = h("div", { class: "preset" }, h("span", { class: "plab", text: "files" }),
    Object.keys(t.files).map(name => h("button", { type: "button", class: "dl", dataset: { file: name }, text: "⬇ " + name, onclick: () => download(name, t.files[name]) })));
  box.append(h("p", { class: "small", text: "1. Save the files; 2. run this against your server (its URL in place of localhost:8000):" }),
    h("pre", { class: "code", id: "testCommand", text: t.command }), h("button", { type: "button", class: "btn small", dataset: { copy: "testCommand" }, text: "Copy", "aria-label": "Copy the test command" }),
    files, h("p", { class: "small", text: "The hypotheses it checks (servesize-test.json holds them with the scenario):" }), list);
}

// -- the panels computed after the verdict ---------------------------------------------------------------

function scheduleHeavy(seq) {
  clearTimeout(App.heavyTimer);
  App.heavyTimer = setTimeout(() => runHeavy(seq), 200);
}

const HEAVY = [
  ["/api/charts/decode", drawDecode], ["/api/charts/miss", drawMiss], ["/api/sensitivity", drawSensitivity],
  ["/api/charts/scaling", drawScaling], ["/api/charts/batch", drawBatch], ["/api/method", drawMethod],
  ["/api/frontier", drawFrontier],   // the slowest last: it plans every catalogue model (its own status line and Cancel)
];

async function runHeavy(seq) {
  if (seq !== App.planSeq) return;
  const ctl = new AbortController();
  App.heavy = ctl;
  const body = planBody(false);
  for (const [path, draw] of HEAVY) {
    let res;
    try {
      res = path === "/api/frontier" ? await frontierWatched(body, ctl) : await post(path, body, ctl.signal);
    } catch (e) { if (path === "/api/frontier" && !ctl.signal.aborted) continue; return; }   // aborted: a newer plan is coming
    if (ctl.signal.aborted || seq !== App.planSeq) return;
    if (res.ok && !res.data.skipped) draw(res.data); else if (!res.ok) banner(res.data.error);
  }
  $("#verdict").dataset.panels = String(seq);
}

// the ranking plans every catalogue model: its own status line and Cancel (a newer plan cancels it too)
async function frontierWatched(body, heavy) {
  const ctl = new AbortController();
  heavy.signal.addEventListener("abort", () => ctl.abort());
  return await postWatched("/api/frontier", body, ctl, $("#frontierProgress"), "ranking every catalogue model on these GPUs");
}

function drawDecode(d) {
  $("#capC").textContent = d.caption;
  const zone = [{ x0: d.warm_zone[0], x1: d.warm_zone[1], cls: "c3" }];
  Charts.line($("#chartC"), {
    title: d.description,
    xlog: true, ylog: true, xLabel: "concurrent decoders per replica", yLabel: "tok/s per user",
    series: [{ name: "p50 per user", x: d.n, y: d.p50, cls: "c1", band: { lo: d.p5, hi: d.p95 } }],
    hlines: [{ y: d.floor, label: `floor ${d.floor} tok/s`, cls: "crit" }, { y: d.comfortable, label: `comfortable ${d.comfortable}`, cls: "warn" }],
    vlines: [{ x: Math.max(1, d.decode_ceiling), label: `ceiling ${d.decode_ceiling}`, cls: "c4" }], zones: zone,
    legendExtra: [{ name: "p5-p95", cls: "c1", kind: "soft" }, { name: "GPU-resident warm sessions p5-p95", cls: "c3", kind: "soft" }],
  });
  $("#capD").textContent = d.aggregate_caption;
  Charts.line($("#chartD"), {
    title: d.aggregate_description,
    xlog: true, xLabel: "concurrent decoders per replica", yLabel: "aggregate tok/s (system)",
    series: [{ name: "aggregate p50", x: d.n, y: d.aggregate_p50, cls: "c3" }],
    vlines: [{ x: Math.max(1, d.decode_ceiling), label: `decode ceiling ${d.decode_ceiling}`, cls: "c4" }], zones: zone,
  });
  drawMfu(d, zone);
}

// M: the engine's effective MFU beside the per-user tok/s, both against the same concurrency (values from charts.py)
function drawMfu(d, zone) {
  $("#capM").textContent = d.mfu_caption;
  const box = $("#chartM");
  if (!d.mfu_p50) { box.textContent = ""; return; }
  box.dataset.points = String(d.mfu_p50.length);
  Charts.line(box, {
    title: d.mfu_description, xlog: true, xLabel: "concurrent decoders per replica", yLabel: "effective MFU (p50)", yMin: 0,
    fmtY: v => (100 * v).toFixed(v < 0.1 ? 1 : 0) + "%",
    series: [{ name: "effective MFU p50", x: d.n, y: d.mfu_p50, cls: "c2" }],
    points: d.n.filter((_, i) => i % 12 === 0).map(n => { const i = d.n.indexOf(n); return { x: n, y: d.mfu_p50[i], label: d.p50_text[i], cls: "c1", show: true }; }),
    vlines: [{ x: Math.max(1, d.decode_ceiling), label: `decode ceiling ${d.decode_ceiling}`, cls: "c4" }], zones: zone,
    legendExtra: [{ name: "labels: per-user tok/s (p50) at that concurrency", cls: "c1", kind: "soft" }],
  });
}

// the method section: the engine's own derivation steps (formula, then figures, then value), and the FAQ
function drawMethod(m) {
  $("#capMethod").textContent = m.caption;
  const box = $("#method");
  box.textContent = "";
  for (const sec of m.sections) {
    box.appendChild(h("details", { class: "fold method-sec", dataset: { section: sec.id } },
      h("summary", { text: `${sec.title}: ${sec.answers}` }),
      h("ol", { class: "steps small" }, sec.steps.map(s => h("li", { class: "step k-" + s.kind, dataset: { kind: s.kind, name: s.name } },
        h("code", { text: s.formula || `${s.name} = ${s.text}` }),
        s.figures ? h("div", { class: "figures", text: `= ${s.figures} = ${s.text}` }) : null,
        h("span", { class: "badge " + (s.kind === "modelled" ? "warn" : ""), text: s.kind }),
        s.source ? h("div", { class: "muted", text: s.source }) : null,
        s.note ? h("div", { class: "muted", text: s.note } ) : null)))));
  }
  box.appendChild(h("details", { class: "fold", dataset: { section: "assumptions" } }, h("summary", { text: `Modelled assumptions (${m.assumptions.length})` }),
    h("ul", { class: "small" }, m.assumptions.map(a => h("li", { text: a.text })))));
  const faq = $("#faq");
  faq.textContent = "";
  for (const item of m.faq) faq.appendChild(h("details", { class: "fold faq" }, h("summary", { text: item.q }), h("p", { class: "small", text: item.a })));
}

function drawMiss(m) {
  $("#capG").textContent = m.caption;
  const dash = { cache: null, decode: "long", latency: "dot", saturation: "dashdot" };
  Charts.line($("#chartG"), {
    title: m.description,
    xLabel: "cache-miss rate", yLabel: "users", fmtX: v => (100 * v).toFixed(v < 0.1 ? 1 : 0) + "%",
    series: Object.keys(m.ceilings).map(c => ({ name: c, x: m.x, y: m.ceilings[c], cls: c, dash: dash[c] })),
    vlines: [{ x: m.current, label: "now", cls: "text" }, ...m.binding_changes.slice(0, 1).map(x => ({ x, label: "binding changes", cls: "muted" }))],
    hlines: App.plan.load_users ? [{ y: m.load, label: `your load ${Math.round(m.load)}`, cls: "text" }] : [],
  });
  $("#capF").textContent = m.burst_caption;
  Charts.line($("#chartF"), {
    title: m.burst_description,
    xLabel: "cache-miss rate", yLabel: "misses at once (B*)", fmtX: v => (100 * v).toFixed(v < 0.1 ? 1 : 0) + "%",
    series: [{ name: "B*", x: m.x, y: m.burst_tolerance, cls: "c1" }],
    hlines: [{ y: 1, label: "absorbs < 1 miss below this", cls: "crit" }],
    vlines: [{ x: m.current, label: "now", cls: "text" }],
  });
}

function drawScaling(s) {
  $("#capB").textContent = s.caption;
  const pts = arr => arr.filter(p => p.p5 !== null);
  const tp = pts(s.tp), dp = pts(s.dp);
  const cur = [...s.tp, ...s.dp].find(p => p.tp === s.current.tp && p.dp === s.current.dp && p.p5 !== null);
  Charts.line($("#chartB"), {
    title: s.description,
    xLabel: "GPUs", yLabel: "warm users p5", fmtX: v => String(v),
    series: [{ name: "TP: one shared cache (band to p95)", x: tp.map(p => p.gpus), y: tp.map(p => p.p5), cls: "c1", dots: true, band: { lo: tp.map(p => p.p5), hi: tp.map(p => p.p95) } },
             { name: `DP: replicas of TP ${s.current.tp} (system, sticky routing)`, x: dp.map(p => p.gpus), y: dp.map(p => p.p5), cls: "c3", dash: "long", dots: true }],
    points: cur ? [{ x: cur.gpus, y: cur.p5, label: "your configuration", cls: "text" }] : [],
  });
}

function drawBatch(b) {
  $("#capE").textContent = b.caption;
  const ok = b.points.filter(p => p.pool_tokens !== undefined);
  const box = $("#chartE");
  Charts.line(box, {
    title: b.description, xlog: true, xLabel: "max_num_batched_tokens", yLabel: "warm users p5",
    series: [{ name: "warm users p5", x: ok.map(p => p.tokens), y: ok.map(p => p.warm_p5), cls: "c1", dots: true }],
    vlines: b.current ? [{ x: b.current, label: "now " + b.current, cls: "text" }] : [],
  });
  box.appendChild(scrollable(h("div", { class: "table-wrap" }, h("table", { class: "data small" },
    h("thead", {}, h("tr", {}, ["max_num_batched_tokens", "activation reserve", "KV pool", "warm users p5"].map(t => h("th", { text: t })))),
    h("tbody", {}, b.points.map(p => h("tr", { class: p.tokens === b.current ? "current" : "" },
      h("td", { class: "num", text: p.tokens.toLocaleString("en") }),
      ...(p.reason ? [h("td", { colspan: 3, text: p.reason })]
        : [h("td", { class: "num", text: p.activation_text }), h("td", { class: "num", text: p.pool_text + " tokens" }),
           h("td", { class: "num", text: Math.round(p.warm_p5).toLocaleString("en") })]))))))));
}

function drawSensitivity(s) {
  $("#capSens").textContent = s.caption;
  const line = $("#verdictSentence"), detail = $("#verdictDetail");   // the same verdict, now with the seed's answer (plan.vs_seed)
  if (line && detail) {   // the seed's answer on a line of its own, under the verdict's detail (a phone leaves it out)
    const old = $("#verdictSeed");
    if (old) old.remove();
    line.dataset.seed = s.vs_seed ? s.vs_seed.assumption : "";
    if (s.seed_sentence) line.after(h("p", { class: "v-detail v-seed", id: "verdictSeed", text: s.seed_sentence[0].toUpperCase() + s.seed_sentence.slice(1) + "." }));
  }
  const box = $("#sensRows");
  box.textContent = "";
  for (const r of s.rows) {
    const [lo, hi] = r.range, span = hi - lo || 1;
    const pos = v => Math.min(100, Math.max(0, 100 * (v - lo) / span));
    const track = h("div", { class: "sens-track" });
    const base = h("span", { class: "sens-base bg-" + (r.binding_at_current || "muted") });
    track.appendChild(base);
    if (r.flip_at !== null && r.flip_at !== undefined) {
      const after = h("span", { class: "sens-after bg-" + r.binds_after });
      const right = r.flip_at > r.current;
      after.style.left = (right ? pos(r.flip_at) : 0) + "%";
      after.style.width = (right ? 100 - pos(r.flip_at) : pos(r.flip_at)) + "%";
      track.appendChild(after);
      const tick = h("span", { class: "sens-tick" });
      tick.style.left = pos(r.flip_at) + "%";
      track.appendChild(tick);
    }
    const now = h("span", { class: "sens-now", text: "▼" });
    now.style.left = pos(r.current) + "%";
    track.appendChild(now);
    box.appendChild(h("div", { class: "sens-row", dataset: { sens: r.name, flip: r.flip_at ?? "" } },
      h("span", { class: "sens-name", text: r.name.replaceAll("_", " ") }), track, h("span", { class: "sens-text small", text: r.text })));
  }
  box.appendChild(h("p", { class: "small muted", text: "Colour: the ceiling that binds; beyond the tick, the one that takes over (further flips are not searched)." }));
}

function drawFrontier(f) {
  $("#capFrontier").textContent = f.caption;
  const box = $("#frontier");
  box.textContent = "";
  const table = h("table", { class: "data", id: "frontierTable" },
    h("thead", {}, h("tr", {}, ["model", "split", "users", "binding", "warm p5", "cache", "decode", "latency", "saturation", "bill / month"].map(t => h("th", { text: t })))));
  const body = h("tbody");
  for (const r of f.rows) {
    const short = r.context_shortfall;
    const tr = h("tr", { class: (r.current ? "current" : "") + (short ? " short" : ""), dataset: { model: r.model, tp: r.tp, dp: r.dp, users: r.users,
      short: short ? "true" : "false" } },
      h("td", {}, h("button", { type: "button", class: "link-btn", text: r.model, "aria-label": `Plan ${r.model} as DP ${r.dp} × TP ${r.tp}` }),
        short ? h("span", { class: "badge crit", text: "context too short" }) : null,
        short ? h("div", { class: "muted short-why", text: short.text }) : null), h("td", { text: `DP ${r.dp} × TP ${r.tp}` }), h("td", { class: "num", text: Math.round(r.users).toLocaleString("en") }),
      h("td", {}, h("span", { class: "bind c-" + r.binding, text: r.binding })), h("td", { class: "num", text: Math.round(r.warm_p5).toLocaleString("en") }),
      ...["cache", "decode", "latency", "saturation"].map(c => h("td", { class: "num", text: r.ceilings[c] === null ? "-" : Math.round(r.ceilings[c]).toLocaleString("en") })),
      h("td", { class: "num", text: r.cost_per_month === null ? "-" : Math.round(r.cost_per_month).toLocaleString("en") }));
    tr.addEventListener("click", () => {
      App.plan.model = r.model;
      if (r.tp > 1) App.plan.tensor_parallel_size = r.tp; else delete App.plan.tensor_parallel_size;
      if (r.dp > 1) App.plan.data_parallel_size = r.dp; else delete App.plan.data_parallel_size;
      for (const k of ["mtp_speedup", "spec_acceptance", "num_speculative_tokens"]) delete App.plan[k];
      window.scrollTo({ top: 0 });
      requestPlan(false);
    });
    body.appendChild(tr);
  }
  table.appendChild(body);
  box.appendChild(table);
  if (f.refused.length) box.appendChild(h("details", { class: "fold" }, h("summary", { text: `${f.refused.length} model × split combinations do not fit` }),
    h("ul", { class: "small" }, f.refused.map(r => h("li", { text: `${r.model} DP ${r.dp} × TP ${r.tp}: ${r.reason}` })))));
}

// -- the way back: a log, a record ----------------------------------------------------------------------

function logHints() {
  // the controls a visitor changed; the rest the server reads from the log, else from the page's flags
  const out = {};
  for (const box of $$("#logHints [data-hint]")) if (box.dataset.touched === "true") out[box.dataset.hint] = box.value.trim();
  return out;
}

function hintControl(c) {
  const id = "hint-" + c.name;
  const attrs = { id, dataset: { hint: c.name, touched: c.from === "given" ? "true" : "false" }, title: c.help,
    onchange: e => { e.target.dataset.touched = "true"; } };
  const box = c.choices.length
    ? h("select", attrs, h("option", { value: "", text: "-" }), c.choices.map(x => h("option", { value: x, text: x, selected: x === c.value })))
    : h("input", { ...attrs, type: "text", inputmode: "numeric", value: c.value === null ? "" : String(c.value),
      placeholder: c.page === null ? "from the log" : String(c.page) });
  const from = c.from === "given" ? "as you gave it" : c.from ? "from the page's flags" : "not given";
  return h("div", { class: "field" }, h("label", { for: id, text: c.label }), box,
    h("span", { class: "muted small", text: from }), h("div", { class: "err", dataset: { errFor: "hint_" + c.name } }));
}

async function calibrate() {
  const text = $("#logText").value;
  clearErrors($("#testCard"));
  const out = $("#calibrateOut");
  const hints = logHints();
  out.setAttribute("aria-busy", "true");
  const res = await post("/api/calibrate", { ...App.plan, vllm_log: text, log_hints: hints });
  out.removeAttribute("aria-busy");
  if (!res.ok) { showError(res.data.field || "vllm_log", res.data.error); return; }
  out.textContent = "";
  const d = res.data;
  out.append(h("p", { class: "verdict-line", id: "calibrateApplied", text: d.applied_text }),
    h("table", { class: "data small", id: "calibrateTable" }, h("thead", {}, h("tr", {}, ["quantity", "predicted", "logged", "error"].map(t => h("th", { text: t })))),
      h("tbody", {}, d.checks.map(c => h("tr", {}, h("td", { text: c.name }), h("td", { class: "num", text: c.text.predicted }),
        h("td", { class: "num", text: c.text.logged }), h("td", { class: "num", text: c.text.error }))))),
    h("ul", { class: "small muted", id: "calibrateNotes" }, d.notes.map(n => h("li", { text: n }))),
    h("details", { class: "fold", id: "logHints", open: !d.usable },
      h("summary", { text: "What the log does not print (a hybrid model's KV-cache groups, block size, ...)" }),
      h("div", { class: "grid-fields" }, d.controls.map(hintControl)),
      h("button", { type: "button", class: "btn", id: "recalibrateBtn", text: "Recalibrate with these", onclick: calibrate })));
  App.plan.calibration = d.calibration;
  requestPlan(false);
}

async function loadRecord(file) {
  clearErrors($("#testCard"));
  const out = $("#recordOut");
  out.textContent = "";
  const res = await post("/api/record", { ...App.plan, record: await file.text() });
  if (!res.ok) { showError(res.data.field || "record", res.data.error); return; }
  const d = res.data;
  out.appendChild(h("p", { class: "verdict-line", id: "recordVerdict", text: d.verdict.line }));
  if (d.kind === "sessions") {
    out.appendChild(h("table", { class: "data small" }, h("thead", {}, h("tr", {}, ["users", "warm-hit rate", "decode tok/s p50", "errors"].map(t => h("th", { text: t })))),
      h("tbody", {}, d.rungs.map(g => h("tr", {}, h("td", { class: "num", text: String(g.users) }),
        h("td", { class: "num", text: g.warm_hit_rate === null ? "-" : (100 * g.warm_hit_rate).toFixed(0) + "%" }),
        h("td", { class: "num", text: g.decode_tok_per_s_p50 === null ? "-" : g.decode_tok_per_s_p50.toFixed(1) }), h("td", { class: "num", text: String(g.errors) }))))));
  }
  if (d.apply) out.appendChild(h("button", { type: "button", class: "btn", id: "applyRecord", text: `Plan with the measured pool (${Math.round(d.apply.pool_tokens).toLocaleString("en")} tokens)`,
    onclick: () => { Object.assign(App.plan, d.apply); requestPlan(false); } }));
}

// -- view 1: what fits -------------------------------------------------------------------------------------

function scheduleFit(draft) {
  clearTimeout(App.fitTimer);
  $("#fitTable").dataset.pending = "true";  // an answer is due: the table shows the settings before this change
  App.fitTimer = setTimeout(runFit, draft ? 150 : 0);
}

async function runFit() {
  const seq = ++App.fitSeq;
  $("#fitTable").dataset.pending = "true";
  const res = await post("/api/fit", App.fit);
  if (seq !== App.fitSeq) return;
  $("#fitTable").dataset.pending = "false";
  clearErrors($("#view-fit"));
  banner("");
  const eff = res.ok ? res.data.effective : {};
  for (const [name, box] of Object.entries(App.fitBoxes)) {
    const explicit = name in App.fit;
    if (box.sync) box.sync(explicit ? App.fit[name] : (eff[name] ?? App.cat.form.fit.fields[name].default), explicit);
    const v = $("#fitv-" + name);
    if (v) v.textContent = explicit || eff[name] === undefined ? "" : "now " + showValue(App.cat.form.fit.fields[name], eff[name]);
  }
  const table = $("#fitTable");
  table.dataset.seq = seq;
  if (!res.ok) {
    table.dataset.state = "error";
    showError(res.data.field, res.data.error, $("#view-fit"));
    // with no table drawn yet (a link refused on opening), the table's place says so, naming the field
    if (!App.lastFit) table.replaceChildren(h("p", { class: "v-stale", id: "fitStale", dataset: { field: res.data.field || "" }, text: "Refused: " + res.data.error }));
    return;
  }
  table.dataset.state = "full";
  App.lastFit = res.data;
  writeHash();
  drawFit();
}

function drawFit() {
  const d = App.lastFit, box = $("#fitTable");
  $("#fitCaption").textContent = "What fits: " + d.caption;
  // what these figures assume where the calculator page differs, and one click to its reading (or back)
  const a = d.assumes, to = a.calculator ? "servesize's reading (each checkpoint's own precision, the engine budget)"
    : "the calculator page's reading (bf16, simple budget)";
  $("#fitAssumes").replaceChildren(a.text, " ", h("button", { type: "button", class: "btn small", id: "fitCalculator", text: "Switch to " + to,
    onclick: () => {
      for (const [k, v] of Object.entries(a.switch)) { if (a.calculator) delete App.fit[k]; else App.fit[k] = v; }
      scheduleFit(false);
    } }));
  const rows = [...d.rows];
  const { key, dir } = App.fitSort;
  if (key) rows.sort((a, b) => (a[key] > b[key] ? 1 : a[key] < b[key] ? -1 : 0) * dir);
  box.textContent = "";
  // each header is a button (a keyboard sorts too); the column's order is announced by aria-sort
  const head = h("tr", {}, d.columns.map(({ key: k, label }) => h("th", { class: "sortable" + (k === key ? (dir > 0 ? " asc" : " desc") : ""), dataset: { sort: k },
    "aria-sort": k === key ? (dir > 0 ? "ascending" : "descending") : "none" },
    h("button", { type: "button", class: "sort-btn", text: label, onclick: () => { App.fitSort = { key: k, dir: App.fitSort.key === k ? -App.fitSort.dir : -1 }; drawFit(); $(`#fitRows th[data-sort="${k}"] button`).focus(); } }))),
    h("th", {}, h("span", { class: "sr-only", text: "actions" })));
  const body = h("tbody");
  for (const r of rows) {
    const name = `${r.cells.model}, ${r.cells.precision}, ${r.cells.tp}`;   // which row a button acts on, for a screen reader
    body.appendChild(h("tr", { dataset: { model: r.model, precision: r.precision, quantization: r.quantization, tp: r.tp, replicas: r.replicas,
      concurrent: r.concurrent_per_replica, total: r.concurrent_total } },
      d.columns.map(({ key: k }) => h("td", { class: typeof r[k] === "number" ? "num" : "", dataset: { col: k }, text: r.cells[k] })),
      h("td", {}, h("button", { type: "button", class: "btn small", text: "why", "aria-label": `why: the memory derivation of ${name}`, onclick: () => explainCell(r) }),
        h("button", { type: "button", class: "btn small", text: "plan it →", "aria-label": `plan it → ${name}`, onclick: () => openInPlan(r) }))));
  }
  box.appendChild(h("table", { class: "data", id: "fitRows" }, h("thead", {}, head), body));
  const refused = $("#fitRefusedBody");
  refused.textContent = "";
  refused.appendChild(h("ul", { class: "small" }, d.fit.refused.map(r => h("li", { text: `${r.model}: ${r.reason}` }))));
}

async function explainCell(row) {
  const res = await post("/api/fit/cell", { query: App.fit, row });
  const card = $("#fitCellCard"), body = $("#fitCellBody");
  card.hidden = false;
  body.textContent = "";
  if (!res.ok) { body.appendChild(h("p", { class: "crit", text: res.data.error })); return; }
  $("#fitCellTitle").textContent = `Derivation: ${res.data.title} → ${res.data.concurrency} sequences per replica`;
  const bar = h("div", {}), caption = h("p", { class: "cs" });
  body.append(caption, bar, h("pre", { class: "steps", id: "fitCellSteps", text: res.data.steps.map(s => s.text).join("\n") }));
  drawMemory(res.data.memory, bar, caption);
  card.scrollIntoView({ block: "nearest" });
}

function openInPlan(r) {
  replaceStore(App.plan, { model: r.model, gpus: App.fit.gpus });
  if (r.quantization !== "native") App.plan.quantization = r.quantization;
  if (r.tp > 1) App.plan.tensor_parallel_size = r.tp;
  if (r.replicas > 1) App.plan.data_parallel_size = r.replicas;
  for (const k of ["kv_cache_dtype", "gpu_memory_utilization", "vllm_version", "budget"]) if (App.fit[k] !== undefined) App.plan[k] = App.fit[k];
  switchView("plan");
  requestPlan(false);
}

async function runMatrix() {
  const gpus = App.cat.gpus.map(g => g.key);
  const cells = {};
  const box = $("#matrixTable");
  for (let i = 0; i < gpus.length; i++) {
    $("#matrixProgress").textContent = ` ${i + 1} of ${gpus.length}: ${gpus[i]}…`;
    const res = await post("/api/fit/matrix", { query: App.fit, gpu: gpus[i] });
    if (!res.ok) { $("#matrixProgress").textContent = " " + res.data.error; return; }
    cells[gpus[i]] = res.data.cells;
    drawMatrix(box, gpus.slice(0, i + 1), cells, res.data.count);
  }
  $("#matrixProgress").textContent = " done";
}

function drawMatrix(box, gpus, cells, count) {
  box.textContent = "";
  const models = App.cat.models.rows.map(r => r.key);
  box.appendChild(h("table", { class: "data small", id: "matrix" },
    h("thead", {}, h("tr", {}, h("th", { text: `model \\ ${count} ×` }), gpus.map(g => h("th", { text: g })))),
    h("tbody", {}, models.map(m => h("tr", {}, h("td", { text: m }), gpus.map(g => {
      const c = cells[g][m];
      return h("td", { class: "num" + (c ? "" : " muted"), title: c ? `${c.precision}, TP ${c.tp} × ${c.replicas}` : "does not fit", text: c ? c.concurrent_total.toLocaleString("en") : "—" });
    }))))));
}

function drawKvTable() {
  const m = App.cat.models;
  $("#kvNote").textContent = m.note;
  $("#kvTable").appendChild(h("table", { class: "data small", id: "kvRows" },
    h("thead", {}, h("tr", {}, ["model", "params", "layers", "heads", "KV heads", "KV / token", "KV / 1Ki tokens", "state / sequence", "weights"].map(t => h("th", { text: t })))),
    h("tbody", {}, m.rows.map(r => h("tr", { dataset: { model: r.key, kv: r.kv_bytes_per_token } }, h("td", {}, r.display, h("div", { class: "muted small", text: r.hf_id || r.key })),
      h("td", { text: r.text.params }), h("td", { text: r.layers }), h("td", { class: "num", text: String(r.heads) }), h("td", { class: "num", text: String(r.kv_heads) }),
      h("td", { class: "num", text: r.text.kv_per_token }), h("td", { class: "num", text: r.text.kv_per_1ki }), h("td", { class: "num", text: r.text.state }), h("td", { text: r.weights }))))));
}

// -- view 3: the cheapest fleet ------------------------------------------------------------------------------

function buildFleetForm() {
  const side = $("#fleetControls");
  const form = App.cat.form.fleet, fields = form.fields;
  App.fleetBoxes = {};
  const changed = () => runFleet();
  for (const sec of form.sections) {
    const grid = h("div", { class: "ctl-grid" });
    const panel = sec.collapsed
      ? h("details", { class: "panel controls fold", id: "sec-" + sec.id }, h("summary", { text: sec.title }), h("p", { class: "lede", text: sec.lede }), grid)
      : h("div", { class: "panel controls", id: "sec-" + sec.id }, h("div", { class: "section-h", text: sec.title }), h("p", { class: "lede", text: sec.lede }), grid);
    for (const name of sec.fields) {
      const spec = { ...fields[name], label: LABELS[name] };
      let box;
      if (spec.widget === "teams") box = teamsControl(spec, App.fleet, changed, "fl-", fleetTeamsWrote);
      else if (spec.widget === "multi") box = multiControl(spec, App.fleet, changed, "fl-", true);
      else box = makeControl(spec, App.fleet, changed, "fl-");
      App.fleetBoxes[name] = box;
      grid.appendChild(box);
      if (name === "preset") grid.appendChild(presetRow(App.cat.presets.workload, App.fleet, changed));
    }
    side.appendChild(panel);
  }
  side.appendChild(h("div", { class: "panel controls" }, h("button", { type: "button", class: "btn", id: "fleetRun", text: "Search again", onclick: () => runFleet() })));
  syncFleetControls();
}

// the teams: one row per team (name, users, its preset or the fleet's workload, a priority), written into
// the query's own repeatable fields, team = NAME=USERS[:PRESET] and priority = NAME=LEVEL
function teamsControl(spec, store, changed, pfx, wrote) {
  const presets = App.cat.form.fleet.fields.preset.choices;
  const rows = h("div", { class: "team-rows", id: pfx + "teams" });
  const read = () => {
    const team = [], priority = [];
    for (const r of $$(".team-row", rows)) {
      const [name, users, preset, level] = $$("input, select", r).map(e => e.value.trim());
      if (!name && !users) continue;
      team.push(`${name}=${users}` + (preset ? ":" + preset : ""));
      if (level) priority.push(`${name}=${level}`);
    }
    return [team, priority];
  };
  const write = () => {
    const [team, priority] = read();
    if (team.length) store.team = team; else delete store.team;
    if (priority.length) store.priority = priority; else delete store.priority;
    if (wrote) wrote();
    changed("team", false);
  };
  const row = (name, users, preset, level) => {
    const sel = h("select", { class: "team-preset", "aria-label": "team workload" }, h("option", { value: "", text: "the fleet's workload" }),
      presets.map(p => h("option", { value: p, text: p })));
    sel.value = preset || "";
    const r = h("div", { class: "team-row" },
      h("input", { type: "text", class: "team-name", placeholder: "name", value: name || "", "aria-label": "team name" }),
      h("input", { type: "text", class: "num team-users", placeholder: "users", value: users || "", "aria-label": "team users" }),
      sel,
      h("input", { type: "text", class: "num team-priority", placeholder: "priority", value: level || "", "aria-label": "team priority", title: "prefill-queue priority: higher first; empty = 0" }),
      h("button", { type: "button", class: "btn small team-remove", text: "×", title: "remove this team", onclick: () => { r.remove(); write(); } }));
    for (const e of $$("input, select", r)) e.addEventListener("change", write);
    return r;
  };
  const add = h("button", { type: "button", class: "btn small", id: pfx + "team-add", text: "+ add a team",
    onclick: () => { rows.appendChild(row()); $(".team-name", rows.lastChild).focus(); } });
  const box = fieldBox({ ...spec, default_text: pfx === "fl-" ? "none: the users above share one workload" : "", range_text: "" },
    h("div", {}, rows, add, h("div", { class: "err", dataset: { errFor: "priority" } })), pfx);
  box.sync = () => {   // rows rebuilt only when the query says something else (a share link, a preset)
    if (JSON.stringify(read()) === JSON.stringify([store.team || [], store.priority || []])) return;
    rows.textContent = "";
    const levels = Object.fromEntries((store.priority || []).map(x => x.split("=")));
    for (const t of store.team || []) {
      const [name, rest] = [t.slice(0, t.indexOf("=")), t.slice(t.indexOf("=") + 1)];
      const [users, preset] = rest.split(":");
      rows.appendChild(row(name, users, preset, levels[name]));
    }
  };
  return box;
}

// teams replace the one workload's users (FleetQuery takes one or the other); the users come back with no team
function fleetTeamsWrote() {
  if (App.fleet.team) {
    if (App.fleet.users !== undefined) { App.fleetUsersBefore = App.fleet.users; delete App.fleet.users; }
  } else if (App.fleet.users === undefined && App.fleetUsersBefore !== undefined) {
    App.fleet.users = App.fleetUsersBefore;
  }
  syncFleetControls();
}

// a long request with the server's own status line: the library's last stage and its seconds (GET
// /api/progress/JOB, polled while it runs; the text is the server's), and a Cancel that aborts it (the server then
// stops at the next stage)
async function postWatched(path, body, ctl, line, what) {
  const job = "j" + Date.now().toString(36) + Math.random().toString(36).slice(2, 10);
  line.hidden = false;
  line.textContent = "";
  line.dataset.stages = "0";
  const text = h("span", { class: "spinner-text", text: what + "…" });
  const spin = h("span", { class: "spinner", "aria-hidden": "true" });
  const cancel = h("button", { type: "button", class: "btn small cancel", text: "Cancel",
    onclick: () => { ctl.abort(); text.textContent = "cancelled: " + what; cancel.remove(); spin.remove(); } });
  line.append(spin, text, " ", cancel);
  line.setAttribute("role", "status");
  let done = false;
  // a poll's body is read under the same signal, so a Cancel can land while it is read: it then answers nothing
  const timer = setInterval(async () => {
    try {
      const r = await fetch("/api/progress/" + job, { signal: ctl.signal });
      if (!r.ok) return;
      const p = await r.json();
      if (done || ctl.signal.aborted) return;
      text.textContent = `${what}: ${p.text}`;
      line.dataset.stages = String(p.stages);
    } catch (e) { return; }   // aborted, or the server gone: the request's own answer says which
  }, 400);
  try { return await post(path, body, ctl.signal, { "X-Servesize-Job": job }); }
  finally { done = true; clearInterval(timer); if (!ctl.signal.aborted) line.hidden = true; }
}

function syncFleetControls() {
  const fields = App.cat.form.fleet.fields;
  for (const [name, box] of Object.entries(App.fleetBoxes || {})) {
    const explicit = Object.prototype.hasOwnProperty.call(App.fleet, name);
    if (box.sync) box.sync(explicit ? App.fleet[name] : fields[name].default, explicit);
  }
  const users = $("#fl-users");
  if (users) users.disabled = !!App.fleet.team;
}

async function runFleet() {
  const seq = ++App.fleetSeq;
  if (App.fleetCtl) App.fleetCtl.abort();        // a newer query supersedes the search still running
  const ctl = new AbortController();
  App.fleetCtl = ctl;
  const box = $("#fleetVerdict"), progress = $("#fleetProgress");
  box.dataset.pending = "true";
  $("#view-fleet .main").classList.add("searching");
  let res;
  try { res = await postWatched("/api/fleet", App.fleet, ctl, progress, "searching GPU type × count × precision × KV dtype × TP/DP"); } catch (e) {
    if (!ctl.signal.aborted) { banner("the server did not answer: " + e.message); }
    box.dataset.pending = "false";
    $("#view-fleet .main").classList.remove("searching");
    return;
  }
  if (seq !== App.fleetSeq) return;              // a newer search is on its way: draw that one
  App.fleetCtl = null;
  box.dataset.pending = "false";
  progress.hidden = true;
  $("#view-fleet .main").classList.remove("searching");
  clearErrors($("#view-fleet"));
  banner("");
  syncFleetControls();
  if (!res.ok) {
    box.dataset.state = "error";
    box.dataset.seq = seq;
    const field = res.data.field === "priority" ? "priority" : res.data.field;
    showError(field, res.data.error, $("#view-fleet"));
    for (const old of $$(".v-stale", box)) old.remove();
    if (!App.lastFleet) box.textContent = "";   // a link refused on opening: an error, never the "Searching…" placeholder
    box.prepend(h("p", { class: "v-stale", id: "fleetStale", dataset: { field: field || "" },
      text: (App.lastFleet ? "Not updated, the last change was refused: " : "Refused: ") + res.data.error }));
    return;
  }
  App.lastFleet = res.data;
  writeHash();
  drawFleet(res.data, seq);
}

const money = (v, cur) => v === null || v === undefined ? "-" : (v >= 100 ? Math.round(v).toLocaleString("en") : v.toFixed(2)) + " " + cur;
const count = v => v === null || v === undefined ? "-" : Math.round(v).toLocaleString("en");

function drawFleet(d, seq) {
  const f = d.fleet, w = f.winner, hl = d.headline, box = $("#fleetVerdict");
  box.textContent = "";
  box.dataset.state = hl.found ? "full" : "none";
  box.dataset.seq = seq;
  box.dataset.users = f.users;
  box.dataset.gpus = w ? w.gpus : "";
  box.dataset.cost = w ? w.cost_per_month : "";
  box.dataset.perUser = w ? w.cost_per_user_month : "";
  box.dataset.binding = w ? w.binding : "";
  box.append(h("p", { class: "v-title", text: hl.title }));
  if (hl.found) {
    box.append(h("h2", { class: "v-head", id: "fleetHead" }, h("span", { class: "big", text: hl.shape })),
      h("p", { class: "v-cost", id: "fleetCost" }, h("b", { text: hl.cost }), " · ", h("b", { text: hl.per_user })),
      h("p", { class: "v-why", text: hl.text }));
    const ceilings = (f.plan && f.plan.ceilings) || null;
    if (ceilings) {
      const max = Math.max(...Object.values(ceilings).map(x => x || 0)) || 1;
      const bars = h("div", { class: "ceil-bars", id: "fleetCeilings" });
      for (const c of d.ceilings) {
        const fill = h("span", { class: "fill bg-" + c });
        fill.style.width = Math.max(1, 100 * (ceilings[c] || 0) / max) + "%";
        bars.appendChild(h("div", { class: "ceil" + (c === f.plan.binding ? " binding" : ""), dataset: { ceiling: c, value: ceilings[c] } },
          h("span", { class: "cname", text: c }), h("span", { class: "track" }, fill), h("span", { class: "cval", text: count(ceilings[c]) + " users" })));
      }
      box.appendChild(bars);
    }
  } else {
    box.append(h("h2", { class: "v-head crit", id: "fleetHead", text: "none serves them" }), h("p", { class: "v-why", text: hl.text }));
  }
  if (hl.next) box.appendChild(h("p", { class: "v-next", text: hl.next }));
  drawFleetOptions(f);
  drawFleetFrontier(d);
  drawFleetTeams(d);
  $("#fleetRecipe").textContent = f.recipe || "no fleet in the search space serves everyone";
  const notes = $("#fleetRecipeNotes");
  notes.textContent = "";
  for (const n of f.recipe_notes) notes.appendChild(h("li", { text: n }));
  $("#fleetConfirm").textContent = f.plan_command || (f.teams.length > 1 ? "several teams: servesize plan plans one workload; the table above is the teams' own check" : "-");
  $("#fleetOpenPlan").hidden = !d.open_plan;
  $("#fleetSearched").textContent = `${f.searched.shapes.toLocaleString("en")} replica shapes fit, at most ${f.max_gpus} GPUs; ${f.price_basis}, ${f.currency}, ${f.hours_per_month} h/month; routing ${f.routing}.`
    + (d.skipped_text ? ` Skipped: ${d.skipped_text}.` : "");
  const skipped = $("#fleetSkippedBody");
  skipped.textContent = "";
  skipped.appendChild(h("ul", { class: "small", id: "fleetSkippedList" }, f.skipped.map(x => h("li", { text: `${x.what}: ${x.why}` }))));
  const prices = $("#fleetPrices");
  prices.textContent = "";
  prices.appendChild(h("table", { class: "data small", id: "fleetPriceRows" },
    h("thead", {}, h("tr", {}, ["GPU", "per GPU-hour", "provider, offer", "date", "source"].map(t => h("th", { text: t })))),
    h("tbody", {}, f.prices.map(p => h("tr", { dataset: { gpu: p.gpu, price: p.per_hour } }, h("td", { text: p.gpu }),
      h("td", { class: "num", text: `${p.per_hour} ${p.currency}` }), h("td", { text: `${p.provider}, ${p.offer}` }),
      h("td", { text: p.date || "given" }), h("td", { class: "small muted", text: p.source }))))));
}

function optionRow(o, i, teams) {
  return h("tr", { class: i === 0 ? "current" : "", dataset: { gpus: o.gpus, tp: o.tp, dp: o.dp, model: o.model, precision: o.precision,
    kv: o.kv_cache_dtype, cost: o.cost_per_month, perUser: o.cost_per_user_month, users: o.users_served, binding: o.binding } },
    h("td", { class: "num", text: String(i + 1) }), h("td", { text: o.gpus }), h("td", { text: `${o.tp} × ${o.dp}` }), h("td", { text: o.model }),
    h("td", { text: o.weights_precision }), h("td", { text: o.kv_cache_dtype }), h("td", { class: "num", text: money(o.cost_per_month, o.currency) }),
    h("td", { class: "num", text: money(o.cost_per_user_month, o.currency) }),
    h("td", { class: "num", text: (o.users_served_is_lower_bound ? "≥" : "") + count(o.users_served) }),
    h("td", {}, h("span", { class: "bind c-" + o.binding, text: o.binding + (teams > 1 ? ` (${o.binding_team})` : "") })));
}

function drawFleetOptions(f) {
  const box = $("#fleetOptions");
  box.textContent = "";
  if (!f.options.length) { box.appendChild(h("p", { class: "muted", text: "none: see what was skipped, and why" })); return; }
  box.appendChild(h("table", { class: "data", id: "fleetOptionRows" },
    h("thead", {}, h("tr", {}, ["#", "GPUs", "TP × DP", "model", "weights", "KV", "cost / month", "per user-month", "users served", "binds"].map(t => h("th", { text: t })))),
    h("tbody", {}, f.options.map((o, i) => optionRow(o, i, f.teams.length)))));
}

function drawFleetFrontier(d) {
  const c = d.frontier_chart, f = d.fleet;
  $("#capFleet").textContent = c.caption;
  Charts.line($("#chartFleet"), {
    title: c.description,
    xLabel: "users served", yLabel: `cost per month (${c.currency})`,
    series: [{ name: "frontier: no cheaper fleet serves as many", x: c.x, y: c.y, cls: "c1", dots: true }],
    vlines: [{ x: c.users, label: `${c.users.toLocaleString("en")} users asked for`, cls: "crit" }],
    points: f.winner ? [{ x: f.winner.users_served, y: f.winner.cost_per_month, label: "cheapest that serves all", cls: "text" }] : [],
  });
  const box = $("#fleetFrontier");
  box.textContent = "";
  box.appendChild(h("table", { class: "data small", id: "fleetFrontierRows" },
    h("thead", {}, h("tr", {}, ["users served", "cost / month", "fleet", "binds"].map(t => h("th", { text: t })))),
    h("tbody", {}, f.frontier.map(o => h("tr", { dataset: { gpus: o.gpus, users: o.users_served, cost: o.cost_per_month } },
      h("td", { class: "num", text: count(o.users_served) }), h("td", { class: "num", text: money(o.cost_per_month, o.currency) }),
      h("td", { text: `${o.gpus} (TP ${o.tp} × DP ${o.dp}) ${o.model} ${o.weights_precision} KV ${o.kv_cache_dtype}` }),
      h("td", {}, h("span", { class: "bind c-" + o.binding, text: o.binding })))))));
}

function teamsTable(rows, ceilings, id) {
  return h("table", { class: "data teams", id },
    h("thead", {}, h("tr", {}, ["team", "users", "priority", "warm p5 shared", "(alone)", ...ceilings, "miss TTFT", "hit TTFT", "binds"].map(t => h("th", { text: t })))),
    h("tbody", {}, rows.map(t => h("tr", { class: t.meets_target ? "" : "short", dataset: { team: t.name, users: t.users, warm: t.warm_users.p5,
      alone: t.warm_users_alone.p5, binding: t.binding, ttft: t.miss_ttft_s, meets: t.meets_target } },
      h("td", { text: t.name }), h("td", { class: "num", text: count(t.users) }), h("td", { class: "num", text: String(t.priority) }),
      h("td", { class: "num", text: count(t.warm_users.p5) }), h("td", { class: "num muted", text: `(${count(t.warm_users_alone.p5)})` }),
      ...ceilings.map(c => h("td", { class: "num" + (c === t.binding ? " binding" : ""), text: count(t.ceilings[c]) })),
      h("td", { class: "num", text: t.miss_ttft_s === null ? "-" : t.miss_ttft_s.toFixed(2) + " s" }),
      h("td", { class: "num", text: t.hit_ttft_s === null ? "-" : t.hit_ttft_s.toFixed(2) + " s" }),
      h("td", {}, h("span", { class: "bind c-" + t.binding, text: t.binding + (t.meets_target ? "" : " (short)") }))))));
}

function drawFleetTeams(d) {
  const f = d.fleet, card = $("#fleetTeamsCard"), pool = f.shared_pool;
  card.hidden = !(f.teams.length > 1);
  if (card.hidden) return;
  $("#fleetTeamsCaption").textContent = d.teams_caption || "no shared fleet in the search space serves every team";
  const teams = $("#fleetTeams");
  teams.textContent = "";
  if (pool) teams.appendChild(teamsTable(pool.teams, d.ceilings, "fleetTeamRows"));
  const part = $("#fleetPartition");
  part.textContent = "";
  if (f.partition) {
    part.appendChild(h("p", { class: "small", text: "Each team on replicas of its own (its cheapest fleet alone):" }));
    part.appendChild(h("table", { class: "data small", id: "fleetPartitionRows" },
      h("thead", {}, h("tr", {}, ["team", "users", "its fleet", "cost / month", "binds"].map(t => h("th", { text: t })))),
      h("tbody", {}, f.partition.cheapest.map(s => h("tr", { dataset: { team: s.team, gpus: s.option ? s.option.gpus : "", cost: s.option ? s.option.cost_per_month : "" } },
        h("td", { text: s.team }), h("td", { class: "num", text: count(s.users) }),
        h("td", { text: s.option ? `${s.option.gpus} (TP ${s.option.tp} × DP ${s.option.dp}) ${s.option.weights_precision} KV ${s.option.kv_cache_dtype}` : "none: " + s.reason }),
        h("td", { class: "num", text: s.option ? money(s.option.cost_per_month, s.option.currency) : "-" }),
        h("td", { text: s.option ? s.option.binding : "" }))))));
    if (f.partition.same_shape && f.partition.same_shape_replicas !== null && f.winner)
      part.appendChild(h("p", { class: "small", id: "fleetSameShape", text: "On the shared winner's replica shape: "
        + f.partition.same_shape.map(s => `${s.team} ${s.option ? s.option.dp : "-"}`).join(", ")
        + ` replicas = ${f.partition.same_shape_replicas} (shared: ${f.winner.dp})` }));
  }
  const v = $("#teamsVerdict");
  v.textContent = f.verdict ? "Verdict: " + f.verdict.text : "";
  v.dataset.choice = f.verdict ? f.verdict.choice : "";
}

// -- the plan view's teams panel: several teams on this deployment (servesize.teams) ---------------------

function buildPlanTeams() {
  const spec = { ...App.cat.form.fleet.fields.team, label: "Teams on this deployment" };
  App.planTeamsBox = teamsControl(spec, App.teams, () => requestTeams(), "pt-");
  $("#planTeamsForm").appendChild(App.planTeamsBox);
  App.planTeamsBox.sync();
}

async function requestTeams() {
  const out = $("#planTeamsOut");
  const seq = ++App.teamsSeq;
  if (App.teamsCtl) App.teamsCtl.abort();
  clearErrors($("#planTeamsCard"));
  if (!App.teams.team) { out.textContent = ""; out.dataset.state = "empty"; out.dataset.seq = seq; out.dataset.pending = "false"; writeHash(); return; }
  const ctl = new AbortController();
  App.teamsCtl = ctl;
  out.dataset.pending = "true";
  let res;
  try { res = await post("/api/teams", { ...App.plan, ...App.teams }, ctl.signal); } catch (e) { return; }   // aborted: a newer one
  if (seq !== App.teamsSeq) return;
  out.dataset.pending = "false";
  out.dataset.seq = seq;
  if (!res.ok) {
    out.dataset.state = "error";
    showError(["team", "priority"].includes(res.data.field) ? res.data.field : "team", res.data.error, $("#planTeamsCard"));
    return;
  }
  out.dataset.state = "full";
  writeHash();
  const d = res.data, pool = d.teams.shared;
  out.textContent = "";
  out.append(h("p", { class: "cs", text: d.caption }), teamsTable(pool.teams, d.ceilings, "planTeamRows"),
    h("p", { class: "small", id: "planTeamsMeets", text: d.meets + (pool.floor_note ? "; " + pool.floor_note : "") }),
    h("p", { class: "verdict-line", id: "planTeamsVerdict", dataset: { choice: d.verdict.choice, shared: d.teams.split.shared_replicas ?? "",
      partitioned: d.teams.split.partitioned_replicas ?? "" }, text: "Verdict: " + d.verdict.text }));
}

function openFleetInPlan() {
  const d = App.lastFleet;
  if (!d || !d.open_plan) return;
  replaceStore(App.plan, d.open_plan);
  App.last = null;
  window.scrollTo({ top: 0 });
  switchView("plan");
}

// -- the share link, the theme, the tabs -------------------------------------------------------------------

function hashFields() {
  if (App.view === "fit") return App.fit;
  if (App.view === "fleet") return App.fleet;
  const fields = App.last ? App.last.share.fields : Object.fromEntries(Object.entries(App.plan).filter(([, v]) => typeof v !== "object"));
  return { ...fields, ...App.teams };
}

function writeHash() {
  const p = new URLSearchParams({ view: App.view });
  for (const [k, v] of Object.entries(hashFields())) {
    if (Array.isArray(v)) v.forEach(x => p.append(k, String(x)));    // a repeatable field: one entry per item
    else if (typeof v !== "object") p.set(k, String(v));
  }
  history.replaceState(null, "", "#" + p.toString());
}

function readHash() {
  const text = location.hash.replace(/^#/, "");
  if (!text) return false;
  const p = new URLSearchParams(text);
  const view = ["fit", "fleet"].includes(p.get("view")) ? p.get("view") : "plan";
  const store = {};
  const listed = App.cat.form.fleet.fields;
  const teams = {};
  for (const k of new Set(p.keys())) {
    if (k === "view") continue;
    const value = listed[k] && listed[k].kind === "list" ? p.getAll(k) : p.get(k);
    if (view === "plan" && (k === "team" || k === "priority")) teams[k] = value;   // the plan view's teams panel
    else store[k] = view === "fleet" ? value : p.get(k);
  }
  if (view === "plan") replaceStore(App.teams, teams);
  App.view = view;
  replaceStore(view === "fit" ? App.fit : view === "fleet" ? App.fleet : App.plan, store);
  return true;
}

function onHashChange() {   // a link pasted into this tab (the page's own writes use replaceState: no event)
  if (!readHash()) return;
  App.last = null; App.lastFit = null; App.lastFleet = null;
  if (App.view === "fleet") syncFleetControls();
  if (App.planTeamsBox) App.planTeamsBox.sync();
  switchView(App.view);
}

function share() {
  writeHash();
  const box = $("#shareBox"), link = $("#shareLink");
  box.hidden = false;
  link.value = location.href;
  link.select();
  const left = App.view === "plan" && App.last ? App.last.share.left_out : [];
  $("#shareNote").textContent = left.length ? `not in the link (upload them again): ${left.join(", ")}` : "";
  if (navigator.clipboard && navigator.clipboard.writeText) navigator.clipboard.writeText(link.value).catch(() => {});
}

function scrollable(wrap) {
  const card = wrap.closest(".card"), title = card && $(".ct", card);
  wrap.tabIndex = 0;
  wrap.setAttribute("role", "region");
  wrap.setAttribute("aria-label", (title ? title.textContent.trim() : "table") + " (scrolls sideways)");
  return wrap;
}

function applyTheme(theme) {
  if (theme) document.documentElement.dataset.theme = theme; else delete document.documentElement.dataset.theme;
}

const SKIP_TO = { plan: ["#verdict", "Skip to the verdict"], fit: ["#fitCaption", "Skip to what fits"],
                  fleet: ["#fleetVerdict", "Skip to the cheapest fleet"] };

// the tab strip as WAI-ARIA's tabs pattern: Left/Right (wrapping), Home and End move to a tab and open it
function onTabKey(e) {
  const tabs = $$(".tabs [role=tab]"), i = tabs.indexOf(e.currentTarget);
  const to = { ArrowRight: i + 1, ArrowLeft: i - 1, Home: 0, End: tabs.length - 1 }[e.key];
  if (to === undefined) return;
  e.preventDefault();
  const tab = tabs[(to + tabs.length) % tabs.length];
  tab.focus();
  switchView(tab.dataset.view);
}

function switchView(view) {
  App.view = view;
  $("#view-fit").hidden = view !== "fit";
  $("#view-plan").hidden = view !== "plan";
  $("#view-fleet").hidden = view !== "fleet";
  for (const t of $$(".tabs button")) {
    t.setAttribute("aria-selected", String(t.dataset.view === view));
    t.tabIndex = t.dataset.view === view ? 0 : -1;   // one tab stop for the strip; the arrow keys move along it
  }
  const strip = $(".tabs"), on = $(`.tabs [data-view="${view}"]`);
  if (strip.scrollWidth > strip.clientWidth) {   // a phone: the strip scrolls sideways; the open tab is brought into it
    strip.scrollLeft += on.getBoundingClientRect().left - strip.getBoundingClientRect().left - (strip.clientWidth - on.offsetWidth) / 2;
  }
  const skip = $("#skipLink");
  skip.href = SKIP_TO[view][0];
  skip.textContent = SKIP_TO[view][1];
  if (view === "fit" && !App.lastFit) runFit();
  if (view === "plan" && !App.last) requestPlan(false);
  if (view === "fleet" && !App.lastFleet) runFleet();
  writeHash();
}

// the glossary: terms and sentences from GET /api/catalogue (web/glossary.py), figures included
function drawGlossary(entries) {
  const list = $("#glossaryList");
  list.textContent = "";
  for (const g of entries) {
    list.append(h("dt", { dataset: { term: g.term, assumption: g.assumption || "" } }, g.term,
      g.abbr ? [" (", h("abbr", { title: g.term, text: g.abbr }), ")"] : null),
      h("dd", { text: g.text }));
  }
}

async function init() {
  let res;
  try { res = await fetch("/api/catalogue"); App.cat = await res.json(); } catch (e) { banner("cannot load the catalogue: " + e.message); return; }
  $("#loading").hidden = true;
  $("#version").textContent = App.cat.version;
  const shared = readHash();
  if (!shared || App.view !== "plan") replaceStore(App.plan, App.cat.start.plan);
  if (!shared || App.view !== "fit") replaceStore(App.fit, App.cat.start.fit);
  // a link to the fleet view with no fields (#view=fleet) starts where the view starts
  if (!shared || App.view !== "fleet" || !Object.keys(App.fleet).length) replaceStore(App.fleet, App.cat.start.fleet);
  window.addEventListener("hashchange", onHashChange);
  buildPlanForm();
  buildFitForm();
  buildFleetForm();
  buildPlanTeams();
  drawKvTable();
  drawGlossary(App.cat.glossary);
  // a table wider than a phone scrolls in its own box: the box takes focus, so the keyboard can scroll it
  for (const wrap of $$(".table-wrap")) scrollable(wrap);
  $("#shareBtn").addEventListener("click", share);
  $("#themeBtn").addEventListener("click", () => {
    const dark = document.documentElement.dataset.theme === "dark" || (!document.documentElement.dataset.theme && matchMedia("(prefers-color-scheme: dark)").matches);
    applyTheme(dark ? "light" : "dark");
  });
  for (const t of $$(".tabs button")) { t.addEventListener("click", () => switchView(t.dataset.view)); t.addEventListener("keydown", onTabKey); }
  $("#skipLink").addEventListener("click", e => {   // focus the target too, so the next Tab goes on from there
    const target = $(e.currentTarget.getAttribute("href"));
    if (target) { e.preventDefault(); target.scrollIntoView({ block: "start" }); target.focus(); }
  });
  // "On this page": the hash holds the share link's state, so a link scrolls to its section and focuses it
  for (const a of $$("#onThisPage a")) a.addEventListener("click", e => {
    const target = $(a.getAttribute("href"));
    if (!target) return;
    e.preventDefault();
    if (!target.hasAttribute("tabindex")) target.setAttribute("tabindex", "-1");
    target.scrollIntoView({ block: "start" });
    target.focus({ preventScroll: true });
  });
  $("#calibrateBtn").addEventListener("click", calibrate);
  $("#recordFile").addEventListener("change", e => { if (e.target.files[0]) loadRecord(e.target.files[0]); });
  $("#matrixBtn").addEventListener("click", runMatrix);
  $("#fleetOpenPlan").addEventListener("click", openFleetInPlan);
  document.addEventListener("click", e => {
    const id = e.target.dataset && e.target.dataset.copy;
    if (id && navigator.clipboard) navigator.clipboard.writeText($("#" + id).textContent).catch(() => {});
  });
  switchView(App.view);
}

document.addEventListener("DOMContentLoaded", init);
