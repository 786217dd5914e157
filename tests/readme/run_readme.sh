#!/usr/bin/env bash
# Runs the README's snippets and commands as written: the "Using it" program is compiled and
# run under the README's tprun line, the "Beyond tensors" fragment is compiled inside a main()
# (its tensors declared) and run on 4 ranks, and every `build/bin/...` line of the README's sh
# blocks that runs on one machine is run from a scratch directory. Changes to what is written:
# build/ is the build tree given, tprun gets --master-port 0 (tests run side by side), and
# sizes above 1K become 1K (-e 128M -> -e 1K), so that the test stays short.
# Usage: run_readme.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1
build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

python3 - "$src/README.md" "$tmp" <<'PY'
import re, sys
readme, out = open(sys.argv[1]).read(), sys.argv[2]
blocks = re.findall(r"```(\w+)\n(.*?)```", readme, flags=re.S)
cpp = [b for lang, b in blocks if lang == "cpp"]
main = [b for b in cpp if "int main()" in b]
fragment = [b for b in cpp if "int main()" not in b and "all_gather_object" in b]
assert len(main) == 1 and len(fragment) == 1, "README: expected one program and one fragment"
open(out + "/my_program.cpp", "w").write(main[0])
open(out + "/beyond.cpp", "w").write(
    "#include <tpcomm/tpcomm.hpp>\n#include <string>\n#include <vector>\n#include <cstdio>\n"
    "int main() {\n  tpcomm::init_process_group();\n"
    "  std::vector<float> grads(8, 1.0f), weight(3, 2.0f), bias(2, 3.0f);\n"
    + fragment[0] +
    "  std::printf(\"fragment done on rank %d\\n\", tpcomm::get_rank());\n"
    "  tpcomm::destroy_process_group();\n}\n")
lines = []
for lang, b in blocks:
    if lang != "sh":
        continue
    for line in b.splitlines():
        line = line.split("  #")[0].rstrip()
        if line.startswith("build/bin/") and "--nnodes" not in line:
            lines.append(line)
open(out + "/commands.txt", "w").write("\n".join(lines) + "\n")
PY

cxx=${CXX:-c++}
for p in my_program beyond; do
  "$cxx" -std=c++20 -I"$src/include" -I"$build/include" "$tmp/$p.cpp" -L"$build" -ltpcomm \
    -Wl,-rpath,"$build" -o "$tmp/$p"
done
cd "$tmp"
timeout 120 "$build/bin/tprun" --master-port 0 --nproc-per-node 4 ./beyond | tee beyond.out
[[ $(grep -c "fragment done on rank" beyond.out) == 4 ]]

n=0
while read -r line; do
  [[ -z $line ]] && continue
  cmd=${line//build\/bin\//$build/bin/}
  cmd=${cmd/\/tprun /\/tprun --master-port 0 }
  cmd=$(sed -E 's/-e [0-9]+[MG]\b/-e 1K/g' <<<"$cmd")
  echo "== $cmd"
  out=$(timeout 120 bash -c "$cmd" 2>&1) || { echo "$out"; echo "FAILED: $line" >&2; exit 1; }
  echo "$out" | tail -3
  if grep -q "perf\|tpbench" <<<"$line" && ! grep -q -- "--out" <<<"$line"; then
    grep -q "Out of bounds values : 0 OK" <<<"$out" || { echo "FAILED (no clean table): $line" >&2; exit 1; }
  fi
  n=$((n + 1))
done <commands.txt
[[ -f results.csv ]] && head -1 results.csv | grep -q "^op,size,count,type,redop,root," || {
  echo "FAILED: --out results.csv is not the CSV" >&2
  exit 1
}
echo "ok: the README's 2 snippets and $n commands ran"
