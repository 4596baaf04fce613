"""pytest wiring for the benchmark suite: options, tiers, the `bench` fixture, baselines per GPU.

The measuring itself lives in perf/harness.py; this file decides what runs, where results are
stored, and what the terminal says about it.
"""

from __future__ import annotations

import gc
import itertools
import json
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from perf import gpu_time, harness, launched_session
from perf.attention_shapes import SWEEPS
from perf.results import recorded_on
from perf.summary_tables import SUMMARY_TABLES
from perf.tiers import (
    ALLREDUCE_SWEEP,
    AXIS_CHOICES,
    TIERS,
    Tier,
    largest_fitting_preset,
    shape_filter_problem,
)
from perf.transfer_workloads import byte_size_label, parse_byte_size

ROOT = Path(__file__).resolve().parent
BASELINES = ROOT / "baselines"
PERF = ROOT / "perf"
DEFAULT_STORAGE = "file://./.benchmarks"  # pytest-benchmark's default, replaced by baselines/<gpu>/

# Benchmark argument name -> (tier attribute, id prefix): the axes pytest_generate_tests fills.
AXES = {
    "impl": ("impls", ""),
    "compared_impl": ("compared_impls", ""),
    "preset": ("presets", ""),
    "precision": ("precisions", ""),
    "context": ("contexts", "ctx"),
    "warmup": ("warmups", "warm"),
    "launch": ("launches", ""),
    # Providers last: the providers of one shape run one after another, side by side in one table.
    "attention_mode": ("attention_modes", ""),
    "attention_shape": ("attention_shapes", ""),
    "attention_provider": ("attention_providers", ""),
    # Measurement suites, each on axes of its own (perf/tiers.py says which values per tier).
    "scaling_precision": ("scaling_precisions", ""),
    "scaling_shape": ("scaling_shapes", ""),
    # Before the presets: the compile suite's ids begin with the context, as its baselines' names do.
    "compile_context": ("compile_contexts", "ctx"),
    "compile_preset": ("compile_presets", ""),
    "compile_precision": ("compile_precisions", ""),
    "compile_attention": ("compile_attentions", ""),
    "step_precision": ("step_precisions", ""),
    "matmul_size": ("matmul_sizes", "n"),
    "memory_preset": ("memory_presets", ""),
    "memory_context": ("memory_contexts", "ctx"),
    "graph_preset": ("graph_presets", ""),
    "transfer_size": ("transfer_sizes", ""),
    "allreduce_dtype": ("allreduce_dtypes", ""),
    "collective_case": ("collective_cases", ""),
    "allreduce_backend": ("allreduce_backends", ""),
    "world_size": ("world_sizes", "world"),
    "allreduce_size": ("allreduce_sizes", ""),
    "dp_preset": ("dp_presets", ""),
    "bucket_size_mb": ("bucket_sizes_mb", "bucket"),
}


