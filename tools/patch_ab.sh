#!/usr/bin/env bash
# A/B of template patches (docs/patches/*.patch) or of other commits by tools/ablate.py, here: one
# worktree per argument, rendered and migrated with its own cake, its programs compiled as ablate
# variants tree-p1, tree-p2, ... into OUT, with this checkout's own programs as tree-p0 (compiled
# the same way: the reference for the bit check; the device's shipped cubin can differ from it in
# bits). A patch argument (a file) is applied on HEAD after the patches before it (the first patch,
# the first two, ...); any other argument is a git ref (a branch, a commit), taken as it is. The
# variants' kernels must take the arguments this checkout launches them with. Then on the device:
#   python tools/ablate.py time --dir OUT --check --ref tree-p0 --row 1doc --variant g:off:saved
# (carry OUT; --check only where the variants keep the bits). Usage:
#   bash tools/patch_ab.sh OUT PROGRAMS PATCH_OR_REF [PATCH_OR_REF ...]
#   e.g. bash tools/patch_ab.sh .ablate bwd_chunk.gate-g.l2n-off.sm_90a docs/patches/a.patch docs/patches/b.patch
#        bash tools/patch_ab.sh .ablate fwd_chunk.gate-sigmoid.x-fp32.l2n-fused.sm_90a exp/fast-gate~2 exp/fast-gate
set -euo pipefail
out=${1:?usage: tools/patch_ab.sh OUT PROGRAMS PATCH_OR_REF [PATCH_OR_REF ...]}
programs=${2:?programs, comma-separated (ablate names, e.g. bwd_chunk.gate-g.l2n-off.sm_90a)}
shift 2
[ $# -ge 1 ] || { echo "no patches or refs given" >&2; exit 2; }
root=$(git rev-parse --show-toplevel)
py="$root/.venv/bin/python"
trees=(--tree "p0=$root")
dirs=()
applied=()
cleanup() { for d in "${dirs[@]}"; do git -C "$root" worktree remove --force "$d"; done; }
trap cleanup EXIT  # the worktrees go also when a patch fails to apply or a render fails
n=0
for arg in "$@"; do
  n=$((n + 1))
  dir=/tmp/patch_ab.$$.p$n
  if [ -f "$arg" ]; then
    applied+=("$(realpath "$arg")")
    git -C "$root" worktree add -q --detach "$dir" HEAD
    dirs+=("$dir")
    for p in "${applied[@]}"; do git -C "$dir" apply "$p"; done
    what="HEAD + ${applied[*]##*/}"
  else
    git -C "$root" worktree add -q --detach "$dir" "$arg"
    dirs+=("$dir")
    what="$arg ($(git -C "$root" rev-parse --short "$arg"))"
  fi
  (cd "$dir" && PYTHONPATH="$dir" "$py" -m cake render >/dev/null && PYTHONPATH="$dir" "$py" -m cake migrate >/dev/null)
  echo "tree-p$n: $what"
  trees+=(--tree "p$n=$dir")
done
"$py" "$root/tools/ablate.py" build --out "$out" "${trees[@]}" --programs "$programs"
echo "built into $out: carry it, then on the device: python tools/ablate.py time --dir $out --check --ref tree-p0 --row ROW --variant V"
