"""Join the process group of a launcher's job (torchrun, or srun with RANK and WORLD_SIZE set) and run
functions in every rank under a watchdog, so that a rank that raises, dies or hangs ends the others.

`launch_from_environment()` reads what the launcher set; `LaunchedGroup.join(launch)` joins the
default process group through env:// (gloo, with NCCL for CUDA tensors where the node has a GPU per
local rank) and starts a watchdog thread. `group.run(fn, args, timeout_s, what)` calls
`fn(rank, world_size, *args)` here, in this rank, as `parallel.launch.run_ranks` does in processes it
spawns, and raises the same errors: `RankFailed` names the rank whose failure came first and carries
its traceback, `RanksTimedOut` the run that outlived its time limit.

How failures cross ranks: every rank reports into the launcher's TCP store (its own connection,
under the prefix "perf-suite/"), beside the process group, which a failure leaves unusable:
- a rank whose function raises reports its traceback, then aborts its process group, which closes
  its connections: peers waiting for it in a gloo collective fail at once, NCCL peers are aborted by
  their watchdog when it sees the report (within WATCH_S);
- a rank killed without a report stops counting its heartbeat; its peers' collectives fail (gloo:
  "Connection closed by peer") and they name it as the rank whose heartbeat stopped;
- a run past its time limit: each rank's watchdog reports where its main thread is and aborts the
  group; a rank whose main thread is still inside the run HUNG_GRACE_S later (stuck outside any
  collective) prints its stack and ends its process, which is then all it can do.
After a failure the group stays broken: later runs fail at once without communicating.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d

from parallel.launch import RankFailed, RanksTimedOut

# Joining (the store connection, every rank's arrival) and the longest any one collective may wait
# for its peers; beyond it torch ends the collective with an error. The watchdog ends a run at its own
# time limit first; this bounds what it does not watch: a peer building an xl model and broadcasting
# its 8.0 GB of weights takes tens of seconds, 300 s leaves a wide margin.
GROUP_TIMEOUT_S = 300.0
# How often the watchdog counts the heartbeat and looks for reports.
WATCH_S = 0.25
# A rank whose heartbeat has not moved for this long has ended (killed, or crashed in native code):
# forty beats missed, far more than a loaded host delays a thread.
STALE_S = 10.0
# After a run's time limit: how long a rank's main thread has to leave the run once the group is
# aborted, before its process ends.
HUNG_GRACE_S = 15.0
# At the end: how long the other ranks wait for rank 0 to store the results (their exit would make
# torchrun terminate rank 0's node).
FINISH_WAIT_S = 120.0
_PREFIX = "perf-suite/"
STACK_FRAMES = 6


class LaunchError(ValueError):
    """The launcher's variables are missing or do not fit together."""


class GroupBroken(RuntimeError):
    """An earlier run failed: the group is aborted and nothing more runs in it."""


@dataclass(frozen=True)
class Launch:
    """What the launcher told this process: its place in the job."""

    launcher: str  # "torchrun", or "srun" / "environment" when the variables were set by hand
    rank: int
    world_size: int
    local_rank: int
    node: str  # this rank's node: torchrun's GROUP_RANK, SLURM_NODEID, else the host name
    master_addr: str
    master_port: int


def launch_from_environment(environ: Mapping[str, str] | None = None) -> Launch | None:
    """This process's Launch when RANK or WORLD_SIZE is set (torchrun sets both); None otherwise.

    srun sets SLURM_* only: export RANK=$SLURM_PROCID WORLD_SIZE=$SLURM_NTASKS
    LOCAL_RANK=$SLURM_LOCALID and MASTER_ADDR (the first node), as the README shows. LaunchError
    names a variable that is missing or wrong.
    """
    env = os.environ if environ is None else environ
    if "RANK" not in env and "WORLD_SIZE" not in env:
        return None
    world_size = _integer(env, "WORLD_SIZE", minimum=1)
    rank = _integer(env, "RANK", minimum=0)
    if rank >= world_size:
        raise LaunchError(f"RANK={rank} is not below WORLD_SIZE={world_size}")
    local_name = "LOCAL_RANK" if "LOCAL_RANK" in env else "SLURM_LOCALID"
    local_rank = _integer(env, local_name, minimum=0, missing="LOCAL_RANK (srun: $SLURM_LOCALID)")
    if not env.get("MASTER_ADDR"):
        raise LaunchError(
            "MASTER_ADDR is not set: the address of rank 0's node, which every rank connects to "
            "(torchrun sets it; under srun export MASTER_ADDR=$(scontrol show hostnames "
            '"$SLURM_JOB_NODELIST" | head -n 1))'
        )
    port = _integer(
        env, "MASTER_PORT", minimum=1, missing="MASTER_PORT (a free TCP port on MASTER_ADDR, e.g. 29500)"
    )
    if "TORCHELASTIC_RUN_ID" in env:
        launcher = "torchrun"
    elif "SLURM_PROCID" in env:
        launcher = "srun"
    else:
        launcher = "environment"
    node = env.get("GROUP_RANK") or env.get("SLURM_NODEID") or socket.gethostname()
    return Launch(launcher, rank, world_size, local_rank, node, env["MASTER_ADDR"], port)


