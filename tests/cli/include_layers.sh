#!/usr/bin/env bash
# The #include lines of src/ follow the layer order README.md states (tools/check_include_layers.sh),
# and the checker does fail on a violation: a small fake tree with an upward include, an include
# within a layer and a folder missing from the order must give exactly those three lines.
set -u
src="$2"
check="$src/tools/check_include_layers.sh"
fail() { echo "FAIL: $*"; exit 1; }

out=$(bash "$check" "$src" 2>&1) || fail "src/ breaks the layer order of README.md:"$'\n'"$out"
echo "ok: src/ follows the layer order"

w=$(mktemp -d); trap 'rm -rf "$w"' EXIT
mkdir -p "$w/src/core" "$w/src/io" "$w/src/data" "$w/src/model" "$w/src/extra"
printf 'Intro.\nLayer order: `core < io, data < model`\n' > "$w/README.md"
printf '#include "core/tensor.h"\n#include "io/a.h"\n#include "data/b.h"\n#include <vector>\n' > "$w/src/model/m.cpp"
printf '#pragma once\n#include "core/tensor.h"\n#include "io/other.h"\n#include "oneapi/dnnl/dnnl.hpp"\n\n#include "model/config.h"\n' > "$w/src/io/a.h"
printf '#include "data/b.h"\n  #  include "io/a.h"\n' > "$w/src/data/b.cpp"
out=$(bash "$check" "$w" 2>&1); rc=$?
[ $rc -eq 1 ] || fail "status $rc on a tree that breaks the order:"$'\n'"$out"
want='src/extra: folder is not in README.md'"'"'s layer order (core < io, data < model)
src/data/b.cpp:2: data includes io ("io/a.h"), which is on its own layer in the layer order; data may include only: core
src/io/a.h:6: io includes model ("model/config.h"), which is above it in the layer order; io may include only: core'
[ "$out" = "$want" ] || fail "unexpected report:"$'\n'"$out"$'\n'"expected:"$'\n'"$want"
echo "ok: a fake tree's violations are named:"$'\n'"$out"

rm -r "$w/src/extra"; sed -i '2d' "$w/src/data/b.cpp"; sed -i '$d' "$w/src/io/a.h"
out=$(bash "$check" "$w" 2>&1) || fail "the repaired fake tree still fails:"$'\n'"$out"
printf 'No order here.\n' > "$w/README.md"
out=$(bash "$check" "$w" 2>&1) && fail "a README.md without the order passed"
echo "ok: $out"
echo PASS
