#!/usr/bin/env bash
# Dependency step of the multinode scenario: three simulated Atlas 800 A2 nodes and the NPU
# driver installer (for hccn_tool), built offline.   artifacts.sh EPHEMERAL_DIR
set -euo pipefail
eph="${1:?ephemeral directory}"
for n in 1 2 3; do
  python3 -m ascend_sim node create "$eph/sim/ascend-mol-mn$n" --model atlas800-a2
done
python3 -m ascend_sim packages "$eph/artifacts" --driver 25.5.0 --firmware 7.8.0.2.212 >/dev/null
# One fixed name for prepare, whatever the build machine's architecture.
cp "$eph"/artifacts/Ascend-hdk-910b-npu-driver_25.5.0_linux-*.run "$eph/artifacts/npu-driver.run"
