#!/usr/bin/env bash
# make install-check: installs hsi into a temporary prefix, then builds the
# README's C examples against it as a user would (plain pkg-config: the
# shared library; once more statically) and runs them on data_samples/.
# Also checks that only public headers were installed and that each
# compiles on its own, as C and as C++.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
make_args=("$@")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
make --no-print-directory "${make_args[@]}" install PREFIX="$prefix" > "$tmp/install.log" ||
    { cat "$tmp/install.log"; exit 1; }
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
fail() { echo "install-check: $*" >&2; exit 1; }

for h in kern_internal.h cuda_internal.h tensor_impl.h ops_kern.h run_internal.h cuda_plugin.h; do
    [ -z "$(find "$prefix/include" -name "$h")" ] || fail "private header $h was installed"
done
n=0
while read -r h; do
    rel=${h#"$prefix/include/"}
    echo "#include <$rel>" > "$tmp/h.c"
    cc -std=c11 -fsyntax-only $(pkg-config --cflags hsi) "$tmp/h.c" 2>"$tmp/h.err" ||
        { cat "$tmp/h.err"; fail "$rel does not compile on its own (C)"; }
    c++ -fsyntax-only -x c++ $(pkg-config --cflags hsi) "$tmp/h.c" 2>"$tmp/h.err" ||
        { cat "$tmp/h.err"; fail "$rel does not compile on its own (C++)"; }
    n=$((n + 1))
done < <(find "$prefix/include/hsi" -name '*.h' | sort)
echo "install-check: $n installed headers compile on their own (C and C++)"

# the README's C blocks, in order
awk -v dir="$tmp" '/^```c$/ {n++; out = sprintf("%s/readme_%d.c", dir, n); on = 1; next}
                   /^```/ {on = 0; next}
                   on {print > out}' README.md
examples=("$tmp"/readme_*.c)
[ -e "${examples[0]}" ] || fail "README.md has no \`\`\`c example"
mkdir -p "$tmp/work"
ln -s "$root/data_samples" "$tmp/work/data_samples"
for src in "${examples[@]}"; do
    name=$(basename "$src" .c)
    lines=$(wc -l < "$src")
    cc -std=c11 -Wall -Werror -o "$tmp/$name" "$src" $(pkg-config --cflags --libs hsi) ||
        fail "$name ($lines lines) does not build with pkg-config --cflags --libs hsi"
    ldd "$tmp/$name" > "$tmp/ldd.txt"
    grep -q "$prefix/lib/libhsi.so" "$tmp/ldd.txt" || fail "$name is not linked to the installed libhsi.so"
    (cd "$tmp/work" && "$tmp/$name" > "$tmp/$name.out") || { cat "$tmp/$name.out"; fail "$name failed"; }
    echo "install-check: README example $name ($lines lines): built against the installed libhsi.so, ran: $(tail -n 1 "$tmp/$name.out")"
done
# static: the archive and the private libraries pkg-config lists
src=${examples[0]}
cc -std=c11 -o "$tmp/static" "$src" $(pkg-config --cflags hsi) "$prefix/lib/libhsi.a" \
    $(pkg-config --static --libs hsi | sed 's/ -lhsi\b//') -rdynamic || fail "static link failed"
(cd "$tmp/work" && "$tmp/static" > /dev/null) || fail "the statically linked example failed"
ldd "$tmp/static" > "$tmp/ldd.txt"
! grep -q libhsi.so "$tmp/ldd.txt" || fail "the static example loads libhsi.so"
# a static program that reaches CUDA through core alone (the device probe)
# still holds every libhsi function the plugin takes from it (pkg-config's
# static flags keep kernels/cuda_stub.c's list): the plugin loads
if [ -e "$prefix/lib/libhsi_cuda.so" ]; then
    printf '%s\n' '#include <hsi/hsi.h>' '#include <stdio.h>' \
        'int main(void) { hsi_device d; hsi_device_resolve(&d, HSI_DEVICE_CUDA, "probe");' \
        '    printf("%s\n", hsi_last_error()); return 0; }' > "$tmp/probe.c"
    cc -std=c11 -o "$tmp/probe" "$tmp/probe.c" $(pkg-config --cflags hsi) "$prefix/lib/libhsi.a" \
        $(pkg-config --static --libs hsi | sed 's/ -lhsi\b//') -rdynamic || fail "static probe link failed"
    HSI_CUDA_PLUGIN="$prefix/lib/libhsi_cuda.so" "$tmp/probe" > "$tmp/probe.out" 2>&1
    ! grep -q "cannot load the CUDA plugin" "$tmp/probe.out" ||
        { cat "$tmp/probe.out"; fail "a static program's device probe cannot load the plugin"; }
    echo "install-check: a static program's device probe loads the plugin ($(cut -c1-100 "$tmp/probe.out"))"
fi
# the installed hsi finds the installed CUDA plugin (bin/../lib)
if [ -e "$prefix/lib/libhsi_cuda.so" ]; then
    if ! (cd "$tmp/work" && "$prefix/bin/hsi" train data_samples/scene.hdr data_samples/scene_gt.hdr \
            --device cuda --epochs 1 --quiet --out "$tmp/gpu_run") > "$tmp/gpu.out" 2>&1; then
        grep -q "cannot load the CUDA plugin" "$tmp/gpu.out" && { cat "$tmp/gpu.out"; fail "the installed hsi does not find the installed plugin"; }
        echo "install-check: the installed hsi loads the installed CUDA plugin ($(tail -n 1 "$tmp/gpu.out" | cut -c1-120))"
    else
        echo "install-check: the installed hsi trained on the GPU through the installed plugin"
    fi
fi
echo "install-check: passed (prefix $prefix, removed)"
