"""Static checks of the production-shaped stack: docker-compose.yml, deploy/, Dockerfile and
docs/deployment.md must tell the same story.

Nothing here needs a Docker engine. When a Docker Compose v2 client is on PATH, the file is
also validated by `docker compose config -q` (which parses and interpolates without a daemon).
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOC = ROOT / "docs" / "deployment.md"
ENV_EXAMPLE = ROOT / "deploy" / "pitstop.env.example"
SEARCH_ATTRIBUTES = ("PitstopRunbook", "PitstopCluster", "PitstopStage", "PitstopStatus")
PITSTOP_SERVICES = ("worker", "slack-bridge")
# Every service that talks to Temporal's frontend, with the variables its client reads for mTLS:
# (certificate, key, CA).
TEMPORAL_CLIENTS = {
    "worker": (
        "TEMPORAL_TLS_CLIENT_CERT_PATH",
        "TEMPORAL_TLS_CLIENT_KEY_PATH",
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH",
    ),
    "slack-bridge": (
        "TEMPORAL_TLS_CLIENT_CERT_PATH",
        "TEMPORAL_TLS_CLIENT_KEY_PATH",
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH",
    ),
    "temporal-admin-tools": (
        "TEMPORAL_TLS_CLIENT_CERT_PATH",
        "TEMPORAL_TLS_CLIENT_KEY_PATH",
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH",
    ),
    "temporal-ui": ("TEMPORAL_TLS_CERT", "TEMPORAL_TLS_KEY", "TEMPORAL_TLS_CA"),
}
# Every variable pitstop reads; docs/deployment.md must describe each one.
PITSTOP_ENV_VARS = (
    "TEMPORAL_ADDRESS",
    "TEMPORAL_NAMESPACE",
    "TEMPORAL_API_KEY",
    "TEMPORAL_TLS",
    "TEMPORAL_TLS_CLIENT_CERT_PATH",
    "TEMPORAL_TLS_CLIENT_KEY_PATH",
    "TEMPORAL_TLS_SERVER_CA_CERT_PATH",
    "TEMPORAL_TLS_SERVER_NAME",
    "PITSTOP_TASK_QUEUE",
    "PITSTOP_HOME",
    "PITSTOP_UI_URL",
    "PITSTOP_CODEC_KEY",
    "PITSTOP_CODEC_KEY_FILE",
    "OTEL_TRACES_EXPORTER",
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "AWS_ENDPOINT_URL_S3",
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "SLACK_BOT_TOKEN",
    "SLACK_SIGNING_SECRET",
    "SLACK_DEFAULT_CHANNEL",
    "KUBECONFIG",
)
INTERPOLATION = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-?])([^}]*))?\}")
SECRET_NAME = re.compile(r"PASSWORD|PWD|SECRET|TOKEN|API_KEY|ACCESS_KEY")


def _load(path: Path) -> Any:
    return YAML(typ="safe").load(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    data = _load(COMPOSE)
    assert isinstance(data, dict) and isinstance(data.get("services"), dict)
    return data


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


@pytest.fixture(scope="module")
def doc() -> str:
    return DOC.read_text(encoding="utf-8")


def _table_after(doc: str, heading: str) -> list[list[str]]:
    """Rows (cells stripped) of the first Markdown table after the given heading."""
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == heading)
    rows: list[list[str]] = []
    for line in lines[start + 1 :]:
        if line.startswith("#"):
            break
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if all(set(cell) <= set("-: ") for cell in cells):
            continue  # separator row
        rows.append(cells)
    assert rows, f"no table after {heading!r} in {DOC}"
    return rows[1:]  # drop the header row


def _doc_services(doc: str) -> dict[str, list[str]]:
    table: dict[str, list[str]] = {}
    for cells in _table_after(doc, "## Services"):
        match = re.fullmatch(r"`([^`]+)`", cells[0])
        assert match, f"first cell must be a service name in backticks: {cells[0]!r}"
        table[match.group(1)] = cells
    return table


def _environment(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, "") for item in env)
    return {str(key): "" if value is None else str(value) for key, value in env.items()}


def _walk_strings(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for key, value in node.items() for s in _walk_strings(key) + _walk_strings(value)]
    if isinstance(node, list):
        return [s for item in node for s in _walk_strings(item)]
    return []


def _bind_sources(service: dict[str, Any]) -> list[tuple[str, str]]:
    """(source, target) of each bind mount given as a path (./..., /..., ~/..., ${...})."""
    mounts = []
    for volume in service.get("volumes") or []:
        if isinstance(volume, dict):
            if volume.get("type") == "bind":
                mounts.append((volume["source"], volume["target"]))
            continue
        source, target = _split_volume(volume)[:2]
        if source.startswith((".", "/", "~", "$")):
            mounts.append((source, target))
    return mounts


def _split_volume(spec: str) -> list[str]:
    """Split a short volume spec on ':' outside ${...} interpolations."""
    parts, depth, current = [], 0, ""
    for char in spec:
        if char == ":" and depth == 0:
            parts.append(current)
            current = ""
            continue
        depth += char == "{" and current.endswith("$")
        depth -= char == "}" and depth > 0
        current += char
    return [*parts, current]


def _host_ports(service: dict[str, Any]) -> list[tuple[int, str]]:
    published = []
    for port in service.get("ports") or []:
        if isinstance(port, dict):
            if port.get("published") is not None:
                published.append((int(port["published"]), port.get("protocol", "tcp")))
            continue
        spec, _, protocol = str(port).partition("/")
        parts = spec.rsplit(":", 2)
        if len(parts) == 1:
            continue  # container port only: nothing published on the host
        host = parts[-2]
        assert host.isdigit(), f"host port must be a fixed number, got {port!r}"
        published.append((int(host), protocol or "tcp"))
    return published


def _env_example() -> dict[str, str]:
    values = {}
    for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f"bad line in {ENV_EXAMPLE}: {line!r}"
            values[key] = value
    return values


# --- services and documentation ---------------------------------------------------------


def test_doc_service_table_matches_compose(services: dict[str, Any], doc: str) -> None:
    documented = _doc_services(doc)
    assert set(documented) - set(services) == set(), "documented but not in docker-compose.yml"
    assert set(services) - set(documented) == set(), "in docker-compose.yml but not documented"


def test_doc_service_table_names_the_same_images(services: dict[str, Any], doc: str) -> None:
    for name, cells in _doc_services(doc).items():
        image = re.match(r"`([^`]+)`", cells[1])
        assert image, f"{name}: image column must start with the image in backticks"
        assert image.group(1) == services[name]["image"], name


def test_expected_services_are_present(services: dict[str, Any]) -> None:
    expected = {
        "postgresql", "temporal", "temporal-admin-tools", "temporal-ui", "codec-server", "ui-proxy",
        "minio", "minio-setup", "etcd", "otel-collector", "jaeger", "worker", "slack-bridge",
    }  # fmt: skip
    assert expected <= set(services)


# --- images ---------------------------------------------------------------------------


def test_every_image_is_pinned(services: dict[str, Any]) -> None:
    for name, service in services.items():
        image = service.get("image")
        assert image, f"{name}: no image (built services name theirs too)"
        assert "${" not in image, f"{name}: image must not depend on the environment: {image}"
        repository, _, digest = image.partition("@")
        last = repository.rsplit("/", 1)[-1]
        assert ":" in last or digest, f"{name}: image without a tag: {image}"
        tag = last.rsplit(":", 1)[-1] if ":" in last else ""
        assert tag.lower() != "latest", f"{name}: image tagged latest: {image}"
        assert re.search(r"\d", tag) or digest, f"{name}: tag is not a version: {image}"


def test_brief_pins(services: dict[str, Any]) -> None:
    image = {name: service["image"] for name, service in services.items()}
    assert image["postgresql"].startswith("postgres:16.")
    assert image["temporal"].startswith(("temporalio/auto-setup:1.", "temporalio/server:1."))
    assert image["temporal-ui"].startswith("temporalio/ui:2.")
    assert re.fullmatch(r"(quay\.io/)?minio/minio:RELEASE\.[0-9T:-]+Z", image["minio"])
    assert re.fullmatch(r"(quay\.io/)?minio/mc:RELEASE\.[0-9T:-]+Z", image["minio-setup"])
    assert re.fullmatch(r"quay\.io/coreos/etcd:v3\.5\.\d+", image["etcd"])
    assert image["otel-collector"].startswith("otel/opentelemetry-collector-contrib:0.")
    assert image["jaeger"].startswith("jaegertracing/all-in-one:1.")


# --- start order ----------------------------------------------------------------------


def test_depends_on_targets_exist_and_conditions_hold(services: dict[str, Any]) -> None:
    for name, service in services.items():
        depends = service.get("depends_on") or {}
        if isinstance(depends, list):
            depends = {target: {"condition": "service_started"} for target in depends}
        for target, spec in depends.items():
            assert target in services, f"{name} depends on unknown service {target}"
            condition = (spec or {}).get("condition", "service_started")
            assert condition in {
                "service_started", "service_healthy", "service_completed_successfully",
            }, f"{name} -> {target}: {condition}"  # fmt: skip
            if condition == "service_healthy":
                assert "healthcheck" in services[target], f"{name} waits for {target}'s health"
            if condition == "service_completed_successfully":
                assert services[target].get("restart", "no") == "no", f"{target} is a job"


def test_stateful_services_have_healthchecks(services: dict[str, Any]) -> None:
    for name in ("postgresql", "temporal", "minio", "etcd", "slack-bridge"):
        test = services[name].get("healthcheck", {}).get("test")
        assert test and test[0] in {"CMD", "CMD-SHELL"}, name


def test_pitstop_waits_for_temporal_and_its_setup_jobs(services: dict[str, Any]) -> None:
    worker = services["worker"]["depends_on"]
    assert worker["temporal"]["condition"] == "service_healthy"
    assert worker["temporal-admin-tools"]["condition"] == "service_completed_successfully"
    assert worker["minio-setup"]["condition"] == "service_completed_successfully"
    assert services["temporal"]["depends_on"]["postgresql"]["condition"] == "service_healthy"
    assert services["minio-setup"]["depends_on"]["minio"]["condition"] == "service_healthy"


# --- files, ports, volumes ------------------------------------------------------------


def test_mounted_local_files_exist(services: dict[str, Any]) -> None:
    mounted = 0
    for name, service in services.items():
        for source, _target in _bind_sources(service):
            if source.startswith("./"):
                assert (ROOT / source).exists(), f"{name} mounts missing {source}"
                mounted += 1
            else:
                # Host paths outside the repo must come from the operator's environment.
                assert source.startswith("${"), f"{name}: hard-coded host path {source}"
    assert mounted >= 4


def test_named_volumes_are_declared(compose: dict[str, Any], services: dict[str, Any]) -> None:
    declared = set(compose.get("volumes") or {})
    for name, service in services.items():
        for volume in service.get("volumes") or []:
            source = volume.get("source") if isinstance(volume, dict) else _split_volume(volume)[0]
            if source and not source.startswith((".", "/", "~", "$")):
                assert source in declared, f"{name} uses undeclared volume {source}"
    assert {"postgresql-data", "minio-data", "etcd-data"} <= declared


def test_host_ports_are_unique(services: dict[str, Any]) -> None:
    owner: dict[tuple[int, str], str] = {}
    for name, service in services.items():
        for port in _host_ports(service):
            assert port not in owner, f"host port {port} used by {owner.get(port)} and {name}"
            owner[port] = name
    assert owner[(8233, "tcp")] == "ui-proxy"
    assert owner[(16686, "tcp")] == "jaeger"
    assert owner[(3000, "tcp")] == "slack-bridge"
    assert services["ui-proxy"]["ports"] == ["127.0.0.1:8233:8233"]


# --- the pitstop image ----------------------------------------------------------------


def test_pitstop_services_build_from_the_dockerfile(services: dict[str, Any]) -> None:
    for name in PITSTOP_SERVICES:
        build = services[name]["build"]
        context = ROOT / (build if isinstance(build, str) else build.get("context", "."))
        dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
        assert (context / dockerfile).is_file(), name
        assert (context / dockerfile).resolve() == (ROOT / "Dockerfile").resolve(), name
    assert services["worker"]["command"] == ["python", "worker.py"]
    assert services["slack-bridge"]["command"] == ["pitstop", "slack", "serve", "--port", "3000"]


def test_dockerfile_shape() -> None:
    text = (ROOT / "Dockerfile").read_text(encoding="utf-8")
    base = re.search(r"^FROM\s+(\S+)", text, re.MULTILINE)
    assert base and re.fullmatch(r"python:3\.11(\.\d+)?-slim(-\w+)?", base.group(1))
    assert "openssh-client" in text
    assert re.search(r"pip install[^\n]*(\.|/app)\s*$", text, re.MULTILINE)
    user = re.findall(r"^USER\s+(\S+)", text, re.MULTILINE)
    assert user and not user[-1].startswith(("root", "0")), "image must run as non-root"
    assert re.search(r'^CMD \["python", "worker.py"\]', text, re.MULTILINE)


def test_dockerignore_keeps_local_state_and_secrets_out() -> None:
    entries = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".venv", ".pitstop", ".git", "deploy/pitstop.env"} <= entries
    assert {".pytest_cache", ".mypy_cache", ".ruff_cache"} <= entries


# --- Temporal ---------------------------------------------------------------------------


def test_temporal_uses_postgresql_and_mounted_dynamic_config(services: dict[str, Any]) -> None:
    temporal = services["temporal"]
    env = _environment(temporal)
    assert env["DB"] in {"postgres12", "postgresql"}
    assert env["POSTGRES_SEEDS"] == "postgresql"
    targets = {target: source for source, target in _bind_sources(temporal)}
    assert targets[env["DYNAMIC_CONFIG_FILE_PATH"]] == "./deploy/temporal/dynamicconfig.yaml"
    dynamic = _load(ROOT / "deploy" / "temporal" / "dynamicconfig.yaml")
    for key, values in dynamic.items():
        assert isinstance(values, list) and all("value" in item for item in values), key


def test_admin_job_registers_the_search_attributes(services: dict[str, Any]) -> None:
    job = services["temporal-admin-tools"]
    assert _environment(job)["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert tuple(job["command"]) == SEARCH_ATTRIBUTES
    script_mounts = [s for s, t in _bind_sources(job) if t in job["entrypoint"]]
    assert script_mounts, "the entrypoint script must be mounted from deploy/"
    script = (ROOT / script_mounts[0]).read_text(encoding="utf-8")
    assert "operator search-attribute create" in script
    assert "--type Keyword" in script
    # The job presents its client certificate to the mTLS frontend as flags every CLI knows.
    for flag in ("--tls-cert-path", "--tls-key-path", "--tls-ca-path"):
        assert flag in script
    assert "search-attribute list" in script, "must skip attributes that already exist"
    for name in SEARCH_ATTRIBUTES:  # also the defaults when run without arguments
        assert name in script


# --- MinIO and telemetry ----------------------------------------------------------------


def test_minio_setup_creates_the_backup_bucket(services: dict[str, Any]) -> None:
    job = services["minio-setup"]
    script_mounts = [s for s, t in _bind_sources(job) if t in job["entrypoint"]]
    script = (ROOT / script_mounts[0]).read_text(encoding="utf-8")
    bucket = _environment(job).get("PITSTOP_S3_BUCKET", "")
    assert bucket == "pitstop-etcd-backups" or "pitstop-etcd-backups" in script
    assert "mc mb --ignore-existing" in script
    assert _environment(services["worker"])["AWS_ENDPOINT_URL_S3"] == "http://minio:9000"


def test_otel_collector_receives_otlp_and_exports_to_jaeger(services: dict[str, Any]) -> None:
    config = _load(ROOT / "deploy" / "otel-collector.yaml")
    protocols = config["receivers"]["otlp"]["protocols"]
    assert protocols["grpc"]["endpoint"].endswith(":4317")
    assert protocols["http"]["endpoint"].endswith(":4318")
    traces = config["service"]["pipelines"]["traces"]
    assert traces["receivers"] == ["otlp"]
    exporters = [config["exporters"][name] for name in traces["exporters"]]
    assert any(exporter.get("endpoint") == "jaeger:4317" for exporter in exporters)
    for name in traces["exporters"] + traces.get("processors", []):
        assert name in config["exporters"] or name in config["processors"]
    for name in PITSTOP_SERVICES:
        env = _environment(services[name])
        assert env["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://otel-collector:4318"
        assert env["OTEL_TRACES_EXPORTER"] == "otlp"


# --- environment and secrets ------------------------------------------------------------


def test_worker_environment(services: dict[str, Any]) -> None:
    env = _environment(services["worker"])
    assert env["TEMPORAL_ADDRESS"] == "temporal:7233"
    assert "PITSTOP_TASK_QUEUE" in env
    assert env["KUBECONFIG"].startswith("/home/pitstop/.kube/")
    kube = [(s, t) for s, t in _bind_sources(services["worker"]) if t == "/home/pitstop/.kube"]
    assert kube == [("${KUBECONFIG_DIR:-~/.kube}", "/home/pitstop/.kube")]
    assert any(v.endswith(":ro") for v in services["worker"]["volumes"] if ".kube" in v)
    slack = _environment(services["slack-bridge"])
    for key in ("SLACK_BOT_TOKEN", "SLACK_SIGNING_SECRET", "SLACK_DEFAULT_CHANNEL", "PITSTOP_UI_URL"):
        assert key in slack


def test_no_secret_value_is_written_in_compose(services: dict[str, Any]) -> None:
    for name, service in services.items():
        for key, value in _environment(service).items():
            if key.endswith(("_FILE", "_PATH", "_DIR")):
                # A path: to a mounted secret or file, never the value itself.
                assert value.startswith("/"), f"{name}.{key}={value} must be a path"
            elif SECRET_NAME.search(key) and value not in ("true", "false"):  # a flag, not a value
                assert INTERPOLATION.fullmatch(value), f"{name}.{key} must be a ${{...}} reference"


def test_env_example_defines_every_required_variable(compose: dict[str, Any]) -> None:
    example = _env_example()
    for text in _walk_strings(compose):
        for var, operator, _ in INTERPOLATION.findall(text):
            if operator in {":?", "?"}:
                assert example.get(var), f"{var} is required but not in {ENV_EXAMPLE.name}"


def test_doc_mentions_every_variable_compose_uses(compose: dict[str, Any], doc: str) -> None:
    used = {var for text in _walk_strings(compose) for var, _, _ in INTERPOLATION.findall(text)}
    for name in PITSTOP_SERVICES:
        used |= set(_environment(compose["services"][name]))
    used |= set(_env_example())
    missing = sorted(var for var in used if f"`{var}`" not in doc)
    assert not missing, f"docs/deployment.md does not describe {missing}"


def test_doc_describes_every_variable_pitstop_reads(doc: str) -> None:
    documented = {
        match.group(1)
        for cells in _table_after(doc, "## Environment variables pitstop reads")
        if (match := re.fullmatch(r"`([A-Z0-9_]+)`", cells[0]))
    }
    assert set(PITSTOP_ENV_VARS) <= documented, sorted(set(PITSTOP_ENV_VARS) - documented)


def test_doc_tells_how_to_start_and_where_the_uis_are(doc: str) -> None:
    assert "docker compose" in doc and "up -d" in doc
    for url in ("http://localhost:8233", "http://localhost:16686", "http://localhost:9001"):
        assert url in doc
    assert "Temporal Cloud" in doc and "TEMPORAL_API_KEY" in doc


# --- secrets, mutual TLS, the codec and the UI's door ---------------------------------------


def _secrets_of(service: dict[str, Any]) -> set[str]:
    return {item if isinstance(item, str) else item["source"] for item in service.get("secrets") or []}


def _secret_paths(service: dict[str, Any]) -> dict[str, str]:
    """Environment variables of a service that point at one of its mounted secrets."""
    return {k: v for k, v in _environment(service).items() if v.startswith("/run/secrets/")}


def test_every_secret_is_declared_used_and_kept_out_of_git_and_the_image(compose: dict[str, Any]) -> None:
    declared = compose.get("secrets") or {}
    used = set().union(*(_secrets_of(svc) for svc in compose["services"].values()))
    assert used - set(declared) == set(), "mounted but not declared"
    assert set(declared) - used == set(), "declared but mounted nowhere"
    for name, spec in declared.items():
        assert set(spec) == {"file"}, f"secret {name} must be a file (no inline value, no env)"
        assert spec["file"].startswith("./deploy/secrets/"), spec
    assert "secrets/" in (ROOT / "deploy" / ".gitignore").read_text().split()
    assert "deploy/secrets" in (ROOT / ".dockerignore").read_text().split()
    # The CA's private key is never mounted into anything.
    assert not any(spec["file"].endswith("ca.key") for spec in declared.values())


def test_every_path_to_a_secret_names_one_the_service_mounts(services: dict[str, Any]) -> None:
    for name, service in services.items():
        mounted = _secrets_of(service)
        for key, value in _secret_paths(service).items():
            assert value.removeprefix("/run/secrets/") in mounted, f"{name}.{key}: {value} is not mounted"
        for test in (service.get("healthcheck") or {}).get("test") or []:
            for secret in re.findall(r"/run/secrets/([\w-]+)", test):
                assert secret in mounted, f"{name} healthcheck uses {secret}"


def test_temporal_requires_client_certificates_on_the_frontend_and_between_its_services(
    services: dict[str, Any],
) -> None:
    env = _environment(services["temporal"])
    assert env["TEMPORAL_TLS_REQUIRE_CLIENT_AUTH"] == "true"
    files = (
        "FRONTEND_CERT",
        "FRONTEND_KEY",
        "SERVER_CERT",
        "SERVER_KEY",
        "SERVER_CA_CERT",
        "CLIENT1_CA_CERT",
    )
    for key in files:
        assert env[f"TEMPORAL_TLS_{key}"].startswith("/run/secrets/"), key
    assert env["TEMPORAL_TLS_FRONTEND_DISABLE_HOST_VERIFICATION"] == "false"
    assert env["TEMPORAL_TLS_INTERNODE_DISABLE_HOST_VERIFICATION"] == "false"
    health = " ".join(services["temporal"]["healthcheck"]["test"])
    assert "--tls-cert-path" in health and "--tls-server-name temporal" in health


def test_every_temporal_client_presents_its_own_client_certificate(services: dict[str, Any]) -> None:
    talking = {
        n for n, svc in services.items() if _environment(svc).get("TEMPORAL_ADDRESS") == "temporal:7233"
    }
    assert talking == set(TEMPORAL_CLIENTS), "a service talks to Temporal without a TLS client set-up"
    certificates: dict[str, str] = {}
    for name, (cert, key, ca) in TEMPORAL_CLIENTS.items():
        env = _environment(services[name])
        assert env[ca] == "/run/secrets/tls-ca", name
        assert env[cert].removeprefix("/run/secrets/") == f"{name.removeprefix('temporal-')}-cert" or env[
            cert
        ].endswith("-cert"), name
        assert env[key] == env[cert].removesuffix("-cert") + "-key", name
        certificates[name] = env[cert]
    assert len(set(certificates.values())) == len(certificates), "clients must not share a certificate"
    # The UI checks the frontend's name; pitstop's clients check it against TEMPORAL_ADDRESS.
    assert _environment(services["temporal-ui"])["TEMPORAL_TLS_ENABLE_HOST_VERIFICATION"] == "true"


def _secret_file(compose: dict[str, Any], service: str, variable: str) -> str:
    secret = _environment(compose["services"][service])[variable].removeprefix("/run/secrets/")
    return str(compose["secrets"][secret]["file"]).removeprefix("./deploy/secrets/")


def test_the_dev_certificates_fit_the_names_and_roles_compose_gives_them(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    """Generate the dev secrets, then check each file compose mounts does the job its service
    gives it: issued by the CA the clients trust, client certificates for clients, a frontend
    certificate for the names the clients dial, an internode certificate for the name set."""
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID

    spec = importlib.util.spec_from_file_location("dev_secrets", ROOT / "deploy" / "dev_secrets.py")
    assert spec is not None and spec.loader is not None
    dev_secrets = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(dev_secrets)
    dev_secrets.make_all(tmp_path, ui_password="x")
    for name, spec_ in compose["secrets"].items():
        assert (tmp_path / spec_["file"].removeprefix("./deploy/secrets/")).is_file(), f"{name} not made"

    def cert(relative: str) -> x509.Certificate:
        return x509.load_pem_x509_certificate((tmp_path / relative).read_bytes())

    def usages(c: x509.Certificate) -> set[x509.ObjectIdentifier]:
        return set(c.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value)

    temporal = _environment(compose["services"]["temporal"])
    ca = cert(_secret_file(compose, "temporal", "TEMPORAL_TLS_SERVER_CA_CERT"))
    frontend = cert(_secret_file(compose, "temporal", "TEMPORAL_TLS_FRONTEND_CERT"))
    frontend.verify_directly_issued_by(ca)
    names = frontend.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    dialed = {"temporal", "localhost"}  # temporal:7233 in the stack, 127.0.0.1:7233 from the host
    assert dialed <= set(names.get_values_for_type(x509.DNSName))
    assert temporal["TEMPORAL_TLS_FRONTEND_SERVER_NAME"] in names.get_values_for_type(x509.DNSName)
    assert ExtendedKeyUsageOID.SERVER_AUTH in usages(frontend)
    internode = cert(_secret_file(compose, "temporal", "TEMPORAL_TLS_SERVER_CERT"))
    internode.verify_directly_issued_by(ca)
    internode_names = internode.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert temporal["TEMPORAL_TLS_INTERNODE_SERVER_NAME"] in internode_names.get_values_for_type(x509.DNSName)
    assert usages(internode) == {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH}
    for service, (cert_var, _, ca_var) in TEMPORAL_CLIENTS.items():
        assert cert(_secret_file(compose, service, ca_var)) == ca, service
        client = cert(_secret_file(compose, service, cert_var))
        client.verify_directly_issued_by(ca)
        assert usages(client) == {ExtendedKeyUsageOID.CLIENT_AUTH}, service


def test_only_workers_hold_the_worker_key_and_only_signers_and_checkers_the_vote_key(
    services: dict[str, Any],
) -> None:
    holders = {
        secret: sorted(n for n, svc in services.items() if secret in _secrets_of(svc))
        for secret in ("pitstop-worker-key", "pitstop-vote-key", "codec-key", "ui-users")
    }
    assert holders == {
        "pitstop-worker-key": ["worker"],
        "pitstop-vote-key": ["slack-bridge", "worker"],
        "codec-key": ["codec-server", "slack-bridge", "worker"],
        "ui-users": ["ui-proxy"],
    }
    assert _environment(services["worker"])["PITSTOP_WORKER_KEY_FILE"] == "/run/secrets/pitstop-worker-key"
    for name in ("worker", "slack-bridge"):
        assert _environment(services[name])["PITSTOP_VOTE_KEY_FILE"] == "/run/secrets/pitstop-vote-key"
    for name in ("worker", "slack-bridge", "codec-server"):
        assert _environment(services[name])["PITSTOP_CODEC_KEY_FILE"] == "/run/secrets/codec-key", name


def test_the_worker_runs_under_the_operators_policy(services: dict[str, Any]) -> None:
    worker = services["worker"]
    policy = _environment(worker)["PITSTOP_WORKER_POLICY"]
    mounts = {target: source for source, target in _bind_sources(worker)}
    assert mounts[policy] == "./deploy/worker-policy.yaml"
    assert f"./deploy/worker-policy.yaml:{policy}:ro" in worker["volumes"]
    data = _load(ROOT / "deploy" / "worker-policy.yaml")
    assert set(data) <= {"files", "clusters_dir", "clusters", "s3", "etcd", "secrets", "http", "prometheus"}
    # Clusters are the worker's, by name; no cluster may run kubeconfig plugins by default.
    assert data["clusters"] and not any(c.get("allow_exec") for c in data["clusters"].values())
    s3 = _environment(worker)["AWS_ENDPOINT_URL_S3"]
    assert any(e["url"] == s3 for e in data["s3"]["endpoints"]), "the stack's own S3 must be allowed"


def _caddy_routes() -> dict[str, str]:
    """`handle_path <prefix>` / `handle` -> upstream default, from deploy/caddy/Caddyfile."""
    text = (ROOT / "deploy" / "caddy" / "Caddyfile").read_text(encoding="utf-8")
    routes: dict[str, str] = {}
    for match in re.finditer(r"handle(?:_path)?\s*([^\s{]*)\s*\{\s*reverse_proxy\s+(\S+)", text):
        upstream = re.fullmatch(r"\{\$\w+:([^}]+)\}", match.group(2))
        routes[match.group(1) or "*"] = upstream.group(1) if upstream else match.group(2)
    return routes


def test_the_ui_and_the_codec_server_are_reachable_only_through_the_login(
    compose: dict[str, Any], services: dict[str, Any]
) -> None:
    assert "ports" not in services["temporal-ui"] and "ports" not in services["codec-server"]
    assert services["codec-server"]["networks"] == ["ui-edge"], "nothing else may reach the codec server"
    assert set(services["ui-proxy"]["networks"]) == {"ui-edge"}
    assert "ui-edge" in compose["networks"] and "ui-edge" in services["temporal-ui"]["networks"]
    proxy = services["ui-proxy"]
    assert "./deploy/caddy/Caddyfile:/etc/caddy/Caddyfile:ro" in proxy["volumes"]
    caddyfile = (ROOT / "deploy" / "caddy" / "Caddyfile").read_text(encoding="utf-8")
    assert "basic_auth" in caddyfile and "/run/secrets/ui-users" in caddyfile
    assert _caddy_routes() == {"/codec/*": "codec-server:8081", "*": "temporal-ui:8080"}


def test_the_ui_the_codec_server_and_the_proxy_agree(services: dict[str, Any]) -> None:
    ui_url = re.fullmatch(
        r"\$\{PITSTOP_UI_URL:-([^}]+)\}", _environment(services["worker"])["PITSTOP_UI_URL"]
    )
    assert ui_url, "PITSTOP_UI_URL must default the same way everywhere"
    origin = ui_url.group(1)
    ui = _environment(services["temporal-ui"])
    assert ui["TEMPORAL_CODEC_ENDPOINT"] == "${PITSTOP_UI_URL:-" + origin + "}/codec"
    command = services["codec-server"]["command"]
    assert command[:3] == ["pitstop", "codec", "serve"]
    port = command[command.index("--port") + 1]
    assert command[command.index("--ui-origin") + 1] == "${PITSTOP_UI_URL:-" + origin + "}"
    assert command[command.index("--host") + 1] == "0.0.0.0"  # inside its container, on ui-edge only
    assert _caddy_routes()["/codec/*"] == f"codec-server:{port}"
    assert str(services["ui-proxy"]["ports"][0]).endswith(":8233") and origin.endswith(":8233")
    assert "codec-key" not in _secrets_of(services["temporal-ui"]), "the UI never holds the key"


def test_pitstop_containers_run_without_privileges(services: dict[str, Any]) -> None:
    for name in ("worker", "slack-bridge", "codec-server"):
        service = services[name]
        assert service["read_only"] is True, name
        assert service["cap_drop"] == ["ALL"], name
        assert "no-new-privileges:true" in service["security_opt"], name


# --- the real parser, where there is one ------------------------------------------------


def _compose_v2() -> list[str] | None:
    docker = shutil.which("docker")
    if docker:
        probe = subprocess.run([docker, "compose", "version"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return [docker, "compose"]
    standalone = shutil.which("docker-compose")
    if standalone:
        probe = subprocess.run([standalone, "version", "--short"], capture_output=True, text=True, timeout=30)
        if probe.returncode == 0 and not probe.stdout.strip().startswith("1."):
            return [standalone]
    return None


def test_docker_compose_config_accepts_the_file() -> None:
    command = _compose_v2()
    if command is None:
        pytest.skip("no Docker Compose v2 client on PATH")
    result = subprocess.run(
        [*command, "--project-directory", str(ROOT), "-f", str(COMPOSE),
         "--env-file", str(ENV_EXAMPLE), "config", "-q"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
