#!/bin/sh
# Creates the etcd snapshot bucket and a least-privilege user for pitstop. Idempotent.
set -eu

BUCKET="${PITSTOP_S3_BUCKET:-pitstop-etcd-backups}"

attempt=0
until mc alias set local http://minio:9000 "${MINIO_ROOT_USER}" "${MINIO_ROOT_PASSWORD}" >/dev/null 2>&1; do
  attempt=$((attempt + 1))
  if [ "${attempt}" -ge 30 ]; then
    echo "MinIO did not accept the root credentials" >&2
    exit 1
  fi
  sleep 2
done

mc mb --ignore-existing "local/${BUCKET}"
# Versioning keeps an overwritten or deleted snapshot recoverable.
mc version enable "local/${BUCKET}"

cat > /tmp/pitstop-policy.json <<POLICY
{
  "Version": "2012-10-17",
  "Statement": [
    {
      "Effect": "Allow",
      "Action": ["s3:GetBucketLocation", "s3:ListBucket", "s3:ListBucketMultipartUploads",
                 "s3:GetBucketVersioning"],
      "Resource": ["arn:aws:s3:::${BUCKET}"]
    },
    {
      "Effect": "Allow",
      "Action": ["s3:GetObject", "s3:PutObject", "s3:DeleteObject", "s3:GetObjectAttributes",
                 "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"],
      "Resource": ["arn:aws:s3:::${BUCKET}/*"]
    }
  ]
}
POLICY

mc admin policy create local pitstop-backups /tmp/pitstop-policy.json
mc admin user add local "${PITSTOP_S3_ACCESS_KEY_ID}" "${PITSTOP_S3_SECRET_ACCESS_KEY}"
mc admin policy attach local pitstop-backups --user "${PITSTOP_S3_ACCESS_KEY_ID}" 2>/dev/null \
  || echo "policy pitstop-backups already attached to ${PITSTOP_S3_ACCESS_KEY_ID}"
echo "bucket ${BUCKET} ready for ${PITSTOP_S3_ACCESS_KEY_ID}"
