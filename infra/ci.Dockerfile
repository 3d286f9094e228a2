# syntax=docker/dockerfile:1
#
# The image Cloud Build's tests step runs .ci/run in: the service's own Python (the same
# PYTHON_IMAGE build arg as infra/Dockerfile, so tests run on the Python the service runs)
# plus every tool .ci/run calls beyond it: terraform (the offline checks), npm (it fetches
# the official A2UI schemas), Java and the gcloud Firestore and Pub/Sub emulators (the tests
# start them on loopback).
# Build from the repository root (nothing of it is copied in):
#   docker build --file infra/ci.Dockerfile --build-arg PYTHON_IMAGE=python:3.11-slim-bookworm --tag loom-ci .

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
# terraform is one static binary; the modules need >= 1.11 (write-only arguments).
ARG TERRAFORM_IMAGE=docker.io/hashicorp/terraform:1.11.4

FROM ${TERRAFORM_IMAGE} AS terraform

FROM ${PYTHON_IMAGE}

# The Cloud SDK release the emulators were checked with.
ARG CLOUD_SDK_VERSION=528.0.0

COPY --from=terraform /bin/terraform /usr/local/bin/terraform

RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates curl gnupg npm openjdk-17-jre-headless \
    && curl -fsSL https://packages.cloud.google.com/apt/doc/apt-key.gpg \
       | gpg --dearmor -o /usr/share/keyrings/cloud.google.gpg \
    && echo "deb [signed-by=/usr/share/keyrings/cloud.google.gpg] https://packages.cloud.google.com/apt cloud-sdk main" \
       > /etc/apt/sources.list.d/google-cloud-sdk.list \
    && apt-get update \
    && apt-get install -y --no-install-recommends \
       "google-cloud-cli=${CLOUD_SDK_VERSION}-0" \
       "google-cloud-cli-firestore-emulator=${CLOUD_SDK_VERSION}-0" \
       "google-cloud-cli-pubsub-emulator=${CLOUD_SDK_VERSION}-0" \
    && rm -rf /var/lib/apt/lists/* \
    && terraform version && npm --version && java -version && gcloud --version && python --version
