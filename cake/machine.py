"""Facts about this machine: GPU, compute capability, driver CUDA version, NVRTC version."""

from __future__ import annotations

from dataclasses import dataclass

from . import env
from .compile import nvrtc_version
from .errors import ConfigError, DeviceError
from .resolve import Facts
from .spec import Arch, Version


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    capability: tuple[int, int]


def _driver():  # noqa: ANN202 - module object
    try:
        from cuda.bindings import driver
    except ImportError as exc:
        raise DeviceError(
            "cuda-bindings is not installed", found=str(exc), fix="pip install cuda-bindings"
        ) from None
    return driver


def _call(driver, result, what: str):  # noqa: ANN001, ANN202
    err, *rest = result if isinstance(result, tuple) else (result,)
    if err != driver.CUresult.CUDA_SUCCESS:
        raise DeviceError(f"CUDA driver call {what} failed", found=str(err))
    return rest[0] if len(rest) == 1 else rest


def init_driver():  # noqa: ANN201
    driver = _driver()
    try:
        _call(driver, driver.cuInit(0), "cuInit")
    except RuntimeError as exc:  # libcuda.so not found
        raise DeviceError("no CUDA driver on this machine", found=str(exc)) from None
    return driver


def driver_version() -> Version | None:
    try:
        driver = init_driver()
        return Version.from_int(_call(driver, driver.cuDriverGetVersion(), "cuDriverGetVersion"))
    except DeviceError:
        return None


def gpus() -> list[Gpu]:
    driver = init_driver()
    out = []
    attr = driver.CUdevice_attribute
    for i in range(_call(driver, driver.cuDeviceGetCount(), "cuDeviceGetCount")):
        dev = _call(driver, driver.cuDeviceGet(i), "cuDeviceGet")
        major = _call(
            driver,
            driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev),
            "attr",
        )
        minor = _call(
            driver,
            driver.cuDeviceGetAttribute(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev),
            "attr",
        )
        name = _call(driver, driver.cuDeviceGetName(256, dev), "cuDeviceGetName")
        out.append(Gpu(i, name.split(b"\x00")[0].decode(), (major, minor)))
    return out


def arch_override() -> Arch | None:
    raw = env.get_str("CAKE_ARCH")
    if not raw:
        return None
    try:
        return Arch(raw)
    except ValueError:
        raise ConfigError(
            "CAKE_ARCH names no arch", expected=", ".join(a.value for a in Arch), found=raw
        ) from None


def facts_for(gpu: Gpu) -> Facts:
    return Facts(
        capability=gpu.capability,
        driver=driver_version(),
        nvrtc=nvrtc_version(),
        arch_override=arch_override(),
    )
