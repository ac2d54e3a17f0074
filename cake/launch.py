"""Module load and kernel launch through the CUDA driver API, on PyTorch's current stream."""

from __future__ import annotations

import ctypes
import functools
import struct
import threading
from typing import Any

from . import env
from .errors import LaunchError
from .machine import _call, init_driver
from .manifest import Entry, Kernel
from .spec import ArgType

# each slot 8 bytes (little-endian; i32 / f32 padded), pointers unsigned
_FORMAT = {ArgType.ptr: "Q", ArgType.i32: "i4x", ArgType.i64: "q", ArgType.f32: "f4x"}
_SMEM_DEFAULT_LIMIT = 48 * 1024
_PTR = ArgType.ptr
_INT_RANGE = {ArgType.i32: (-(2**31), 2**31), ArgType.i64: (-(2**63), 2**63)}


@functools.cache
def _primary_context(device: int) -> Any:
    """The device's primary context (the one PyTorch uses), retained once per process: a retain per
    rebinding thread would never be released."""
    driver = init_driver()
    dev = _call(driver, driver.cuDeviceGet(device), "cuDeviceGet")
    return _call(driver, driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")


def ensure_context(device: int, *, force: bool = False) -> None:
    """Make the device's primary context current on this thread: when none is current, or always
    with `force` (the thread's current context belongs to another device)."""
    import torch

    torch.cuda.init()
    driver = init_driver()
    ctx = _call(driver, driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if force or int(ctx) == 0:
        _call(driver, driver.cuCtxSetCurrent(_primary_context(device)), "cuCtxSetCurrent")


@functools.cache
def _cu_launch() -> Any:
    """libcuda's cuLaunchKernel through ctypes: a launch from Python costs a few microseconds this
    way, against ~100 through cuda-bindings' argument conversion (docs/notes.md, session 3)."""
    fn = ctypes.CDLL("libcuda.so.1").cuLaunchKernel
    fn.restype = ctypes.c_int
    fn.argtypes = [ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p]
    fn.argtypes += [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p]
    return fn


# CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_CONTEXT_IS_DESTROYED: the
# launching thread has no current context, or another device's
_WRONG_CONTEXT = (400, 201, 709)


def _current_stream(device: int) -> int:
    import torch

    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what Triton launches on
    return raw(device) if raw is not None else torch.cuda.current_stream(device).cuda_stream


class ArgBlock:
    """A kernel's arguments packed in one buffer allocated once (8 bytes a slot, each value in the
    program's C type), and the array of the slots' addresses that cuLaunchKernel takes as
    kernelParams. `set` converts one launch's arguments (a tensor or None for a pointer, a Python
    int for i32/i64, a number for f32) and packs them in place with one struct call: on the
    H200's host a launch's Python side is most of its cost (docs/notes.md, session 11)."""

    def __init__(self, kinds: tuple[ArgType, ...] | list[ArgType], symbol: str = "kernel") -> None:
        self.kinds = tuple(kinds)
        self.symbol = symbol
        self._struct = struct.Struct("<" + "".join(_FORMAT[k] for k in self.kinds))
        self._buf = ctypes.create_string_buffer(max(8, 8 * len(self.kinds)))
        base = ctypes.addressof(self._buf)
        self.params = (ctypes.c_void_p * max(1, len(self.kinds)))(
            *[base + 8 * i for i in range(len(self.kinds))]
        )
        self._ptrs = [i for i, k in enumerate(self.kinds) if k is _PTR]
        self._ints = [i for i, k in enumerate(self.kinds) if k in _INT_RANGE]

    def set(self, args: tuple[Any, ...] | list[Any]) -> None:
        values = self._convert(args)
        try:
            self._struct.pack_into(self._buf, 0, *values)
        except struct.error:
            self._refuse(values, args)

    def packed(self, args: tuple[Any, ...] | list[Any]) -> bytes:
        """The bytes `set` would write, without writing them (`load` does)."""
        values = self._convert(args)
        try:
            return self._struct.pack(*values)
        except struct.error:
            self._refuse(values, args)
            raise  # unreachable: _refuse raises

    def load(self, data: bytes) -> None:
        ctypes.memmove(self._buf, data, len(data))

    def _convert(self, args: tuple[Any, ...] | list[Any]) -> list[Any]:
        if len(args) != len(self.kinds):
            raise LaunchError(
                f"{self.symbol} called with {len(args)} arguments",
                expected=f"{len(self.kinds)} ({', '.join(self.kinds)})",
            )
        values = list(args)
        for i in self._ptrs:
            arg = values[i]
            if arg is None:
                values[i] = 0
            elif type(arg) is not int:
                try:
                    values[i] = arg.data_ptr()
                except AttributeError:  # an address given as another integer type
                    values[i] = int(arg)
        for i in self._ints:
            if type(values[i]) is not int:  # bool and float are refused, as are int subclasses
                raise LaunchError(f"{self.symbol} argument {i} must be an int", found=repr(args[i]))
        return values

    def _refuse(self, values: list[Any], args: tuple[Any, ...] | list[Any]) -> None:
        for i in self._ints:
            lo, hi = _INT_RANGE[self.kinds[i]]
            if not lo <= values[i] < hi:
                raise LaunchError(
                    f"{self.symbol} argument {i} does not fit in {self.kinds[i]}",
                    found=repr(args[i]),
                ) from None
        raise LaunchError(f"{self.symbol}: arguments do not pack", found=repr(args)) from None


class Function:
    """One kernel: a launch converts the arguments, fills its ArgBlock and calls the driver, under
    a lock so that threads sharing a kernel do not interleave the fill and the launch."""

    def __init__(self, module: Any, entry: Entry, meta: Kernel, device: int) -> None:
        driver = init_driver()
        self.entry = entry
        self.meta = meta
        self.device = device
        try:
            self.handle = _call(
                driver,
                driver.cuModuleGetFunction(module, meta.symbol.encode()),
                "cuModuleGetFunction",
            )
        except Exception as exc:
            raise LaunchError(
                f"{entry.program} has no kernel {meta.symbol}", found=str(exc)
            ) from None
        if meta.smem > _SMEM_DEFAULT_LIMIT:
            attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            _call(
                driver,
                driver.cuFuncSetAttribute(self.handle, attr, meta.smem),
                "cuFuncSetAttribute",
            )
        self._fn = int(self.handle)
        self._block = ArgBlock(meta.args, f"{entry.program}:{meta.symbol}")
        self._lock = threading.Lock()
        self._launch = _cu_launch()
        self._dims: dict[tuple[int, ...], tuple[int, ...]] = {}  # grid -> launch dimensions

    def __call__(self, grid: tuple[int, ...], *args: Any, stream: int | None = None) -> None:
        dims = self._dims.get(grid)
        if dims is None:
            gx, gy, gz = (*grid, 1, 1)[:3]
            if min(gx, gy, gz) <= 0:
                return  # nothing to do (e.g. an empty batch); a zero grid is a driver error
            if len(self._dims) >= 256:  # packed batches change the grid from call to call
                self._dims.clear()
            dims = self._dims[grid] = (gx, gy, gz, self.meta.threads, 1, 1, self.meta.smem)
        if stream is None:
            stream = _current_stream(self.device)
        with self._lock:
            self._block.set(args)
            err = self._launch(self._fn, *dims, stream, self._block.params, None)
            if err in _WRONG_CONTEXT:
                # a thread that never touched the device (autograd's backward thread, whose first
                # CUDA work may be this launch) or whose current context is another device's
                ensure_context(self.device, force=True)
                err = self._launch(self._fn, *dims, stream, self._block.params, None)
        if err != 0:
            driver = init_driver()
            raise LaunchError(
                f"launch of {self.entry.program}:{self.meta.symbol} failed",
                found=str(driver.CUresult(err)),
            )


class Module:
    """One loaded program: its kernels by symbol."""

    def __init__(self, entry: Entry, cubin: bytes, device: int) -> None:
        ensure_context(device)
        driver = init_driver()
        self.entry = entry
        try:
            self.handle = _call(driver, driver.cuModuleLoadData(cubin), "cuModuleLoadData")
        except Exception as exc:
            raise LaunchError(f"cannot load {entry.program}", found=str(exc)) from None
        self.kernels = {k.symbol: Function(self.handle, entry, k, device) for k in entry.kernels}

    def __getitem__(self, symbol: str) -> Function:
        return self.kernels[symbol]

    def __contains__(self, symbol: object) -> bool:
        return symbol in self.kernels


# Several launches as one CUDA graph. On the H200's host a kernel launched from Python costs ~12 us
# (argument fill, ctypes, cuLaunchKernel), a graph node's arguments set again ~3 us and the graph's
# launch ~5 us: nine launches 107 us, the same nine as one graph 34 us (tools/host_micro.py,
# docs/notes.md session 45). A small call's fwd+bwd is bound by that host time.

GRAPHS: bool | None = None  # None: CAKE_GRAPHS decides; tools that hook Function.__call__ set False
_MAX_GRAPHS = 256  # one per sequence of kernels: a handful per call signature's programs


def graphs_enabled() -> bool:
    return env.get_bool("CAKE_GRAPHS") if GRAPHS is None else GRAPHS


class _NodeParams(ctypes.Structure):  # CUDA_KERNEL_NODE_PARAMS_v2 (cuda.h)
    _fields_ = [
        ("func", ctypes.c_void_p),
        *[(f, ctypes.c_uint) for f in ("gx", "gy", "gz", "bx", "by", "bz", "smem")],
        ("params", ctypes.c_void_p),
        ("extra", ctypes.c_void_p),
        ("kern", ctypes.c_void_p),
        ("ctx", ctypes.c_void_p),
    ]


@functools.cache
def _graph_api() -> Any:
    """libcuda's graph entry points through ctypes, or None where the driver lacks the _v2 node
    calls (CUDA < 12): the launches then go one by one."""
    lib = ctypes.CDLL("libcuda.so.1")
    if not hasattr(lib, "cuGraphExecKernelNodeSetParams_v2"):
        return None
    vp = ctypes.c_void_p
    for name, argtypes in (
        ("cuGraphCreate", [vp, ctypes.c_uint]),
        ("cuGraphAddKernelNode_v2", [vp, vp, vp, ctypes.c_size_t, vp]),
        ("cuGraphInstantiateWithFlags", [vp, vp, ctypes.c_ulonglong]),
        ("cuGraphExecKernelNodeSetParams_v2", [vp, vp, vp]),
        ("cuGraphLaunch", [vp, vp]),
        ("cuGraphExecDestroy", [vp]),
        ("cuGraphDestroy", [vp]),
        ("cuStreamIsCapturing", [vp, vp]),
    ):
        fn = getattr(lib, name)
        fn.restype = ctypes.c_int
        fn.argtypes = argtypes
    return lib


class _Graph:
    """One instantiated graph of a fixed sequence of kernels, each node after the one before it.
    Every node has its own argument block and launch parameters, set again before a launch where
    its grid or argument bytes changed since they were last set (the driver copies them when set:
    launches already enqueued keep theirs). The grids are per launch, so that packed batches of
    other lengths reuse the graph."""

    def __init__(self, kernels: tuple[Function, ...]) -> None:
        api = _graph_api()
        self.kernels = kernels
        self.device = kernels[0].device
        # the graph belongs to the context current at its creation: the device's primary one
        ensure_context(self.device, force=True)
        self._lock = threading.Lock()
        self._api = api
        self._exec = self._graph = None
        vp = ctypes.c_void_p
        graph = vp()
        self._check(api.cuGraphCreate(ctypes.byref(graph), 0), "cuGraphCreate")
        self._graph = graph
        self._nodes: list[tuple[ArgBlock, _NodeParams, Any]] = []
        # each node's (grid, argument bytes) as last set: a node whose grid and arguments are the
        # same again (the caching allocator hands a training loop the same addresses step after
        # step) is not set again
        self._last: list[tuple[tuple[int, ...], bytes] | None] = [None] * len(kernels)
        for fn in kernels:  # a grid of one block until the first launch sets the real one
            block = ArgBlock(fn.meta.args, f"{fn.entry.program}:{fn.meta.symbol}")
            params = _NodeParams(fn._fn, 1, 1, 1, fn.meta.threads, 1, 1, fn.meta.smem)
            params.params = ctypes.addressof(block.params)
            node = vp()
            after = (vp * 1)(self._nodes[-1][2]) if self._nodes else None
            self._check(
                api.cuGraphAddKernelNode_v2(
                    ctypes.byref(node), graph, after, len(self._nodes[-1:]), ctypes.byref(params)
                ),
                "cuGraphAddKernelNode",
            )
            self._nodes.append((block, params, node))
        exec_ = vp()
        self._check(
            api.cuGraphInstantiateWithFlags(ctypes.byref(exec_), graph, 0), "cuGraphInstantiate"
        )
        self._exec = exec_

    def __del__(self) -> None:
        # a graph still running when destroyed is freed by the driver once it completes
        api = getattr(self, "_api", None)
        if api is None:
            return
        try:
            if self._exec is not None:
                api.cuGraphExecDestroy(self._exec)
            if self._graph is not None:
                api.cuGraphDestroy(self._graph)
        except Exception:  # noqa: BLE001, S110 - the interpreter may be shutting down
            pass

    def _check(self, err: int, what: str) -> None:
        if err != 0:
            names = ", ".join(f"{fn.entry.program}:{fn.meta.symbol}" for fn in self.kernels)
            raise LaunchError(
                f"{what} failed for the graph of {names}", found=str(init_driver().CUresult(err))
            )

    def launch(self, steps: list[tuple[Any, tuple[int, ...], tuple[Any, ...]]], stream: int) -> int:
        """Set the nodes whose grid or arguments changed, then launch; returns the first driver
        error (0 if none)."""
        api = self._api
        with self._lock:
            for i, ((block, params, node), (_, grid, a)) in enumerate(
                zip(self._nodes, steps, strict=True)
            ):
                now = (grid, block.packed(a))
                if now == self._last[i]:
                    continue
                block.load(now[1])
                params.gx, params.gy, params.gz = grid
                self._last[i] = None  # unknown until the driver has taken them
                err = api.cuGraphExecKernelNodeSetParams_v2(
                    self._exec, node, ctypes.addressof(params)
                )
                if err != 0:
                    return err
                self._last[i] = now
            return api.cuGraphLaunch(self._exec, stream)


_GRAPH_CACHE: dict[tuple[Function, ...], _Graph] = {}
_GRAPH_CACHE_LOCK = threading.Lock()


class Batch:
    """Launches gathered on the host and issued together, in order, on one stream: `batch(fn,
    grid, *args)` records one (no GPU work yet), `issue()` sends them all. Real kernels go as one
    CUDA graph per sequence of kernels, instantiated once and cached; other callables (the
    CPU emulator's kernels), a stream being captured into a graph, CAKE_GRAPHS=0 or a driver
    without graph nodes' _v2 calls launch one by one, in the same order. Nothing may be issued on
    the stream between the recording and `issue()` that the recorded kernels must follow or
    precede: the caller allocates first and issues before its next stream work."""

    __slots__ = ("steps",)

    def __init__(self) -> None:
        self.steps: list[tuple[Any, tuple[int, ...], tuple[Any, ...]]] = []

    def __call__(self, fn: Any, grid: tuple[int, ...], *args: Any) -> None:
        self.steps.append((fn, grid, args))

    def issue(self, stream: int | None = None) -> None:
        steps = [(fn, (*grid, 1, 1)[:3], args) for fn, grid, args in self.steps]
        steps = [s for s in steps if min(s[1]) > 0]  # an empty grid launches nothing
        self.steps = []
        if not steps:
            return
        if (
            len(steps) < 2
            or not graphs_enabled()
            or any(type(fn) is not Function for fn, _, _ in steps)
            or _graph_api() is None
        ):
            _one_by_one(steps, stream)
            return
        device: int = steps[0][0].device
        if stream is None:
            stream = _current_stream(device)
        if _capturing(stream):  # a graph launch inside the caller's capture: launch one by one
            _one_by_one(steps, stream)
            return
        key = tuple(fn for fn, _, _ in steps)
        graph = _GRAPH_CACHE.get(key)
        if graph is None:
            with _GRAPH_CACHE_LOCK:
                if len(_GRAPH_CACHE) >= _MAX_GRAPHS:
                    _GRAPH_CACHE.clear()
                graph = _GRAPH_CACHE[key] = _Graph(key)
        err = graph.launch(steps, stream)
        if err in _WRONG_CONTEXT:  # as in Function.__call__: a thread with no current context
            ensure_context(device, force=True)
            err = graph.launch(steps, stream)
        if err != 0:
            graph._check(err, "graph launch")


def _one_by_one(
    steps: list[tuple[Any, tuple[int, ...], tuple[Any, ...]]], stream: int | None
) -> None:
    for fn, grid, args in steps:
        if stream is None:
            fn(grid, *args)  # the emulator's kernels and the CPU tests' stand-ins take no stream
        else:
            fn(grid, *args, stream=stream)


def _capturing(stream: int) -> bool:
    status = ctypes.c_int()
    err = _graph_api().cuStreamIsCapturing(stream, ctypes.byref(status))
    return err != 0 or status.value != 0  # CU_STREAM_CAPTURE_STATUS_NONE = 0
