"""Tune the FlashAttention Triton kernels on this GPU and store their choices as its table.

    python scripts/tune_flash_triton.py [--cases attention,model] [--dtypes bf16,fp32] [--seqs N,..]
        [--head-dims D,..] [--contexts 512,2048] [--out PATH] [--merge] [--list] [--reuse-triton-cache]

Each case runs one forward and backward of FlashAttentionTriton on random inputs of its shape, which
autotunes both kernels for its tuning key; what the autotuner chose goes to kernels/tuned/<gpu>.json
(see kernels/flash_attention_triton/stored.py), rewritten after every case, so that a run stopped by a time
limit keeps the cases it finished. A table may be made in parts, each adding to it with --merge.

Case sets: `attention`, the fixed_tokens sweep of perf/cases/attention.py (the cells the attention
benchmarks run); `scaling`, its scaling sweep; `model`, the attention call of each GPU-sized model
preset's training step, (batch_size, num_heads, context, head_dim) causal, at --contexts. --dtypes,
--seqs and --head-dims filter every set; --list prints the cases without running them (no GPU needed).

The run tunes from scratch: FLASH_TRITON_TUNING=off (no stored table) and, unless
--reuse-triton-cache, an empty TRITON_CACHE_DIR, so that every candidate is compiled and timed now
rather than an earlier run's timings read from Triton's cache.

Exit codes: 0 written (or listed), 1 nothing tuned (every case out of memory), 2 refused (one line
on stderr saying why).
"""

from __future__ import annotations

import argparse
import gc
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # run as `python scripts/tune_flash_triton.py`: the packages are at the root

from kernels.attention_inputs import HEAD_DIMS  # noqa: E402
from model.config import PRESETS  # noqa: E402
from perf.cases.attention import SWEEPS  # noqa: E402

PROG = "tune_flash_triton"
CASE_SETS = {"attention": "fixed_tokens", "scaling": "scaling", "model": None}
MODEL_PRESETS = ("small", "medium", "large", "xl", "2.7b")  # the presets sized for a GPU
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# Read by kernels/flash_attention_triton/ (stored.py and configs.py) at each launch.
TUNING_ENV = "FLASH_TRITON_TUNING"
CONFIG_ENV = "FLASH_TRITON_CONFIG"


@dataclass(frozen=True)
class Case:
    source: str  # the case set, and for a model case its preset and context
    batch: int
    heads: int
    seq: int
    head_dim: int
    causal: bool
    dtype: str  # a key of DTYPES

    def __str__(self) -> str:
        masking = "causal" if self.causal else "full"
        shape = f"b{self.batch}-h{self.heads}-s{self.seq}-d{self.head_dim}-{masking}"
        return f"{self.source:<18} {shape:<26} {self.dtype}"

    @property
    def shape(self) -> dict[str, int]:
        return {"batch": self.batch, "heads": self.heads, "seq_q": self.seq, "seq_k": self.seq}


def select_cases(
    sets: Sequence[str],
    dtypes: Sequence[str],
    seqs: Sequence[int] | None,
    head_dims: Sequence[int] | None,
    contexts: Sequence[int],
) -> tuple[list[Case], list[str]]:
    """The cases to tune, in order and once each, and why cases of the sets were left out."""
    shapes: list[tuple[str, int, int, int, int, bool]] = []
    skipped: list[str] = []
    for name in sets:
        if CASE_SETS[name] is not None:
            shapes += [(name, s.batch, s.heads, s.seq, s.head_dim, s.causal) for s in SWEEPS[CASE_SETS[name]]]
            continue
        for preset in MODEL_PRESETS:
            config = PRESETS[preset]
            if config.head_dim not in HEAD_DIMS:
                skipped.append(
                    f"model {preset}: head dim {config.head_dim} (d_model {config.d_model} / "
                    f"{config.num_heads} heads); FlashAttentionTriton takes {', '.join(map(str, HEAD_DIMS))}"
                )
                continue
            shapes += [
                (f"model {preset}@{c}", config.batch_size, config.num_heads, c, config.head_dim, True)
                for c in contexts
            ]
    cases: dict[tuple, Case] = {}
    for dtype in dtypes:
        for source, batch, heads, seq, head_dim, causal in shapes:
            if (seqs is None or seq in seqs) and (head_dims is None or head_dim in head_dims):
                case = Case(source, batch, heads, seq, head_dim, causal, dtype)
                cases.setdefault((batch, heads, seq, head_dim, causal, dtype), case)
    return list(cases.values()), skipped


