#!/usr/bin/env bash
# Static checks of the deployment artefacts that need no cloud access:
# terraform fmt, the custom checkov policies (and their self-test) and the
# Cloud Build schema. The first run also creates .venv-checkov (about 30 s).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo_root"

start=$SECONDS

echo "== terraform fmt"
# No CLI config: nothing is read from, or fetched for, the user's setup.
TF_CLI_CONFIG_FILE=/dev/null terraform fmt -check -recursive -diff terraform infra/checkov/fixtures

echo "== checkov"
bash infra/scripts/checkov.sh
bash infra/scripts/checkov.sh --self-test

echo "== cloudbuild.yaml schema"
if command -v check-jsonschema >/dev/null 2>&1; then
  check-jsonschema --builtin-schema vendor.cloudbuild cloudbuild.yaml
else
  "${PYTHON:-python3}" -m check_jsonschema --builtin-schema vendor.cloudbuild cloudbuild.yaml
fi

echo "offline checks passed in $((SECONDS - start)) s"
