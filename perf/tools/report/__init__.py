"""The report of a result file, alone or against a baseline: `python -m perf.tools.report`.

- `document`: the command line, the result files it reads and the report's content, written as
  Markdown and HTML;
- `comparison`: current against baseline per benchmark, by the gate's rule, with its ratio plot;
- `plots` and `figures`: the PNGs the results have data for, and the drawing they share;
- `render`: the blocks of a report (headings, tables, images) as Markdown and as one HTML page.
"""

from perf.tools.report.document import main

__all__ = ["main"]