def _integer(env: Mapping[str, str], name: str, minimum: int, missing: str | None = None) -> int:
    raw = env.get(name)
    if raw is None:
        raise LaunchError(f"{missing or name} is not set; a launcher sets RANK, WORLD_SIZE and LOCAL_RANK")
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        raise LaunchError(f"{name}={raw!r}: an integer >= {minimum} is accepted")
    return value


class LaunchedGroup:
    """This rank's membership of the launcher's process group, with its watchdog."""

    def __init__(self, launch: Launch, store: dist.Store, topology: dict[str, Any]):
        self.launch = launch
        self.store = store
        self.topology = topology  # nodes, ranks per node, GPUs per node: what results carry
        self.broken: str | None = None  # what the group stopped working at
        self._current: _Run | None = None
        self._terminating = False
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="perf-watchdog", daemon=True)
        self._thread.start()
        self._main = threading.main_thread()
        if threading.current_thread() is self._main:
            signal.signal(signal.SIGTERM, self._terminated)

    # ------------------------------------------------------------------ joining
    @classmethod
    def join(cls, launch: Launch, timeout_s: float = GROUP_TIMEOUT_S) -> LaunchedGroup:
        """Join the default process group; LaunchError (on every rank) if a node has fewer GPUs than
        local ranks. Rank r uses cuda:LOCAL_RANK where there are GPUs."""
        gpus = torch.cuda.device_count()
        if gpus and launch.local_rank < gpus:
            torch.cuda.set_device(launch.local_rank)
        # torch's default ends the process at an NCCL error, rank 0's results with it; the watchdog
        # aborts the group instead, which makes the collective raise.
        os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "0")
        # Both backends in one group: gloo for CPU tensors, NCCL for CUDA tensors. NCCL's
        # communicators are created at the first CUDA collective, after the check below.
        backend = "cpu:gloo,cuda:nccl" if gpus else "gloo"
        timeout = datetime.timedelta(seconds=timeout_s)
        dist.init_process_group(backend, rank=launch.rank, world_size=launch.world_size, timeout=timeout)
        store = dist.PrefixStore(
            _PREFIX,
            dist.TCPStore(
                launch.master_addr,
                launch.master_port,
                is_master=False,
                timeout=timeout,
                wait_for_workers=False,
            ),
        )
        store.set(
            f"member/{launch.rank}",
            json.dumps({"node": launch.node, "local_rank": launch.local_rank, "gpus": gpus}),
        )
        store.wait([f"member/{r}" for r in range(launch.world_size)], timeout)
        members = [json.loads(store.get(f"member/{r}")) for r in range(launch.world_size)]
        shortage = gpu_shortage(members)
        if shortage is not None:
            dist.destroy_process_group()
            raise LaunchError(shortage)
        return cls(launch, store, _topology(members))

    # ------------------------------------------------------------------ running
    def run(self, fn: Callable[..., Any], args: tuple, timeout_s: float, what: str) -> Any:
        """fn(rank, world_size, *args) in this rank, with every other rank doing the same."""
        if self.broken is not None:
            raise GroupBroken(f"not run: the ranks stopped working together at {self.broken}")
        run = _Run(what=what, deadline=time.monotonic() + timeout_s, timeout_s=timeout_s)
        with self._lock:
            self._current = run
        try:
            value = fn(self.launch.rank, self.launch.world_size, *args)
        except KeyboardInterrupt:
            raise
        except BaseException:
            run.failed = True  # the watchdog leaves its time limit alone while the cause is sought
            self._report("raised", what, traceback.format_exc())
            self._abort(what)
            raise self._first_failure(run) from None
        finally:
            with self._lock:
                self._current = None
        if run.timed_out:
            raise RanksTimedOut(self._timeout_message(run))
        return value

    def finish(self) -> None:
        """Rank 0 says it is done; the others wait for that before they leave, then the group ends."""
        self._stop.set()
        try:
            if self.launch.rank == 0:
                self.store.set("done", "1")
            else:
                self.store.wait(["done"], datetime.timedelta(seconds=FINISH_WAIT_S))
        except Exception as err:  # the store's host (rank 0 or a launcher's agent) has gone
            print(f"rank {self.launch.rank}: not waiting for rank 0 to finish: {err}", file=sys.stderr)
        if self.broken is None and dist.is_initialized():
            dist.destroy_process_group()

    # ------------------------------------------------------------------ failures
    def _report(self, kind: str, what: str, text: str) -> None:
        entry = {"rank": self.launch.rank, "kind": kind, "what": what, "text": text}
        try:
            index = self.store.add("failures", 1)
            self.store.set(f"failure/{index}", json.dumps(entry))
        except Exception as err:
            print(f"rank {self.launch.rank}: could not report its failure: {err}", file=sys.stderr)

    def _reports(self) -> list[dict[str, Any]]:
        count = self.store.add("failures", 0)
        keys = [f"failure/{i}" for i in range(1, count + 1)]
        if not keys:
            return []
        self.store.wait(keys, datetime.timedelta(seconds=10))  # counted before written
        return [json.loads(self.store.get(key)) for key in keys]

    def _abort(self, what: str) -> None:
        """Leave the group for good: its collectives in flight end here and at the peers."""
        if self.broken is None:
            self.broken = what
            if dist.is_initialized():
                c10d._abort_process_group()

    def _first_failure(self, run: _Run) -> Exception:
        """The failure that came first: a rank whose heartbeat stopped without a report (killed: its
        peers' collectives fail and they report that, sooner than its silence shows), else the first
        report. Waits STALE_S for the heartbeats to tell."""
        try:
            beats = self._beats()
            deadline = time.monotonic() + STALE_S + 1
            while time.monotonic() < deadline and not run.timed_out:
                time.sleep(WATCH_S)
            if run.timed_out:
                time.sleep(2 * WATCH_S)  # the peers' watchdogs report their stacks too
                return RanksTimedOut(self._timeout_message(run))
            reports = self._reports()
            stopped = [r for r, (a, b) in enumerate(zip(beats, self._beats(), strict=True)) if a == b]
        except Exception as err:  # the store's host has gone: a launcher's agent ends when its node fails
            return RankFailed(
                self.launch.rank, f"{traceback.format_exc()}\nand the launcher's store went away: {err}"
            )
        reported = {r["rank"] for r in reports}
        silent = [r for r in stopped if r not in reported]
        if silent:
            error = RankFailed(
                silent[0],
                f"its process ended without a report (killed, or crashed outside Python) during "
                f"{run.what}: its heartbeat stopped",
                what="ended",
            )
            if reports:
                error.add_note(f"ranks {sorted(reported)} failed after it: {_last_line(reports[0]['text'])}")
            return error
        first = reports[0] if reports else {"rank": self.launch.rank, "text": "no report", "what": run.what}
        error = RankFailed(first["rank"], f"during {first['what']}:\n{first['text']}")
        others = sorted(reported - {first["rank"]})
        if others:
            error.add_note(f"ranks {others} failed after it")
        return error

    def _timeout_message(self, run: _Run) -> str:
        stacks = "\n".join(
            f"rank {r['rank']} was in:\n{r['text']}" for r in self._reports() if r["kind"] == "timed out"
        )
        return f"{run.what}: still running after {run.timeout_s:.0f} s on every rank; all stopped.\n{stacks}"

    def _terminated(self, signum: int, frame: Any) -> None:
        """The launcher ends this rank: torchrun does when another rank of its node has ended.

        Rank 0 inside a run lets the run fail first (its peers are gone: the watchdog aborts the
        group), so that its output names the rank that ended; torchrun waits 30 s before it kills.
        Elsewhere rank 0 stops as at Ctrl-C, which lets pytest store what it has measured.
        """
        with self._lock:
            run = self._current
        self._report("terminated", run.what if run else "-", f"ended by its launcher (signal {signum})")
        if self.launch.rank != 0:
            os._exit(128 + signum)
        if run is None:
            raise KeyboardInterrupt(f"rank 0 ended by its launcher (signal {signum})")
        self._terminating = True

    # ------------------------------------------------------------------ the watchdog thread
    def _beats(self) -> list[int]:
        return [self.store.add(f"beat/{r}", 0) for r in range(self.launch.world_size)]

    def _watch(self) -> None:
        seen = 0
        # Each rank watches the next one's heartbeat only: one store read per rank and look, whatever
        # the world size (every rank reading every beat would be world_size squared reads per look).
        # The rank that finds its neighbour stopped aborts; its collective then fails and reports, and
        # the others abort on that report.
        neighbour = (self.launch.rank + 1) % self.launch.world_size
        beat, moved = -1, time.monotonic()
        while not self._stop.wait(WATCH_S):
            try:
                now = time.monotonic()
                self.store.add(f"beat/{self.launch.rank}", 1)
                current = self.store.add(f"beat/{neighbour}", 0)
                if current != beat:
                    beat, moved = current, now
                with self._lock:
                    run = self._current
                if run is None or run.failed:
                    continue
                failures = self.store.add("failures", 0)
                # A peer that reported, a neighbour whose heartbeat stopped (killed: NCCL collectives
                # with it would wait for their timeout), or the launcher ending this rank: collectives in
                # flight can only fail now, and NCCL's need the abort for that.
                stopped = neighbour != self.launch.rank and now - moved > STALE_S
                if failures > seen or stopped or self._terminating:
                    seen = failures
                    self._abort(run.what)
                if now > run.deadline and not run.timed_out:
                    run.timed_out = True
                    self._report("timed out", run.what, _stack_of(self._main))
                    self._abort(run.what)
                if run.timed_out and now > run.deadline + HUNG_GRACE_S:
                    print(
                        f"rank {self.launch.rank}: {run.what} still runs {HUNG_GRACE_S:.0f} s after its time "
                        f"limit, outside any collective; ending this process. Its stack:\n"
                        f"{_stack_of(self._main)}",
                        file=sys.stderr,
                        flush=True,
                    )
                    os._exit(1)
            except Exception as err:  # the store has gone: the job is ending
                print(f"rank {self.launch.rank}: watchdog stopped: {err}", file=sys.stderr)
                return


