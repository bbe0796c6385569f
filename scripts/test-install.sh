#!/usr/bin/env bash
# Installs the library from a build directory into a temporary prefix and checks what a user gets:
#   - the files: lib/libhyperparallel.so.X.Y.Z with its SONAME link .so.X and dev link .so,
#     lib/libhyperparallel.a, lib/pkgconfig/hyperparallel.pc, include/hp/*.h, bin/hp;
#   - hp/hp.h includes every public header, and its version macros are pkg-config's version;
#   - examples/c builds against the prefix through pkg-config only (PKG_CONFIG_PATH), with the
#     shared and with the static library, and its MLP trained under a strategy has the losses of
#     the single-device run: on one rank, and under mpirun with 2 ranks (dp and tp).
# Exits non-zero on the first failure.
#
#   scripts/test-install.sh [BUILD_DIR]       (default: build)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build}"
work="$(mktemp -d "${TMPDIR:-/tmp}/hp-install.XXXXXX")"
trap 'rm -rf "$work"' EXIT
prefix="$work/prefix"
fail() { echo "test-install: FAIL: $*" >&2; exit 1; }

cmake --install "$build" --prefix "$prefix" > "$work/install.log" || { cat "$work/install.log"; fail "cmake --install"; }

# The version comes from the project (CMakeLists.txt), through the .pc file.
export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
version="$(pkg-config --modversion hyperparallel)" || fail "pkg-config finds no hyperparallel in $PKG_CONFIG_PATH"
major="${version%%.*}"
libdir="$(pkg-config --variable=libdir hyperparallel)"
for f in "libhyperparallel.so.$version" "libhyperparallel.so.$major" libhyperparallel.so libhyperparallel.a; do
    [[ -e "$libdir/$f" ]] || fail "$libdir/$f is missing"
done
[[ -x "$prefix/bin/hp" ]] || fail "$prefix/bin/hp is missing"
soname="$(objdump -p "$libdir/libhyperparallel.so.$version" | awk '$1 == "SONAME" { print $2 }')"
[[ "$soname" == "libhyperparallel.so.$major" ]] || fail "SONAME is '$soname', expected libhyperparallel.so.$major"
[[ "$(readlink "$libdir/libhyperparallel.so")" == "libhyperparallel.so.$major" ]] || fail "libhyperparallel.so does not link to .so.$major"

# hp/hp.h includes every installed header.
for h in "$prefix"/include/hp/*.h; do
    name="hp/$(basename "$h")"
    [[ "$name" == hp/hp.h ]] && continue
    grep -q "^#include \"$name\"" "$prefix/include/hp/hp.h" || fail "hp/hp.h does not include $name"
done
for part in MAJOR MINOR PATCH; do
    v="$(awk -v m="HP_VERSION_$part" '$1 == "#define" && $2 == m { print $3 }' "$prefix/include/hp/hp.h")"
    case $part in MAJOR) want="${version%%.*}" ;; MINOR) want="$(cut -d. -f2 <<< "$version")" ;;
                  PATCH) want="$(cut -d. -f3 <<< "$version")" ;; esac
    [[ "$v" == "$want" ]] || fail "hp/hp.h HP_VERSION_$part is '$v', the project version is $version"
done

# The example, built out of the source tree against the prefix.
cp -r "$root/examples/c" "$work/example"
make -C "$work/example" -s CC="${CC:-cc}" || fail "examples/c does not build against the installed library"
export OMP_NUM_THREADS=1 OMP_WAIT_POLICY=PASSIVE
(cd "$work/example" && ./mlp dp && ./mlp-static tp) || fail "examples/c on one rank"
if command -v mpirun > /dev/null && pkg-config --cflags hyperparallel | grep -q HP_HAVE_MPI; then
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
    for s in dp tp; do
        (cd "$work/example" && timeout 300 mpirun --oversubscribe -n 2 ./mlp "$s") || fail "examples/c under mpirun -n 2 ($s)"
    done
    (cd "$work/example" && timeout 300 mpirun --oversubscribe -n 2 ./mlp-static dp) || fail "examples/c (static) under mpirun -n 2"
else
    echo "test-install: no MPI: the 2-rank runs are skipped"
fi
echo "test-install: PASS (hyperparallel $version installed, examples/c on 1 and 2 ranks)"
