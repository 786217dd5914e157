#!/usr/bin/env bash
# Regenerates the README's table of TPCOMM_* variables from the registry (tpinfo).
#   tools/gen_env_table.sh [BUILD_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
table=$("$build/bin/tpinfo" --vars-markdown)
python3 - "$table" <<'PY'
import sys, re
table = sys.argv[1]
readme = open("README.md").read()
new = re.sub(r"<!-- ENV TABLE BEGIN -->.*<!-- ENV TABLE END -->",
             "<!-- ENV TABLE BEGIN -->\n" + table + "\n<!-- ENV TABLE END -->",
             readme, flags=re.S)
open("README.md", "w").write(new)
PY
echo "README.md: $(echo "$table" | wc -l) lines of variables"
