// The trends page's state and data: the filter, the GPU model and the figure, kept in the address
// (#q=...&gpu=...&fig=wall) so that a view can be linked to; the data files, loaded with script tags when
// needed (no server: file:// works), and decoded from the compact form perf/history/trends_data.py writes.

const PERF = {
  data: {},
  kernels: {},
  waiting: {},
  requested: {},
  loaded(gpu, payload) {
    PERF.data[gpu] = decodeSeries(payload);
    ready(`s\u0000${gpu}`);
  },
  kernelsLoaded(gpu, k, payload) {
    PERF.kernels[`${gpu}\u0000${k}`] = decodeKernels(payload);
    ready(`k\u0000${gpu}\u0000${k}`);
  },
};
const state = { gpu: null, q: "", fig: "gpu" };
let lastHash = null,
  observer = null,
  mark = null;

function ready(key) {
  const waiting = PERF.waiting[key] || [];
  delete PERF.waiting[key];
  waiting.forEach(then => then());
}

// Run `then` once `have()` is true, loading `src` (a data file) if it is not yet.
function need(key, src, have, then) {
  if (have()) return then();
  (PERF.waiting[key] = PERF.waiting[key] || []).push(then);
  if (PERF.requested[key]) return;
  PERF.requested[key] = true;
  const script = document.createElement("script");
  script.src = src;
  script.onerror = () => {
    delete PERF.requested[key];
    notice(`Could not load ${src}: the page's data folder is incomplete; write the page again.`);
  };
  document.body.appendChild(script);
}

function el(tag, className, text) {
  const e = document.createElement(tag);
  if (className) e.className = className;
  if (text !== undefined) e.textContent = text;
  return e;
}

function notice(text) {
  const box = document.getElementById("notice");
  box.hidden = false;
  box.textContent = box.textContent ? `${box.textContent} ${text}` : text;
}

// ------------------------------------------------------------------ the address
// Any text may follow the #: a part that is not valid percent-encoding is taken as it is.
function decodePart(text) {
  try {
    return decodeURIComponent(text);
  } catch (error) {
    return text;
  }
}

function readHash() {
  const raw = location.hash.slice(1),
    found = { q: "", gpu: null, fig: "gpu" };
  if (!/^(q|gpu|fig)=/.test(raw)) {
    found.q = decodePart(raw);
    return found;
  } // #text: the filter alone
  raw.split("&").forEach(part => {
    const at = part.indexOf("="),
      key = part.slice(0, at),
      value = decodePart(part.slice(at + 1));
    if (key === "q") found.q = value;
    else if (key === "gpu") found.gpu = value;
    else if (key === "fig" && value === "wall") found.fig = "wall";
  });
  return found;
}

// Write the state into the address; where the browser refuses (replaceState on file:// may throw a
// SecurityError), set location.hash instead, and where that fails too keep the state in memory only.
function writeHash() {
  const parts = [];
  if (state.q) parts.push(`q=${encodeURIComponent(state.q)}`);
  if (state.gpu) parts.push(`gpu=${encodeURIComponent(state.gpu)}`);
  if (state.fig === "wall") parts.push("fig=wall");
  const hash = parts.length ? `#${parts.join("&")}` : "";
  if (hash === location.hash) return;
  lastHash = hash;
  try {
    history.replaceState(null, "", hash || location.pathname + location.search);
    return;
  } catch (error) {
    /* below */
  }
  try {
    location.hash = hash;
  } catch (error) {
    /* the state stays in memory */
  }
}

function matches(...texts) {
  const q = state.q.toLowerCase();
  return (
    !q ||
    texts.some(t =>
      String(t || "")
        .toLowerCase()
        .includes(q),
    )
  );
}

// ------------------------------------------------------------------ data
function decodeSeries(payload) {
  const runs = payload.runs,
    methods = payload.methods || [];
  const series = payload.series.map((s, k) => {
    const pos = [];
    s.r.forEach(([first, count]) => {
      for (let i = 0; i < count; i++) pos.push(first + i);
    });
    // Each point's GPU-time method (null without GPU time), from the [index, method] changes.
    const method = s.g ? s.g.map(() => null) : null;
    (s.m || []).forEach(([index, m], j) => {
      const end = j + 1 < s.m.length ? s.m[j + 1][0] : s.g.length;
      for (let i = index; i < end; i++) if (s.g[i] !== null) method[i] = methods[m];
    });
    return {
      k,
      name: s.n,
      label: s.v || "",
      figure: s.f,
      pos,
      wall: s.w,
      gpu: s.g && s.g.some(v => v !== null) ? s.g : null,
      method,
      mhz: s.s || null,
      t: pos.map(i => runs.t[i]),
      run: pos.map(i => runs.id[i]),
      commit: pos.map(i => runs.c[i]),
      locked: pos.map(i => runs.l[i]),
      capped: new Set(s.c || []),
      steps: (s.st || []).map(([index, ratio, certainty]) => ({ index, ratio, certainty })),
    };
  });
  // A label keeps its colour across charts (the commonest labels get the first colours), unless another
  // series of the same chart has it already.
  const counts = new Map();
  series.forEach(s => counts.set(s.label, (counts.get(s.label) || 0) + 1));
  const rank = [...counts.keys()].sort((a, b) => counts.get(b) - counts.get(a) || a.localeCompare(b));
  const charts = payload.charts.map(([suite, key, members]) => {
    const used = new Set();
    members.forEach(i => {
      let c = rank.indexOf(series[i].label) % PALETTE.length;
      while (used.has(c) && used.size < PALETTE.length) c = (c + 1) % PALETTE.length;
      used.add(c);
      series[i].color = PALETTE[c];
    });
    return { suite, key, series: members.map(i => series[i]) };
  });
  return { series, charts };
}

// Run id -> rows; a run's names and launches are those of the run before where the file leaves them out.
function decodeKernels(payload) {
  const out = new Map();
  let names = [],
    launches = [];
  payload.r.forEach(([run, us, ids, counts]) => {
    if (ids) names = ids;
    if (counts) launches = counts;
    out.set(
      run,
      us.map((u, j) => ({ kernel: payload.n[names[j]], us: u, launches: launches[j] })),
    );
  });
  return out;
}

function gpuInfo(name) {
  return INDEX.gpus.find(g => g.name === name);
}
function shortName(name) {
  return name.includes("::") ? name.slice(name.indexOf("::") + 2) : name;
}
function date(t, time) {
  return new Date(t * 1000)
    .toISOString()
    .slice(0, time ? 16 : 10)
    .replace("T", " ");
}

// The values a series shows: in the GPU view its GPU time, by whatever method each run measured it (the
// chart breaks the line where that changes), and wall time only for a series without any GPU time.
function shown(s) {
  const gpu = state.fig === "gpu" && s.gpu !== null;
  return {
    figure: gpu ? "gpu" : "wall",
    y: gpu ? s.gpu : s.wall,
    methods: gpu ? s.method : null,
    dashed: state.fig === "gpu" && !gpu,
  };
}
