"""A kernel launch resolved once and then made straight through Triton's compiled launcher.

A call through a jit function specializes every argument (type, 16-byte alignment, value of 1), hashes
the result to find the compiled kernel and rebuilds the launch's argument list; the autotuner and the
heuristics add their own dict of the arguments. For a given call signature (shapes, strides, dtype,
device, alignment, settings: see launch) all of that comes out the same every time, so DirectLaunch
keeps what the first launch resolved: the compiled kernel, the grid and every argument but the
tensors, which each call hands over. A TMA descriptor's shape, strides and tile are kept too, and it
is rebuilt around each call's tensor (the launcher encodes it at every launch, as Triton's own does);
Gluon's descriptors likewise (their shared-memory layout is the compiled kernel's: the launcher reads
base, shape, strides and padding of either kind).

`prepare` returns None where this Triton's compiled kernels do not offer the launcher (the CPU
interpreter, for one): calls then keep going through the jit function.
"""

from __future__ import annotations

import collections
import dataclasses
import functools

import triton

try:  # launch hooks (Triton's profilers set them): Triton 3.4 and later
    from triton import knobs as _knobs
except ImportError:  # pragma: no cover - older Triton has no hooks to honour
    _knobs = None

try:
    from triton.tools.tensor_descriptor import TensorDescriptor
except ImportError:  # pragma: no cover - older Triton loads through pointers only
    TensorDescriptor = None

try:  # Gluon's descriptors (with a shared-memory layout), which the launcher reads the same way
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor as GluonTensorDescriptor
except ImportError:  # pragma: no cover - a Triton without Gluon
    GluonTensorDescriptor = None

_DESCRIPTOR_TYPES = tuple(t for t in (TensorDescriptor, GluonTensorDescriptor) if t is not None)


@functools.cache
def _template_type(fields: tuple[str, ...]) -> type:
    """A named tuple of a descriptor class's fields, which the launcher reads as it reads the class."""
    return collections.namedtuple("DescriptorTemplate", fields)


class DirectLaunch:
    """One resolved launch: `direct(*tensors)` launches it on the current stream of its device with
    the given tensors in the places named by `per_call` (the same order), and every other argument as
    it was when prepared. A per-call name whose prepared value was None (a descriptor not made) keeps
    None and ignores what it is given."""

    def __init__(self, compiled, grid: tuple[int, ...], bound: dict, per_call: tuple[str, ...], device: int):
        self.launcher = compiled.run  # Triton's launcher: grid, stream, function, metadata, hooks, arguments
        self.compiled = compiled
        self.function = compiled.function
        self.packed_metadata = compiled.packed_metadata
        self.grid = (*grid, 1, 1)[:3]
        self.args = list(bound.values())
        names = list(bound)
        self.values = {name: value for name, value in bound.items() if name not in per_call}
        # (index among the call's tensors, position in the arguments, descriptor template or None) for
        # each per-call name whose prepared value was not None; a None (a descriptor not made) stays.
        self.slots = [
            (index, names.index(name), _template(bound[name]))
            for index, name in enumerate(per_call)
            if bound[name] is not None
        ]
        self.count = len(per_call)
        for _, position, _ in self.slots:  # no tensor of the preparing call is kept alive
            self.args[position] = None
        self.device = device
        self.current_stream = None  # the driver's, looked up at the first launch

    def value(self, name: str):
        """The prepared value of an argument that is not a per-call tensor (a constexpr, for one)."""
        return self.values[name]

    def __call__(self, *tensors) -> None:
        if len(tensors) != self.count:
            raise ValueError(f"{len(tensors)} tensors for a launch that takes {self.count}")
        args = self.args.copy()
        for index, position, template in self.slots:
            tensor = tensors[index]
            args[position] = tensor if template is None else template._replace(base=tensor)
        if self.current_stream is None:
            self.current_stream = triton.runtime.driver.active.get_current_stream
        stream = self.current_stream(self.device)
        # Launch hooks and their metadata as Triton's own launch passes them (its compiled kernel
        # makes no metadata where no hook is set).
        enter = exit_ = metadata = None
        if _knobs is not None:
            enter, exit_ = _knobs.runtime.launch_enter_hook, _knobs.runtime.launch_exit_hook
            if enter is not None:
                metadata = self.compiled.launch_metadata(self.grid, stream, *args)
        self.launcher(*self.grid, stream, self.function, self.packed_metadata, metadata, enter, exit_, *args)


def _is_descriptor(value) -> bool:
    return isinstance(value, _DESCRIPTOR_TYPES)


def _template(value) -> tuple | None:
    """A descriptor's fixed parts, every field its release has (a later one reads more of them, such as
    round_f32_to_tf32), with no base; None for a plain argument (a tensor)."""
    if not _is_descriptor(value):
        return None
    fields = tuple(field.name for field in dataclasses.fields(value))
    return _template_type(fields)(**{name: getattr(value, name) for name in fields})._replace(base=None)


def prepare(compiled, grid, bound: dict, per_call: tuple[str, ...], device: int) -> DirectLaunch | None:
    """A DirectLaunch of `compiled` (what a jit function's launch returned) with the launch's grid and
    every argument by name in the kernel's order, or None where it cannot launch directly."""
    if compiled is None or not all(hasattr(compiled, a) for a in ("run", "function", "packed_metadata")):
        return None
    descriptors = [value for value in bound.values() if _is_descriptor(value)]
    if any(not hasattr(d, "padding") for d in descriptors):
        return None  # a Triton whose descriptors the launcher reads differently
    return DirectLaunch(compiled, tuple(grid), bound, per_call, device)


def launch_jit(fn, grid, named: dict, per_call: tuple[str, ...], device: int) -> DirectLaunch | None:
    """Launch jit function `fn` with every argument by name, the usual way, and return it prepared."""
    compiled = fn[grid](**named)
    return prepare(compiled, grid, {name: named[name] for name in fn.arg_names}, per_call, device)


def launch_keeping(fn, grid, named: dict, per_call: tuple[str, ...], device: int, keep) -> None:
    """Launch jit function `fn` with every argument by name; with keep = (a Kept, the call's signature),
    keep the prepared launch there too. Without keep nothing is prepared."""
    if keep is None:
        fn[grid](**named)
        return
    made = launch_jit(fn, grid, named, per_call, device)
    if made is not None:
        kept, signature = keep
        kept[signature] = made


class Kept(dict):
    """Prepared launches by call signature, the oldest dropped beyond `limit` (lengths that vary call
    by call would otherwise grow it without end)."""

    def __init__(self, limit: int = 256):
        super().__init__()
        self.limit = limit

    def __setitem__(self, signature, launch) -> None:
        if signature not in self and len(self) >= self.limit:
            del self[next(iter(self))]
        super().__setitem__(signature, launch)
