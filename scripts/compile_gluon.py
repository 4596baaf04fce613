"""Compile the Gluon attention kernels ahead of time for Hopper (sm_90) on a machine without a GPU.

    python scripts/compile_gluon.py [--head-dims 64,80,96,128] [--kernels forward,persistent,backward]
        [--dtypes bf16,fp16] [--seq 1024] [--error-lines 3] [--keep DIR]

Finds what otherwise only a GPU run shows: Gluon type and layout errors, an API a Triton release renamed,
shared memory over the H100/H200 limit, register spills, ptxas errors. Any Triton with Gluon will do (its
wheel brings ptxas: source -> TTGIR -> LLVM IR -> PTX -> cubin all run here); for the release a GPU runner
has, make a venv with it, e.g. `python3.11 -m venv ../venv-t36 && ../venv-t36/bin/pip install
triton==3.6.0 torch numpy`, and run this script with its python. CI runs it with its own Triton
(tests/test_gluon_compiles.py).

The launchers (gluon_attention_forward, gluon_attention_backward_into) run on CPU tensors with the
kernel's `[grid](...)` recorded, not launched: TensorDescriptors (block shapes, NVMMA layouts),
constexprs and options (num_warps, maxnreg, NUM_STAGES) are theirs; their checks run, and a refusal is
a failure. The JIT's binder specialises them as on a GPU; triton.compile builds for sm_90.

One line per variant (per launch, should a launcher make several): OK with shared memory, registers,
spill bytes and PTX instruction count, or FAIL with the first lines of the error (with MLIR's
diagnostics, which C++ writes to stderr). Exit code 1 if any failed, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
import os
import re
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

os.environ.pop("TRITON_INTERPRET", None)  # the compiler, not the interpreter, before triton is imported
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

MAX_SHARED = 232448  # cudaDevAttrMaxSharedMemoryPerBlockOptin on sm_90 (227 KiB), as the driver checks
MAX_REGS_PER_BLOCK = 65536
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


class _Recorder:
    """Stands in for `kernel` in `kernel[grid](*args, **kwargs)` and records the calls."""

    def __init__(self, fn):
        self.fn, self.calls = fn, []

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.calls.append((args, kwargs))


def capture(name, head_dim, dtype, causal, seq):
    """The launcher of kernel `name` run on zero CPU tensors (batch 1, 2 heads): its recorded launches."""
    from kernels.flash_attention_triton import gluon_backward as bwd
    from kernels.flash_attention_triton import gluon_forward as fwd
    from kernels.flash_attention_triton import gluon_persistent as persistent

    shape = (1, 2, seq, head_dim)
    q, k, v, do, dk, dv = (torch.zeros(shape, dtype=dtype) for _ in range(6))
    lse, delta, dq_acc = (torch.zeros(s, dtype=torch.float32) for s in (shape[:3], shape[:3], shape))
    module, kernel = {
        "forward": (fwd, "_attention_forward_kernel"),
        "persistent": (persistent, "_attention_forward_persistent_kernel"),
        "backward": (bwd, "_attention_backward_kernel"),
    }[name]
    rec = _Recorder(getattr(module, kernel))
    no_device = lambda _device: contextlib.nullcontext()  # noqa: E731 - torch.cuda.device refuses CPU
    with mock.patch.object(module, kernel, rec), mock.patch.object(torch.cuda, "device", no_device):
        if name != "backward":
            fwd.gluon_attention_forward(q, k, v, causal, persistent=name == "persistent")
        else:
            bwd.gluon_attention_backward_into(q, k, v, do, lse, delta, dq_acc, dk, dv, causal)
    if not rec.calls:
        raise RuntimeError("the launcher launched nothing")
    return rec


def compile_call(fn, args, kwargs):
    """triton.compile of one recorded launch, specialised as JITFunction.run does; (kernel, ptxas log)."""
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler.compiler import make_backend
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import create_function_from_signature

    target = GPUTarget("cuda", 90, 32)  # (backend, compute capability, warp size)
    backend = make_backend(target)
    kwargs = dict(kwargs, debug=kwargs.get("debug", fn.debug) or knobs.runtime.debug,
                  instrumentation_mode=knobs.compilation.instrumentation_mode)  # fmt: skip
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
    src = GluonASTSource(fn, signature, constexprs, attrs)  # as GluonJITFunction.create_binder sets
    knobs.compilation.always_compile = True  # a cache hit would skip ptxas and its log
    knobs.nvidia.dump_ptxas_log = True  # printed to stdout; so is the PTX when ptxas fails
    log, diagnostics = io.StringIO(), []
    try:
        with _stderr_into(diagnostics), contextlib.redirect_stdout(log):
            kernel = triton.compile(src, target=target, options=options.__dict__)
    except Exception as exc:  # MLIR's messages went to file descriptor 2, not into the exception
        exc.diagnostics = "".join(diagnostics)
        raise
    return kernel, log.getvalue()


@contextlib.contextmanager
def _stderr_into(sink: list):
    """File descriptor 2 into a temporary file, whose text is appended to sink on exit."""
    sys.stderr.flush()
    saved, tmp = os.dup(2), tempfile.TemporaryFile(mode="w+")
    os.dup2(tmp.fileno(), 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        tmp.seek(0)
        sink.append(tmp.read())
        tmp.close()


def summarise(kernel, log):
    """(ok, text): shared memory, registers and spills (from the ptxas log), PTX instruction count."""
    meta, threads = kernel.metadata, kernel.metadata.num_warps * 32
    regs = re.search(r"Used (\d+) registers", log)
    spill = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)
    ptx_lines = (line.strip() for line in kernel.asm["ptx"].splitlines())
    n_ptx = sum(1 for s in ptx_lines if s.endswith(";") and not s.startswith((".", "//")))
    text = (f"shared={meta.shared} regs={regs.group(1) if regs else '?'} warps={meta.num_warps} "
            f"spills={'/'.join(spill.groups()) + 'B' if spill else '?'} ptx_instrs={n_ptx}")  # fmt: skip
    if spill and any(int(x) for x in spill.groups()):
        text += " (SPILLS)"
    problems = [f"shared memory {meta.shared} > {MAX_SHARED}"] if meta.shared > MAX_SHARED else []
    if regs and int(regs.group(1)) * threads > MAX_REGS_PER_BLOCK:
        problems.append(f"registers {regs.group(1)} x {threads} threads > {MAX_REGS_PER_BLOCK}")
    return not problems, "".join(f"{p} | " for p in problems) + text


def error_head(exc: BaseException, n_lines: int) -> str:
    """The first n_lines of what went wrong: the exception's message (for a Gluon CompilationError: its
    position, the source line and the message under the caret), then MLIR's `error:` lines."""
    lines = [line.rstrip() for line in str(exc).splitlines() if line.strip()]
    caret = next((i for i, line in enumerate(lines) if line.strip() == "^"), None)
    if caret:
        lines = [lines[0], lines[caret - 1].strip(), *lines[caret + 1 :]]
    cause = exc.__cause__ or exc.__context__
    while cause is not None:  # what a CompilationError wraps: the error inside the called function
        lines += [
            f"{type(cause).__name__}: {str(cause).strip().splitlines()[-1] if str(cause).strip() else ''}"
        ]
        cause = cause.__cause__ or cause.__context__
    for line in getattr(exc, "diagnostics", "").splitlines():
        if ": error: " in line and "Failures have been detected" not in line:
            lines.append(line.replace(f"{ROOT}/", ""))
        elif m := re.search(r"Pipeline failed while executing \[`(\w+)`", line):
            lines.append(f"in pass {m.group(1)}")
    return f"{type(exc).__name__}: " + " | ".join(list(dict.fromkeys(lines))[:n_lines])  # MLIR repeats


