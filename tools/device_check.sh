#!/usr/bin/env bash
# One device call: GPU tests (shipped arch, then the sm_90 twins), compute-sanitizer on a small
# set, accuracy and forward speed against FLA 0.6.0. Logs go to $OUT. Usage on the H200:
#   bash tools/device_check.sh [steps...]   (steps: latency tests twin sanitize accuracy speed fla-cache kernels diag long long-report speed-long host timeline probe bits ab abtime wall)
# abtime times tree variants built here (`tools/ablate.py build --out DIR --tree p0=<main> --tree
# new=<worktree> --programs ...`, DIR carried) against AB_REF on each row:variant of AB_ROWS.
# bits / ab compare this tree with .base (tools/ab_prepare.sh): o and every gradient bitwise (one
# fwd+bwd per BITS_ROWS entry, row:variant), and per-kernel times (kernels in both trees, twice here,
# for each of AB_VARIANTS).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=/tmp/site:. PYTHONUNBUFFERED=1 CAKE_CACHE_DIR=/tmp/cake-cache CAKE_QUIET=1
# a bundle built here (`cake build --arch sm_90a --arch sm_90 --package kda_det --out .bundle`)
# spares the device the NVRTC compiles; programs missing from it are compiled as usual
[ -d .bundle ] && export CAKE_BUNDLE_DIR=$PWD/.bundle
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# FLA's Triton kernels and autotuning results, kept between calls (the fla-cache step fills it)
TCACHE="--triton-cache .tcache"
steps=${*:-latency tests twin sanitize accuracy speed}
for step in $steps; do
  echo "=== $step"
  case $step in
    tests) timeout ${TESTS_S:-400} python3 -m pytest -q -m "gpu and not slow" -rf --durations=8 2>&1 | tee "$OUT/tests.log" | tail -30 ;;
    twin) CAKE_ARCH=sm_90 timeout ${TESTS_S:-400} python3 -m pytest -q -m "gpu and not slow" -rf 2>&1 | tee "$OUT/twin.log" | tail -8 ;;
    sanitize) for tool in ${TOOLS:-memcheck racecheck initcheck synccheck}; do
        timeout 240 compute-sanitizer --tool $tool --report-api-errors no --error-exitcode 9 python3 tools/sanitize_small.py > "$OUT/sanitize-$tool.log" 2>&1
        echo "$tool rc=$? $(grep -E 'ERROR SUMMARY|sanitize_small' "$OUT/sanitize-$tool.log" | tr '\n' ' ')"
      done ;;
    accuracy) timeout 400 python3 tools/bench.py --accuracy --acc-cases g-mixed-off,g-fast-off,g-slow-off,g-slow-fused,g-extreme-off,raw-lb-off,raw-lb-fused --acc-paths ${PATHS_:-saved} $TCACHE --json "$OUT/accuracy.json" 2>&1 | tee "$OUT/accuracy.log" | tail -30 ;;
    # one JSON and log per ROWS, so that two speed steps in one call keep both tables
    speed) rows=${ROWS:-1doc,4doc,R2,m2} tag=speed-${rows//,/-}
      timeout ${SPEED_S:-400} python3 tools/bench.py --rows $rows --ops ${OPS_:-fwd} --variants ${VARIANTS:-g:off:saved,g:fused:saved,raw:off:saved,raw:fused:saved} $TCACHE --json "$OUT/$tag.json" 2>&1 | tee "$OUT/$tag.log" | tail -40 ;;
    fla-cache) # FLA's autotuning, once per row and variant, kept for later calls: bring back
      # $OUT/tcache.tgz and unpack its results into tools/fla_autotune (mkdir -p /tmp/t && tar
      # -xzf tcache.tgz -C /tmp/t && cp -r /tmp/t/.tcache/. tools/fla_autotune/), then commit
      # them: bench.py --triton-cache seeds its cache from there in every later checkout
      timeout ${SPEED_S:-500} python3 tools/bench.py --impl fla --rows ${ROWS:-1doc,4doc,R2,m2} --ops fwd+bwd --variants ${VARIANTS:-all} --samples 1 --calls 1 $TCACHE 2>&1 | tail -5
      tuned=$(find .tcache -name '*autotune*')
      echo "triton cache: $(du -sh .tcache | cut -f1), $(find .tcache -type f | wc -l) files, $(echo -n "$tuned" | grep -c .) autotuning results"
      if [ -n "$tuned" ]; then echo "$tuned" | tar -czf "$OUT/tcache.tgz" -T -
      else tar -czf "$OUT/tcache.tgz" .tcache; fi
      ls -la "$OUT/tcache.tgz" ;;
    long) timeout ${TESTS_S:-400} python3 -m pytest -q -m gpu -rf tests/test_kda_long_gpu.py 2>&1 | tee "$OUT/long.log" | tail -12 ;;
    long-report) timeout ${TESTS_S:-400} python3 tools/long_report.py --json "$OUT/long-report.json" 2>&1 | tee "$OUT/long-report.log" | tail -40 ;;
    host) timeout 60 python3 tools/host_profile.py --row ${ROW:-m2} --top 15 2>&1 | tee "$OUT/host.log" | head -25 ;;
    timeline) # where the host is during back-to-back forwards and steps (is the GPU waiting on it?)
      for flag in "" --step; do timeout 100 python3 tools/launch_timeline.py --row ${ROW:-4doc} --variant ${VARIANT:-raw:off:saved} $flag 2>&1 | tail -10; done | tee "$OUT/timeline.log" ;;
    speed-long) timeout ${SPEED_S:-400} python3 tools/bench.py --rows long,long4 --impl fla,cake,cake1 --ops fwd,fwd+bwd --variants g:off:saved $TCACHE --json "$OUT/speed-long.json" 2>&1 | tee "$OUT/speed-long.log" | tail -12 ;;
    kernels) timeout 120 python3 tools/kernel_times.py --rows ${ROWS:-1doc,4doc,R2,m2} --variant ${VARIANT:-g:off:saved} 2>&1 | tee "$OUT/kernels.log" | tail -70 ;;
    diag) timeout 120 python3 tools/diag_dbeta.py 2>&1 | tail -12 ;;
    bits) for rv in ${BITS_ROWS:-1doc:g:off:saved m2:raw:fused:replay R2:g:off:saved}; do
        row=${rv%%:*} variant=${rv#*:}
        timeout 120 python3 tools/one_step.py --row "$row" --variant "$variant" --save /tmp/bits-new.pt >/dev/null 2>&1
        (cd .base && CAKE_BUNDLE_DIR=$PWD/.bundle timeout 120 python3 tools/one_step.py --row "$row" --variant "$variant" --save /tmp/bits-base.pt >/dev/null 2>&1)
        echo "$row $variant: $(python3 tools/one_step.py --compare /tmp/bits-new.pt /tmp/bits-base.pt 2>&1 | tr -s ' ' | tr '\n' ';')"
      done 2>&1 | tee "$OUT/bits.log" ;;
    ab) # per-kernel times here / .base / here again, for each variant of AB_VARIANTS (default
      # VARIANT), all into $OUT/ab.txt; one line per (variant, row, kernel) at the end
      for v in ${AB_VARIANTS:-${VARIANT:-g:off:saved}}; do
        for k in new base new2; do
          echo "== $v $k"
          if [ $k = base ]; then (cd .base && OUT=$OUT/base VARIANT=$v bash tools/device_check.sh kernels 2>&1)
          else VARIANT=$v bash tools/device_check.sh kernels 2>&1; fi | grep -E "segments=|kda_|total" | grep -v at::native
        done
      done > "$OUT/ab.txt"
      python3 tools/ab_table.py "$OUT/ab.txt" ;;
    abtime) for rv in ${AB_ROWS:-1doc:g:off:saved 1doc:raw:off:saved 1doc:g:fused:replay 1doc:raw:fused:replay R2:g:off:saved}; do
        row=${rv%%:*} variant=${rv#*:} log="$OUT/abtime-$(basename "${AB_DIR:-.ablate}")-${rv//:/-}.log"
        timeout ${AB_S:-90} python3 tools/ablate.py time --dir "${AB_DIR:-.ablate}" --rounds ${AB_ROUNDS:-7} --check --ref "${AB_REF:-tree-p0}" --row "$row" --variant "$variant" > "$log" 2>&1
        echo "== $rv (rc=$?)"; grep -E "grid=|^    [A-Za-z0-9_-]+ +[0-9]" "$log"  # every variant: trees and ablations
      done ;;
    wall) # cake's wall times in this tree, .base (tools/ab_prepare.sh) and this tree again: host
      # changes (no program moves); WALL_ROWS, WALL_VARIANTS, WALL_OPS
      for k in new base new2; do
        args="--impl cake --rows ${WALL_ROWS:-R2} --ops ${WALL_OPS:-fwd+bwd} --variants ${WALL_VARIANTS:-all}"
        if [ $k = base ]; then (cd .base && CAKE_BUNDLE_DIR=$PWD/.bundle timeout ${WALL_S:-120} python3 tools/bench.py $args --json "$OUT/wall-$k.json" >/dev/null 2>&1)
        else timeout ${WALL_S:-120} python3 tools/bench.py $args --json "$OUT/wall-$k.json" > /dev/null 2>&1; fi
        echo "$k rc=$?"
      done
      python3 tools/wall_table.py "$OUT/wall-new.json" "$OUT/wall-base.json" "$OUT/wall-new2.json" | tee "$OUT/wall.txt" ;;
    probe) timeout 120 python3 -m pytest -q -m sm90 -rf tests/test_wgmma_probe_gpu.py 2>&1 | tee "$OUT/probe.log" | tail -8 ;;
    latency) python3 tools/load_latency.py >/dev/null 2>&1; python3 tools/load_latency.py --json "$OUT/latency.json" ;;
  esac
done
