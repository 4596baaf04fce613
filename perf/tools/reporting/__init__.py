"""What the tools print and write, from results read (perf/tools/reading/) and judged (perf/tools/judging/).

- `verdict`, `verdict_markdown` and `gate_output`: the gate's verdict in the terminal and as Markdown for a
  job summary, and the two shown;
- `ab_verdict`: the A/B's verdict (`gate --base`);
- `bisect_answer`: what a bisection prints as it goes and at the end;
- `noise_summary`: the thresholds a noise file gives;
- `nccl_table`: the suite's NCCL bus bandwidth beside nccl-tests';
- `calibration`: the calibration's rates as a table;
- the report of a result file (`python -m perf.tools.report`): `document` (its content, written as Markdown
  and HTML), `comparison` (current against baseline by the gate's rule, with its ratio plot), `plots` and
  `figures` (the PNGs the results have data for, and the drawing they share), `render` (the blocks of a
  report as Markdown and as one HTML page).

Nothing here runs pytest (perf/tools/running/ does) or imports it.
"""
