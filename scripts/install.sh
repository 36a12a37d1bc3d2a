#!/usr/bin/env bash
# Installs a prefix laid out like a CANN toolkit:
#   PREFIX/include/{hccl,acl}/*.h       C headers
#   PREFIX/lib64/libhccl.{so,a}         HCCL
#   PREFIX/lib64/libascendcl.{so,a}     host ACL runtime
#   PREFIX/bin/                         tools (hccl_test-compatible *_test, hccl_bench)
#   PREFIX/set_env.sh                   exports ASCEND_HOME_PATH, LD_LIBRARY_PATH and PATH
#
# Usage: scripts/install.sh [--profile release|debug|<cargo profile>] PREFIX
# The default profile is release (what users want). `--profile debug` reuses a debug build and
# exists for the test suite. CARGO_TARGET_DIR is honoured.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
profile=release
prefix=
while [ $# -gt 0 ]; do
    case "$1" in
        --profile) profile="${2:?--profile needs a value}"; shift 2 ;;
        --profile=*) profile="${1#--profile=}"; shift ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        -*) echo "install.sh: unknown option $1" >&2; exit 2 ;;
        *) [ -z "$prefix" ] || { echo "install.sh: one PREFIX only" >&2; exit 2; }
           prefix="$1"; shift ;;
    esac
done
[ -n "$prefix" ] || { echo "usage: scripts/install.sh [--profile NAME] PREFIX" >&2; exit 2; }

case "$profile" in
    debug|dev) cargo_profile=(); outdir=debug ;;
    release) cargo_profile=(--release); outdir=release ;;
    *) cargo_profile=(--profile "$profile"); outdir="$profile" ;;
esac
target="${CARGO_TARGET_DIR:-$root/target}"

cd "$root"
cargo build "${cargo_profile[@]}" --target-dir "$target" -p hccl -p ascendcl -p hccl-tools
build="$target/$outdir"

mkdir -p "$prefix"
prefix="$(cd "$prefix" && pwd)"
mkdir -p "$prefix/include/hccl" "$prefix/include/acl" "$prefix/lib64" "$prefix/bin"
install -m 0644 include/hccl/*.h "$prefix/include/hccl/"
install -m 0644 include/acl/*.h "$prefix/include/acl/"
for lib in libhccl libascendcl; do
    install -m 0755 "$build/$lib.so" "$prefix/lib64/"
    install -m 0644 "$build/$lib.a" "$prefix/lib64/"
done
# Every binary the tools crate defines (src/bin/<name>.rs or src/bin/<name>/main.rs).
tools=0
for src in tools/src/bin/*.rs tools/src/bin/*/main.rs; do
    [ -e "$src" ] || continue
    case "$src" in
        */main.rs) name="$(basename "$(dirname "$src")")" ;;
        *) name="$(basename "$src" .rs)" ;;
    esac
    install -m 0755 "$build/$name" "$prefix/bin/"
    tools=$((tools + 1))
done

cat >"$prefix/set_env.sh" <<EOF
# Environment for the HCCL host toolkit installed here. Use: source $prefix/set_env.sh
export ASCEND_HOME_PATH="$prefix"
export ASCEND_TOOLKIT_HOME="$prefix"
export LD_LIBRARY_PATH="$prefix/lib64\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export PATH="$prefix/bin\${PATH:+:\$PATH}"
EOF
chmod 0644 "$prefix/set_env.sh"
echo "installed ($profile) into $prefix: headers, 4 libraries, $tools tools; next: source $prefix/set_env.sh"