# --------------------------------------------------------------------------- options
def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("perf", "LM training-stack benchmarks")
    group.addoption("--device", default="auto", help="auto (cuda when present), cpu, cuda, cuda:N")
    group.addoption(
        "--tier", default="auto", help=f"auto, {', '.join(TIERS)}; auto is 'default' on a GPU, 'cpu' without"
    )
    group.addoption("--presets", help="comma-separated model presets, replacing the tier's")
    group.addoption("--precisions", help="comma-separated precisions: fp32, bf16, fp16")
    group.addoption("--contexts", help="comma-separated context lengths, e.g. 128,256,512,1024")
    group.addoption("--warmups", help="comma-separated warm-up step counts, e.g. 0,1,2,5")
    group.addoption("--impls", help="comma-separated models: naive, sdpa, flash_triton, reference")
    group.addoption("--optimizer", help="train_step AdamW: own, torch (foreach), torch_fused (default)")
    group.addoption(
        "--launches",
        help="comma-separated end-to-end step launches: eager (op by op), cuda_graph (the whole step "
        "captured once and replayed)",
    )
    group.addoption(
        "--attention-providers", help=f"comma-separated: {', '.join(AXIS_CHOICES['attention-providers'])}"
    )
    group.addoption(
        "--attention-modes", help=f"comma-separated: {', '.join(AXIS_CHOICES['attention-modes'])}"
    )
    group.addoption("--attention-sweeps", help=f"comma-separated shape sweeps: {', '.join(SWEEPS)}")
    group.addoption("--seqs", help="comma-separated sequence lengths: keeps the sweeps' shapes with these")
    group.addoption("--head-dims", help="comma-separated head dims: keeps the sweeps' shapes with these")
    group.addoption("--matmul-sizes", help="comma-separated n of the n x n matmuls, e.g. 4096,8192")
    group.addoption(
        "--transfer-sizes",
        help="comma-separated bytes per host-to-device copy, with K, M or G (binary), e.g. 1M,1G",
    )
    group.addoption(
        "--allreduce-sizes", help="comma-separated fp32 all-reduce message bytes, with K, M or G, e.g. 1M,1G"
    )
    group.addoption(
        "--allreduce-sweep",
        action="store_true",
        help="all-reduce sizes from 8 B to 8 GiB, doubling (as nccl-tests), in place of the tier's",
    )
    group.addoption("--allreduce-backends", help="comma-separated: gloo (CPU tensors), nccl (GPUs)")
    group.addoption("--collectives", help=f"comma-separated: {', '.join(AXIS_CHOICES['collectives'])}")
    group.addoption(
        "--collective-dtypes", help=f"comma-separated: {', '.join(AXIS_CHOICES['collective-dtypes'])}"
    )
    group.addoption("--placements", help=f"comma-separated: {', '.join(AXIS_CHOICES['placements'])}")
    group.addoption("--world-sizes", help="comma-separated process counts, e.g. 2,4,8")
    group.addoption("--bucket-sizes-mb", help="comma-separated DDPBucketed bucket sizes in MB, e.g. 1,10,100")
    group.addoption(
        "--memory-snapshot",
        metavar="DIR",
        help="write a torch.cuda.memory snapshot (.pickle) and its HTML view per benchmark into DIR",
    )


def _split(option: str, raw: str) -> tuple[str, ...]:
    values = tuple(v.strip() for v in raw.split(",") if v.strip())
    if not values:
        raise pytest.UsageError(f"--{option}: give at least one value")
    return values


def _parse_ints(option: str, raw: str, minimum: int) -> tuple[int, ...]:
    values = []
    for v in _split(option, raw):
        try:
            n = int(v)
        except ValueError:
            n = minimum - 1
        if n < minimum:
            raise pytest.UsageError(f"--{option}: {v!r} is not an integer >= {minimum}")
        values.append(n)
    return tuple(values)


def _parse_names(option: str, raw: str) -> tuple[str, ...]:
    values = _split(option, raw)
    accepted = AXIS_CHOICES[option]
    for v in values:
        if v not in accepted:
            raise pytest.UsageError(f"--{option}: unknown value {v!r}; accepted: {', '.join(accepted)}")
    return values


def _parse_positive_floats(option: str, raw: str) -> tuple[float, ...]:
    values = []
    for v in _split(option, raw):
        try:
            x = float(v)
        except ValueError:
            x = 0.0
        if not x > 0 or x == float("inf"):
            raise pytest.UsageError(f"--{option}: {v!r} is not a positive number")
        values.append(x)
    return tuple(values)


def _parse_sizes(option: str, raw: str) -> tuple[int, ...]:
    try:
        return tuple(parse_byte_size(v) for v in _split(option, raw))
    except ValueError as err:
        raise pytest.UsageError(f"--{option}: {err}") from None


