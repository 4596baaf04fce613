"""Write a patch that slows the attention forward kernel by a known share, for checking a gate live:

    python scripts/plant_attention_forward.py --share 0.02 > plant.diff
    python -m perf.tools.calibrate live --plant plant.diff -- perf/test_attention.py --tier pr -k flash_triton

The patched `attention_forward` (kernels/flash_attention_triton/launch.py) runs the forward once more, by
the same kernel (Gluon or Triton, as the call ran), on round(share x batch x heads) of the call's (batch,
head) pairs, at least one, and discards it: results stay the same, the forward kernel does that much more
work (more where one pair is more than the share) and launches twice. The patch is of this checkout's file.
"""

from __future__ import annotations

import argparse
import difflib
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAUNCH = Path("kernels/flash_attention_triton/launch.py")
ENTRY = "def attention_forward("
RENAMED = "def _unplanted_forward("

WRAPPER = '''

def attention_forward(q, k, v, is_causal):
    """The forward, then again on a share of its (batch, head) pairs by the same kernel: a slowdown."""
    route = _gluon_forward_route(q, k, v, is_causal)
    out, lse = _unplanted_forward(q, k, v, is_causal)
    pairs = max(1, round({share!r} * q.shape[0] * q.shape[1]))
    again = [t.flatten(0, 1)[:pairs].unsqueeze(0).contiguous() for t in (q, k, v)]
    if route is not None:
        gluon_forward.gluon_attention_forward(*again, is_causal, persistent=route == "persistent")
    else:
        _unplanted_forward(*again, is_causal)
    return out, lse
'''


def planted(source: str, share: float) -> str:
    """The launch module's source with its forward planted."""
    if source.count(ENTRY) != 1:
        raise ValueError(f"{LAUNCH}: expected one `{ENTRY}`, found {source.count(ENTRY)}")
    return source.replace(ENTRY, RENAMED, 1).rstrip("\n") + "\n" + WRAPPER.format(share=share)


def patch(root: Path, share: float) -> str:
    """A unified diff (git apply reads it) from `root`'s launch module to the planted one."""
    before = (root / LAUNCH).read_text()
    after = planted(before, share)
    lines = difflib.unified_diff(
        before.splitlines(keepends=True), after.splitlines(keepends=True), f"a/{LAUNCH}", f"b/{LAUNCH}"
    )
    return "".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--share", type=float, default=0.02, help="share of (batch, head) pairs, in (0, 1]")
    options = parser.parse_args(argv)
    if not 0 < options.share <= 1:
        parser.error(f"--share {options.share}: accepted is a fraction in (0, 1]")
    try:
        sys.stdout.write(patch(ROOT, options.share))
    except (OSError, ValueError) as err:
        print(f"plant_attention_forward: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