def variant(name, head_dim, dtype, causal, args, label):
    """(ok, text, seconds) for each launch the launcher makes (one today), or for its refusal."""
    start = time.perf_counter()
    try:
        rec = capture(name, head_dim, DTYPES[dtype], causal, args.seq)
    except Exception as exc:  # the launcher's checks
        yield False, error_head(exc, args.error_lines), time.perf_counter() - start
        return
    for i, (call_args, call_kwargs) in enumerate(rec.calls):
        try:
            kernel, log = compile_call(rec.fn, call_args, call_kwargs)
            ok, text = summarise(kernel, log)
            if args.keep:
                stem = "_".join([*label.replace("=", "").split(), str(i)])
                args.keep.mkdir(parents=True, exist_ok=True)
                for ext, body in {"ttgir": kernel.asm["ttgir"], "ptx": kernel.asm["ptx"], "log": log}.items():
                    (args.keep / f"{stem}.{ext}").write_text(body)
        except Exception as exc:  # every failure is a line of the report
            ok, text = False, error_head(exc, args.error_lines)
        yield ok, (f"launch {i}: " if len(rec.calls) > 1 else "") + text, time.perf_counter() - start
        start = time.perf_counter()


def _listed(allowed: tuple, convert=str):
    """An argparse type: a comma-separated list of `allowed` values."""

    def parse(text: str) -> list:
        try:
            values = [convert(part) for part in text.split(",")]
        except ValueError:
            values = None
        if not values or any(value not in allowed for value in values):
            raise argparse.ArgumentTypeError(
                f"{text!r}: a comma-separated list of {', '.join(map(str, allowed))}"
            )
        return values

    return parse


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # Any head dim a launcher may be asked for: the ones it refuses are reported as failures.
    parser.add_argument("--head-dims", type=_listed(tuple(range(1, 513)), int), default=[64, 80, 96, 128])
    # persistent: the forward as gluon_persistent's kernel.
    kernels = ("forward", "persistent", "backward")
    parser.add_argument("--kernels", type=_listed(kernels), default=list(kernels))
    parser.add_argument("--dtypes", type=_listed(tuple(DTYPES)), default=list(DTYPES))
    parser.add_argument("--seq", type=int, default=1024, help="sequence length of the recorded launches")
    parser.add_argument("--error-lines", type=int, default=3, help="lines of an error to print")
    parser.add_argument("--keep", type=Path, help="write each variant's ttgir, ptx and ptxas log here")
    args, failed = parser.parse_args(argv), 0
    for name, head_dim, dtype, causal in itertools.product(
        args.kernels, args.head_dims, args.dtypes, (False, True)
    ):
        label = f"{name:10} d={head_dim:<3} {dtype} {'causal' if causal else 'full  '}"
        for ok, text, took in variant(name, head_dim, dtype, causal, args, label):
            failed += not ok
            print(f"{label} {'OK  ' if ok else 'FAIL'} {text} ({took:.1f}s)", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    os._exit(code)  # skips nanobind's report of Triton's bindings still referenced at exit
