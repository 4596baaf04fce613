"""How each kernel gets its configuration: forced (FLASH_TRITON_CONFIG), stored for the GPU model
(kernels/tuned/, see stored), or chosen by Triton's autotuner once per tuning key and from then on
launched directly (_Kernel).

A tuning key is the query and key length buckets (the next power of two), whether the launch loads
through TMA descriptors, the head dim and causal, with the inputs' dtype and device. The autotuner
times the candidates configs keeps for it (configs._prune) and keeps the timings in Triton's cache
directory, so each case is tuned once per machine (_tuned). The backward's timings include converting
the one-pass form's fp32 dQ (_convert_dq_while_tuning), which that form costs in every call.

The kernels run under Triton heuristics computed from each launch's arguments: whether the lengths are
whole multiples of the tiles (EVEN_*, which drop the row masks), whether a launch loads through TMA,
and the one-pass form's zeroed dQ buffer.
"""

from __future__ import annotations

import torch
import triton
from triton.runtime.errors import OutOfResources

from kernels.flash_attention_triton import direct, stored
from kernels.flash_attention_triton.backward_kernels import backward_kernel
from kernels.flash_attention_triton.configs import (
    CONFIG_ENV,
    _candidates,
    _prune,
    does_not_fit,
    forced_configs,
    interpreting,
)
from kernels.flash_attention_triton.forward_kernels import forward_kernel


def length_bucket(n: int) -> int:
    """Autotuning key for a length: lengths within a power of two share a tuned configuration."""
    return triton.next_power_of_2(n)


# WITH_DESCRIPTORS: loads through TMA or pointers time differently, the one-pass backward most.
_AUTOTUNE_KEY = ["SEQ_Q_BUCKET", "SEQ_K_BUCKET", "WITH_DESCRIPTORS", "HEAD_DIM", "IS_CAUSAL"]
# Short timing per candidate: the differences that decide are mostly tens of percent, and a long sweep
# per shape would make the first call of every new shape take minutes. But TUNING_MS holds only a few
# calls of a long backward, too few to tell close candidates apart: see _tuning_bench.
TUNING_MS = 25
TUNING_MIN_CALLS = 10


def _tuning_bench(kernel_call, quantiles=None):
    """The autotuner's timing of one candidate: do_bench over TUNING_MS, or over TUNING_MIN_CALLS calls
    where those take longer. At (1, 32, 16384, 64) causal bf16, where the one-pass backward beats the
    best two-pass one by a few percent, timing over TUNING_MS alone sometimes picked the two-pass one,
    and over TUNING_MIN_CALLS calls it did not (NOTES.md: Measurements behind comments in the code)."""
    timing = triton.testing.do_bench(kernel_call, warmup=5, rep=TUNING_MS, quantiles=quantiles)
    typical = timing[0] if quantiles else timing  # the autotuner asks for quantiles, the median first
    if typical * TUNING_MIN_CALLS > TUNING_MS:
        # One call more: do_bench counts its calls from an estimate that includes clearing the L2.
        rep = typical * (TUNING_MIN_CALLS + 1)
        timing = triton.testing.do_bench(kernel_call, warmup=0, rep=rep, quantiles=quantiles)
    return timing


def convert_dq(dq_acc: torch.Tensor, sm_scale: float, dq: torch.Tensor) -> None:
    """The one-pass form's dQ: its fp32 sum of unscaled shares, scaled and cast into dq in one pass."""
    torch.mul(dq_acc, sm_scale, out=dq)


def _convert_dq_while_tuning(args, exception=None) -> None:
    """Autotuner post-hook: converting the one-pass form's fp32 dQ is part of that form's cost, so
    the timings that choose between the forms include it (after a chosen run, the launcher converts)."""
    if exception is None and args.get("ATOMIC_DQ"):
        convert_dq(args["DQ_ACC"], args["sm_scale"], args["DQ"])


def _tuned(kernel: str, fn, post_hook=None, two_pass_only: bool = False):
    # cache_results: the timings of each (kernel source, GPU, key) are kept in Triton's cache
    # directory (TRITON_CACHE_DIR, ~/.triton/cache by default), so a shape is tuned once per machine,
    # not in every process. A change of the kernel, the candidates or Triton tunes again; deleting
    # the "*.autotune.json" files there does too. The candidates are part of that cache's key, so the
    # two-pass-only autotuner keeps timings of its own.
    configs = [c for c in _candidates(kernel) if not (two_pass_only and c.kwargs.get("ATOMIC_DQ"))]
    return triton.autotune(
        configs=configs,
        key=_AUTOTUNE_KEY,
        prune_configs_by={"early_config_prune": _prune},
        do_bench=_tuning_bench,
        post_hook=post_hook,
        cache_results=True,
    )(fn)


def _zero_dq_acc_for_one_pass(args) -> bool:
    """Heuristic for DQ_ACC_ZEROED: the one-pass form adds into DQ_ACC, so it is zeroed right before
    each launch of that form (autotuning runs included); the two-pass form leaves it alone."""
    if not args["ATOMIC_DQ"]:
        return False
    args["DQ_ACC"].zero_()
    return True


