"""A control-plane node's /etc/kubernetes as kubeadm leaves it: the cluster's PKI (real x509,
so expiry checks read real notAfter dates) and the ClusterConfiguration it was set up with.

One PKI per simulated cluster, shared by its control-plane nodes as kubeadm's HA set-up shares
them (the CAs and sa.key are copied; here the leaf certificates are shared too). Keys are
ECDSA P-256 (kubeadm's `encryptionAlgorithm: ECDSA-P256`): cheap to generate at start-up.
Validity follows kubeadm: CAs 10 years, leaf certificates 1 year, from the time of generation.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from pitstop_sim.ssh.fs import MemoryFS

KUBERNETES_DIR = "/etc/kubernetes"
PKI_DIR = f"{KUBERNETES_DIR}/pki"
KUBEADM_CONFIG = f"{KUBERNETES_DIR}/kubeadm-config.yaml"
KUBEADM_CONFIGMAP = "kubeadm-config"  # in kube-system
CA_DAYS = 3650
LEAF_DAYS = 365

Key = ec.EllipticCurvePrivateKey


@dataclass(frozen=True)
class PkiFile:
    path: str
    data: bytes
    mode: int


def _key() -> Key:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: Key) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _cert(
    subject: str,
    key: Key,
    issuer: tuple[x509.Certificate, Key] | None,
    days: int,
    now: datetime,
    *,
    server: list[str] | None = None,
    client: bool = False,
    org: str | None = None,
) -> x509.Certificate:
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, subject)]
    if org:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, org))
    name = x509.Name(attrs)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer[0].subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server is not None else []
    if client:
        usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(n) for n in server]), critical=False
        )
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256())


def cluster_configuration(cluster: str, control_plane: list[str], version: str) -> str:
    """kubeadm's ClusterConfiguration, as in /etc/kubernetes/kubeadm-config.yaml and the
    ConfigMap kube-system/kubeadm-config (key ClusterConfiguration)."""
    endpoint = control_plane[0] if control_plane else cluster
    return (
        "apiVersion: kubeadm.k8s.io/v1beta4\n"
        "kind: ClusterConfiguration\n"
        f"clusterName: {cluster}\n"
        f"kubernetesVersion: {version}\n"
        "certificatesDir: /etc/kubernetes/pki\n"
        "encryptionAlgorithm: ECDSA-P256\n"
        f"controlPlaneEndpoint: {endpoint}:6443\n"
        "networking:\n  dnsDomain: cluster.local\n  podSubnet: 10.244.0.0/16\n  serviceSubnet: 10.96.0.0/12\n"
        "etcd:\n  local:\n    dataDir: /var/lib/etcd\n"
    )


def generate(cluster: str, control_plane: list[str], version: str) -> list[PkiFile]:
    """kubeadm's PKI layout (`kubeadm certs check-expiration` lists the same certificates)."""
    now = datetime.now(UTC)
    out: list[PkiFile] = []

    def pair(path: str, cert: x509.Certificate, key: Key) -> None:
        out.append(PkiFile(f"{PKI_DIR}/{path}.crt", cert.public_bytes(serialization.Encoding.PEM), 0o644))
        out.append(PkiFile(f"{PKI_DIR}/{path}.key", _key_pem(key), 0o600))

    def ca(path: str, subject: str) -> tuple[x509.Certificate, Key]:
        key = _key()
        cert = _cert(subject, key, None, CA_DAYS, now)
        pair(path, cert, key)
        return cert, key

    def leaf(path: str, subject: str, issuer: tuple[x509.Certificate, Key], **kw: object) -> None:
        key = _key()
        pair(path, _cert(subject, key, issuer, LEAF_DAYS, now, **kw), key)  # type: ignore[arg-type]

    names = ["kubernetes", "kubernetes.default", "kubernetes.default.svc", *control_plane]
    root = ca("ca", "kubernetes")
    leaf("apiserver", "kube-apiserver", root, server=names)
    leaf(
        "apiserver-kubelet-client",
        "kube-apiserver-kubelet-client",
        root,
        client=True,
        org="kubeadm:cluster-admins",
    )
    proxy = ca("front-proxy-ca", "front-proxy-ca")
    leaf("front-proxy-client", "front-proxy-client", proxy, client=True)
    etcd = ca("etcd/ca", "etcd-ca")
    leaf(
        "etcd/server",
        control_plane[0] if control_plane else cluster,
        etcd,
        server=["localhost", *control_plane],
        client=True,
    )
    leaf(
        "etcd/peer",
        control_plane[0] if control_plane else cluster,
        etcd,
        server=["localhost", *control_plane],
        client=True,
    )
    leaf("etcd/healthcheck-client", "kube-etcd-healthcheck-client", etcd, client=True)
    leaf("apiserver-etcd-client", "kube-apiserver-etcd-client", etcd, client=True)
    sa = _key()
    out.append(PkiFile(f"{PKI_DIR}/sa.key", _key_pem(sa), 0o600))
    sa_pub = sa.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    out.append(PkiFile(f"{PKI_DIR}/sa.pub", sa_pub, 0o644))
    config = cluster_configuration(cluster, control_plane, version)
    out.append(PkiFile(KUBEADM_CONFIG, config.encode(), 0o600))
    return out


class ClusterPki:
    """The cluster's PKI, generated once (on the first control-plane node that asks)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: list[PkiFile] | None = None

    def install(self, fs: MemoryFS, cluster: str, control_plane: list[str], version: str) -> None:
        with self._lock:
            if self._files is None:
                self._files = generate(cluster, control_plane, version)
            files = self._files
        fs.mkdir(f"{PKI_DIR}/etcd", "root", parents=True)
        for item in files:
            fs.write(item.path, item.data, "root", mode=item.mode)
