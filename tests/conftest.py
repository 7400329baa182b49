"""Shared fixtures. The embedded stack starts only when a test asks for it (lazily), so
unit tests never pay for it; once started it serves the whole session.

Every worker and activity of the session runs under a worker policy, as a user's would: the
session has its own PITSTOP_HOME (where the stack writes its policy and where rehearsal
clusters are registered) and tests add what they need to the policy through `worker_policy`
(tests/policy_site.py)."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from temporalio.client import Client

from pitstop.client import connect
from pitstop.devstack import DevStack, free_ports_config
from pitstop.policy.errors import POLICY_ENV
from pitstop.settings import Settings
from tests.leftovers import SESSION_ENV, kill_all, left_running
from tests.policy_site import PolicyLayer, TestSite, start_site

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

REPO_ROOT = Path(__file__).resolve().parent.parent


# First of the session's fixtures, so that its teardown runs last: session fixtures are
# finalized in the reverse order of their set-up, and autouse fixtures of this conftest are set
# up (in the order they are defined here) before any fixture a test asks for, such as `stack`.
@pytest.fixture(scope="session", autouse=True)
def nothing_left_running(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Fail the session when a process it started (sshd, etcd, Temporal, moto, a worker, ...)
    is still alive after every other fixture's teardown; the message lists pid and cmdline."""
    marker = uuid.uuid4().hex
    saved = os.environ.get(SESSION_ENV)
    # A fresh marker even in a session started by a test: its parent's processes are not its own.
    os.environ[SESSION_ENV] = marker
    yield
    if saved is None:
        os.environ.pop(SESSION_ENV, None)
    else:
        os.environ[SESSION_ENV] = saved
    left = left_running(os.getpid(), marker, tmp_path_factory.getbasetemp())
    if left:
        kill_all(left)
        listed = "\n".join(f"  {proc}" for proc in left)
        pytest.fail(
            f"{len(left)} process(es) started by this test session were still running after every "
            f"fixture's teardown (now killed):\n{listed}",
            pytrace=False,
        )


@pytest.fixture(scope="session", autouse=True)
def worker_site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestSite]:
    """The session's PITSTOP_HOME and worker policy (never a developer's own)."""
    home = tmp_path_factory.mktemp("pitstop-home")
    saved = {name: os.environ.get(name) for name in ("PITSTOP_HOME", POLICY_ENV)}
    os.environ["PITSTOP_HOME"] = str(home)
    try:
        yield start_site(home)
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture(scope="session", autouse=True)
def pitstop_keys() -> Iterator[dict[str, str]]:
    """A worker key and a vote key for the session, in the environment every worker, bridge
    and CLI of the tests reads (subprocesses inherit it). Tests that prove a key never reaches
    history read them from here."""
    from pitstop.keys import new_key_text

    keys = {"PITSTOP_WORKER_KEY": new_key_text(), "PITSTOP_VOTE_KEY": new_key_text()}
    saved = {
        name: os.environ.get(name) for name in [*keys, "PITSTOP_WORKER_KEY_FILE", "PITSTOP_VOTE_KEY_FILE"]
    }
    for name in saved:
        os.environ.pop(name, None)
    os.environ.update(keys)
    yield keys
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


@pytest.fixture
def worker_policy(worker_site: TestSite) -> Iterator[PolicyLayer]:
    """What this test adds to the worker policy (grants, endpoints, directories), removed after."""
    with worker_site.layer() as layer:
        yield layer


@pytest.fixture(scope="session")
def stack(worker_site: TestSite) -> Iterator[DevStack]:
    """Temporal + S3 + etcd on free loopback ports in the session's home, for the session.

    Free ports, not the defaults, so tests never touch a developer's own stack on 7233. Its
    worker policy (S3, etcd, the rehearsal clusters' SSH key) becomes the session's.
    """
    config = free_ports_config(worker_site.home)
    with DevStack(config).running(timeout=60) as running:
        worker_site.write()
        yield running


@pytest.fixture(scope="session")
def temporal_settings(stack: DevStack) -> Settings:
    """Settings pointing at the session stack (what `connect` and the worker read)."""
    return Settings(
        temporal_address=stack.temporal_address,
        temporal_namespace="default",
        home=stack.home,
        ui_url=stack.ui_url,
    )


@pytest.fixture(scope="session")
async def temporal_client(temporal_settings: Settings) -> AsyncIterator[Client]:
    """A client made by `pitstop.client.connect` (pydantic converter, tracing interceptor)."""
    yield await connect(temporal_settings)


@pytest.fixture(scope="session")
def s3_endpoint(stack: DevStack) -> str:
    """`http://127.0.0.1:<port>` of the moto S3 server (use path-style addressing)."""
    return stack.s3_endpoint


@pytest.fixture(scope="session")
def etcd_endpoint(stack: DevStack) -> str:
    """`http://127.0.0.1:<port>` of the etcd client URL."""
    return stack.etcd_endpoint


@pytest.fixture
def s3_client(s3_endpoint: str) -> S3Client:
    """A boto3 S3 client for the moto server (path-style, dummy credentials)."""
    import boto3
    from botocore.config import Config

    client: S3Client = boto3.client(
        "s3",
        endpoint_url=s3_endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(s3={"addressing_style": "path"}),
    )
    return client


@pytest.fixture
def task_queue(request: pytest.FixtureRequest) -> str:
    """A task queue name unique to this test, so workers of different tests never share work."""
    name = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name)[:60]
    return f"test-{name}-{uuid.uuid4().hex[:8]}"


def pytest_collection_modifyitems(config: pytest.Config, items: list[Any]) -> None:
    # Everything under tests/integration needs real components: mark it so `-m "not
    # integration"` gives a fast run.
    for item in items:
        if "integration" in Path(str(item.fspath)).parts:
            item.add_marker(pytest.mark.integration)
