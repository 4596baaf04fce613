// The trends page's charts: SVG drawn from series of (time, value) points, with time and value ticks,
// units, the noise band, step marks, a tooltip on hover and a callback on click (trends_page.js uses it).

const SVG = "http://www.w3.org/2000/svg";
const PALETTE = [
  "#1f5fa8",
  "#e08a00",
  "#2a9d5c",
  "#d1495b",
  "#7b4fb0",
  "#00838f",
  "#8d6e63",
  "#c2185b",
  "#7cb342",
  "#546e7a",
];
const DAY = 86400;

function svgEl(tag, attrs, parent) {
  const e = document.createElementNS(SVG, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  if (parent) parent.appendChild(e);
  return e;
}

// The unit a chart's values are shown in: the largest whose values are at least 1 (ms are stored).
function unitOf(maxMs) {
  if (maxMs >= 1000) return { name: "s", per_ms: 1e-3 };
  if (maxMs >= 1) return { name: "ms", per_ms: 1 };
  if (maxMs >= 1e-3) return { name: "µs", per_ms: 1e3 };
  return { name: "ns", per_ms: 1e6 };
}

function shortNumber(v) {
  return String(Number(v.toPrecision(3)));
}

function formatMs(ms) {
  const unit = unitOf(Math.abs(ms));
  return `${Number((ms * unit.per_ms).toPrecision(4))} ${unit.name}`;
}

// Ticks at 1, 2 or 5 times a power of ten, about `count` of them between lo and hi.
function linearTicks(lo, hi, count) {
  const raw = (hi - lo) / Math.max(count, 1) || Math.abs(hi) || 1;
  const power = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map(m => m * power).find(s => s >= raw) || raw;
  const ticks = [];
  for (let v = Math.ceil(lo / step) * step; v <= hi + step * 1e-9; v += step)
    ticks.push(Number(v.toPrecision(12)));
  return ticks;
}

// Ticks of a log axis: 1, 2, 5 times powers of ten within [lo, hi]; more of them where the range is short.
function logTicks(lo, hi) {
  const ticks = [];
  for (let p = Math.floor(Math.log10(lo)); p <= Math.ceil(Math.log10(hi)); p++) {
    for (const m of [1, 2, 5]) {
      const v = m * Math.pow(10, p);
      if (v >= lo && v <= hi) ticks.push(v);
    }
  }
  return ticks.length >= 2 ? ticks : linearTicks(lo, hi, 3);
}

// The steps a time axis may tick at, finest first: hours, days, weeks (Mondays), months, years.
const TIME_STEPS = [
  ...[1, 2, 3, 6, 12].map(n => ["h", n]),
  ...[1, 2, 7, 14].map(n => ["d", n]),
  ...[1, 2, 3, 6, 12, 24, 60, 120].map(n => ["mo", n]),
];
const MONDAY = 4 * DAY; // 1970-01-05, a Monday: weeks tick on Mondays

// The ticks of one step between t0 and t1 (seconds since 1970, UTC), each with its label: hours as
// "06:00" (a day's midnight and the first tick with their date), days as "11-27", months "2026-11",
// years "2026".
function stepTicks(t0, t1, [unit, n]) {
  const ticks = [];
  if (unit === "mo") {
    const d = new Date(t0 * 1000);
    let m = d.getUTCFullYear() * 12 + d.getUTCMonth();
    if (Date.UTC(Math.floor(m / 12), m % 12, 1) < t0 * 1000) m += 1;
    for (m = Math.ceil(m / n) * n; Date.UTC(Math.floor(m / 12), m % 12, 1) <= t1 * 1000; m += n) {
      const t = Date.UTC(Math.floor(m / 12), m % 12, 1) / 1000,
        iso = new Date(t * 1000).toISOString();
      ticks.push({ t, text: n >= 12 ? iso.slice(0, 4) : iso.slice(0, 7) });
    }
    return ticks;
  }
  const step = n * (unit === "h" ? 3600 : DAY),
    origin = n >= 7 ? MONDAY : 0;
  for (let t = Math.ceil((t0 - origin) / step) * step + origin; t <= t1; t += step) {
    const iso = new Date(t * 1000).toISOString();
    let text = iso.slice(5, 10);
    if (unit === "h" && t % DAY) text = ticks.length ? iso.slice(11, 16) : `${text} ${iso.slice(11, 16)}`;
    ticks.push({ t, text });
  }
  return ticks;
}

// A label's width in the chart's units, measured in a hidden SVG text of the charts' style.
let probe = null;
function textWidth(text) {
  if (!probe) {
    const box = svgEl("svg", { class: "probe", width: 0, height: 0, "aria-hidden": "true" });
    box.style.cssText = "position:absolute;visibility:hidden;width:0;height:0";
    document.body.appendChild(box);
    probe = svgEl("text", { class: "xtick" }, box);
  }
  probe.textContent = text;
  return probe.getComputedTextLength() || 6 * text.length;
}

// The ticks of a time axis drawn from `left` to `right` (x maps a time there): the finest step whose
// labels, each centred on its tick and kept inside [0, width], leave GAP between neighbours; each
// tick's {t, text, at} (at: where its label starts). Where no step fits, the coarsest with its
// overlapping labels left out.
function timeTicks(t0, t1, x, left, right, width) {
  const GAP = 10;
  const place = ticks => {
    let end = -Infinity,
      fits = true;
    const kept = [];
    ticks.forEach(tick => {
      const w = textWidth(tick.text),
        at = Math.min(Math.max(x(tick.t) - w / 2, 1), width - 1 - w);
      if (at < end + GAP) fits = false;
      else {
        kept.push({ ...tick, at });
        end = at + w;
      }
    });
    return { fits, kept };
  };
  const most = Math.max(2, Math.floor((right - left) / 40)); // at most a label per 40 units
  let found = null;
  for (const step of TIME_STEPS) {
    const ticks = stepTicks(t0, t1, step);
    if (ticks.length > most) continue;
    found = place(ticks);
    if (found.fits) return found.kept;
  }
  return found ? found.kept : [];
}

// The noise band of each point: median of the `window` values before it +- k robust standard deviations;
// where `methods` are given (GPU time), of the values before it measured by the point's own method.
function noiseBand(values, window, k, methods) {
  const median = a => {
    const s = [...a].sort((x, y) => x - y),
      m = s.length >> 1;
    return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
  };
  return values.map((_, i) => {
    const before = [];
    for (let j = i - 1; j >= 0 && before.length < window; j--) {
      if (values[j] !== null && (!methods || methods[j] === methods[i])) before.push(values[j]);
    }
    if (before.length < 3) return null;
    const mid = median(before),
      sd = 1.4826 * median(before.map(v => Math.abs(v - mid)));
    return [mid - k * sd, mid + k * sd];
  });
}

// The runs of a series' drawn points that one line joins: consecutive points of one method (all of
// them where the series has no methods, as in wall time). Lists of point indices.
function segments(y, methods) {
  const out = [];
  let last;
  y.forEach((v, i) => {
    if (v === null) return;
    const m = methods ? methods[i] : null;
    if (!out.length || m !== last) out.push([]);
    out[out.length - 1].push(i);
    last = m;
  });
  return out;
}

// Draw a chart into `box`. model: {series, wide, figure}; a series: {label, color, t: [s], y: [ms or null],
// methods: [GPU-time method] or null, capped: Set, locked: [0/1], dashed, steps: [{index, ratio,
// certainty, marked}], band}. hover(si, i) gives a point's tooltip text, click(si, i) is called on a
// click. Returns the svg.
function drawChart(box, model, hover, click) {
  const W = model.wide ? Math.max(600, box.clientWidth || 900) : 360,
    H = model.wide ? 300 : 170;
  const L = 58,
    R = 10,
    T = 10,
    B = 22;
  const all = [],
    times = [];
  model.series.forEach(s =>
    s.y.forEach((v, i) => {
      if (v !== null) {
        all.push(v);
        times.push(s.t[i]);
      }
    }),
  );
  if (model.wide)
    model.series.forEach(s =>
      (s.band || []).forEach(b => {
        if (b && b[0] > 0) all.push(b[0], b[1]);
      }),
    );
  let lo = Math.min(...all),
    hi = Math.max(...all);
  const log = lo > 0 && hi / lo > 5;
  if (!log) {
    const pad = (hi - lo) * 0.08 || Math.abs(hi) * 0.02 || 1;
    lo = Math.max(0, lo - pad);
    hi += pad;
  } else {
    lo /= 1.1;
    hi *= 1.1;
  }
  let t0 = Math.min(...times),
    t1 = Math.max(...times);
  if (t1 - t0 < 3600) {
    t0 -= DAY / 2;
    t1 += DAY / 2;
  }
  const span = t1 - t0;
  t0 -= span * 0.02;
  t1 += span * 0.02;
  const x = t => L + ((W - L - R) * (t - t0)) / (t1 - t0);
  const y = log
    ? v => T + (H - T - B) * (1 - Math.log(v / lo) / Math.log(hi / lo))
    : v => T + (H - T - B) * (1 - (v - lo) / (hi - lo));
  const unit = unitOf(hi);
  const svg = svgEl("svg", {
    class: "plot",
    viewBox: `0 0 ${W} ${H}`,
    width: W,
    height: H,
    "data-figure": model.figure,
    "data-unit": unit.name,
    "aria-label": `${model.figure === "wall" ? "wall" : "GPU"} time, ${unit.name}`,
  });
  // At least three value ticks: a 1-2-5 step that leaves two in range is halved.
  let linear = linearTicks(lo, hi, model.wide ? 6 : 4);
  if (linear.length < 3) linear = linearTicks(lo, hi, model.wide ? 12 : 8);
  const yTicks = (log ? logTicks(lo, hi) : linear).filter(v => v >= lo && v <= hi);
  yTicks.forEach(v => {
    svgEl("line", { class: "grid-line", x1: L, x2: W - R, y1: y(v), y2: y(v) }, svg);
    svgEl("text", { class: "ytick", x: L - 4, y: y(v) + 3, "text-anchor": "end" }, svg).textContent =
      `${shortNumber(v * unit.per_ms)} ${unit.name}`;
  });
  svgEl("line", { class: "axis", x1: L, x2: W - R, y1: H - B, y2: H - B }, svg);
  svgEl("line", { class: "axis", x1: L, x2: L, y1: T, y2: H - B }, svg);
  timeTicks(t0, t1, x, L, W - R, W).forEach(tick => {
    svgEl("line", { class: "axis", x1: x(tick.t), x2: x(tick.t), y1: H - B, y2: H - B + 4 }, svg);
    svgEl("text", { class: "xtick", x: tick.at, y: H - 6 }, svg).textContent = tick.text;
  });
  const placed = [];
  let labelled = 0; // step labels stagger over four rows
  model.series.forEach((s, si) => {
    const parts = segments(s.y, s.methods);
    if (model.wide && s.band) {
      parts.forEach(part => {
        const upper = [],
          lower = [];
        part.forEach(i => {
          const b = s.band[i];
          if (!b || b[0] <= 0) return;
          upper.push(`${x(s.t[i])},${y(b[1])}`);
          lower.unshift(`${x(s.t[i])},${y(b[0])}`);
        });
        if (upper.length > 1)
          svgEl("polygon", { points: upper.concat(lower).join(" "), fill: s.color, opacity: 0.12 }, svg);
      });
    }
    parts.forEach(part => {
      const line = part.map(i => `${x(s.t[i]).toFixed(1)},${y(s.y[i]).toFixed(1)}`);
      svgEl(
        "polyline",
        {
          class: "line",
          "data-s": si,
          "data-method": s.methods ? s.methods[part[0]] : "",
          points: line.join(" "),
          fill: "none",
          stroke: s.color,
          "stroke-width": 1.2,
          "stroke-dasharray": s.dashed ? "4 3" : "none",
          opacity: 0.8,
        },
        svg,
      );
    });
    (s.steps || []).forEach(st => {
      const at = x(s.t[st.index]) - (st.index > 0 ? (x(s.t[st.index]) - x(s.t[st.index - 1])) / 2 : 0);
      const colour = st.ratio > 1 ? "#b00" : "#070";
      svgEl(
        "line",
        {
          class: "step",
          x1: at,
          x2: at,
          y1: T,
          y2: H - B,
          stroke: colour,
          "stroke-width": st.marked ? 2.5 : 1,
          "stroke-dasharray": "4 3",
          opacity: st.marked || model.wide ? 1 : 0.6,
        },
        svg,
      );
      if (model.wide || st.marked) {
        svgEl(
          "text",
          { x: at + 3, y: T + 10 + 12 * (labelled++ % 4), fill: colour, style: `fill:${colour}` },
          svg,
        ).textContent = `x${st.ratio} (${(100 * st.certainty).toFixed(1)}%)${s.label ? " " + s.label : ""}`;
      }
    });
    const dots = s.y.length <= (model.wide ? 400 : 150),
      r = model.wide ? 3.5 : 2.5;
    s.y.forEach((v, i) => {
      if (v === null) return;
      placed.push([x(s.t[i]), y(v), si, i]);
      if (!dots) return;
      const style = {
        class: "point",
        "data-s": si,
        "data-i": i,
        fill: s.capped.has(i) ? "#fff" : s.color,
        stroke: s.color,
        "stroke-width": 1.3,
      };
      if (s.locked[i])
        svgEl("rect", { x: x(s.t[i]) - r, y: y(v) - r, width: 2 * r, height: 2 * r, ...style }, svg);
      else svgEl("circle", { cx: x(s.t[i]), cy: y(v), r, ...style }, svg);
    });
  });
  const nearest = event => {
    const box = svg.getBoundingClientRect(),
      sx = W / box.width,
      sy = H / box.height;
    const px = (event.clientX - box.left) * sx,
      py = (event.clientY - box.top) * sy;
    let best = null,
      dist = 15 * 15;
    placed.forEach(p => {
      const d = (p[0] - px) ** 2 + (p[1] - py) ** 2;
      if (d <= dist) {
        dist = d;
        best = p;
      }
    });
    return best;
  };
  const tip = document.getElementById("tip");
  svg.addEventListener("mousemove", event => {
    const p = nearest(event);
    if (!p) {
      tip.hidden = true;
      svg.style.cursor = "";
      return;
    }
    svg.style.cursor = "pointer";
    tip.textContent = hover(p[2], p[3]);
    tip.hidden = false;
    tip.style.left = `${Math.min(event.clientX + 14, window.innerWidth - tip.offsetWidth - 8)}px`;
    tip.style.top = `${event.clientY + 14}px`;
  });
  svg.addEventListener("mouseleave", () => {
    tip.hidden = true;
  });
  svg.addEventListener("click", event => {
    const p = nearest(event);
    if (p) click(p[2], p[3]);
  });
  box.appendChild(svg);
  return svg;
}
