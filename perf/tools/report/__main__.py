"""`python -m perf.tools.report RESULT.json [--baseline FILE] [--out DIR]` (perf/tools/report/document.py)."""

import sys

from perf.tools.report.document import main

sys.exit(main())
