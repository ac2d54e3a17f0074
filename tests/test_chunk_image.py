"""The chunk-tile image of generators/include/cake/chunk_image.cuh, checked as C++ (the header is
plain C++; its one include with inline PTX is swapped for the emulator's twin, as tools/emu does).

kda_fwd_chunk (sm_90a) stores W, U, Qg, Kd^T and Aqk through these maps, kda_fwd_state copies each
tile whole into shared memory, and kda_bwd_state reads its pieces at constant strides from them:
each map must be a permutation of 16-byte pieces, rows r and r + 8 must lie a constant step apart
(both programs hoist that step out of their loops), W's and Kd^T's rows must follow fwd_state's pk
order, and U's halves must be fwd_state's el64 tiles."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tools.emu import compiler  # noqa: E402

PROGRAM = r"""
#include "emu/runtime.h"
#include "cake/chunk_image.cuh"
#include <set>

static int failures = 0;
#define CHECK(cond, ...) do { if (!(cond)) { ++failures; printf(__VA_ARGS__); printf("\n"); } } while (0)

// rows x cols floats through map: a permutation of [0, rows cols) that moves whole 16-byte pieces
// (4 floats), keeps each piece's order, and puts row r + 8 a constant step from row r.
template <class Map>
static void check_map(const char* name, int rows, int cols, Map map) {
    std::set<int> seen;
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) {
            const int o = map(r, c);
            CHECK(o >= 0 && o < rows * cols, "%s(%d, %d) = %d: outside the tile", name, r, c, o);
            CHECK(seen.insert(o).second, "%s(%d, %d) = %d: taken twice", name, r, c, o);
            CHECK(o % 4 == c % 4 && (c % 4 == 0 || o == map(r, c - c % 4) + c % 4),
                  "%s(%d, %d): not inside its 16-byte piece", name, r, c);
            if (r + 8 < rows)
                CHECK(map(r + 8, c) - o == map(8, 0) - map(0, 0),
                      "%s: rows %d and %d are not the constant step apart at column %d", name, r, r + 8, c);
        }
}

int main() {
    for (int q = 0; q < 128; ++q) CHECK(cake_pkinv(cake_pk(q)) == q && cake_pk(cake_pkinv(q)) == q, "pk %d", q);
    // pk(8j + 2t + e) = 8j + t + 4e: the chain's accumulator order
    for (int j = 0; j < 16; ++j)
        for (int t = 0; t < 4; ++t)
            for (int e = 0; e < 2; ++e) CHECK(cake_pk(8 * j + 2 * t + e) == 8 * j + t + 4 * e, "pk order");
    check_map("w", 64, 128, [](int r, int k) { return cake_img_w(r, k); });
    check_map("u", 64, 128, [](int r, int v) { return cake_img_u(r, v); });
    check_map("qg", 64, 128, [](int r, int k) { return cake_img_qg(r, k); });
    check_map("kd", 128, 64, [](int d, int r) { return cake_img_kd(d, r); });
    check_map("aqk", 64, 64, [](int r, int c) { return cake_img_aqk(r, c); });
    for (int r = 0; r < 64; ++r)
        for (int k = 0; k < 128; ++k) {
            CHECK(cake_img_w(r, k) == cake_wg_idx<64>(cake_pkinv(r), k), "w is not the pk-ordered wgmma tile");
            CHECK(cake_img_qg(r, k) == cake_wg_idx<64>(r, k), "qg is not the wgmma tile");
            // fwd_state's el64(r, col): r * 64 + ((col / 4) ^ sw(r)) * 4 + col % 4, one half of 64 values
            const int half = k >> 6, col = k & 63;
            CHECK(cake_img_u(r, k) == half * 4096 + r * 64 + (((col >> 2) ^ cake_sw64(r)) << 2) + (col & 3),
                  "u's half %d is not fwd_state's el64 tile", half);
        }
    for (int d = 0; d < 128; ++d)
        for (int r = 0; r < 64; ++r)
            CHECK(cake_img_kd(d, r) == cake_wg_idx<128>(cake_pkinv(d), r), "kd is not the pk-ordered wgmma tile");
    printf(failures ? "FAILED %d\n" : "ok\n", failures);
    return failures ? 1 : 0;
}
"""


@pytest.mark.skipif(not compiler.available(), reason="no C++ compiler for tools/emu")
def test_chunk_image_maps_are_piecewise_permutations_with_constant_row_steps(tmp_path):
    src = tmp_path / "chunk_image_check.cpp"
    src.write_text(PROGRAM)
    exe = tmp_path / "chunk_image_check"
    include = [REPO / "tools/emu/include", REPO / "generators/include"]  # the twins first
    cmd = [
        compiler.compiler(),
        "-std=c++20",
        "-O1",
        *(f"-I{p}" for p in include),
        str(src),
        "-o",
        str(exe),
    ]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    run = subprocess.run([str(exe)], capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip().endswith("ok"), run.stdout[-2000:]
