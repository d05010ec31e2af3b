/* servesize explorer: plain-SVG line charts of series the server computed.
   Nothing here knows a formula of the model: it maps numbers it is given onto axes. */
"use strict";

const Charts = (() => {
  const NS = "http://www.w3.org/2000/svg";
  const W = 640, H = 300, M = { l: 58, r: 16, t: 14, b: 42 };

  function node(tag, attrs, parent) {
    const e = document.createElementNS(NS, tag);
    for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) e.setAttribute(k, v);
    if (parent) parent.appendChild(e);
    return e;
  }

  // axis numbers: 1,200 / 31k / 2.95M, never a unit (the axis label says it)
  function short(v) {
    const a = Math.abs(v);
    if (a >= 1e6) return (v / 1e6).toLocaleString("en", { maximumFractionDigits: 2 }) + "M";
    if (a >= 1e4) return (v / 1e3).toLocaleString("en", { maximumFractionDigits: 1 }) + "k";
    if (a >= 100) return Math.round(v).toLocaleString("en");
    return v.toLocaleString("en", { maximumFractionDigits: a < 1 ? 3 : 2 });
  }

  function niceStep(span, n) {
    const raw = span / Math.max(1, n), mag = Math.pow(10, Math.floor(Math.log10(raw)));
    const f = raw / mag;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
  }

  function linTicks(lo, hi, n) {
    if (!(hi > lo)) return [lo];
    const step = niceStep(hi - lo, n), out = [];
    for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step) out.push(+v.toPrecision(12));
    return out;
  }

  function logTicks(lo, hi) {
    const out = [];
    for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
      for (const m of [1, 2, 5]) {
        const v = m * Math.pow(10, e);
        if (v >= lo * 0.999 && v <= hi * 1.001) out.push(v);
      }
    }
    return out.length >= 2 ? out : [lo, hi];
  }

  function scale(lo, hi, a, b, log) {
    if (log) {
      const l0 = Math.log(lo), l1 = Math.log(hi);
      return v => a + (Math.log(Math.max(v, lo)) - l0) / (l1 - l0 || 1) * (b - a);
    }
    return v => a + (v - lo) / ((hi - lo) || 1) * (b - a);
  }

  function extent(values, log) {
    const ok = values.filter(v => v !== null && v !== undefined && isFinite(v) && (!log || v > 0));
    if (!ok.length) return [log ? 1 : 0, 1];
    let lo = Math.min(...ok), hi = Math.max(...ok);
    if (lo === hi) { lo = log ? lo / 2 : lo - 1; hi = log ? hi * 2 : hi + 1; }
    return [lo, hi];
  }

  function path(xs, ys, sx, sy) {
    let d = "", pen = false;
    for (let i = 0; i < xs.length; i++) {
      const x = xs[i], y = ys[i];
      if (y === null || y === undefined || !isFinite(y) || x === null || !isFinite(x)) { pen = false; continue; }
      d += (pen ? "L" : "M") + sx(x).toFixed(1) + "," + sy(y).toFixed(1);
      pen = true;
    }
    return d;
  }

  function band(xs, lo, hi, sx, sy) {
    const pts = [];
    for (let i = 0; i < xs.length; i++) if (isFinite(lo[i]) && lo[i] !== null) pts.push([sx(xs[i]), sy(lo[i])]);
    for (let i = xs.length - 1; i >= 0; i--) if (isFinite(hi[i]) && hi[i] !== null) pts.push([sx(xs[i]), sy(hi[i])]);
    return pts.length ? "M" + pts.map(p => p[0].toFixed(1) + "," + p[1].toFixed(1)).join("L") + "Z" : "";
  }

  /* spec: { series: [{name, x, y, cls, dash, band: {lo, hi}, dots}], xlog, ylog, xLabel, yLabel,
             vlines: [{x, label, cls}], hlines: [{y, label, cls}], zones: [{x0, x1, label, cls}],
             points: [{x, y, label, cls, show}] (show: the label drawn beside it), yMin, fmtX, fmtY } */
  function line(container, spec) {
    container.textContent = "";
    const svgEl = node("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart-svg", role: "img",
      "aria-label": spec.title || spec.yLabel || "chart" }, container);
    const all = spec.series || [];
    const xsAll = all.flatMap(s => s.x), ysAll = all.flatMap(s => [...s.y, ...(s.band ? [...s.band.lo, ...s.band.hi] : [])]);
    (spec.hlines || []).forEach(h => ysAll.push(h.y));
    (spec.points || []).forEach(p => { xsAll.push(p.x); ysAll.push(p.y); });
    (spec.vlines || []).forEach(v => xsAll.push(v.x));
    let [x0, x1] = extent(xsAll, spec.xlog), [y0, y1] = extent(ysAll, spec.ylog);
    if (!spec.ylog) { y0 = Math.min(spec.yMin ?? 0, y0); y1 = y1 + (y1 - y0) * 0.06; }
    else { y0 = y0 / 1.2; y1 = y1 * 1.2; }
    const sx = scale(x0, x1, M.l, W - M.r, spec.xlog), sy = scale(y0, y1, H - M.b, M.t, spec.ylog);
    const grid = node("g", { class: "grid" }, svgEl);
    const fx = spec.fmtX || short, fy = spec.fmtY || short;
    const xt = spec.xlog ? logTicks(x0, x1) : linTicks(x0, x1, 6);
    const yt = spec.ylog ? logTicks(y0, y1) : linTicks(y0, y1, 5);
    for (const t of yt) {
      node("line", { x1: M.l, x2: W - M.r, y1: sy(t), y2: sy(t) }, grid);
      node("text", { x: M.l - 6, y: sy(t) + 4, class: "tick", "text-anchor": "end" }, grid).textContent = fy(t);
    }
    for (const t of xt) {
      node("line", { x1: sx(t), x2: sx(t), y1: M.t, y2: H - M.b, class: "vgrid" }, grid);
      node("text", { x: sx(t), y: H - M.b + 16, class: "tick", "text-anchor": "middle" }, grid).textContent = fx(t);
    }
    node("text", { x: (M.l + W - M.r) / 2, y: H - 6, class: "axis-label", "text-anchor": "middle" }, svgEl).textContent = spec.xLabel || "";
    const yl = node("text", { x: 12, y: (M.t + H - M.b) / 2, class: "axis-label", "text-anchor": "middle",
      transform: `rotate(-90 12 ${(M.t + H - M.b) / 2})` }, svgEl);
    yl.textContent = spec.yLabel || "";
    for (const z of spec.zones || []) {
      const a = sx(Math.max(z.x0, x0)), b = sx(Math.min(z.x1, x1));
      if (b > a) node("rect", { x: a, y: M.t, width: b - a, height: H - M.b - M.t, class: "zone f-" + (z.cls || "c3") }, svgEl);
    }
    for (const s of all) if (s.band) node("path", { d: band(s.x, s.band.lo, s.band.hi, sx, sy), class: "band f-" + s.cls }, svgEl);
    for (const h of spec.hlines || []) {
      node("line", { x1: M.l, x2: W - M.r, y1: sy(h.y), y2: sy(h.y), class: "ref s-" + (h.cls || "muted") }, svgEl);
      node("text", { x: W - M.r - 4, y: sy(h.y) - 4, class: "ref-label", "text-anchor": "end" }, svgEl).textContent = h.label || "";
    }
    for (const v of spec.vlines || []) {
      node("line", { x1: sx(v.x), x2: sx(v.x), y1: M.t, y2: H - M.b, class: "ref s-" + (v.cls || "muted") }, svgEl);
      const right = sx(v.x) > M.l + 0.7 * (W - M.l - M.r);  // a label near the right edge reads leftwards
      node("text", { x: sx(v.x) + (right ? -4 : 4), y: M.t + 11, class: "ref-label", "text-anchor": right ? "end" : "start" },
        svgEl).textContent = v.label || "";
    }
    for (const s of all) {
      node("path", { d: path(s.x, s.y, sx, sy), class: "series s-" + s.cls + (s.dash ? " dash-" + s.dash : "") }, svgEl);
      if (s.dots) s.x.forEach((x, i) => { if (s.y[i] !== null && isFinite(s.y[i])) node("circle", { cx: sx(x), cy: sy(s.y[i]), r: 3, class: "f-" + s.cls }, svgEl); });
    }
    for (const p of spec.points || []) {
      const c = node("circle", { cx: sx(p.x), cy: sy(p.y), r: 6, class: "point s-" + (p.cls || "text") }, svgEl);
      node("title", {}, c).textContent = p.label || "";
      if (p.show && p.label) node("text", { x: sx(p.x) + 8, y: sy(p.y) - 8, class: "tick point-label" }, svgEl).textContent = p.label;
    }
    hover(container, svgEl, all, sx, sy, fx, fy, spec);
    legend(container, spec);
  }

  function hover(container, svgEl, series, sx, sy, fx, fy, spec) {
    if (!series.length) return;
    const guide = node("line", { y1: M.t, y2: H - M.b, class: "guide", visibility: "hidden" }, svgEl);
    const tip = document.createElement("div");
    tip.className = "tip-box";
    tip.hidden = true;
    container.appendChild(tip);
    const base = series[0];
    svgEl.addEventListener("mousemove", ev => {
      const r = svgEl.getBoundingClientRect(), px = (ev.clientX - r.left) / r.width * W;
      let best = 0, dist = Infinity;
      base.x.forEach((x, i) => { const d = Math.abs(sx(x) - px); if (d < dist) { dist = d; best = i; } });
      const x = base.x[best];
      guide.setAttribute("x1", sx(x)); guide.setAttribute("x2", sx(x)); guide.setAttribute("visibility", "visible");
      const lines = [(spec.xLabel || "x") + ": " + fx(x)];
      for (const s of series) {
        const i = s.x.indexOf(x);
        if (i >= 0 && s.y[i] !== null && isFinite(s.y[i])) lines.push(s.name + ": " + fy(s.y[i]));
      }
      tip.textContent = lines.join("\n");
      tip.hidden = false;
      tip.style.left = Math.min(r.width - 160, (ev.clientX - r.left) + 12) + "px";
      tip.style.top = "8px";
    });
    svgEl.addEventListener("mouseleave", () => { guide.setAttribute("visibility", "hidden"); tip.hidden = true; });
  }

  function legend(container, spec) {
    const items = [...(spec.series || []).filter(s => s.name), ...(spec.legendExtra || [])];
    if (!items.length) return;
    const box = document.createElement("div");
    box.className = "legend";
    for (const s of items) {
      const li = document.createElement("span");
      li.className = "li";
      const sw = document.createElement("span");
      sw.className = "sw bg-" + s.cls + (s.dash ? " dash-" + s.dash : "") + (s.kind ? " " + s.kind : "");
      li.appendChild(sw);
      li.appendChild(document.createTextNode(s.name));
      box.appendChild(li);
    }
    container.appendChild(box);
  }

  function empty(container, text) {
    container.textContent = "";
    const p = document.createElement("p");
    p.className = "muted";
    p.textContent = text;
    container.appendChild(p);
  }

  return { line, empty, short };
})();
