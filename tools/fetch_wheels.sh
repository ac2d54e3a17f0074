#!/usr/bin/env bash
# Download the wheels the GPU machine needs into .whl/ (git-ignored).
#
# The GPU machine has no network but already has torch and triton, so only the pure-Python and
# small compiled dependencies travel: pydantic (for cake) and FLA 0.6.0 (the baseline that
# tools/bench.py times). Install there with
#   pip install --no-deps --target "$DIR" .whl/*.whl && export PYTHONPATH="$DIR:$PYTHONPATH"
#
# Pins follow the packages' own metadata:
#   pydantic 2.14.4  Requires-Dist: pydantic-core==2.50.5, annotated-types>=0.6.0,
#                    typing-extensions>=4.16.0, typing-inspection>=0.4.4
#   fla-core 0.6.0   Requires-Dist: einops (torch/triton only under extras, provided by the machine)
# typing-extensions is shipped because pydantic and pydantic-core both require >=4.16.0, newer
# than what a torch install usually brings; the --target directory shadows the older copy.
# matplotlib is not shipped (too large for the budget): tools/bench.py --replot draws the PNG
# from the JSON on a machine that has it.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest="$root/.whl"
pip="${PIP:-$root/.venv/bin/pip}"
if [ ! -x "$pip" ]; then
    pip="pip"
fi

packages=(
    pydantic==2.14.4
    pydantic-core==2.50.5
    annotated-types==0.8.0
    typing-inspection==0.4.5
    typing-extensions==4.16.0
    fla-core==0.6.0
    einops==0.8.2
)

mkdir -p "$dest"
# The target is the GPU machine (CPython 3.12, x86_64 Linux), not this one: pip must not resolve
# for the local interpreter, hence --python-version/--platform with binary-only wheels.
"$pip" download \
    --no-deps \
    --only-binary=:all: \
    --python-version 3.12 \
    --implementation cp \
    --platform manylinux_2_28_x86_64 \
    --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 \
    --dest "$dest" \
    "${packages[@]}"

# A stale wheel of another version left in .whl/ would be installed next to the pinned one.
for whl in "$dest"/*.whl; do
    name="$(basename "$whl")"
    dist="${name%%-*}"
    version="$(echo "$name" | cut -d- -f2)"
    keep=0
    for pkg in "${packages[@]}"; do
        pkg_dist="$(echo "${pkg%%==*}" | tr '-' '_')"
        if [ "$pkg_dist" = "$dist" ] && [ "${pkg##*==}" = "$version" ]; then
            keep=1
        fi
    done
    if [ "$keep" = 0 ]; then
        echo "removing stale wheel $name" >&2
        rm -f "$whl"
    fi
done

total_kib="$(du -sk "$dest" | cut -f1)"
if [ "$total_kib" -gt $((20 * 1024)) ]; then
    echo "error: $dest holds ${total_kib} KiB, over the 20 MiB budget" >&2
    exit 1
fi
ls -l "$dest"
echo "total: ${total_kib} KiB in $dest"
