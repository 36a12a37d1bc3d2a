#!/usr/bin/env bash
# Installs a prefix laid out like a CANN toolkit:
#   PREFIX/include/{hccl,acl}/*.h       C headers
#   PREFIX/lib64/libhccl.{so,a}         HCCL
#   PREFIX/lib64/libascendcl.{so,a}     host ACL runtime
#   PREFIX/lib64/libhccl_net_ofi.so     libfabric net plugin, found beside libhccl.so (built
#                                       only where libfabric's headers are installed)
#   PREFIX/lib64/pkgconfig/{hccl,ascendcl}.pc            pkg-config packages
#   PREFIX/lib64/cmake/hccl/hcclConfig{,Version}.cmake   find_package(hccl CONFIG): imported
#                                       targets hccl::hccl and ascendcl::ascendcl (the same
#                                       files also in PREFIX/share/cmake/hccl/)
#   PREFIX/bin/                         tools (hccl_test-compatible *_test, hccl_bench)
#   PREFIX/set_env.sh                   exports ASCEND_HOME_PATH, LD_LIBRARY_PATH, PATH,
#                                       PKG_CONFIG_PATH and CMAKE_PREFIX_PATH
#
# Usage: scripts/install.sh [--profile release|debug|<cargo profile>] PREFIX
# The default profile is release (what users want). `--profile test` reuses what `cargo test`
# built (in target/debug) and exists for the test suite. CARGO_TARGET_DIR is honoured.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
profile=release
prefix=
while [ $# -gt 0 ]; do
    case "$1" in
        --profile) profile="${2:?--profile needs a value}"; shift 2 ;;
        --profile=*) profile="${1#--profile=}"; shift ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        -*) echo "install.sh: unknown option $1" >&2; exit 2 ;;
        *) [ -z "$prefix" ] || { echo "install.sh: one PREFIX only" >&2; exit 2; }
           prefix="$1"; shift ;;
    esac
done
[ -n "$prefix" ] || { echo "usage: scripts/install.sh [--profile NAME] PREFIX" >&2; exit 2; }

case "$profile" in
    debug|dev) cargo_profile=(); outdir=debug ;;
    release) cargo_profile=(--release); outdir=release ;;
    test) cargo_profile=(--profile test); outdir=debug ;;
    *) cargo_profile=(--profile "$profile"); outdir="$profile" ;;
esac
target="${CARGO_TARGET_DIR:-$root/target}"

cd "$root"
cargo build "${cargo_profile[@]}" --target-dir "$target" -p hccl -p ascendcl -p hccl-tools
plugin=0
if [ -f /usr/include/rdma/fabric.h ] || pkg-config --exists libfabric 2>/dev/null; then
    cargo build "${cargo_profile[@]}" --target-dir "$target" -p hccl-net-ofi
    plugin=1
else
    echo "install: libfabric headers not found (Debian: libfabric-dev): no net plugin, level1 uses TCP" >&2
fi
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
[ "$plugin" = 0 ] || install -m 0755 "$build/libhccl_net_ofi.so" "$prefix/lib64/"
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

# pkg-config and CMake packages from the templates in scripts/pkg/, with this build's version
# (the library crate's) and this prefix.
version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)"
[ -n "$version" ] || { echo "install.sh: no version in Cargo.toml" >&2; exit 1; }
mkdir -p "$prefix/lib64/pkgconfig"
subst() { sed -e "s|@PREFIX@|$prefix|g" -e "s|@VERSION@|$version|g" "$1" >"$2"; chmod 0644 "$2"; }
subst scripts/pkg/hccl.pc.in "$prefix/lib64/pkgconfig/hccl.pc"
subst scripts/pkg/ascendcl.pc.in "$prefix/lib64/pkgconfig/ascendcl.pc"
# The CMake package goes to lib64/cmake/hccl, and to share/cmake/hccl as well: CMake searches
# PREFIX/lib64/cmake only where the distribution uses lib64 (not on Debian), share/cmake
# everywhere. Both are three levels below PREFIX, which the package finds relative to itself.
for dir in lib64/cmake/hccl share/cmake/hccl; do
    mkdir -p "$prefix/$dir"
    install -m 0644 scripts/pkg/hcclConfig.cmake "$prefix/$dir/"
    subst scripts/pkg/hcclConfigVersion.cmake.in "$prefix/$dir/hcclConfigVersion.cmake"
done

cat >"$prefix/set_env.sh" <<EOF
# Environment for the HCCL host toolkit installed here. Use: source $prefix/set_env.sh
export ASCEND_HOME_PATH="$prefix"
export ASCEND_TOOLKIT_HOME="$prefix"
export LD_LIBRARY_PATH="$prefix/lib64\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export PATH="$prefix/bin\${PATH:+:\$PATH}"
export PKG_CONFIG_PATH="$prefix/lib64/pkgconfig\${PKG_CONFIG_PATH:+:\$PKG_CONFIG_PATH}"
export CMAKE_PREFIX_PATH="$prefix\${CMAKE_PREFIX_PATH:+:\$CMAKE_PREFIX_PATH}"
EOF
chmod 0644 "$prefix/set_env.sh"
echo "installed ($profile) into $prefix: headers, $((4 + plugin)) libraries, pkg-config and CMake packages, $tools tools; next: source $prefix/set_env.sh"
