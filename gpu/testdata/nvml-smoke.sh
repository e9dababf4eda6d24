#!/usr/bin/env bash
# NVML smoke test: open the real NVML library, read every GPU twice a second
# apart, print every field. Run on a machine with an NVIDIA driver, from
# anywhere in the repository:  bash gpu/testdata/nvml-smoke.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
if command -v nvidia-smi >/dev/null; then
	nvidia-smi --query-gpu=index,name,uuid,utilization.gpu,utilization.memory,memory.used,memory.total,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu,clocks_event_reasons.active,mig.mode.current --format=csv || true
fi
CGO_ENABLED=1 TOKENTOP_NVML_SMOKE=1 go test -count=1 -v -run 'TestNVMLSmoke|TestOpenNVMLOnThisMachine' ./gpu/
