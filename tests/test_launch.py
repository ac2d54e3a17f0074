"""CPU: the launch path's argument block (cake/launch.py): the kernelParams array points at slots
that hold each launch's values with the programs' C types, and bad values are refused."""

from __future__ import annotations

import ctypes

import pytest

from cake.errors import LaunchError
from cake.launch import ArgBlock, Function
from cake.spec import ArgType

KINDS = [ArgType.ptr, ArgType.ptr, ArgType.i32, ArgType.i64, ArgType.f32]


def read_back(block: ArgBlock) -> list[object]:
    """What the driver would read: dereference each kernelParams entry with the kind's C type."""
    ctype = {ArgType.ptr: ctypes.c_uint64, ArgType.i32: ctypes.c_int32}
    ctype |= {ArgType.i64: ctypes.c_int64, ArgType.f32: ctypes.c_float}
    return [
        ctypes.cast(block.params[i], ctypes.POINTER(ctype[k])).contents.value
        for i, k in enumerate(KINDS)
    ]


def test_params_point_at_the_filled_values_and_refill_in_place():
    block = ArgBlock(KINDS)
    addresses = list(block.params)
    block.fill([0x7F0000001000, 0, -3, 2**40, 0.5])
    assert read_back(block) == [0x7F0000001000, 0, -3, 2**40, 0.5]
    block.fill([16, 32, 2**31 - 1, -(2**63), -1.25])
    assert read_back(block) == [16, 32, 2**31 - 1, -(2**63), -1.25]
    assert list(block.params) == addresses  # the same slots every launch


class _Meta:
    symbol = "k"
    args = KINDS


class _Tensor:
    def data_ptr(self) -> int:
        return 4096


def converter() -> Function:
    fn = Function.__new__(Function)  # no module or driver: only the conversion is exercised
    fn.meta = _Meta()  # type: ignore[assignment]
    return fn


def test_values_are_converted_per_kind():
    fn = converter()
    args = [_Tensor(), None, 7, 9, 2]
    got = [fn._value(i, k, a) for i, (k, a) in enumerate(zip(KINDS, args, strict=True))]
    assert got == [4096, 0, 7, 9, 2.0]


@pytest.mark.parametrize(
    ("kind", "arg"),
    [(ArgType.i32, 2**31), (ArgType.i32, True), (ArgType.i32, 1.0), (ArgType.i64, 2**63)],
)
def test_ints_that_do_not_fit_or_are_not_ints_are_refused(kind, arg):
    with pytest.raises(LaunchError, match="argument 3"):
        converter()._value(3, kind, arg)