# --------------------------------------------------------------------------- options
def _listed(accepted: Sequence[str]):
    def parse(text: str) -> tuple[str, ...]:
        values = [v.strip() for v in text.split(",") if v.strip()]
        bad = [v for v in values if v not in accepted]
        if bad or not values:
            given = ", ".join(map(repr, bad)) or "nothing given"
            raise argparse.ArgumentTypeError(f"{given}: accepted {', '.join(accepted)} (comma-separated)")
        return tuple(dict.fromkeys(values))

    return parse


def _integers(accepted: Sequence[int] | None = None):
    def parse(text: str) -> tuple[int, ...]:
        values = [v.strip() for v in text.split(",") if v.strip()]
        ok = [
            int(v) for v in values if v.isdigit() and int(v) > 0 and (accepted is None or int(v) in accepted)
        ]
        if len(ok) != len(values) or not values:
            what = ", ".join(map(str, accepted)) if accepted else "positive integers"
            raise argparse.ArgumentTypeError(f"{text!r}: accepted {what} (comma-separated)")
        return tuple(dict.fromkeys(ok))

    return parse


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog=f"python scripts/{PROG}.py", description=__doc__.split("\n")[0])
    p.add_argument("--cases", type=_listed(tuple(CASE_SETS)), default=("attention", "model"),
                   help="case sets: attention, scaling, model (default attention,model)")  # fmt: skip
    p.add_argument("--dtypes", type=_listed(tuple(DTYPES)), default=("bf16", "fp32"),
                   help="bf16, fp16, fp32 (default bf16,fp32)")  # fmt: skip
    p.add_argument("--seqs", type=_integers(), help="keep only these sequence lengths (contexts)")
    p.add_argument("--head-dims", type=_integers(HEAD_DIMS), help="keep only these head dims")
    p.add_argument("--contexts", type=_integers(), default=(512, 2048),
                   help="contexts of the model cases (default 512,2048)")  # fmt: skip
    p.add_argument("--out", type=Path, help="the table to write (default kernels/tuned/<this GPU>.json)")
    p.add_argument(
        "--merge", action="store_true", help="add to the existing table, replacing the cases tuned again"
    )
    p.add_argument("--list", action="store_true", help="print the cases and exit; needs no GPU")
    p.add_argument("--reuse-triton-cache", action="store_true",
                   help="keep TRITON_CACHE_DIR: timings stored there by earlier runs are reused")  # fmt: skip
    return p


def _refuse(message: str) -> int:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    return 2


# --------------------------------------------------------------------------- the machine
def git_state() -> tuple[str | None, bool | None]:
    """The commit checked out and whether the tree differs from it; (None, None) without git."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(
                ["git", *args], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout if done.returncode == 0 else None

    head = git("rev-parse", "HEAD")
    if head is None:
        return None, None
    # The tables are left out: an earlier part's table is no change to what is being tuned.
    status = git("status", "--porcelain", "--", ".", ":(exclude)kernels/tuned")
    return head.strip(), None if status is None else bool(status.strip())


def gpu_info(device: torch.device) -> dict:
    """The GPU and versions as benchmark results record them (perf.harness.machine_info), and git's state."""
    from perf.harness import machine_info

    info = machine_info(device)
    commit, dirty = git_state()
    return {
        "name": info["gpu"]["name"],
        "capability": info["gpu"]["capability"],
        "driver": info["gpu"]["driver"],
        "cuda": info["cuda"],
        "torch": info["torch"],
        "triton": info["triton"],
        "commit": commit,
        "dirty": dirty,
    }


# --------------------------------------------------------------------------- tuning
def _run_case(case: Case, device: torch.device) -> None:
    """One forward and backward of the case, which autotunes each kernel not tuned for its key yet."""
    from kernels.flash_attention_triton import FlashAttentionTriton, tuning

    shape = (case.batch, case.heads, case.seq, case.head_dim)
    dtype = DTYPES[case.dtype]
    q, k, v = (torch.randn(shape, device=device, dtype=dtype, requires_grad=True) for _ in range(3))
    grad = torch.randn(shape, device=device, dtype=dtype)
    for kernel in tuning.AUTOTUNED.values():
        kernel.tuned.configs_timings = {}  # filled again only by a tuning of this case: no stale timings
    FlashAttentionTriton.apply(q, k, v, case.causal).backward(grad)
    torch.cuda.synchronize(device)


def _median_ms(tuned, config) -> float | None:
    """The autotuner's median time of `config` in its last tuning (a Triton Autotuner keeps the timings
    of every candidate in configs_timings, the quantiles (0.5, 0.2, 0.8) of each)."""
    from kernels.flash_attention_triton.stored import same_config

    for candidate, timing in (getattr(tuned, "configs_timings", None) or {}).items():
        if same_config(candidate, config):
            ms = timing[0] if isinstance(timing, list | tuple) else timing
            return float(ms) if isinstance(ms, int | float) else None
    return None


