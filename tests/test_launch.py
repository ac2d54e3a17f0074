"""CPU: the launch path's argument block (cake/launch.py): the kernelParams array points at slots
that hold each launch's values with the programs' C types, and bad values are refused."""

from __future__ import annotations

import ctypes

import pytest

from cake.errors import LaunchError
from cake.launch import ArgBlock
from cake.spec import ArgType

KINDS = [ArgType.ptr, ArgType.ptr, ArgType.i32, ArgType.i64, ArgType.f32]
CTYPE = {ArgType.ptr: ctypes.c_uint64, ArgType.i32: ctypes.c_int32}
CTYPE |= {ArgType.i64: ctypes.c_int64, ArgType.f32: ctypes.c_float}


def read_back(block: ArgBlock) -> list[object]:
    """What the driver would read: dereference each kernelParams entry with the kind's C type."""
    return [
        ctypes.cast(block.params[i], ctypes.POINTER(CTYPE[k])).contents.value
        for i, k in enumerate(KINDS)
    ]


class _Tensor:
    def data_ptr(self) -> int:
        return 4096


class _Address:
    def __int__(self) -> int:
        return 8192


def test_params_point_at_the_converted_values_and_refill_in_place():
    block = ArgBlock(KINDS, "k")
    addresses = list(block.params)
    block.set([_Tensor(), None, -3, 2**40, 0.5])
    assert read_back(block) == [4096, 0, -3, 2**40, 0.5]
    block.set([0x7F0000001000, 16, 2**31 - 1, -(2**63), -1])  # ints as pointers; an int as f32
    assert read_back(block) == [0x7F0000001000, 16, 2**31 - 1, -(2**63), -1.0]
    assert list(block.params) == addresses  # the same slots every launch
    block.set([_Address(), None, 0, 0, 0.0])  # an address as another integer type
    assert read_back(block)[:2] == [8192, 0]


@pytest.mark.parametrize(
    ("index", "arg", "why"),
    [
        (2, 2**31, "does not fit"),
        (2, True, "must be an int"),
        (2, 1.0, "must be an int"),
        (3, 2**63, "does not fit"),
    ],
)
def test_ints_that_do_not_fit_or_are_not_ints_are_refused(index, arg, why):
    args = [None, None, 0, 0, 0.0]
    args[index] = arg
    with pytest.raises(LaunchError, match=f"argument {index} {why}"):
        ArgBlock(KINDS, "k").set(args)


def test_the_argument_count_is_checked():
    with pytest.raises(LaunchError, match="called with 4 arguments"):
        ArgBlock(KINDS, "k").set([None, None, 0, 0])


def test_a_batch_of_stand_ins_runs_in_order_skipping_empty_grids():
    """Batch: callables other than cake's kernels (the CPU emulator's, the tests' stand-ins) run
    one by one at issue(), in the order recorded, with nothing run before issue() and nothing left
    after; a grid with a zero dimension launches nothing, as Function.__call__ does."""
    from cake.launch import Batch

    ran: list[tuple[str, tuple[int, ...], tuple[object, ...], dict[str, object]]] = []

    def kernel(name: str):  # noqa: ANN202
        return lambda grid, *args, **kw: ran.append((name, grid, args, kw))

    batch = Batch()
    batch(kernel("a"), (4, 2), 1, None)
    batch(kernel("b"), (0, 2), 2)
    batch(kernel("c"), (3,), 3)
    assert ran == []
    batch.issue()
    assert ran == [("a", (4, 2, 1), (1, None), {}), ("c", (3, 1, 1), (3,), {})]
    assert batch.steps == []
    batch.issue()  # nothing recorded: nothing runs
    assert len(ran) == 2
    batch(kernel("d"), (1, 1, 1))
    batch.issue(stream=7)  # a stream given is passed on
    assert ran[-1] == ("d", (1, 1, 1), (), {"stream": 7})


def test_the_graph_node_struct_has_cudas_layout():
    """_NodeParams is CUDA_KERNEL_NODE_PARAMS_v2 of cuda.h (a wrong offset would hand the driver
    a garbled launch)."""
    from cake.launch import _NodeParams

    offsets = {name: getattr(_NodeParams, name).offset for name, _ in _NodeParams._fields_}
    assert offsets == {
        "func": 0, "gx": 8, "gy": 12, "gz": 16, "bx": 20, "by": 24, "bz": 28, "smem": 32,
        "params": 40, "extra": 48, "kern": 56, "ctx": 64,
    }  # fmt: skip
    assert ctypes.sizeof(_NodeParams) == 72


def test_packed_bytes_are_what_set_writes_and_load_writes_them():
    """The graph route compares a node's packed bytes with the last ones it set (bit for bit: -0.0
    and 0.0 differ) and loads them only when they changed."""
    a, b = ArgBlock(KINDS, "k"), ArgBlock(KINDS, "k")
    args = [_Tensor(), None, -3, 2**40, 0.5]
    a.set(args)
    data = b.packed(args)
    assert data == ctypes.string_at(ctypes.addressof(a._buf), len(data))
    assert read_back(b) == [0, 0, 0, 0, 0.0]  # packed() leaves the slots alone
    b.load(data)
    assert read_back(b) == read_back(a)
    assert b.packed([_Tensor(), None, -3, 2**40, -0.0]) != b.packed(
        [_Tensor(), None, -3, 2**40, 0.0]
    )
    with pytest.raises(LaunchError, match="argument 2 does not fit"):
        b.packed([None, None, 2**31, 0, 0.0])
