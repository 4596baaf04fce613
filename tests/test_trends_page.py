"""The trends page in a real browser: Debian's Chromium driven by Playwright, the page opened from file:// as
a user opens it. One browser for the module, a fresh page (and its own address) per test; every test fails
on a console error or an uncaught exception of the page. Skipped, with the reason, where Playwright or a
Chromium is missing (CI installs both: .ci/run, pyproject.toml)."""

from __future__ import annotations

import os
import shutil
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path

import pytest

from perf.history import trends
from perf.history.store import connect
from perf.history.synthetic import ONCE, STEPPED, TREND_GPUS, trend_documents

CHROMIUM = ("chromium", "chromium-browser", "google-chrome")  # Debian's name first
STEP_COMMIT = f"{30:04x}" + "c0ffee"  # the first 10 characters of the commit at trend_documents' step
STEPPED_CHART = "perf/test_attention.py::test_attention[bf16-forward_backward-b4-h16-s4096-d128-causal]"


@pytest.fixture(scope="module")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Playwright is not installed (pip install playwright: pyproject.toml lists it)")
    path = os.environ.get("PERF_CHROMIUM") or next(filter(None, map(shutil.which, CHROMIUM)), None)
    if path is None:
        pytest.skip(
            f"no Chromium found ({', '.join(CHROMIUM)} on PATH, or PERF_CHROMIUM): apt-get install chromium"
        )
    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=path)
        yield chromium
        chromium.close()


def _site(folder: Path, documents: list[dict]) -> Path:
    with connect(str(folder / "history.sqlite")) as history:
        for document in documents:
            history.record(document)
        return trends.publish(history, folder / "site", branch="main")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """The page of 40 nightly runs on two GPU models, a step planted 10 runs ago (history/synthetic.py)."""
    return _site(tmp_path_factory.mktemp("trends"), trend_documents(40))


class Page:
    """A browser page that records its console errors and uncaught exceptions."""

    def __init__(self, browser, init_script: str | None = None):
        self.context = browser.new_context(viewport={"width": 1300, "height": 900})
        self.context.set_default_timeout(10_000)  # a page that fails shows it in a second, not 30
        if init_script:
            self.context.add_init_script(init_script)
        self.page = self.context.new_page()
        self.errors: list[str] = []
        self.page.on(
            "console", lambda m: self.errors.append(f"console: {m.text}") if m.type == "error" else None
        )
        self.page.on("pageerror", lambda error: self.errors.append(f"page error: {error}"))

    def open(self, url: str):
        self.page.goto(url)
        self.page.wait_for_selector("body[data-drawn]", state="attached")
        return self.page


@pytest.fixture
def page(browser):
    opened = Page(browser)
    yield opened
    opened.context.close()
    assert opened.errors == []


def test_the_planted_step_is_on_the_landing_with_its_ratio_commit_and_kernel(site, page):
    p = page.open(site.as_uri())
    rows = p.locator("#changes tr.change")
    assert rows.count() == 1
    text = rows.first.inner_text()
    assert "+8." in text and "slower" in text and "x1.08" in text, text
    assert STEP_COMMIT in text and "attn_fwd_v2" in text and "flash_triton" in text and TREND_GPUS[0] in text
    # Its link opens the chart wide, the step marked and labelled, the noise band drawn.
    rows.first.locator("a.open").click()
    card = p.locator(f'.card.marked[data-chart="{STEPPED_CHART}"]')
    assert card.count() == 1 and "wide" in card.get_attribute("class")
    assert card.locator("line.step[stroke-width='2.5']").count() == 1 and card.locator("polygon").count() >= 1
    assert "x1.08" in card.locator("svg.plot").inner_html()


def test_clicking_a_point_shows_its_kernel_table(site, page):
    p = page.open(site.as_uri())
    card = p.locator(f'.card[data-chart="{STEPPED_CHART}"]')
    card.scroll_into_view_if_needed()
    newest = card.locator("circle.point[data-s='0']").last  # flash_triton's newest run, after the step
    newest.hover()
    assert (
        "flash_triton" in p.locator("#tip").inner_text()
        and "SM clock 1980 MHz" in p.locator("#tip").inner_text()
    )
    newest.click()
    table = card.locator("table.kernels")
    table.wait_for()
    assert "attn_fwd_v2" in table.inner_text() and "elementwise_add" in table.inner_text()
    card.locator("circle.point[data-s='0']").first.click()
    card.locator("table.kernels >> text=attn_fwd").first.wait_for()
    assert "attn_fwd_v2" not in card.locator("table.kernels").inner_text()


def test_a_one_point_series_is_drawn_small(site, page):
    p = page.open(site.as_uri())
    card = p.locator(".card.single")
    assert card.count() == 1 and card.locator("svg.plot").count() == 0
    assert card.get_attribute("data-chart") == ONCE.replace("-pinned", "")
    assert "one run" in card.inner_text() and "pinned" in card.inner_text()
    card.locator("svg.dot").click()  # its kernel table: none recorded
    card.locator("p.kernel-head").wait_for()
    assert "no kernel table recorded" in card.inner_text()


