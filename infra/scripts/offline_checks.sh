#!/usr/bin/env bash
# Static checks of the deployment artefacts that need no cloud access:
# terraform fmt, the custom checkov policies (and their self-test) and the
# Cloud Build schema: about 10 s. The first run on a machine also makes checkov's
# virtualenv under the user's cache (about a minute more with a cold pip cache);
# each step says how long it took.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo_root"

start=$SECONDS
step=$SECONDS
took() { echo "   ($((SECONDS - step)) s)"; step=$SECONDS; }

echo "== terraform fmt"
# No CLI config and no Checkpoint call (terraform's version check phones home otherwise):
# nothing is read from, or fetched for, the user's setup.
CHECKPOINT_DISABLE=1 TF_CLI_CONFIG_FILE=/dev/null \
  terraform fmt -check -recursive -diff terraform infra/checkov/fixtures
took

echo "== checkov"
bash infra/scripts/checkov.sh
bash infra/scripts/checkov.sh --self-test
took

echo "== cloudbuild.yaml schema"
if command -v check-jsonschema >/dev/null 2>&1; then
  check-jsonschema --builtin-schema vendor.cloudbuild cloudbuild.yaml
else
  "${PYTHON:-python3}" -m check_jsonschema --builtin-schema vendor.cloudbuild cloudbuild.yaml
fi
took

echo "offline checks passed in $((SECONDS - start)) s"
