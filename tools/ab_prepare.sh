#!/usr/bin/env bash
# A/B timing of kernel versions on the device, each version in its own process over its own tree:
# export a base commit into .base/ (git-ignored) with a bundle of its sm_90a cubins built here
# (with the base's own cake), so the device compiles nothing. The working tree, .bundle, .whl and
# .base together must stay under the device's 64 MiB (about 50 MiB today). Usage, here:
#   bash tools/ab_prepare.sh <base-ref>        # e.g. HEAD~3 or a branch
# then carry [".whl", ".bundle", ".base"] and run on the device, for example:
#   bash tools/device_check.sh kernels; (cd .base && bash tools/device_check.sh kernels)
# Both print per-kernel times for the same rows; put the two tables side by side in the notes.
set -euo pipefail
ref=${1:?usage: tools/ab_prepare.sh <base-ref>}
root=$(git rev-parse --show-toplevel)
rm -rf "$root/.base"
mkdir -p "$root/.base"
git -C "$root" archive "$ref" | tar -x -C "$root/.base"
cd "$root/.base"
PYTHONPATH="$root/.base" "$root/.venv/bin/python" -m cake build --arch sm_90a --package kda_det \
  --package kda_cp --out .bundle --jobs "${CAKE_JOBS:-2}"
ln -sfn ../.whl .whl 2>/dev/null || true
echo "ready: .base = $(git -C "$root" rev-parse --short "$ref"), carry .base with its .bundle"
