#!/usr/bin/env bash
# A/B of template patches (docs/patches/*.patch) by tools/ablate.py, here: one worktree of HEAD per
# prefix of the given patches (the first patch, the first two, ...), each rendered and migrated, and
# their programs compiled as ablate variants tree-p1, tree-p2, ... into OUT, with this checkout's
# own programs as tree-p0 (compiled the same way: the reference for the bit check; the device's
# shipped cubin can differ from it in bits). Then on the device:
#   python tools/ablate.py time --dir OUT --check --ref tree-p0 --row 1doc --variant g:off:saved
# (carry OUT). Usage:
#   bash tools/patch_ab.sh OUT PROGRAMS PATCH [PATCH ...]
#   e.g. bash tools/patch_ab.sh .ablate bwd_chunk.gate-g.l2n-off.sm_90a docs/patches/a.patch docs/patches/b.patch
set -euo pipefail
out=${1:?usage: tools/patch_ab.sh OUT PROGRAMS PATCH [PATCH ...]}
programs=${2:?programs, comma-separated (ablate names, e.g. bwd_chunk.gate-g.l2n-off.sm_90a)}
shift 2
[ $# -ge 1 ] || { echo "no patches given" >&2; exit 2; }
root=$(git rev-parse --show-toplevel)
py="$root/.venv/bin/python"
trees=(--tree "p0=$root")
dirs=()
applied=()
cleanup() { for d in "${dirs[@]}"; do git -C "$root" worktree remove --force "$d"; done; }
trap cleanup EXIT  # the worktrees go also when a patch fails to apply or a render fails
for patch in "$@"; do
  applied+=("$(realpath "$patch")")
  n=${#applied[@]}
  dir=/tmp/patch_ab.$$.p$n
  git -C "$root" worktree add -q --detach "$dir" HEAD
  dirs+=("$dir")
  for p in "${applied[@]}"; do git -C "$dir" apply "$p"; done
  (cd "$dir" && PYTHONPATH="$dir" "$py" -m cake render >/dev/null && PYTHONPATH="$dir" "$py" -m cake migrate >/dev/null)
  echo "tree-p$n: HEAD + ${applied[*]##*/}"
  trees+=(--tree "p$n=$dir")
done
"$py" "$root/tools/ablate.py" build --out "$out" "${trees[@]}" --programs "$programs"
echo "built into $out: carry it, then on the device: python tools/ablate.py time --dir $out --check --ref tree-p0 --row ROW --variant V"