def _fit_descriptors(
    rows_of: dict[str, str], switch: str | None = None, columns_if: dict[str, str] | None = None
):
    """Heuristic for USE_TMA: whether the launcher passed descriptors (and the configuration about to
    run has `switch` on), whose tile shapes it then sets from that configuration: the autotuner picks
    the tiles after the descriptors exist. A descriptor named in columns_if spans a column-major copy,
    (batch, heads, d, seq), when the kernel argument named there is set: its tiles are (d, block)."""

    def fit(args) -> bool:
        if args["desc_q"] is None or (switch is not None and not args[switch]):
            return False
        for name, block in rows_of.items():
            tile = [args[block], args["D_MAIN"]]
            if columns_if and args.get(columns_if.get(name, ""), False):
                tile.reverse()
            args[name].block_shape = [1, 1, *tile]
        return True

    return fit


_forward_fixed = triton.heuristics(
    {
        "EVEN_M": lambda a: a["seq_q"] % a["BLOCK_M"] == 0,
        "USE_TMA": _fit_descriptors(
            {"desc_q": "BLOCK_M", "desc_o": "BLOCK_M", "desc_k": "BLOCK_N", "desc_v": "BLOCK_N"},
            columns_if={"desc_v": "V_COLUMN_MAJOR"},
        ),
    }
)(forward_kernel)
_backward_fixed = triton.heuristics(
    {
        # Causal dK/dV query tiles start at a key tile: aligned to BLOCK_M1 only if it divides BLOCK_N1.
        "EVEN_M1": lambda a: (
            a["seq_q"] % a["BLOCK_M1"] == 0 and (not a["IS_CAUSAL"] or a["BLOCK_N1"] % a["BLOCK_M1"] == 0)
        ),
        "EVEN_N1": lambda a: a["seq_k"] % a["BLOCK_N1"] == 0,
        "EVEN_M2": lambda a: a["seq_q"] % a["BLOCK_M2"] == 0,
        "EVEN_N2": lambda a: a["seq_k"] % a["BLOCK_N2"] == 0,
        "USE_TMA": _fit_descriptors(
            {"desc_q": "BLOCK_M1", "desc_do": "BLOCK_M1", "desc_dq": "BLOCK_M1"}, switch="ATOMIC_DQ"
        ),
        # Triton's interpreter has no TMA reductions; it adds through pointers.
        "TMA_REDUCE": lambda a: a["USE_TMA"] and not interpreting(),
        "DQ_ACC_ZEROED": _zero_dq_acc_for_one_pass,
    }
)(backward_kernel)