def tune(options: argparse.Namespace, cases: list[Case], command: str) -> int:
    # Before triton is imported: every candidate is compiled and timed by this run, none read back.
    os.environ[TUNING_ENV] = "off"
    cache = None if options.reuse_triton_cache else tempfile.mkdtemp(prefix="flash-triton-tuning-")
    if cache:
        os.environ["TRITON_CACHE_DIR"] = cache
    try:
        return _tune(options, cases, command)
    finally:
        if cache:
            shutil.rmtree(cache, ignore_errors=True)


def _tune(options: argparse.Namespace, cases: list[Case], command: str) -> int:
    from kernels.flash_attention_triton import stored, stored_writing, tuning

    device = torch.device("cuda", torch.cuda.current_device())
    info = gpu_info(device)
    out = options.out or stored.table_path(info["name"])
    base = None
    if out.exists():
        if not options.merge:
            return _refuse(f"{out} exists; --merge adds this run's cases to it, or give another --out")
        try:
            base = stored.read_table(out)
            stored_writing.check_mergeable(base, info, str(out))
        except stored.TuningTableError as err:
            return _refuse(str(err))
    versions = f"torch {info['torch']}, triton {info['triton']}"
    print(f"tuning {len(cases)} cases on {info['name']} ({versions}) into {out}", flush=True)
    started = datetime.now(UTC).isoformat(timespec="seconds")
    entries: dict[tuple, dict] = {}  # this run's, by case
    skipped = 0
    for i, case in enumerate(cases, 1):
        before = {name: set(kernel.chosen) for name, kernel in tuning.AUTOTUNED.items()}
        begin = time.perf_counter()
        try:
            _run_case(case, device)
            reason = None
        except torch.OutOfMemoryError as err:
            reason = str(err).splitlines()[0]
        seconds = time.perf_counter() - begin
        chosen, tuned_now = [], 0  # a kernel tuned before the other ran out of memory is kept
        for name, kernel in tuning.AUTOTUNED.items():
            new = [key for key in kernel.chosen if key not in before[name]]
            tuned_now += len(new)
            for key in new:
                config = kernel.chosen[key]
                ms = _median_ms(kernel.tuned, config)
                entries[stored.case_of(name, key)] = stored_writing.case_entry(
                    name, key, config, ms=ms, shape=case.shape
                )
                timing = f"{ms:.3f} ms" if ms is not None else "no timing"
                chosen.append(f"{name} {stored.config_text(config)} ({timing})")
            if not new and kernel.last is not None and reason is None:
                chosen.append(f"{name} {stored.config_text(kernel.last)} (tuned by an earlier case)")
        if reason is not None:
            gc.collect()  # the failed case's tensors, then the allocator's cache of them
            torch.cuda.empty_cache()
            skipped += 1
            chosen.insert(0, f"skipped, out of GPU memory ({reason})")
        print(f"[{i}/{len(cases)}] {case}: {seconds:.1f} s; {'; '.join(chosen)}", flush=True)
        if tuned_now:  # written after each case: a run stopped by a time limit keeps what it finished
            stored_writing.save_table(
                out, stored_writing.build_table(info, entries.values(), command, base=base, date=started)
            )
    if not entries:
        print(f"{PROG}: nothing tuned ({skipped} cases out of memory); {out} not written", file=sys.stderr)
        return 1
    total = len(stored.read_table(out)["cases"])
    print(f"wrote {out}: {total} cases, {len(entries)} tuned by this run; {skipped} skipped for memory")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    options = parser().parse_args(argv)
    cases, skipped = select_cases(
        options.cases, options.dtypes, options.seqs, options.head_dims, options.contexts
    )
    if options.list:
        for reason in skipped:
            print(f"not tunable: {reason}")
        for case in cases:
            print(case)
        print(f"{len(cases)} cases")
    if not cases:
        return _refuse("no case left after the filters (--cases, --dtypes, --seqs, --head-dims, --contexts)")
    if options.list:
        return 0
    if os.environ.get(CONFIG_ENV, "").strip():
        return _refuse(f"{CONFIG_ENV} is set, which forces a configuration instead of tuning; unset it")
    if not torch.cuda.is_available():
        return _refuse(
            f"no CUDA GPU visible to torch {torch.__version__}: tuning runs on the GPU whose table it writes "
            "(--list works without one)"
        )
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        return _refuse(
            "TRITON_INTERPRET is set: the interpreter runs one configuration, there is nothing to tune"
        )
    for reason in skipped:
        print(f"not tunable: {reason}")
    return tune(options, cases, shlex.join(["python", f"scripts/{PROG}.py", *argv]))


if __name__ == "__main__":
    sys.exit(main())