def test_the_filter_works_and_lives_in_the_address(site, page):
    p = page.open(site.as_uri())
    p.fill("#filter", "matmul")
    assert p.locator("details.suite").count() == 1 and p.locator(".card").count() == 1
    assert "q=matmul" in p.evaluate("location.hash")
    assert p.locator("#changes tr.change").count() == 0  # the step is not a matmul's
    p.reload()
    p.wait_for_selector("body[data-drawn]", state="attached")
    assert p.input_value("#filter") == "matmul" and p.locator(".card").count() == 1


@pytest.mark.parametrize("hash_", ["#50%", "#q=%E0%A4%A", "#%", "#gpu=%ZZ&q=d128"])
def test_any_text_in_the_address_renders(site, page, hash_):
    p = page.open(site.as_uri() + hash_)
    if "d128" in hash_:  # an unknown GPU model: the newest is shown, filtered
        assert p.locator(".card").count() == 1 and p.locator("#changes tr.change").count() == 1
    else:
        assert "matches the filter" in p.inner_text("#suites") and "step(s) began" in p.inner_text("#landing")
    expected = {"#50%": "50%", "#q=%E0%A4%A": "%E0%A4%A", "#%": "%", "#gpu=%ZZ&q=d128": "d128"}[hash_]
    assert p.input_value("#filter") == expected


def test_the_filter_works_where_replace_state_is_refused(browser, site):
    # Some browsers refuse history.replaceState on file:// with a SecurityError: the page falls back.
    refusing = "history.replaceState = () => { throw new DOMException('refused', 'SecurityError'); };"
    opened = Page(browser, refusing)
    try:
        p = opened.open(site.as_uri())
        p.fill("#filter", "end_to_end")
        assert p.locator(".card").count() == 1 and "q=end_to_end" in p.evaluate("location.hash")
    finally:
        opened.context.close()
    assert opened.errors == []


def test_the_wall_gpu_switch_changes_the_values(site, page):
    p = page.open(site.as_uri() + "#q=test_train_step")
    plot = p.locator(".card svg.plot").first
    gpu_ticks = plot.locator("text.ytick").all_text_contents()
    assert plot.get_attribute("data-figure") == "gpu"
    p.check("input[name=figure][value=wall]")
    plot = p.locator(".card svg.plot").first
    plot.wait_for()
    assert plot.get_attribute("data-figure") == "wall" and "fig=wall" in p.evaluate("location.hash")
    wall_ticks = plot.locator("text.ytick").all_text_contents()
    assert wall_ticks and gpu_ticks and wall_ticks != gpu_ticks, (gpu_ticks, wall_ticks)


def test_the_gpu_choice_survives_a_reload(site, page):
    p = page.open(site.as_uri())
    assert "on" in p.locator(f'.gpu[data-gpu="{TREND_GPUS[0]}"]').get_attribute("class")
    p.click(f'.gpu[data-gpu="{TREND_GPUS[1]}"]')
    p.wait_for_selector(".card")
    p.reload()
    p.wait_for_selector("body[data-drawn]", state="attached")
    assert "on" in p.locator(f'.gpu[data-gpu="{TREND_GPUS[1]}"]').get_attribute("class")
    assert "on" not in p.locator(f'.gpu[data-gpu="{TREND_GPUS[0]}"]').get_attribute("class")
    # The planted step is not on this model: its chart has no step line.
    card = p.locator(f'.card[data-chart="{STEPPED_CHART}"]')
    card.scroll_into_view_if_needed()
    card.locator("svg.plot").wait_for()
    assert card.locator("line.step").count() == 0


def test_runs_without_gpu_time_give_a_page_that_says_so(tmp_path, page):
    site = _site(tmp_path, trend_documents(8, gpu_time=False))
    p = page.open(site.as_uri())
    assert "recorded GPU time" in p.inner_text("#notice") and p.locator("svg.plot").count() >= 1
    assert p.locator("svg.plot").first.get_attribute("data-figure") == "gpu"  # shown dashed: wall time
    card = p.locator(".card").first
    assert "wall time, dashed" in card.locator(".chart-note").inner_text()
    assert card.locator("polyline.line[stroke-dasharray='4 3']").count() >= 1