class _Kernel:
    """A kernel launched three ways: forced (FLASH_TRITON_CONFIG), through Triton's autotuner the first
    time a tuning key is seen that the GPU's stored table (kernels/tuned/) does not hold, and from then
    on, or from the first call of a stored key, with that key's configuration straight through the jit
    function, its heuristics computed here on one dict of the arguments.

    A forced or known launch made with a call signature is kept (direct.DirectLaunch): from the next
    call with that signature on, the launcher skips this class and the jit function altogether.
    """

    def __init__(self, name: str, fixed, post_hook=None, two_pass_only: bool = False):
        self.name = name
        self.fixed = fixed  # the jit function under its heuristics
        # The deterministic backward: never the one-pass form, whose atomic adds of dQ land in any order.
        self.two_pass_only = two_pass_only
        self.tuned = _tuned(name, fixed, post_hook, two_pass_only)
        self.chosen: dict[tuple, triton.Config] = {}  # tuning key -> the autotuner's choice
        self.last: triton.Config | None = None  # what the last autotuned launch ran with
        # call signature -> (configuration or None where forced, tuning key, the launch): see direct
        self.prepared = direct.Kept()

    def named(self, args: tuple, kwargs: dict) -> dict:
        """A launch's arguments by the kernel's names: the first ones come positional, the rest as kwargs."""
        return dict(zip(self.fixed.arg_names, args, strict=False)) | kwargs

    def key(self, named: dict) -> tuple:
        """The autotuner's key for these arguments, with the dtype and device of the inputs."""
        q = named["Q"]
        return (*(named[name] for name in _AUTOTUNE_KEY), q.dtype, q.device)

    def known(self, key: tuple) -> triton.Config | None:
        """The key's configuration: tuned in this process, or stored for this GPU model (kernels/tuned/,
        see stored) and from then on kept as if tuned; None: the autotuner chooses."""
        config = self.chosen.get(key)
        if config is None:
            gpu = stored.gpu_name_of(key[-1])
            config = stored.lookup(self.name, key, gpu, _could_choose)
            if config is not None and self.two_pass_only and config.kwargs.get("ATOMIC_DQ"):
                config = None  # stored for the default, faster mode: the two passes are tuned here
            if config is not None:
                self.chosen[key] = config
        return config

    def forced(self) -> dict[str, int] | None:
        """The configuration FLASH_TRITON_CONFIG forces for this kernel, if any; the one-pass form
        forced where only two passes may run is refused."""
        forced = forced_configs().get(self.name)
        if forced is not None and self.two_pass_only and forced.get("ATOMIC_DQ"):
            raise ValueError(
                f"{CONFIG_ENV}: the backward entry sets ATOMIC_DQ=1, whose atomic adds of dQ are not "
                f"deterministic, while torch.use_deterministic_algorithms(True) is in force: set ATOMIC_DQ=0 "
                f"or leave the backward kernel out of {CONFIG_ENV}"
            )
        return forced

    def may_run(self, switch: str, named: dict) -> bool:
        """Whether a launch with these key arguments (named as the kernel's) may run a configuration
        with `switch` on: the forced one, the key's tuned or stored choice, or before tuning any
        candidate that pruning keeps for it."""
        forced = self.forced()
        if forced is not None:
            return bool(forced.get(switch))
        config = self.known(self.key(named))
        configs = [config] if config is not None else _prune(self.tuned.configs, named)
        return any(c.kwargs.get(switch) for c in configs)

    def launch(self, grid, *args, signature=None, per_call=(), **kwargs) -> dict[str, int]:
        """Launch with the forced configuration if one is set, else autotuned; returns its kwargs.

        With a `signature` (a hashable of everything the launch's arguments other than the tensors
        named in `per_call` follow from), a launch with a resolved configuration is kept, and
        `kept(signature)` then gives it back for launching straight through Triton's launcher.
        """
        named = self.named(args, kwargs)
        forced = self.forced()
        if forced is not None:
            config, key, options = None, None, forced
        else:
            key = self.key(named)
            config = self.known(key)
            if config is None:
                self.tuned[grid](*args, **kwargs)
                self.last = self.chosen[key] = self.tuned.best_config
                return self.last.kwargs
            options = config.all_kwargs()
        named |= options
        for rule_name, rule in self.fixed.values.items():  # the heuristics, in their order
            named[rule_name] = rule(named)
        rules = {rule_name: named[rule_name] for rule_name in self.fixed.values}
        launch_grid = grid(named)
        try:
            compiled = self.fixed.fn[launch_grid](*args, **kwargs, **options, **rules)
        except OutOfResources as error:  # the autotuner skips such candidates; a forced one is the user's
            if forced is None:
                raise
            q = named["Q"]
            raise does_not_fit(
                self.name, forced, q.dtype, named["HEAD_DIM"], stored.gpu_name_of(q.device), error
            ) from error
        if signature is not None:
            bound = {name: named[name] for name in self.fixed.fn.arg_names}
            made = direct.prepare(compiled, launch_grid, bound, per_call, named["Q"].device.index)
            if made is not None:
                self.prepared[signature] = (config, key, made)
        if config is not None:
            self.last = config
        return options if config is None else config.kwargs

    def kept(self, signature) -> direct.DirectLaunch | None:
        """The launch kept for `signature`, while its configuration is still the one in force: forced
        ones are told apart by the signature, which holds FLASH_TRITON_CONFIG; a tuned or stored one
        must still be the key's choice (tests and tuning runs replace them)."""
        kept = self.prepared.get(signature)
        if kept is None:
            return None
        config, key, made = kept
        if config is not None:
            if self.chosen.get(key) is not config:
                return None
            self.last = config
        return made


def _could_choose(kernel: str, key: tuple, config: triton.Config) -> bool:
    """Whether the autotuner could pick `config` at a tuning key: one of the candidates _prune keeps
    for its head dim and dtype. A stored table's entries are checked with it."""
    named = {"Q": torch.empty(0, dtype=key[5]), "HEAD_DIM": key[3]}
    kept = _prune(AUTOTUNED[kernel].tuned.configs, named)
    return any(stored.same_config(config, c) for c in kept)


AUTOTUNED = {
    "forward": _Kernel("forward", _forward_fixed),
    "backward": _Kernel("backward", _backward_fixed, _convert_dq_while_tuning),
}
# The backward under torch.use_deterministic_algorithms(True): two passes only, tuned apart.
DETERMINISTIC_BACKWARD = _Kernel("backward", _backward_fixed, _convert_dq_while_tuning, two_pass_only=True)


def backward_kernel() -> _Kernel:
    """The backward for this call: two passes only where torch asks for deterministic algorithms (the
    one-pass form adds dQ with atomics, in any order), else the fastest form."""
    return DETERMINISTIC_BACKWARD if torch.are_deterministic_algorithms_enabled() else AUTOTUNED["backward"]


def chosen_configs() -> dict[str, str | None]:
    """The configuration each kernel ran with last (autotuned or forced), for reports."""
    forced = forced_configs()
    chosen: dict[str, str | None] = {}
    for name, kernel in AUTOTUNED.items():
        if name in forced:
            chosen[name] = ", ".join(f"{k}={v}" for k, v in forced[name].items()) + " (forced)"
        else:
            chosen[name] = str(kernel.last) if kernel.last is not None else None
    if DETERMINISTIC_BACKWARD.last is not None and "backward" not in forced:
        chosen["backward (deterministic)"] = str(DETERMINISTIC_BACKWARD.last)
    return chosen
