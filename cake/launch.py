"""Module load and kernel launch through the CUDA driver API, on PyTorch's current stream."""

from __future__ import annotations

import ctypes
import functools
import struct
import threading
from typing import Any

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
        try:
            self._struct.pack_into(self._buf, 0, *values)
        except struct.error:
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
