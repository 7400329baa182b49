"""The one mapping from SSH failures to Temporal errors, with messages a person can act on.

Retryable (Temporal retries them within the module's RetryDefaults): an unreachable host, a
failed handshake, a connection lost while running something safe to run again.
Non-retryable: an unknown or changed host key, a refused key, a missing secret or key, a
connection lost while running something that may not be run twice.
"""

from __future__ import annotations

from temporalio.exceptions import ApplicationError

from pitstop.errors import ErrorType

HOST_KEY_MISMATCH = ErrorType.HOST_KEY_MISMATCH.value
UNAUTHORIZED = ErrorType.UNAUTHORIZED.value
UNREACHABLE = ErrorType.HOST_UNREACHABLE.value
CONNECTION_LOST = ErrorType.CONNECTION_LOST.value
PRECONDITION_FAILED = ErrorType.PRECONDITION_FAILED.value
INVALID_ARGS = ErrorType.INVALID_ARGS.value


class ChannelLost(Exception):
    """The SSH connection went away. `started` says whether the remote command may have run."""

    def __init__(self, address: str, command: str, started: bool, reason: str) -> None:
        super().__init__(f"connection to {address} lost while running {command}: {reason}")
        self.address = address
        self.command = command
        self.started = started
        self.reason = reason


def host_key_unknown(
    name: str, key_type: str, fingerprint: str, source: str, hint: str = ""
) -> ApplicationError:
    return ApplicationError(
        f"host key verification failed: {name} is not in {source}; it offered a {key_type} key "
        f"with fingerprint {fingerprint}{hint}. Verify that fingerprint out of band and add the "
        f"host's key to {source} (pitstop never accepts unknown host keys)",
        type=HOST_KEY_MISMATCH,
        non_retryable=True,
    )


def host_key_changed(
    name: str, key_type: str, fingerprint: str, expected: str, source: str
) -> ApplicationError:
    return ApplicationError(
        f"host key verification failed: the host key for {name} has CHANGED. It offered a "
        f"{key_type} key with fingerprint {fingerprint}; {source} expects {expected}. Someone "
        f"could be intercepting the connection, or the host was reinstalled: verify the new key "
        f"out of band, then update {source}",
        type=HOST_KEY_MISMATCH,
        non_retryable=True,
    )


def host_key_revoked(name: str, key_type: str, fingerprint: str, where: str) -> ApplicationError:
    return ApplicationError(
        f"host key verification failed: {name} offered a {key_type} key with fingerprint "
        f"{fingerprint}, which is marked @revoked in {where}. A revoked key must never be trusted: "
        f"the host (or someone in between) holds a compromised key. Give the host a new key, verify "
        f"it out of band and list it in known_hosts",
        type=HOST_KEY_MISMATCH,
        non_retryable=True,
    )


def unauthorized(user: str, address: str, key_name: str, reason: str) -> ApplicationError:
    return ApplicationError(
        f"{user}@{address} refused the SSH key from secret {key_name!r} ({reason}); add its public "
        f"key to ~{user}/.ssh/authorized_keys on the host, or fix cluster.ssh.user / ansible_user",
        type=UNAUTHORIZED,
        non_retryable=True,
    )


def unreachable(address: str, reason: str, via: str | None = None) -> ApplicationError:
    route = f" via jump host {via}" if via else ""
    return ApplicationError(f"cannot reach {address}{route} over SSH: {reason}", type=UNREACHABLE)


def precondition(message: str) -> ApplicationError:
    return ApplicationError(message, type=PRECONDITION_FAILED, non_retryable=True)


def invalid_args(message: str) -> ApplicationError:
    return ApplicationError(message, type=INVALID_ARGS, non_retryable=True)


def connection_lost(lost: ChannelLost, *, safe_to_retry: bool, why_safe: str = "") -> ApplicationError:
    """A dropped connection: retried only when running the command again is known to be safe."""
    if not lost.started:
        return ApplicationError(
            f"connection to {lost.address} lost before {lost.command} started ({lost.reason}); retrying",
            type=CONNECTION_LOST,
        )
    if safe_to_retry:
        return ApplicationError(
            f"connection to {lost.address} lost while running {lost.command} ({lost.reason}); "
            f"retrying because {why_safe}",
            type=CONNECTION_LOST,
        )
    return ApplicationError(
        f"connection lost while running {lost.command} on {lost.address} ({lost.reason}); not "
        "retried because it may have run. Check the host, then re-run; guard the command with "
        "`creates`/`removes`, or set `retry_on_disconnect: true` if running it twice is safe",
        type=CONNECTION_LOST,
        non_retryable=True,
    )
