#!/usr/bin/env bash
# Sets the machine up and runs the whole test suite (what CI runs).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh
swift build --build-tests
bash scripts/watchdog.sh swift test
