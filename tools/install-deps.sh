#!/usr/bin/env bash
# Install the Debian packages mrcnet needs, but only those that are missing.
# clang/llvm/libbpf-dev: compile the fabric's tc BPF trimming program.
# iproute2: ip/tc for the fabric. tshark: optional decode check of the sample pcap, and
# its dumpcap records captures (mrc-fabric capture).
# nftables/ethtool: host-side drop of MRC frames and NIC tuning.
# systemd: systemd-analyze checks mrcd's unit file (tests; no running systemd needed).
set -euo pipefail
need=()
have_cmd() { command -v "$1" >/dev/null 2>&1; }
have_pkg() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
have_cmd gcc      || need+=(gcc)
have_cmd clang    || need+=(clang)
have_cmd llc      || need+=(llvm)
have_pkg libbpf-dev || need+=(libbpf-dev)
have_cmd ip       || need+=(iproute2)
have_cmd tshark   || need+=(tshark)
have_cmd nft      || need+=(nftables)
have_cmd ethtool  || need+=(ethtool)
have_cmd systemd-analyze || need+=(systemd)
# The interpreter the virtualenv is made with (the Makefile's PYTHON): Debian's needs its
# headers (python3-dev) to build the C module and python3-venv (ensurepip) for a venv.
py=${PYTHON:-python3}
if [ "$(command -v "$py")" = /usr/bin/python3 ]; then
    have_pkg python3-dev || need+=(python3-dev)
else
    have_pkg python3-dev || have_cmd python3-config || need+=(python3-dev)
fi
"$py" -c 'import ensurepip' 2>/dev/null || need+=(python3-venv)
if [ ${#need[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "mrcnet needs these Debian packages: ${need[*]} (run as root or install them yourself)" >&2
    exit 1
fi
echo "installing Debian packages: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