@dataclass
class _Run:
    what: str
    deadline: float
    timeout_s: float
    timed_out: bool = False
    failed: bool = False


def gpu_shortage(members: list[dict[str, Any]]) -> str | None:
    """Why the ranks cannot each have a GPU of their node (what NCCL needs), or None. `members`: per
    rank its node, local rank and the GPUs its node shows; a node without GPUs runs gloo alone."""
    short = [m for m in members if m["gpus"] and m["local_rank"] >= m["gpus"]]
    if not short:
        return None
    nodes = sorted({m["node"] for m in short})
    return (
        f"node(s) {', '.join(nodes)}: {max(m['local_rank'] for m in short) + 1} local ranks but "
        f"{short[0]['gpus']} GPU(s) visible; NCCL needs a GPU per local rank (start at most that many "
        "ranks per node, e.g. torchrun --nproc-per-node)"
    )


def _topology(members: list[dict[str, Any]]) -> dict[str, Any]:
    per_node: dict[str, int] = {}
    for member in members:
        per_node[member["node"]] = per_node.get(member["node"], 0) + 1
    return {
        "world_size": len(members),
        "nodes": len(per_node),
        "ranks_per_node": sorted(set(per_node.values())),
        "gpus_per_node": sorted({m["gpus"] for m in members}),
    }


def _stack_of(thread: threading.Thread) -> str:
    frame = sys._current_frames().get(thread.ident)
    # The innermost frames: where in the measurement it is, not the pytest frames around it.
    return (
        "".join(traceback.format_stack(frame)[-STACK_FRAMES:]) if frame is not None else "(no Python frame)"
    )


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""
