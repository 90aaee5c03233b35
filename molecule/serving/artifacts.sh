#!/usr/bin/env bash
# Dependency step of the env scenario: everything the node will be given, built offline.
#   - the simulated node (Atlas 800 A2), the cpufreq stand-in, the apt mirror (the running
#     kernel's headers and image) and the line of this machine's Debian mirror, the stack's
#     installers (prepare converges the accelerator stack first), the Miniconda test double;
#   - model mirror content: a tiny DeepSeek-V3 model with its manifest, a copy of it in which
#     one file is damaged (same size, other bytes: only the sha256 can tell), and a copy for the
#     broken-download test.
#   artifacts.sh EPHEMERAL_DIR PROJECT_DIR
set -euo pipefail
eph="${1:?ephemeral directory}"
project="${2:?project directory}"
mkdir -p "$project/.cache/apt-archives/${ASCEND_APT_CACHE_ID:-shared}/partial"
python3 -m ascend_sim node create "$eph/sim/ascend-mol-serving" --model atlas800-a2
# The cpufreq stand-in (molecule.yml), reset on every run: two policies, one not on performance.
for policy in 0 1; do
  mkdir -p "$eph/cpufreq/policy$policy"
  echo performance powersave schedutil > "$eph/cpufreq/policy$policy/scaling_available_governors"
done
echo schedutil > "$eph/cpufreq/policy0/scaling_governor"
echo performance > "$eph/cpufreq/policy1/scaling_governor"
python3 -m ascend_sim.mirror apt "$eph/mirror/apt" >/dev/null
# The node is set up like an air-gapped host (vars.yml): its default sources are disabled and
# os_base reads this machine's own Debian mirror, as an "internal mirror", from this line.
python3 -m ascend_sim.mirror upstream "$eph/mirror/upstream.list" --suite bookworm
python3 -m ascend_sim packages "$eph/artifacts" --set vllm-ascend-0.13.0 --firmware 7.8.0.2.212 \
  --vars-file "$eph/artifacts/pins.yml" >/dev/null
python3 -m ascend_sim miniconda "$eph/conda" --vars-file "$eph/conda/conda.yml" >/dev/null

models="$eph/models"
if [ ! -f "$models/tiny-deepseek-v3/ascend-serve-manifest.json" ]; then
  rm -rf "$models"
  ascend-serve model make-tiny --arch deepseek_v3 "$models/tiny-deepseek-v3" >/dev/null
fi
for copy in tiny-corrupt tiny-resume; do
  rm -rf "${models:?}/$copy"
  cp -a "$models/tiny-deepseek-v3" "$models/$copy"
done
# Damage the largest file of the corrupt copy in place: same size, different bytes.
python3 - "$models/tiny-corrupt" <<'PY'
import json, sys
from pathlib import Path
root = Path(sys.argv[1])
files = json.loads((root / "ascend-serve-manifest.json").read_text())["files"]
victim = root / max(files, key=lambda f: f["size"])["path"]
data = bytearray(victim.read_bytes())
data[len(data) // 2] ^= 0xFF
victim.write_bytes(bytes(data))
print(victim.name)
PY
