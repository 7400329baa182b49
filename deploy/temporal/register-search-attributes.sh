#!/bin/sh
# Registers pitstop's custom search attributes (all Keyword) in the Temporal namespace.
# Idempotent: an attribute that already exists is left alone, so the job can run on every
# `docker compose up`. Names come from the arguments (see docker-compose.yml).
# The temporal CLI reads TEMPORAL_ADDRESS (and TEMPORAL_NAMESPACE) from the environment.
set -eu

NAMESPACE="${TEMPORAL_NAMESPACE:-default}"
[ "$#" -gt 0 ] || set -- PitstopRunbook PitstopCluster PitstopStage PitstopStatus

echo "waiting for namespace '${NAMESPACE}' at ${TEMPORAL_ADDRESS:-localhost:7233}"
attempt=0
until temporal operator namespace describe --namespace "${NAMESPACE}" >/dev/null 2>&1; do
  attempt=$((attempt + 1))
  if [ "${attempt}" -ge 60 ]; then
    echo "namespace '${NAMESPACE}' did not appear after 60 attempts" >&2
    exit 1
  fi
  sleep 2
done

for name in "$@"; do
  if temporal operator search-attribute list --namespace "${NAMESPACE}" | grep -qw "${name}"; then
    echo "search attribute ${name} already registered"
    continue
  fi
  echo "registering search attribute ${name} (Keyword)"
  if ! temporal operator search-attribute create --namespace "${NAMESPACE}" \
      --name "${name}" --type Keyword; then
    # Another run may have created it in the meantime: accept that, fail otherwise.
    temporal operator search-attribute list --namespace "${NAMESPACE}" | grep -qw "${name}"
  fi
done
echo "search attributes ready"
