"""Module load and kernel launch through the CUDA driver API, on PyTorch's current stream."""

from __future__ import annotations

import ctypes
from typing import Any

from .errors import LaunchError
from .machine import _call, init_driver
from .manifest import Entry, Kernel
from .spec import ArgType

_CTYPES = {
    ArgType.ptr: ctypes.c_void_p,
    ArgType.i32: ctypes.c_int32,
    ArgType.i64: ctypes.c_int64,
    ArgType.f32: ctypes.c_float,
}
_SMEM_DEFAULT_LIMIT = 48 * 1024


def ensure_context(device: int, *, force: bool = False) -> None:
    """Make the device's primary context (the one PyTorch uses) current on this thread: when none
    is current, or always with `force` (the thread's current context belongs to another device)."""
    import torch

    torch.cuda.init()
    driver = init_driver()
    ctx = _call(driver, driver.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if force or int(ctx) == 0:
        dev = _call(driver, driver.cuDeviceGet(device), "cuDeviceGet")
        ctx = _call(driver, driver.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
        _call(driver, driver.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")


class Function:
    def __init__(self, module: Any, entry: Entry, meta: Kernel, device: int) -> None:
        driver = init_driver()
        self.entry = entry
        self.meta = meta
        self.device = device
        self._types = tuple(_CTYPES[k] for k in meta.args)
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

    def _pack(self, args: tuple[Any, ...]) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        if len(args) != len(self.meta.args):
            raise LaunchError(
                f"{self.entry.program}:{self.meta.symbol} called with {len(args)} arguments",
                expected=f"{len(self.meta.args)} ({', '.join(self.meta.args)})",
            )
        values = []
        for i, (kind, arg) in enumerate(zip(self.meta.args, args, strict=True)):
            if kind is ArgType.ptr:
                values.append(
                    0 if arg is None else arg.data_ptr() if hasattr(arg, "data_ptr") else int(arg)
                )
            elif kind is ArgType.f32:
                values.append(float(arg))
            else:
                if not isinstance(arg, int) or isinstance(arg, bool):
                    raise LaunchError(
                        f"{self.meta.symbol} argument {i} must be an int", found=repr(arg)
                    )
                values.append(arg)
        return tuple(values), self._types

    def __call__(self, grid: tuple[int, ...], *args: Any, stream: int | None = None) -> None:
        import torch

        gx, gy, gz = (*grid, 1, 1)[:3]
        if min(gx, gy, gz) <= 0:
            return  # nothing to do (e.g. an empty batch); a zero grid is a driver error
        if stream is None:
            stream = torch.cuda.current_stream(self.device).cuda_stream
        driver = init_driver()
        packed = self._pack(args)
        launch = (
            self.handle,
            gx,
            gy,
            gz,
            self.meta.threads,
            1,
            1,
            self.meta.smem,
            stream,
            packed,
            0,
        )
        err = driver.cuLaunchKernel(*launch)[0]
        if err in (
            driver.CUresult.CUDA_ERROR_INVALID_CONTEXT,
            driver.CUresult.CUDA_ERROR_CONTEXT_IS_DESTROYED,
            driver.CUresult.CUDA_ERROR_INVALID_HANDLE,
        ):
            # a thread that never touched the device (autograd's backward thread, whose first CUDA
            # work may be this launch) or whose current context is another device's
            ensure_context(self.device, force=True)
            err = driver.cuLaunchKernel(*launch)[0]
        if err != driver.CUresult.CUDA_SUCCESS:
            raise LaunchError(
                f"launch of {self.entry.program}:{self.meta.symbol} failed", found=str(err)
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
