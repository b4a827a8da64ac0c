#!/bin/sh
# On a GPU machine, as root: grade the reference with the workers' file system an allow-list
# (grader/sandbox/rootfs.py) and show that CUDA and the kernels still work inside it.
# Usage: tools/gpu_view_check.sh [OUT_DIR]   (exit 0: full marks, allow-list and own uid in force)
set -e
out="${1:-build}"
mkdir -p "$out"
python3 -m grader grade --submission reference/l1_paged_kv_write.py --report "$out/r.json" --device cuda
python3 - "$out/r.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
sandbox = r["extra_data"]["sandbox"]
fs = sandbox.get("file_system", {})
print(json.dumps({"score": r["score"], "max_score": r["max_score"], "privilege_drop": sandbox["privilege_drop"],
                  "why_not": sandbox["why_not"], "file_system": fs}, indent=1))
ok = fs.get("view") == "allow-list" and sandbox["privilege_drop"] and r["score"] >= r["max_score"] - 1e-6
print("OK" if ok else "NOT OK: see file_system.why_not, why_not and the report's tests")
sys.exit(0 if ok else 1)
PY
