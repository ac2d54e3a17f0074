#!/usr/bin/env bash
# A/B of other commits' programs by tools/ablate.py, here: one worktree per git ref (a branch, a
# commit), rendered and migrated with its own cake, its programs compiled as ablate variants
# tree-r1, tree-r2, ... into OUT, with this checkout's own programs as tree-p0 (the reference of
# the bit check). The refs' kernels must take the arguments this checkout launches them with (the
# same signatures; a ref whose programs read a buffer this checkout does not pass is not for
# this). Then on the device (carry OUT):
#   python tools/ablate.py time --dir OUT --check --ref tree-p0 --row 1doc --variant raw:fused:saved
# (--check only where the refs keep the bits). Usage:
#   bash tools/ref_ab.sh OUT PROGRAMS REF [REF ...]
#   e.g. bash tools/ref_ab.sh .ablate fwd_chunk.gate-sigmoid.x-fp32.l2n-fused.sm_90a exp/fast-gate~1 exp/fast-gate
set -euo pipefail
out=${1:?usage: tools/ref_ab.sh OUT PROGRAMS REF [REF ...]}
programs=${2:?programs, comma-separated (ablate names, e.g. bwd_chunk.gate-g.l2n-off.sm_90a)}
shift 2
[ $# -ge 1 ] || { echo "no refs given" >&2; exit 2; }
root=$(git rev-parse --show-toplevel)
py="$root/.venv/bin/python"
trees=(--tree "p0=$root")
dirs=()
cleanup() { for d in "${dirs[@]}"; do git -C "$root" worktree remove --force "$d"; done; }
trap cleanup EXIT
n=0
for ref in "$@"; do
  n=$((n + 1))
  dir=/tmp/ref_ab.$$.r$n
  git -C "$root" worktree add -q --detach "$dir" "$ref"
  dirs+=("$dir")
  (cd "$dir" && PYTHONPATH="$dir" "$py" -m cake render >/dev/null && PYTHONPATH="$dir" "$py" -m cake migrate >/dev/null)
  echo "tree-r$n: $ref ($(git -C "$root" rev-parse --short "$ref"))"
  trees+=(--tree "r$n=$dir")
done
"$py" "$root/tools/ablate.py" build --out "$out" "${trees[@]}" --programs "$programs"
echo "built into $out: carry it, then on the device: python tools/ablate.py time --dir $out --ref tree-p0 --row ROW --variant V [--check]"