def _select_tier(config: pytest.Config, device: torch.device) -> Tier:
    name = config.getoption("tier")
    if name == "auto":
        name = "default" if device.type == "cuda" else "cpu"
    if name not in TIERS:
        raise pytest.UsageError(f"--tier: unknown tier {name!r}; accepted: auto, {', '.join(TIERS)}")
    opt = config.getoption
    optimizer = opt("optimizer")
    if optimizer is not None and optimizer not in AXIS_CHOICES["optimizer"]:
        raise pytest.UsageError(
            f"--optimizer: unknown value {optimizer!r}; accepted: {', '.join(AXIS_CHOICES['optimizer'])}"
        )
    presets = opt("presets") and _parse_names("presets", opt("presets"))
    precisions = opt("precisions") and _parse_names("precisions", opt("precisions"))
    contexts = opt("contexts") and _parse_ints("contexts", opt("contexts"), minimum=1)
    seqs = opt("seqs") and _parse_ints("seqs", opt("seqs"), minimum=1)
    head_dims = opt("head_dims") and _parse_ints("head-dims", opt("head_dims"), minimum=1)
    tier = TIERS[name].with_overrides(
        presets=presets,
        precisions=precisions,
        impls=opt("impls") and _parse_names("impls", opt("impls")),
        contexts=contexts,
        warmups=opt("warmups") and _parse_ints("warmups", opt("warmups"), minimum=0),
        launches=opt("launches") and _parse_names("launches", opt("launches")),
        optimizer=optimizer,
        attention_providers=opt("attention_providers")
        and _parse_names("attention-providers", opt("attention_providers")),
        attention_modes=opt("attention_modes") and _parse_names("attention-modes", opt("attention_modes")),
        attention_sweeps=opt("attention_sweeps")
        and _parse_names("attention-sweeps", opt("attention_sweeps")),
        seqs=seqs,
        head_dims=head_dims,
        scaling_seqs=seqs,
        scaling_head_dims=head_dims,
        # The measurement suites follow --presets, --precisions and --contexts too.
        compile_presets=presets,
        compile_contexts=contexts,
        scaling_precisions=precisions,
        compile_precisions=precisions,
        step_precisions=precisions,
        memory_presets=presets,
        memory_contexts=contexts,
        graph_presets=presets,
        matmul_sizes=opt("matmul_sizes") and _parse_ints("matmul-sizes", opt("matmul_sizes"), minimum=1),
        transfer_sizes=opt("transfer_sizes") and _parse_sizes("transfer-sizes", opt("transfer_sizes")),
        allreduce_sizes=ALLREDUCE_SWEEP
        if opt("allreduce_sweep")
        else opt("allreduce_sizes") and _parse_sizes("allreduce-sizes", opt("allreduce_sizes")),
        allreduce_backends=opt("allreduce_backends")
        and _parse_names("allreduce-backends", opt("allreduce_backends")),
        collectives=opt("collectives") and _parse_names("collectives", opt("collectives")),
        collective_dtypes=opt("collective_dtypes")
        and _parse_names("collective-dtypes", opt("collective_dtypes")),
        placements=opt("placements") and _parse_names("placements", opt("placements")),
        world_sizes=opt("world_sizes") and _parse_ints("world-sizes", opt("world_sizes"), minimum=1),
        dp_presets=presets,
        bucket_sizes_mb=opt("bucket_sizes_mb")
        and _parse_positive_floats("bucket-sizes-mb", opt("bucket_sizes_mb")),
    )
    if tier.memory_presets is None:
        total = torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else 0
        tier = tier.with_overrides(memory_presets=(largest_fitting_preset(total),))
    problem = shape_filter_problem(tier, given={"seqs": seqs is not None, "head-dims": head_dims is not None})
    if problem:
        raise pytest.UsageError(problem)
    return tier


