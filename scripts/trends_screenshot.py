"""Regenerate docs/images/trends.png, the trends page in docs/history.md: a synthetic history (40 nightly runs
on two GPU models, a step planted in one attention provider: perf/history/synthetic.py) written as a page
and photographed in Chromium, the newest run's kernel table of the stepped series opened.

    .venv/bin/python scripts/trends_screenshot.py [--out docs/images/trends.png] [--chromium PATH]

Needs Playwright (a dependency in pyproject.toml) and a Chromium (Debian: apt-get install chromium); it
never downloads a browser.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from perf.history import trends  # noqa: E402 (after the repository is on the path)
from perf.history.store import connect  # noqa: E402
from perf.history.synthetic import trend_documents  # noqa: E402

OUT = ROOT / "docs" / "images" / "trends.png"
VIEWPORT = {"width": 1280, "height": 1000}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help=f"the PNG to write ({OUT.relative_to(ROOT)})")
    parser.add_argument("--chromium", help="the browser to drive (default: chromium on PATH)")
    options = parser.parse_args(argv)
    browser_path = options.chromium or shutil.which("chromium") or shutil.which("chromium-browser")
    if browser_path is None:
        parser.error("--chromium: no chromium on PATH; give the browser's path (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory() as scratch:
        with connect(str(Path(scratch) / "history.sqlite")) as history:
            for document in trend_documents(40):
                history.record(document)
            page_path = trends.publish(history, Path(scratch) / "site", branch="main")
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=browser_path)
            page = browser.new_page(viewport=VIEWPORT)
            page.goto(page_path.as_uri())
            page.wait_for_selector("body[data-drawn]", state="attached")
            card = page.locator(".card").first  # the stepped chart: charts with a slower step come first
            newest = card.locator("circle.point[data-s='0']").last  # the stepped provider's newest run
            newest.click()
            card.locator("table.kernels").wait_for()
            page.mouse.move(0, 0)  # no tooltip in the picture
            page.evaluate("window.scrollTo(0, 0)")
            options.out.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(options.out))
            browser.close()
    print(f"wrote {options.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
