// The trends page: a section of small charts per suite for the chosen GPU model, the providers or
// variants of one shape in one chart; a point's kernel table on a click; the controls.

// ------------------------------------------------------------------ the suites
function renderSuites() {
  const box = document.getElementById("suites");
  box.innerHTML = "";
  if (observer) observer.disconnect();
  if (!state.gpu) {
    document.body.dataset.drawn = "none";
    return;
  }
  const info = gpuInfo(state.gpu);
  box.appendChild(el("p", "muted", `loading ${state.gpu}…`));
  need(
    `s\u0000${state.gpu}`,
    info.file,
    () => PERF.data[state.gpu],
    () => drawSuites(box, state.gpu),
  );
}

function drawSuites(box, gpu) {
  if (gpu !== state.gpu) return;
  box.innerHTML = "";
  observer = new IntersectionObserver(
    entries =>
      entries.forEach(entry => {
        if (entry.isIntersecting) {
          observer.unobserve(entry.target);
          entry.target.draw();
        }
      }),
    { rootMargin: "400px" },
  );
  const moved = new Set(INDEX.landing.filter(e => e.gpu === gpu && e.ratio > 1).map(e => e.chart));
  const suites = new Map();
  PERF.data[gpu].charts.forEach(chart => {
    if (!chart.series.some(s => matches(s.name, s.label))) return;
    if (!suites.has(chart.suite)) suites.set(chart.suite, []);
    suites.get(chart.suite).push(chart);
  });
  if (!suites.size)
    box.appendChild(el("p", "nothing", `No benchmark on ${gpu} matches the filter “${state.q}”.`));
  let marked = null;
  // Suites with a recent slower step first, then those whose charts have a history (more than one run),
  // then by name.
  const rank = charts => [
    -charts.filter(c => moved.has(c.key)).length,
    -Math.round((10 * charts.filter(c => c.series.some(s => s.pos.length > 1)).length) / charts.length),
  ];
  const order = [...suites.keys()].sort((a, b) => {
    const [ra, rb] = [rank(suites.get(a)), rank(suites.get(b))];
    return ra[0] - rb[0] || ra[1] - rb[1] || a.localeCompare(b);
  });
  order.forEach(suite => {
    const charts = suites.get(suite);
    charts.sort((a, b) => moved.has(b.key) - moved.has(a.key));
    const section = el("details", "suite");
    section.open = true;
    section.dataset.suite = suite;
    const slower = charts.filter(c => moved.has(c.key)).length;
    section.appendChild(
      el(
        "summary",
        "",
        `${suite}: ${charts.length} chart(s)` + (slower ? `, ${slower} with a recent slower step` : ""),
      ),
    );
    const grid = el("div", "grid");
    charts.forEach(chart => {
      const isMarked = mark && mark.gpu === gpu && mark.chart === chart.key;
      const c = card(gpu, chart, moved.has(chart.key), isMarked ? mark : null);
      if (isMarked) marked = c;
      grid.appendChild(c);
    });
    section.appendChild(grid);
    box.appendChild(section);
  });
  if (marked) {
    marked.scrollIntoView({ block: "center" });
    mark = null;
  }
  document.body.dataset.drawn = gpu; // for the tests: the suites of this GPU model are on the page
}