# --------------------------------------------------------------------------- set-up and baselines
def pytest_configure(config: pytest.Config) -> None:
    # Under torchrun or srun this process is one rank of the job: it joins the launcher's group first.
    launched_session.join(config)
    try:
        device = launched_session.device(config.getoption("device")) or harness.resolve_device(
            config.getoption("device")
        )
    except ValueError as err:
        raise pytest.UsageError(str(err)) from None
    config.perf_device = device
    config.perf_tier = launched_session.world_sizes(
        _select_tier(config, device), given=config.getoption("world_sizes") is not None
    )
    config.perf_notes = []
    config.perf_out_of_memory = []
    config.perf_snapshot_dir = _snapshot_dir(config, device)
    _route_results_to_baselines(config, device)


def _snapshot_dir(config: pytest.Config, device: torch.device) -> Path | None:
    """--memory-snapshot's folder, created and checked for writing before anything runs."""
    raw = config.getoption("memory_snapshot")
    if raw is None:
        return None
    folder = Path(raw).expanduser()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder):
            pass
    except OSError as err:
        raise pytest.UsageError(
            f"--memory-snapshot: cannot write into {raw!r} ({err.strerror or err}); give a writable folder"
        ) from None
    if device.type != "cuda":
        config.perf_notes.append(
            "--memory-snapshot: snapshots come from the CUDA caching allocator; none are written on the CPU"
        )
        return None
    config.perf_notes.append(f"memory snapshots (.pickle and .html per benchmark) go to {folder}")
    return folder


def _route_results_to_baselines(config: pytest.Config, device: torch.device) -> None:
    """Store and compare results under baselines/<gpu-model>/ so that like is compared with like.

    pytest-benchmark files results under a folder named by its machine id (OS and Python version);
    here that id is the GPU model instead. Its plugin configures after this hook (trylast), so the
    options and machine id set here are the ones it uses.
    """
    if not hasattr(config.option, "benchmark_storage"):
        return  # pytest-benchmark not loaded (-p no:benchmark)
    slug = harness.machine_slug(device)
    if config.option.benchmark_storage == DEFAULT_STORAGE:
        config.option.benchmark_storage = f"file://{BASELINES}"
    if config.option.benchmark_timer == "time.perf_counter":
        config.option.benchmark_timer = "perf.harness.synchronized_timer"
    # A collection pass in the middle of a launch-bound step shows up as a spike in its round;
    # the bench fixture collects between benchmarks instead.
    config.option.benchmark_disable_gc = True
    import pytest_benchmark.session

    pytest_benchmark.session.get_machine_id = lambda: slug
    storage = config.option.benchmark_storage
    if storage.startswith("file://"):  # other backends (elasticsearch) do their own loading
        _check_baseline(config, device, Path(storage.removeprefix("file://")) / slug)


def _check_baseline(config: pytest.Config, device: torch.device, folder: Path) -> None:
    """Say what --benchmark-compare will compare with, or why it will not compare at all."""
    compare = config.option.benchmark_compare
    if compare is True:  # no file named: the newest stored result of this machine
        stored = sorted(folder.glob("[0-9][0-9][0-9][0-9]_*.json"))
        if not stored:
            _no_comparison(
                config,
                f"no stored baseline for {folder.name} (looked in {_shown(folder)}/). This run is not "
                "compared; save one with `make baseline` or `pytest perf/ --benchmark-save=NAME`.",
            )
            return
        candidates = [stored[-1]]
    elif compare:
        # As pytest-benchmark reads it: a file, a name prefix in this machine's folder, or 'machine/prefix'.
        candidates = (
            sorted(folder.glob(f"{compare}*.json"))
            or sorted(folder.parent.glob(f"{compare}*.json"))
            or [Path(compare)]
        )
    else:
        return
    for path in candidates:
        problem = _baseline_problem(path, device)
        if problem:
            _no_comparison(config, f"cannot compare against {_shown(path)}: {problem}")
            return
    config.perf_notes.append(f"comparing against {', '.join(_shown(p) for p in candidates)}")


