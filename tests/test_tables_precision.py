from perf.tables.precision import TABLES, TITLE, matmul_table, step_table, table, toy_table

CUDA_BF16 = dict(
    params="float32", fc1="bfloat16", ln="float32", logits="bfloat16", loss="float32", grads="float32"
)
FP32 = dict.fromkeys(CUDA_BF16, "float32")

TOY = [
    {"suite": "toy_autocast", "precision": "bf16", "dtypes": CUDA_BF16, "median_ms": 0.25},
    {"suite": "toy_autocast", "precision": "fp32", "dtypes": FP32, "median_ms": 0.2},
]
MATMUL = [
    {"suite": "matmul", "mode": m, "n": n, "rel_error": e, "median_ms": ms, "tflops": t, "mfu": u}
    for m, n, e, ms, t, u in (
        ("bf16", 8192, 1.6e-3, 1.5, 733.0, 0.741),
        ("fp32", 8192, 2.1e-7, 20.0, 55.0, 0.822),
        ("tf32", 8192, 3.3e-4, 3.0, 366.5, 0.741),
        ("fp32", 4096, 1.5e-7, 2.5, 55.0, 0.822),
    )
]
STEP = [
    {
        "suite": "step_precision",
        "preset": p,
        "context": 512,
        "precision": q,
        "median_ms": ms,
        "tokens_per_s": t,
    }
    for p, q, ms, t in (
        ("large", "bf16", 100.0, 40000.0),
        ("small", "fp16", 20.0, 100000.0),
        ("small", "fp32", 50.0, 40000.0),
        ("large", "fp32", 250.0, 16000.0),
        ("small", "bf16", 25.0, 80000.0),
    )
]
OTHERS = [
    {"suite": "memory", "preset": "small", "precision": "bf16", "median_ms": 3.0},
    {"provider": "sdpa_flash", "mode": "forward", "median_ms": 1.0},
]


def test_no_results_of_these_suites_no_lines():
    assert table(OTHERS) == []
    assert all(make(OTHERS) == [] for _, make in TABLES)


def test_toy_rows_in_precision_order_with_each_stage_dtype():
    header, fp32, bf16 = toy_table(TOY)
    assert header.split() == ["precision", "params", "fc1", "ln", "logits", "loss", "grads", "ms"]
    assert fp32.split() == ["fp32", *["float32"] * 6, "0.200"]
    assert bf16.split() == [
        "bf16",
        "float32",
        "bfloat16",
        "float32",
        "bfloat16",
        "float32",
        "float32",
        "0.250",
    ]


def test_matmul_rows_by_size_then_mode():
    header, *rows = matmul_table([*MATMUL, *OTHERS])
    assert header.split() == ["mode", "n", "ms", "TFLOP/s", "MFU", "rel", "error"]
    assert [row.split() for row in rows] == [
        ["fp32", "4096", "2.500", "55", "82.2%", "1.50e-07"],
        ["fp32", "8192", "20.000", "55", "82.2%", "2.10e-07"],
        ["tf32", "8192", "3.000", "366.5", "74.1%", "3.30e-04"],
        ["bf16", "8192", "1.500", "733", "74.1%", "1.60e-03"],
    ]


def test_fp16_accumulation_row_beside_fp16():
    # Rows come in the modes' registry order whatever order the results arrive in: fp16_accum right
    # after fp16 of the same n, with its TFLOP/s and error.
    results = [
        {"suite": "matmul", "mode": m, "n": 8192, "rel_error": e, "median_ms": ms, "tflops": t, "mfu": u}
        for m, e, ms, t, u in (
            ("fp16_reduced", 2.4e-4, 1.5, 733.0, 0.741),
            ("fp16_accum", 3.3e-3, 1.4, 785.4, 0.794),
            ("fp16", 2.4e-4, 1.5, 733.0, 0.741),
        )
    ]
    header, *rows = matmul_table([*results, *MATMUL])
    assert [row.split() for row in rows if row.split()[1] == "8192"] == [
        ["fp32", "8192", "20.000", "55", "82.2%", "2.10e-07"],
        ["tf32", "8192", "3.000", "366.5", "74.1%", "3.30e-04"],
        ["bf16", "8192", "1.500", "733", "74.1%", "1.60e-03"],
        ["fp16", "8192", "1.500", "733", "74.1%", "2.40e-04"],
        ["fp16_accum", "8192", "1.400", "785.4", "79.4%", "3.30e-03"],
        ["fp16_reduced", "8192", "1.500", "733", "74.1%", "2.40e-04"],
    ]
    assert len({len(row) for row in [header, *rows]}) == 1  # the columns line up


def test_step_speedup_against_fp32_of_the_same_preset():
    header, *rows = step_table(STEP)
    assert header.split() == ["preset", "ctx", "precision", "ms", "tokens/s", "vs", "fp32"]
    assert [row.split() for row in rows] == [
        ["small", "512", "fp32", "50.000", "40000", "1.00x"],
        ["small", "512", "bf16", "25.000", "80000", "2.00x"],
        ["small", "512", "fp16", "20.000", "100000", "2.50x"],
        ["large", "512", "fp32", "250.000", "16000", "1.00x"],
        ["large", "512", "bf16", "100.000", "40000", "2.50x"],
    ]


def test_untimed_results_show_dashes():
    # With --benchmark-disable the harness adds no figures, only the suites' own keys.
    untimed = [{k: v for k, v in x.items() if k not in ("median_ms", "tokens_per_s")} for x in STEP[:2]]
    untimed.append({k: v for k, v in MATMUL[0].items() if k not in ("median_ms", "tflops", "mfu")})
    assert [row.split() for row in step_table(untimed)[1:]] == [
        ["small", "512", "fp16", "-", "-", "-"],
        ["large", "512", "bf16", "-", "-", "-"],
    ]
    assert matmul_table(untimed)[1].split() == ["bf16", "8192", "-", "-", "-", "1.60e-03"]


def test_a_missing_fp32_step_leaves_the_speedup_empty():
    rows = step_table([x for x in STEP if x["precision"] != "fp32"])
    assert rows[1].split()[-1] == "-"


def test_results_missing_their_suite_keys_are_left_out():
    assert matmul_table([{"suite": "matmul", "mode": "fp32", "median_ms": 1.0}]) == []


def test_table_puts_each_part_under_its_title():
    lines = table([*OTHERS, *STEP, *TOY, *MATMUL])
    titles = [title for title, _ in TABLES]
    assert [line for line in lines if not line.startswith("  ")] == titles
    assert len(lines) == len(titles) + 3 + 5 + 6
    assert TITLE and "\n" not in TITLE
