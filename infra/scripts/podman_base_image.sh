#!/usr/bin/env bash
# Prepares podman to build infra/Dockerfile with no container registry in reach:
#   - a private containers.conf (runc; ulimits the sandbox can grant) — the host's /etc is untouched;
#   - a Python base image made from Debian packages with mmdebstrap, imported as
#     localhost/debian-python:bookworm-<recipe hash> (bookworm's CPython is 3.11, as at runtime).
# The rootfs tarball is cached outside the repository, so only the first run pays for it.
#
#   eval "$(bash infra/scripts/podman_base_image.sh)"   # exports CONTAINERS_CONF, PYTHON_IMAGE
#   podman build --pull=never --build-arg PYTHON_IMAGE="$PYTHON_IMAGE" -f infra/Dockerfile .
#
# Needs podman, runc and mmdebstrap (.ci/run installs them) and root (mmdebstrap's root mode).
# Progress goes to stderr; stdout is only the export lines.
set -euo pipefail

cache="${LOOM_PODMAN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/loom-podman}"
suite=bookworm
packages=python3,python3-venv,python3-pip,python-is-python3,ca-certificates
# A change of the recipe makes a new tarball and image instead of reusing a stale one.
key="$(printf '%s %s' "$suite" "$packages" | sha256sum | cut -c1-12)"
image="localhost/debian-python:$suite-$key"
tarball="$cache/debian-python-$suite-$key.tar"
mkdir -p "$cache"

# podman's default ulimits ask for more than an unprivileged sandbox may set.
hard_nofile="$(ulimit -Hn)"
hard_nproc="$(ulimit -Hu)"
[ "$hard_nofile" = unlimited ] && hard_nofile=65536
[ "$hard_nproc" = unlimited ] && hard_nproc=32768
nofile=$((hard_nofile < 65536 ? hard_nofile : 65536))
nproc=$((hard_nproc < 32768 ? hard_nproc : 32768))
conf="$cache/containers.conf"
cat > "$conf.tmp" <<CONF
# Written by infra/scripts/podman_base_image.sh.
[containers]
default_ulimits = ["nofile=$nofile:$nofile", "nproc=$nproc:$nproc"]

[engine]
# crun refuses hybrid cgroup layouts that runc accepts.
runtime = "runc"
CONF
mv "$conf.tmp" "$conf"
export CONTAINERS_CONF="$conf"

if [ ! -s "$tarball" ]; then
  echo "building $tarball with mmdebstrap (first run only)" >&2
  hooks=()
  # Locally added CAs (e.g. a TLS-inspecting proxy) must be trusted inside the build too,
  # or pip there cannot reach the package index.
  if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    hooks+=(--customize-hook='cp /usr/local/share/ca-certificates/*.crt "$1/usr/local/share/ca-certificates/"')
    hooks+=(--customize-hook='chroot "$1" update-ca-certificates >/dev/null')
  fi
  mmdebstrap --quiet --variant=minbase --include="$packages" \
    "${hooks[@]}" "$suite" "$cache/partial.tar" >&2
  mv "$cache/partial.tar" "$tarball"
fi

if ! podman image exists "$image"; then
  # A plain import has no PATH: the Dockerfile's PATH=/opt/venv/bin:$PATH would lose /usr/sbin.
  podman import --quiet \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' \
    "$tarball" "$image" >/dev/null
fi

printf 'export CONTAINERS_CONF=%q\nexport PYTHON_IMAGE=%q\n' "$conf" "$image"
