set -u
export OUT
ROWS=1doc,R2 AB_VARIANTS="g:off:saved raw:fused:replay" bash tools/device_check.sh bits ab 2>&1 | tail -26
TESTS_S=200 bash tools/device_check.sh tests twin sanitize long 2>&1 | grep -E "===|passed|failed|rc=|error" | head -30