function card(gpu, chart, moved, marked) {
  const div = el("div", "card");
  div.dataset.chart = chart.key;
  if (moved) div.classList.add("moved");
  const single = chart.series.every(s => s.pos.length <= 1);
  if (single) div.classList.add("single");
  const detail = el("div", "detail");
  const tools = el("span", "tools");
  const title = el("h3", "", shortName(chart.key));
  const legend = el("div", "legend");
  chart.series.forEach(s => {
    if (chart.series.length === 1 && !s.label) return; // a lone series needs no legend
    const item = el("span");
    const swatch = el("i");
    swatch.style.background = s.color;
    item.appendChild(swatch);
    item.append(s.label || "this benchmark");
    legend.appendChild(item);
  });
  const plot = el("div", "plotbox");
  div.append(tools, title, legend, chartNote(chart), plot, detail);
  if (single) {
    drawSingle(plot, gpu, chart, detail);
    return div;
  }
  let wide = Boolean(marked);
  const toggle = el("button", "link", wide ? "smaller" : "larger");
  tools.appendChild(toggle);
  plot.draw = () => {
    plot.innerHTML = "";
    const series = chart.series.map(s => {
      const view = shown(s);
      const steps = view.figure === s.figure ? s.steps : [];
      return {
        label: s.label,
        color: s.color,
        t: s.t,
        y: view.y,
        capped: s.capped,
        locked: s.locked,
        methods: view.methods,
        dashed: view.dashed,
        band: wide ? noiseBand(view.y, INDEX.window, INDEX.band_k, view.methods) : null,
        steps: steps.map(st => ({
          ...st,
          marked: Boolean(marked && marked.name === s.name && marked.index === st.index),
        })),
      };
    });
    drawChart(
      plot,
      { series, wide, figure: state.fig },
      (si, i) => tooltip(chart.series[si], i),
      (si, i) => showKernels(detail, gpu, chart.series[si], i),
    );
  };
  toggle.addEventListener("click", () => {
    wide = !wide;
    div.classList.toggle("wide", wide);
    toggle.textContent = wide ? "smaller" : "larger";
    plot.draw();
  });
  if (marked) {
    div.classList.add("wide", "marked");
    plot.draw();
  } else observer.observe(plot);
  return div;
}

// What a chart says once about its figures in the GPU view: the GPU-time methods where a series changed
// method (its line breaks there), and the series drawn in wall time for want of any GPU time.
function chartNote(chart) {
  const note = el("p", "chart-note");
  const views = chart.series.map(s => [s, shown(s)]);
  const methods = new Set(),
    wall = [];
  let changed = false;
  views.forEach(([s, view]) => {
    if (view.dashed) wall.push(s.label || "this benchmark");
    if (!view.methods) return;
    const own = new Set(view.methods.filter(m => m !== null));
    own.forEach(m => methods.add(m));
    changed = changed || own.size > 1;
  });
  const words = ["no", "one", "two", "three", "four", "five"];
  const parts = [];
  if (changed) {
    const count = words[methods.size] || String(methods.size);
    parts.push(`GPU time by ${count} methods (${[...methods].join(", ")}): the line breaks where it changed`);
  }
  if (wall.length) {
    const which = chart.series.length > 1 ? ` for ${wall.join(", ")}` : "";
    parts.push(`wall time, dashed${which}: no GPU time recorded`);
  }
  note.textContent = parts.join("; ");
  note.hidden = !parts.length;
  return note;
}

// A chart whose series have one point each: a line per series with a dot, not a full-size empty chart.
function drawSingle(box, gpu, chart, detail) {
  chart.series.forEach(s => {
    if (!s.pos.length) return;
    const view = shown(s),
      line = el("div", "one");
    const dot = svgEl("svg", { width: 12, height: 12, class: "dot" });
    svgEl("circle", { class: "point", cx: 6, cy: 6, r: 4, fill: s.color, "data-i": 0 }, dot);
    dot.style.cursor = "pointer";
    dot.addEventListener("click", () => showKernels(detail, gpu, s, 0));
    line.appendChild(dot);
    line.append(
      ` ${s.label ? s.label + ": " : ""}${view.y[0] === null ? "-" : formatMs(view.y[0])} ` +
        `${view.figure === "gpu" ? "GPU" : "wall"}, one run: ${s.commit[0] || "?"} ${date(s.t[0])}`,
    );
    line.title = tooltip(s, 0);
    box.appendChild(line);
  });
}

function tooltip(s, i) {
  const view = shown(s),
    value = view.y[i];
  const clock = s.mhz && s.mhz[i] ? `SM clock ${s.mhz[i]} MHz` : "SM clock not sampled";
  const state_ =
    (s.capped.has(i) ? ", held down by the power cap" : "") + (s.locked[i] ? ", clocks locked" : "");
  const method = view.methods && view.methods[i] ? ` (${view.methods[i]})` : "";
  const figure = view.figure === "gpu" ? `GPU time${method}` : "wall time";
  return (
    `${s.label ? s.label + ": " : ""}${value === null ? "-" : formatMs(value)} ${figure}\n` +
    `commit ${s.commit[i] || "?"}, ${date(s.t[i], true)} UTC\n${clock}${state_}\n` +
    `run #${s.run[i]}: click for its kernel table`
  );
}

