"""The end-of-run data-parallel tables, on synthetic results."""

from perf.tables.data_parallel import MEMORY_TITLE, STEP_TITLE, TABLES, TITLE, memory_table, step_table, table

GIB = 2**30
MIB = 2**20

OTHER_SUITES = [
    {"provider": "sdpa_flash", "mode": "forward", "median_ms": 1.0},  # an attention result
    {"suite": "allreduce", "backend": "gloo", "world_size": 2, "size_bytes": 8, "median_ms": 2.0},
]
XL = {"preset": "xl", "backend": "nccl", "world_size": 2, "batch_per_rank": 2, "context": 512}
TINY = {"preset": "tiny", "backend": "gloo", "world_size": 2, "batch_per_rank": 2, "context": 128}


def step_info(
    setup,
    variant,
    median_ms,
    bucket_size_mb=None,
    sync_ms=0.0,
    single_ms=400.0,
    ddp_ms=440.0,
    peak_gib=None,
    held_mib=(),
):
    overhead = median_ms - single_ms
    return {
        "suite": "data_parallel",
        **setup,
        "variant": variant,
        "bucket_size_mb": bucket_size_mb,
        "median_ms": median_ms,
        "tokens_per_s": 2 * setup["batch_per_rank"] * setup["context"] / median_ms * 1e3,
        "sync_wait_ms": sync_ms,
        "comm_overhead_ms": overhead,
        "comm_share": overhead / median_ms,
        "vs_torch_ddp": median_ms / ddp_ms,
        "peak_memory_bytes": None if peak_gib is None else peak_gib * GIB,
        "state_bytes_per_rank": [int(mib * MIB) for mib in held_mib],
    }


def memory_info(setup, kind, state_bytes, whole_state_bytes, median_ms, cuda=True, held_mib=()):
    def gib(n):
        return n * GIB if cuda else None

    return {
        "suite": "sharded_optimizer",
        **setup,
        "optimizer_kind": kind,
        "after_build_bytes": gib(6),
        "before_step_bytes": gib(12),
        "after_step_bytes": gib(12) + state_bytes if cuda else None,
        "peak_bytes": gib(20),
        "optimizer_state_bytes": state_bytes,
        "state_vs_adamw": state_bytes / whole_state_bytes,
        "state_bytes_per_rank": [int(mib * MIB) for mib in held_mib],
        "median_ms": median_ms,
    }


# Out of order, as a run with -k or xdist may finish them. xl's training state per rank: 24 GiB
# replicated (weights, gradients, AdamW's two moments), half of it per rank under FSDP2, the
# ranks' shards a little uneven.
REPLICA = (24576.0, 24576.0)
STEPS = [
    step_info(XL, "bucketed", 430.0, bucket_size_mb=100.0, sync_ms=20.0, peak_gib=31.5, held_mib=REPLICA),
    step_info(XL, "fsdp2", 470.0, peak_gib=17.25, held_mib=(12288.5, 12287.5)),
    step_info(XL, "torch_ddp", 440.0, peak_gib=37.0, held_mib=REPLICA),
    step_info(XL, "naive", 800.0, sync_ms=390.0, peak_gib=30.0, held_mib=REPLICA),
    step_info(XL, "bucketed", 420.0, bucket_size_mb=10.0, sync_ms=12.0, peak_gib=30.5, held_mib=REPLICA),
    step_info(XL, "single", 400.0, peak_gib=30.0, held_mib=REPLICA),
    step_info(TINY, "flat", 30.0, sync_ms=4.0, single_ms=20.0, ddp_ms=25.0, held_mib=(21.5, 21.5)),
]
MEMORY = [
    memory_info(XL, "sharded_adamw", 6 * GIB, 12 * GIB, 450.0, held_mib=(18432.0, 18433.0)),
    memory_info(XL, "adamw", 12 * GIB, 12 * GIB, 420.0, held_mib=REPLICA),
]


def test_no_table_without_data_parallel_results():
    assert step_table(OTHER_SUITES) == []
    assert memory_table(OTHER_SUITES) == []
    assert table(OTHER_SUITES) == []
    assert table([]) == []


