#!/usr/bin/env bash
export TESTS_S=150
bash tools/device_check.sh sanitize twin
