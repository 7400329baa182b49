#!/bin/sh
# Registers pitstop's custom search attributes (all Keyword) in the Temporal namespace.
# Idempotent: an attribute that already exists is left alone, so the job can run on every
# `docker compose up`. Names come from the arguments (see docker-compose.yml).
# The temporal CLI reads TEMPORAL_ADDRESS (and TEMPORAL_NAMESPACE) from the environment; the
# mTLS client certificate is passed as flags, which every 1.x CLI accepts (the environment
# variables for them were renamed between CLI versions).
set -eu

NAMESPACE="${TEMPORAL_NAMESPACE:-default}"
[ "$#" -gt 0 ] || set -- PitstopRunbook PitstopCluster PitstopStage PitstopStatus

TLS_ARGS=""
if [ -n "${TEMPORAL_TLS_CLIENT_CERT_PATH:-}" ]; then
  TLS_ARGS="--tls-cert-path ${TEMPORAL_TLS_CLIENT_CERT_PATH} --tls-key-path ${TEMPORAL_TLS_CLIENT_KEY_PATH:?TEMPORAL_TLS_CLIENT_KEY_PATH is unset}"
  TLS_ARGS="${TLS_ARGS} --tls-ca-path ${TEMPORAL_TLS_SERVER_CA_CERT_PATH:?TEMPORAL_TLS_SERVER_CA_CERT_PATH is unset}"
  [ -z "${TEMPORAL_TLS_SERVER_NAME:-}" ] || TLS_ARGS="${TLS_ARGS} --tls-server-name ${TEMPORAL_TLS_SERVER_NAME}"
fi

t() {
  # shellcheck disable=SC2086 # TLS_ARGS is a list of flags; the paths hold no spaces.
  temporal "$@" ${TLS_ARGS}
}

echo "waiting for namespace '${NAMESPACE}' at ${TEMPORAL_ADDRESS:-localhost:7233}"
attempt=0
until t operator namespace describe --namespace "${NAMESPACE}" >/dev/null 2>&1; do
  attempt=$((attempt + 1))
  if [ "${attempt}" -ge 60 ]; then
    echo "namespace '${NAMESPACE}' did not appear after 60 attempts" >&2
    exit 1
  fi
  sleep 2
done

for name in "$@"; do
  if t operator search-attribute list --namespace "${NAMESPACE}" | grep -qw "${name}"; then
    echo "search attribute ${name} already registered"
    continue
  fi
  echo "registering search attribute ${name} (Keyword)"
  if ! t operator search-attribute create --namespace "${NAMESPACE}" \
      --name "${name}" --type Keyword; then
    # Another run may have created it in the meantime: accept that, fail otherwise.
    t operator search-attribute list --namespace "${NAMESPACE}" | grep -qw "${name}"
  fi
done
echo "search attributes ready"
