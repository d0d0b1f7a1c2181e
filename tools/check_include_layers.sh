#!/usr/bin/env bash
# Checks every #include "<folder>/..." under <root>/src against the layer order that README.md
# states on its line "Layer order: `a < b, c < d ...`": a file may include its own folder and the
# folders of lower layers, never a folder of its own layer or a higher one; every folder of src/
# must be in the order. Prints one line per violation (file:line, the forbidden edge, what the
# folder may include) and exits 1 when there is any.
# Usage: tools/check_include_layers.sh [root]   (root: the checkout, default this script's ../)
set -u
root=${1:-$(dirname "$0")/..}
cd "$root" || exit 2
order=$(sed -n 's/^Layer order: `\([^`]*\)`.*/\1/p' README.md | head -n 1)
[ -n "$order" ] || { echo "README.md: no line 'Layer order: \`core < ...\`'"; exit 1; }

bad=0
for d in src/*/; do
  f=${d#src/}; f=${f%/}
  case " $(echo "$order" | tr '<,' '  ') " in
    *" $f "*) ;;
    *) echo "src/$f: folder is not in README.md's layer order ($order)"; bad=1 ;;
  esac
done

grep -rnE --include='*.h' --include='*.hpp' --include='*.cpp' --include='*.cc' \
    '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' src | sort -t: -k1,1 -k2,2n |
awk -v order="$order" '
BEGIN {
  n = split(order, L, "<")
  for (i = 1; i <= n; i++) {
    m = split(L[i], F, ",")
    for (j = 1; j <= m; j++) {
      f = F[j]; gsub(/[ \t]/, "", f)
      if (f != "") { level[f] = i; names[i] = names[i] (names[i] == "" ? "" : ", ") f }
    }
  }
  acc = ""  # below[i]: the folders of layers 1 .. i-1
  for (i = 1; i <= n; i++) { below[i] = acc; if (names[i] != "") acc = acc (acc == "" ? "" : ", ") names[i] }
}
{
  c1 = index($0, ":"); file = substr($0, 1, c1 - 1); rest = substr($0, c1 + 1)
  c2 = index(rest, ":"); line = substr(rest, 1, c2 - 1); text = substr(rest, c2 + 1)
  if (!match(text, /"[^"]+"/)) next
  inc = substr(text, RSTART + 1, RLENGTH - 2)
  split(file, P, "/"); from = P[2]
  k = index(inc, "/"); if (k == 0) next
  to = substr(inc, 1, k - 1)
  if (!(from in level) || !(to in level) || from == to) next  # not ours (oneapi/...), or same folder
  if (level[to] < level[from]) next
  allowed = below[level[from]]
  printf "%s:%s: %s includes %s (\"%s\"), which is %s in the layer order; %s may include only: %s\n",
         file, line, from, to, inc, level[to] == level[from] ? "on its own layer" : "above it", from,
         allowed == "" ? "nothing" : allowed
  bad = 1
}
END { exit bad }' || bad=1
exit $bad