def test_variants_in_registry_order_then_bucket_sizes_smallest_first_per_setup():
    *lines, note = step_table(iter([*OTHER_SUITES, *STEPS]))  # a generator is read once
    assert [line.split() for line in lines] == [
        "variant ms tokens/s sync ms overhead ms share vs DDP peak GiB held MiB".split(),
        ["tiny", "fp32,", "gloo", "with", "2", "ranks,", "batch", "2", "per", "rank,", "ctx", "128"],
        ["flat", "30.000", "17067", "4.000", "10.000", "33%", "1.20x", "-", "21.5"],  # CPU: no peak
        ["xl", "fp32,", "nccl", "with", "2", "ranks,", "batch", "2", "per", "rank,", "ctx", "512"],
        ["single", "400.000", "5120", "0.000", "0.000", "0%", "0.91x", "30.00", "24576.0"],
        ["naive", "800.000", "2560", "390.000", "400.000", "50%", "1.82x", "30.00", "24576.0"],
        ["torch_ddp", "440.000", "4655", "0.000", "40.000", "9%", "1.00x", "37.00", "24576.0"],
        # The largest rank's shard.
        ["fsdp2", "470.000", "4357", "0.000", "70.000", "15%", "1.07x", "17.25", "12288.5"],
        ["bucketed", "10MiB", "420.000", "4876", "12.000", "20.000", "5%", "0.95x", "30.50", "24576.0"],
        ["bucketed", "100MiB", "430.000", "4763", "20.000", "30.000", "7%", "0.98x", "31.50", "24576.0"],
    ]
    assert note == (
        "sync ms: time in finish_gradient_synchronization; torch_ddp's all-reduces and fsdp2's "
        "reduce-scatters run in backward"
    )


def test_rows_line_up_under_the_header():
    header, _, row = step_table(STEPS)[:3]
    assert len(row) == len(header)
    header, _, row = memory_table(MEMORY)[:3]
    assert len(row) == len(header)


def test_memory_rows_whole_state_first_with_the_sharded_ratio():
    lines = memory_table(MEMORY)
    assert [line.split() for line in lines] == [
        "optimizer built pre-step stepped peak state MiB vs adamw held MiB ms".split(),
        ["xl", "fp32,", "nccl", "with", "2", "ranks,", "batch", "2", "per", "rank,", "ctx", "512"],
        ["adamw", "6.00", "12.00", "24.00", "20.00", "12288.0", "1.000", "24576.0", "420.000"],
        ["sharded_adamw", "6.00", "12.00", "18.00", "20.00", "6144.0", "0.500", "18433.0", "450.000"],
    ]


def test_cpu_results_show_dashes_for_cuda_memory_and_untimed_ones_for_times():
    cpu = memory_info(TINY, "adamw", 11 * MIB, 11 * MIB, 200.0, cuda=False, held_mib=(21.5, 21.5))
    del cpu["median_ms"]  # --benchmark-disable: no timing
    _, _, row = memory_table([cpu])
    assert row.split() == ["adamw", "-", "-", "-", "-", "11.0", "1.000", "21.5", "-"]


def test_results_stored_before_peak_and_held_state_show_dashes():
    old = step_info(XL, "flat", 430.0, sync_ms=30.0)
    del old["peak_memory_bytes"], old["state_bytes_per_rank"]
    _, _, row = step_table([old])
    assert row.split()[-2:] == ["-", "-"]


def test_every_table_under_its_title():
    lines = table([*STEPS, *MEMORY])
    assert lines[0] == STEP_TITLE and MEMORY_TITLE in lines
    assert all(line.startswith("  ") for line in lines if line not in (STEP_TITLE, MEMORY_TITLE))
    assert [title for title, _ in TABLES] == [STEP_TITLE, MEMORY_TITLE]
    assert len(TITLE.splitlines()) == 1


def test_the_note_on_sync_wait_comes_with_torch_ddp_or_fsdp2_only():
    lines = step_table([STEPS[-1]])  # tiny "flat" alone
    assert len(lines) == 3 and not lines[-1].startswith("sync ms:")
    assert step_table([STEPS[1]])[-1].startswith("sync ms:")  # xl "fsdp2" alone


def test_a_step_faster_than_single_shows_no_overhead_or_share_and_says_why():
    # Ranks sharing a CPU's cores: a variant's median under the single step's is noise, not a saving
    # (it read -39% and -100% on two cores).
    faster = step_info(TINY, "flat", 10.0, sync_ms=5.0, single_ms=20.0, ddp_ms=25.0, held_mib=(21.5, 21.5))
    slower = step_info(TINY, "naive", 30.0, single_ms=20.0, ddp_ms=25.0, held_mib=(21.5, 21.5))
    _, _, naive, flat, note = step_table([faster, slower])
    assert flat.split()[3:6] == ["5.000", "-", "-"]  # sync ms stays; overhead and share do not
    assert naive.split()[3:6] == ["0.000", "10.000", "33%"]
    assert note == "overhead ms, share: '-' where the step took less than 'single' alone: noise, not a saving"
    assert "noise" not in "".join(step_table([slower]))