def test_gpu_time_by_two_methods_is_drawn_with_a_break_where_the_method_changed(tmp_path, page):
    # The runs from the 36th on measured GPU time by another method; the step at run 30 is then scanned
    # on wall time (steps compare one method only), and the landing's link opens the wall view.
    documents = trend_documents(40)
    for document in documents[36:40] + documents[76:]:
        for entry in document["benchmarks"]:
            if "gpu_method" in entry["extra_info"]:
                entry["extra_info"]["gpu_method"] = "steady"
    p = page.open(_site(tmp_path, documents).as_uri())
    row = p.locator("#changes tr.change")
    assert row.count() == 1 and "wall time" in row.inner_text()
    row.locator("a.open").click()
    card = p.locator(f'.card.marked[data-chart="{STEPPED_CHART}"]')
    assert "fig=wall" in p.evaluate("location.hash") and card.locator("line.step[stroke-width='2.5']").count()
    # The GPU view: GPU time, each provider's line in two parts, said once in the chart's note.
    p.check("input[name=figure][value=gpu]")
    card = p.locator(f'.card[data-chart="{STEPPED_CHART}"]')
    card.scroll_into_view_if_needed()
    card.locator("svg.plot").wait_for()
    assert card.locator("svg.plot").get_attribute("data-figure") == "gpu"
    # A point's tooltip: its GPU time (not its wall time) and its method.
    newest = documents[39]["benchmarks"][0]
    assert newest["fullname"] == STEPPED
    card.locator("circle.point[data-s='0']").last.hover()
    tip = p.locator("#tip").inner_text()
    gpu_ms, wall_ms = newest["extra_info"]["gpu_ms"], newest["stats"]["median"] * 1e3
    assert f"{float(f'{gpu_ms:.5g}'):.4g} ms GPU time (steady)" in tip, (tip, gpu_ms)
    assert f"{float(f'{wall_ms:.5g}'):.4g} ms" not in tip
    lines = card.locator("polyline.line[data-s='0']")
    assert [lines.nth(i).get_attribute("data-method") for i in range(lines.count())] == ["rounds", "steady"]
    assert card.locator("polyline.line[stroke-dasharray='4 3']").count() == 0
    note = card.locator(".chart-note").inner_text()
    assert "GPU time by two methods (rounds, steady)" in note and "wall" not in note
    assert "method" not in card.locator(".legend").inner_text()


def _retimed(documents: list[dict], span: timedelta) -> list[dict]:
    """The first GPU model's runs of `documents`, spread evenly over `span` up to a fixed day."""
    first = [d for d in documents if d["machine_info"]["perf"]["gpu"]["name"] == TREND_GPUS[0]]
    end = datetime(2026, 11, 27, 6, 30, tzinfo=UTC)
    for k, document in enumerate(first):
        when = (end - span * (len(first) - 1 - k) / (len(first) - 1)).isoformat()
        document["datetime"] = document["commit_info"]["time"] = when
    return first


def _tick_labels(p, charts: str = "svg.plot") -> list[int]:
    """The number of time-axis labels of each chart drawn (`charts` selects them), after checking that
    there are at least three (a small chart has room for them), inside their chart, none overlapping."""
    found = p.evaluate(
        """charts => [...document.querySelectorAll(charts)].map(svg => ({
            svg: svg.getBoundingClientRect().toJSON(),
            ticks: [...svg.querySelectorAll('text.xtick')].map(t =>
                ({text: t.textContent, ...t.getBoundingClientRect().toJSON()}))}))""",
        charts,
    )
    assert found
    for chart in found:
        ticks = sorted(chart["ticks"], key=lambda t: t["left"])
        assert len(ticks) >= 3, ticks
        for a, b in pairwise(ticks):
            assert a["right"] <= b["left"], (a, b)
        assert chart["svg"]["left"] <= ticks[0]["left"] and ticks[-1]["right"] <= chart["svg"]["right"]
    return [len(chart["ticks"]) for chart in found]


# 18 hours; 22 hours, as the stored H200 baselines span (their labels overlapped); a year of nightly runs.
@pytest.mark.parametrize(
    "runs, span", [(4, timedelta(hours=18)), (4, timedelta(hours=22)), (300, timedelta(days=365))]
)
def test_the_time_axis_labels_never_overlap(tmp_path, page, runs, span):
    site = _site(tmp_path, _retimed(trend_documents(runs, step_at=runs), span))
    p = page.open(site.as_uri())
    small = _tick_labels(p)
    p.locator(".card button.link").first.click()  # enlarged: about three times as wide, more labels
    assert _tick_labels(p, ".card.wide svg.plot")[0] >= 2 * max(small), small


def test_the_page_of_the_stored_baselines_draws_gpu_time_without_errors(tmp_path, page):
    from perf.history.__main__ import main as history_main

    files = sorted(str(f) for f in Path(__file__).parent.parent.glob("baselines/*/[0-9]*.json"))
    assert files
    db = str(tmp_path / "h.sqlite")
    assert history_main(["--db", db, "import", *files]) == 0
    assert history_main(["--db", db, "trends", "--out", str(tmp_path / "site")]) == 0
    p = page.open((tmp_path / "site" / "index.html").as_uri())
    card = p.locator(".card:has(svg.plot)").first
    assert card.locator("svg.plot").get_attribute("data-figure") == "gpu"
    card.locator(".point").first.hover()
    assert "GPU time (" in p.locator("#tip").inner_text()
    lines = card.locator("polyline.line")
    assert lines.count() and all(lines.nth(i).get_attribute("data-method") for i in range(lines.count()))
    _tick_labels(p)


def test_an_empty_database_gives_a_page_that_says_so(tmp_path, page):
    from perf.history.__main__ import main as history_main

    (tmp_path / "empty.sqlite").touch()
    assert (
        history_main(["trends", "--db", str(tmp_path / "empty.sqlite"), "--out", str(tmp_path / "site")]) == 0
    )
    p = page.open((tmp_path / "site" / "index.html").as_uri())
    assert "an empty database" in p.inner_text("#notice") and p.locator(".card").count() == 0
