// The trends page's landing: the steps of the last days across suites and GPU models, slower first,
// and the series whose newest runs left their noise band; each links to its chart.

// ------------------------------------------------------------------ the landing
function sizeCell(e) {
  const td = el("td", `size ${e.ratio > 1 ? "slower" : "faster"}`);
  const pct = (100 * (e.ratio - 1)).toFixed(1);
  td.textContent = `${e.ratio > 1 ? "▲ +" : "▼ "}${pct}% ${e.ratio > 1 ? "slower" : "faster"}`;
  td.appendChild(el("div", "muted", `x${e.ratio} · ${(100 * e.certainty).toFixed(2)}% certain`));
  return td;
}

function kernelsCell(e) {
  const td = el("td");
  if (typeof e.kernels === "string") {
    td.appendChild(el("span", "muted", e.kernels));
    return td;
  }
  if (!e.kernels.length) {
    td.appendChild(el("span", "muted", "no kernel moved by 0.5% or more"));
    return td;
  }
  e.kernels.forEach(([kernel, change, before, after]) => {
    const line = el("div", "mono");
    const launches =
      before === null
        ? " (new)"
        : after === null
          ? " (gone)"
          : before === after
            ? ""
            : ` (launches ${before} → ${after})`;
    line.textContent = `${change > 0 ? "+" : ""}${change.toFixed(1)} µs${launches} ${kernel}`;
    td.appendChild(line);
  });
  return td;
}

function landingRow(e) {
  const tr = el("tr", "change");
  tr.dataset.name = e.name;
  tr.appendChild(sizeCell(e));
  const what = el("td");
  what.appendChild(el("span", "mono", shortName(e.chart)));
  if (e.label) what.appendChild(el("span", "label", e.label));
  const figure = e.figure === "gpu" ? "GPU" : "wall";
  what.appendChild(el("div", "muted", `${e.suite} · ${e.gpu} · ${figure} time`));
  tr.appendChild(what);
  const when = el("td", "mono when");
  when.appendChild(el("div", "", `${e.before.commit || "?"} ${date(e.before.t)}  ${formatMs(e.before.ms)}`));
  when.appendChild(el("div", "", `${e.after.commit || "?"} ${date(e.after.t)}  ${formatMs(e.after.ms)}`));
  tr.appendChild(when);
  tr.appendChild(kernelsCell(e));
  const open = el("td"),
    link = el("a", "open", "chart");
  link.href = "#";
  link.addEventListener("click", event => {
    event.preventDefault();
    openChart(e);
  });
  open.appendChild(link);
  tr.appendChild(open);
  return tr;
}

function fillTable(table, entries, limit) {
  table.innerHTML = "";
  if (!entries.length) return;
  const head = el("tr");
  [
    "change",
    "benchmark",
    "last run before → first run after",
    "kernels that moved (µs per call)",
    "",
  ].forEach(h => head.appendChild(el("th", "", h)));
  table.appendChild(head);
  entries.slice(0, limit).forEach(e => table.appendChild(landingRow(e)));
}

function renderLanding() {
  const note = document.getElementById("landing-note"),
    more = document.getElementById("more-changes");
  const changes = document.getElementById("changes"),
    fresh = document.getElementById("fresh");
  more.innerHTML = "";
  if (INDEX.empty) {
    note.textContent = "Nothing to show: see the notice above.";
    return;
  }
  if (!INDEX.steps) {
    note.textContent = "Steps were left out when this page was written (--no-steps).";
    return;
  }
  const listed = INDEX.landing.filter(e => matches(e.name, e.gpu, e.label));
  const newest = Math.max(...INDEX.gpus.map(g => g.last));
  const where = `the last ${INDEX.recent_days} days on branch ${INDEX.branch || "any"}`;
  if (!INDEX.landing_total) {
    note.textContent = `No step began in ${where}; the newest run charted is of ${date(newest)}.`;
  } else {
    note.textContent =
      `${INDEX.landing_total} step(s) began in ${where}, slower first, then the most certain` +
      (state.q ? `; ${listed.length} of those listed here match the filter.` : ".");
  }
  fillTable(changes, listed, 10);
  if (listed.length > 10) {
    const button = el("button", "link", `show all ${listed.length}`);
    button.addEventListener("click", () => {
      fillTable(changes, listed, listed.length);
      more.innerHTML = "";
    });
    more.appendChild(button);
  }
  if (INDEX.landing_total > INDEX.landing.length) {
    more.appendChild(
      el(
        "span",
        "muted",
        ` ${INDEX.landing_total - INDEX.landing.length} less important ones are ` +
          `not on this page: python -m perf.history steps lists them all.`,
      ),
    );
  }
  const offBand = INDEX.fresh.filter(e => matches(e.name, e.gpu, e.label));
  document.getElementById("fresh-title").hidden = !offBand.length;
  fillTable(fresh, offBand, 10);
}

function openChart(e) {
  state.gpu = e.gpu;
  state.fig = e.figure;
  if (!matches(e.name)) state.q = "";
  mark = { gpu: e.gpu, chart: e.chart, name: e.name, index: e.index };
  syncControls();
  writeHash();
  renderSuites();
}
