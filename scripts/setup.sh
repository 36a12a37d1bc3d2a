#!/usr/bin/env bash
# Installs what building and testing need on a fresh Debian machine (run as root; a no-op
# when everything is already there).
set -euo pipefail
need=()
command -v cc >/dev/null 2>&1 || need+=(gcc)
command -v c++ >/dev/null 2>&1 || need+=(g++)
# mpirun alone is not enough: building MPI programs needs the headers of libopenmpi-dev.
{ command -v mpirun && echo "#include <mpi.h>" | mpicc -E - ; } >/dev/null 2>&1 || need+=(openmpi-bin libopenmpi-dev)
command -v ip >/dev/null 2>&1 || need+=(iproute2)
# The packaging tests build consumer projects with CMake and with make + pkg-config.
command -v cmake >/dev/null 2>&1 || need+=(cmake)
command -v make >/dev/null 2>&1 || need+=(make)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
# The Slurm test starts its own munged, slurmctld and slurmd (sbin: not always in PATH).
{ [ -x /usr/sbin/slurmd ] && [ -x /usr/sbin/slurmctld ] && [ -x /usr/sbin/munged ] && command -v srun; } >/dev/null 2>&1 || need+=(slurmd slurmctld slurm-client munge)
# The libfabric net plugin (net-ofi/) builds against libfabric's headers; its benchmark and the
# verbs probe use fi_pingpong and fi_info.
{ [ -f /usr/include/rdma/fabric.h ] && command -v fi_info; } >/dev/null 2>&1 || need+=(libfabric-dev libfabric-bin)
# The hot-path test counts instructions and stores per call with valgrind's callgrind.
command -v valgrind >/dev/null 2>&1 || need+=(valgrind)
# A second, independent PNG inflater for the plot test (zlib is part of CPython).
python3 -c "import zlib" >/dev/null 2>&1 || need+=(python3)
if [ ${#need[@]} -gt 0 ]; then
    if [ "$(id -u)" -ne 0 ]; then
        echo "missing packages: ${need[*]} (run as root or install them)" >&2
        exit 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
for comp in clippy rustfmt; do
    if ! rustup component list --installed 2>/dev/null | grep -q "^$comp"; then
        rustup component add "$comp"
    fi
done
# scripts/fuzz.sh (run by scripts/test.sh) needs the nightly toolchain and cargo-fuzz.
if ! rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    rustup toolchain install nightly --profile minimal
fi
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