def _shown(path: Path) -> str:
    path = path.resolve()
    return str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)


def _no_comparison(config: pytest.Config, message: str) -> None:
    if config.option.benchmark_compare_fail:
        raise pytest.UsageError(message + " A regression gate needs a baseline of this GPU.")
    config.option.benchmark_compare = False
    config.perf_notes.append(message)


def _baseline_problem(path: Path, device: torch.device) -> str | None:
    """Why a stored result cannot serve as this machine's baseline, or None if it can."""
    if not path.is_file():
        return "no such file"
    try:
        data = json.loads(path.read_text())
        benchmarks = data["benchmarks"]
        info = data["machine_info"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        return f"unreadable result file ({type(err).__name__}: {err})"
    if not isinstance(benchmarks, list) or not isinstance(info, dict):
        return "unreadable result file (no list of benchmarks or no machine info)"
    stored, current = _recorded_on(info.get("perf")), _recorded_on(harness.machine_info(device))
    if stored != current:
        return f"it was recorded on {stored}, this run is on {current}; such results are not comparable"
    return None


def _recorded_on(perf_info: object) -> str:
    """The processor a result belongs to: the GPU model, or the CPU model for CPU runs."""
    return recorded_on(perf_info) or "an unknown machine (no 'perf' machine info)"


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    machine_info["perf"] = harness.machine_info(config.perf_device)
    launch = launched_session.machine_info()
    if launch is not None:
        machine_info["perf"]["launch"] = launch


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    launched_session.skip_single_process(items)


def pytest_unconfigure(config: pytest.Config) -> None:
    launched_session.finish()


def _collected_benchmarks(items: list[pytest.Item]) -> bool:
    return any("bench" in getattr(item, "fixturenames", ()) for item in items)


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> list[str]:
    """Said after collection, and only when benchmarks were collected: where they run and how."""
    config.perf_collected = _collected_benchmarks(items) and launched_session.records_here()
    config.perf_attention_collected = any(
        "attention_provider" in getattr(i, "fixturenames", ()) for i in items
    )
    if not config.perf_collected:
        return []
    device, tier = config.perf_device, config.perf_tier
    where = harness.gpu_name(device) or f"CPU ({harness.machine_info(device)['cpu_model']})"
    lines = [
        f"perf: device {device} [{where}], torch {torch.__version__}, tier '{tier.name}' "
        f"(presets {','.join(tier.presets)}; precisions {','.join(tier.precisions)}; "
        f"contexts {','.join(map(str, tier.contexts))}; warm-ups {','.join(map(str, tier.warmups))})"
    ]
    if config.perf_attention_collected:
        shapes = tier.attention_shapes
        lines.append(
            f"perf: attention: sweeps {','.join(tier.attention_sweeps)} ({len(shapes)} shape"
            f"{'' if len(shapes) == 1 else 's'}; seqs "
            f"{','.join(map(str, sorted({s.seq for s in shapes})))}; head dims "
            f"{','.join(map(str, sorted({s.head_dim for s in shapes})))}); providers "
            f"{','.join(tier.attention_providers)}; modes {','.join(tier.attention_modes)}"
        )
    if not harness.NVTX_AVAILABLE:
        config.perf_notes.append("nvtx is not importable: no NVTX ranges for nsys (pip install nvtx)")
    launch = launched_session.header()
    if launch:
        lines.append(f"perf: {launch}")
    lines += [f"perf: {note}" for note in _cpu_notes(config) + config.perf_notes]
    return lines


def _cpu_notes(config: pytest.Config) -> list[str]:
    if config.perf_device.type == "cuda":
        return []
    default, tier = TIERS["default"], config.perf_tier
    presets = [p for p in default.presets if p not in tier.presets]
    precisions = [p for p in default.precisions if p not in tier.precisions]
    left_out = f"GPU presets not run: {', '.join(presets)}; " if presets else ""
    if precisions:
        left_out += f"not run: {', '.join(precisions)} (emulated by most CPUs; --precisions adds it); "
    providers = [p for p in default.attention_providers if p not in tier.attention_providers]
    if providers and getattr(config, "perf_attention_collected", False):
        left_out += f"attention providers not run: {', '.join(providers)} (--attention-providers adds them); "
    return [
        "no CUDA GPU in use: benchmarks run on the CPU at small sizes; "
        + left_out
        + "peak memory, MFU, CUDA-event comparisons, CUDA graphs, host-to-device copies and the TF32 and "
        "reduced-precision matmul switches are GPU-only and reported as skipped (with the reason) or empty"
    ]


# --------------------------------------------------------------------------- parametrization
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if PERF not in metafunc.definition.path.parents:
        return  # correctness tests under tests/ parametrize themselves
    axes = [name for name in AXES if name in metafunc.fixturenames]
    if not axes:
        return
    tier: Tier = metafunc.config.perf_tier
    values = [getattr(tier, AXES[name][0]) for name in axes]
    cases = list(itertools.product(*values))
    ids = ["-".join(filter(None, map(_case_id, axes, case))) for case in cases]
    metafunc.parametrize(axes, cases, ids=ids)


# The value an axis leaves out of ids: the one every case had before the axis existed, so that those
# cases keep the names their baselines have.
UNNAMED = {"launch": "eager", "compile_attention": "sdpa", "allreduce_dtype": "fp32"}


def _case_id(axis: str, value: object) -> str:
    """Byte counts read as 1MiB or 1GiB, not 1048576; an eager launch and the compile suite's sdpa
    attention as nothing (UNNAMED); other axes as their prefix and value."""
    if axis in ("transfer_size", "allreduce_size"):
        return byte_size_label(value)
    if UNNAMED.get(axis) == value:
        return ""
    return f"{AXES[axis][1]}{value}"


# --------------------------------------------------------------------------- fixtures
@pytest.fixture(scope="session")
def device(pytestconfig: pytest.Config) -> torch.device:
    return pytestconfig.perf_device


@pytest.fixture(scope="session")
def tier(pytestconfig: pytest.Config) -> Tier:
    return pytestconfig.perf_tier


@pytest.fixture(scope="session")
def timing_policy(pytestconfig: pytest.Config, device: torch.device) -> harness.TimingPolicy:
    # pytest-benchmark's own options set the budget; the floor on a round's length is ours:
    # 20 ms keeps a CUDA synchronize and launch (~10-50 us) under 0.25% of a round.
    floor = 0.02 if device.type == "cuda" else 0.005
    return harness.TimingPolicy(
        min_round_s=max(floor, float(pytestconfig.getoption("benchmark_min_time"))),
        budget_s=float(pytestconfig.getoption("benchmark_max_time")),
        min_rounds=int(pytestconfig.getoption("benchmark_min_rounds")),
    )


@pytest.fixture
def bench(benchmark, pytestconfig: pytest.Config, device: torch.device, timing_policy: harness.TimingPolicy):
    yield harness.Bench(benchmark, device, timing_policy, snapshot_dir=pytestconfig.perf_snapshot_dir)
    # The next benchmark starts with the memory this one used given back.
    _release_memory()


def _release_memory() -> None:
    gc.collect()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


# --------------------------------------------------------------------------- out of memory
@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    """An out-of-memory in a benchmark becomes a skip naming the configuration, and memory is freed.

    Also when torch.compile wrapped it in an error of its own; notes added to the error
    (harness.oom_note) go into the message.
    """
    message = None
    try:
        return (yield)
    except Exception as err:
        message = _out_of_memory_message(item, err)  # no local here may keep the error alive
        if message is None:
            raise
    # pytest keeps the error for post-mortem debugging in sys.last_* until the next test's call, and
    # with it the tensors its frames held: that test's peak memory would count them. A skip needs none.
    for name in ("last_type", "last_value", "last_traceback", "last_exc"):
        if hasattr(sys, name):
            delattr(sys, name)
    item.config.perf_out_of_memory.append(message)
    pytest.skip(message)  # the bench fixture's teardown then collects what the failed call held


def _out_of_memory_message(item: pytest.Item, err: BaseException) -> str | None:
    """The skip message for `err` if it is, or was raised from, an out-of-memory; else None."""
    oom = harness.out_of_memory_in(err)
    if oom is None:
        return None
    first_line = str(oom).strip().splitlines()[0] if str(oom).strip() else "out of memory"
    notes = dict.fromkeys([*getattr(oom, "__notes__", ()), *getattr(err, "__notes__", ())])
    return f"out of memory in {item.name}: {first_line[:200]}" + "".join(f"; {n}" for n in notes)


# --------------------------------------------------------------------------- terminal summary
# (title, lines from the results' extra_info): one table per suite, printed when it has results.


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    session = getattr(config, "_benchmarksession", None)
    results = [b for b in (session.benchmarks if session else []) if b and b.extra_info.get("median_ms")]
    tr = terminalreporter
    if not getattr(config, "perf_collected", False):
        return
    notes = _cpu_notes(config) + config.perf_notes + gpu_time.run_notes([b.extra_info for b in results])
    notes += _stored_tuning_notes()
    if results:
        tr.section("derived figures (median)", sep="-")
        tr.write_line(
            f"{'benchmark':<64} {'ms':>10} {'GPU ms':>10} {'busy':>5} {'tokens/s':>11} {'TFLOP/s':>8} "
            f"{'MFU':>6} {'peak GiB':>9} {'host ms':>8}"
        )
        for b in results:
            x = b.extra_info
            peak = x.get("peak_memory_bytes")
            tr.write_line(
                f"{b.name[:64]:<64} {x['median_ms']:>10.3f} {_fmt(x.get('gpu_ms'), '.3f'):>10} "
                f"{_fmt(x.get('gpu_busy_share'), '.0%'):>5} {_fmt(x.get('tokens_per_s'), '.0f'):>11} "
                f"{_fmt(x.get('tflops'), '.1f'):>8} {_fmt(x.get('mfu'), '.1%'):>6} "
                f"{_fmt(peak / 2**30 if peak else None, '.2f'):>9} {_fmt(x.get('host_ms'), '.1f'):>8}"
            )
        interleaved = [b for b in results if b.extra_info.get("ratio_to_baseline")]
        if interleaved:
            tr.section("project model / plain PyTorch reference, interleaved rounds", sep="-")
            tr.write_line(f"{'benchmark':<64} {'ms':>10} {'ref ms':>10} {'ratio':>6}")
            for b in interleaved:
                x = b.extra_info
                tr.write_line(
                    f"{b.name[:64]:<64} {x['median_ms']:>10.3f} {x['baseline_median_ms']:>10.3f} "
                    f"{x['ratio_to_baseline']:>6.3f}"
                )
    infos = [b.extra_info for b in results]
    for title, table in SUMMARY_TABLES:
        lines = table(infos)
        if lines:
            tr.section(title, sep="-")
            for line in lines:
                tr.write_line(line)
    if config.perf_out_of_memory:
        tr.section("out of memory: recorded as skips, the sweeps went on", sep="-")
        for message in config.perf_out_of_memory:
            tr.write_line(message)
    if notes:
        tr.section("perf notes", sep="-")
        for note in notes:
            tr.write_line(note)


def _stored_tuning_notes() -> list[str]:
    """Which stored Triton configurations the run launched, once the Triton kernels ran (imported
    here only then: importing Triton's kernels early would fix the interpreter setting)."""
    tuning = sys.modules.get("kernels.flash_triton_tuning")
    return [f"flash_triton: {line}" for line in tuning.describe()] if tuning else []


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)
