#!/usr/bin/env bash
# Runs Loom's custom checkov policies (infra/checkov/*.yaml) on terraform/, offline.
#
#   infra/scripts/checkov.sh              scan terraform/: fail on any failed policy
#   infra/scripts/checkov.sh --self-test  scan infra/checkov/fixtures/bad: every policy must fail
#
# checkov lives in its own virtualenv: installed beside python-hcl2 it parses nothing and
# reports success, so this script also fails when checkov scanned no resource or left a
# policy unevaluated. The virtualenv is made once per checkov version and Python, under the
# user's cache ($CHECKOV_VENV to choose another place): making it is most of the time these
# checks ever take (about a minute with a cold pip cache), and a fresh clone (CI's) reuses it.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo_root"

mode="scan"
case "${1:-}" in
  "") ;;
  --self-test) mode="self-test" ;;
  *)
    echo "usage: $0 [--self-test]" >&2
    exit 2
    ;;
esac

# No update check against PyPI on every run: the scan stays offline.
export CKV_SKIP_PACKAGE_UPDATE_CHECK=true
python="${PYTHON:-python3}"
# Pinned: an open range made pip resolve checkov's hundred dependencies anew on every fresh
# virtualenv; wheels preferred, so no dependency is ever compiled from source here.
checkov_version="3.3.30"
py_tag="$("$python" -c 'import sys; print(f"py{sys.version_info[0]}{sys.version_info[1]}")')"
venv="${CHECKOV_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/loom-checkov/$checkov_version-$py_tag}"
policies_dir="infra/checkov"
# Policies whose resource types Loom does not use: they have nothing to pass on.
may_be_unused="CKV_LOOM_7"

if [[ ! -f "$venv/.installed" ]]; then
  echo "checkov: creating $venv (once per checkov version and Python)" >&2
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
  install_log="$(mktemp)"
  if ! "$venv/bin/python" -m pip install --disable-pip-version-check --prefer-binary \
      "checkov==$checkov_version" >"$install_log" 2>&1; then
    cat "$install_log" >&2
    rm -f "$install_log"
    exit 1
  fi
  rm -f "$install_log"
  touch "$venv/.installed"
fi

ids="$(sed -n 's/^  id: *"\{0,1\}\(CKV_LOOM_[0-9]*\)"\{0,1\} *$/\1/p' "$policies_dir"/*.yaml | sort -u | paste -sd, -)"
if [[ -z "$ids" ]]; then
  echo "checkov: no policy found in $policies_dir" >&2
  exit 1
fi

if [[ "$mode" == "scan" ]]; then
  target="terraform"
else
  target="$policies_dir/fixtures/bad"
fi

report="$(mktemp)"
trap 'rm -f "$report"' EXIT

# checkov exits 1 when a policy fails; the report below decides.
"$venv/bin/checkov" \
  --directory "$target" \
  --framework terraform \
  --skip-download \
  --external-checks-dir "$policies_dir" \
  --check "$ids" \
  --output json \
  >"$report" || true

"$python" - "$mode" "$report" "$ids" "$may_be_unused" <<'PY'
import json
import sys

mode, path, ids, may_be_unused = sys.argv[1:5]
wanted = set(ids.split(","))
optional = set(filter(None, may_be_unused.split(",")))
try:
    with open(path, encoding="utf-8") as handle:
        data = json.load(handle)
except (OSError, json.JSONDecodeError) as error:
    sys.exit(f"checkov: no JSON report ({error}); did checkov crash?")

reports = data if isinstance(data, list) else [data]
passed, failed, resources, parse_errors = [], [], 0, 0
for report in reports:
    summary = report.get("summary", report)
    resources += summary.get("resource_count", 0)
    parse_errors += summary.get("parsing_errors", 0)
    results = report.get("results", {})
    passed += results.get("passed_checks", [])
    failed += results.get("failed_checks", [])

evaluated = {c["check_id"] for c in passed + failed}
failed_ids = {c["check_id"] for c in failed}
if mode == "scan":
    print(
        f"checkov scan: {resources} resources, {len(passed)} checks passed, "
        f"{len(failed)} failed, {len(wanted)} policies"
    )
else:  # here a failed check is the expected outcome: say so, not "15 failed"
    print(
        f"checkov self-test: {len(failed_ids & wanted)} of {len(wanted)} policies caught the "
        f"bad fixture ({len(failed)} expected findings on {resources} resources)"
    )
problems = []
if parse_errors:
    problems.append(f"{parse_errors} file(s) could not be parsed")
if resources == 0:
    problems.append("no resource scanned")
if mode == "scan":
    if not passed:
        problems.append("no check passed: nothing was evaluated")
    for check in failed:
        problems.append(
            f"{check['check_id']} {check['check_name']}: {check['resource']} "
            f"({check['file_path']}:{check['file_line_range'][0]})"
        )
    for check_id in sorted(wanted - optional - evaluated):
        problems.append(f"{check_id} evaluated no resource")
else:
    for check_id in sorted(wanted - failed_ids):
        problems.append(f"{check_id} did not fail on the bad fixture")
for problem in problems:
    print(f"  FAIL {problem}")
sys.exit(1 if problems else 0)
PY