function showKernels(box, gpu, s, i) {
  const key = `${gpu}\u0000${s.k}`;
  box.textContent = "loading the kernel table…";
  need(
    `k\u0000${key}`,
    `${gpuInfo(gpu).dir}/${s.k}.js`,
    () => PERF.kernels[key],
    () => {
      const rows = PERF.kernels[key].get(s.run[i]) || [];
      box.innerHTML = "";
      const gpuMs = s.gpu && s.gpu[i] !== null ? `GPU ${formatMs(s.gpu[i])} (${s.method[i]}), ` : "";
      const head = el(
        "p",
        "kernel-head",
        `${s.label ? s.label + ", " : ""}run #${s.run[i]}, commit ${s.commit[i] || "?"}, ` +
          `${date(s.t[i], true)}: ${gpuMs}wall ${formatMs(s.wall[i])}` +
          (s.mhz && s.mhz[i] ? `, SM ${s.mhz[i]} MHz` : "") +
          (rows.length ? "" : "; no kernel table recorded"),
      );
      box.appendChild(head);
      if (!rows.length) return;
      const table = el("table", "kernels");
      const header = el("tr");
      ["µs per call", "launches", "kernel"].forEach(h => header.appendChild(el("th", "", h)));
      table.appendChild(header);
      rows.forEach(r => {
        const tr = el("tr");
        [r.us.toFixed(2), String(r.launches), r.kernel].forEach(c => tr.appendChild(el("td", "", c)));
        table.appendChild(tr);
      });
      box.appendChild(table);
    },
  );
}

// ------------------------------------------------------------------ controls
function syncControls() {
  document.getElementById("filter").value = state.q;
  document.querySelectorAll("input[name=figure]").forEach(r => {
    r.checked = r.value === state.fig;
  });
  document.querySelectorAll(".gpu").forEach(b => b.classList.toggle("on", b.dataset.gpu === state.gpu));
}

function start() {
  document.getElementById("capped").textContent = `${100 * (INDEX.capped_share || 0.5)}%`;
  document.getElementById("window").textContent = INDEX.window;
  document.getElementById("bandk").textContent = INDEX.band_k;
  const leftOut = Object.entries(INDEX.unmeasured || {}).map(([gpu, n]) => `${n} on ${gpu}`);
  document.getElementById("created").textContent =
    `Written ${INDEX.created}${INDEX.source ? ` from ${INDEX.source}` : ""}.` +
    (leftOut.length ? ` Left out, not measurements (a time of 0 or less): ${leftOut.join(", ")}.` : "");
  if (INDEX.empty) notice(INDEX.empty);
  INDEX.gpus
    .filter(g => !g.gpu_series)
    .forEach(g =>
      notice(
        `No run on ${g.name} recorded GPU time ` +
          "(runs without the GPU profiler, or on a CPU): its charts show wall time.",
      ),
    );
  Object.assign(state, readHash());
  if (!gpuInfo(state.gpu)) {
    const newest = [...INDEX.gpus].sort((a, b) => b.last - a.last)[0];
    state.gpu = newest ? newest.name : null;
  }
  INDEX.gpus.forEach(g => {
    const button = el("button", "gpu", `${g.name} (${g.benchmarks} benchmarks, ${g.runs} runs)`);
    button.dataset.gpu = g.name;
    button.addEventListener("click", () => {
      state.gpu = g.name;
      syncControls();
      writeHash();
      renderSuites();
    });
    document.getElementById("gpus").appendChild(button);
  });
  document.getElementById("filter").addEventListener("input", event => {
    state.q = event.target.value;
    writeHash();
    renderLanding();
    renderSuites();
  });
  document.querySelectorAll("input[name=figure]").forEach(radio =>
    radio.addEventListener("change", () => {
      state.fig = radio.value === "wall" ? "wall" : "gpu";
      writeHash();
      renderSuites();
    }),
  );
  window.addEventListener("hashchange", () => {
    if (location.hash === lastHash) return;
    Object.assign(state, readHash());
    if (!gpuInfo(state.gpu) && INDEX.gpus.length) state.gpu = INDEX.gpus[0].name;
    syncControls();
    renderLanding();
    renderSuites();
  });
  syncControls();
  renderLanding();
  renderSuites();
}

start();
