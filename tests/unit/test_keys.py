"""The worker and vote keys (pitstop/keys.py) and what signs with them (pitstop/signing.py):
where a key comes from, every refusal of an unusable one, and a worker that has none."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from pitstop import signing
from pitstop.keys import (
    KeyConfigError,
    ensure_home_keys,
    home_key_path,
    load_key,
    new_key_text,
    parse_keys,
    require_key,
)

KEY = new_key_text()
OTHER = new_key_text()
REPO = Path(__file__).resolve().parents[2]


def test_a_key_comes_from_the_variable_or_the_file_and_never_shows() -> None:
    ring = load_key("worker", {"PITSTOP_WORKER_KEY": KEY}, home=Path("/nonexistent"))
    assert ring is not None and ring.signing == bytes.fromhex(KEY) and ring.origin == "PITSTOP_WORKER_KEY"
    assert KEY not in repr(ring) and KEY not in str(ring) and ring.key_id not in KEY
    assert len(ring.key_id) == 12


def test_a_key_file_and_the_embedded_stacks_home(tmp_path: Path) -> None:
    path = tmp_path / "vote.key"
    path.write_text(f"# rotated 2026-11\n{KEY}\n{OTHER}\n")
    ring = load_key("vote", {"PITSTOP_VOTE_KEY_FILE": str(path)}, home=tmp_path / "home")
    assert ring is not None and ring.keys == (bytes.fromhex(KEY), bytes.fromhex(OTHER))
    # Neither variable: the embedded stack's key, when `pitstop dev up` wrote one.
    home = tmp_path / "home"
    assert load_key("vote", {}, home=home) is None
    worker_path, vote_path = ensure_home_keys(home)
    assert (worker_path, vote_path) == (home_key_path("worker", home), home_key_path("vote", home))
    for made in (worker_path, vote_path):
        assert stat.S_IMODE(made.stat().st_mode) == 0o600
    assert stat.S_IMODE((home / "keys").stat().st_mode) == 0o700
    first = worker_path.read_text()
    ensure_home_keys(home)  # never replaced: running runs would stop verifying
    assert worker_path.read_text() == first and first != vote_path.read_text()
    from_home = load_key("worker", {"PITSTOP_HOME": str(home)})
    assert from_home is not None and from_home.signing == bytes.fromhex(first.strip())
    # A variable wins over the home's key.
    chosen = load_key("worker", {"PITSTOP_WORKER_KEY": KEY}, home=home)
    assert chosen is not None and chosen.signing == bytes.fromhex(KEY)


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({"PITSTOP_WORKER_KEY": "abc"}, "the worker key from PITSTOP_WORKER_KEY is not hexadecimal"),
        ({"PITSTOP_WORKER_KEY": "ab" * 16}, "is 16 bytes; at least 32 random bytes"),
        ({"PITSTOP_WORKER_KEY": "00" * 32}, "is not random (too few distinct bytes)"),
        ({"PITSTOP_WORKER_KEY": "  "}, None),
        ({"PITSTOP_WORKER_KEY": KEY, "PITSTOP_WORKER_KEY_FILE": "/x"}, "set only one of them"),
        ({"PITSTOP_WORKER_KEY_FILE": "/nonexistent/worker.key"}, "/nonexistent/worker.key: no such file"),
        ({"PITSTOP_WORKER_KEY": f"{KEY},zz"}, "(key 2) is not hexadecimal"),
    ],
)
def test_an_unusable_key_is_refused_with_what_to_do(environ: dict[str, str], expected: str | None) -> None:
    if expected is None:  # blank is unset
        assert load_key("worker", environ, home=Path("/nonexistent")) is None
        return
    with pytest.raises(KeyConfigError) as info:
        load_key("worker", environ, home=Path("/nonexistent"))
    assert expected in str(info.value)
    if "only one" not in expected:  # nothing to make there: one variable too many
        assert "pitstop keys new" in str(info.value)


def test_no_worker_key_names_both_variables_and_how_to_make_one() -> None:
    with pytest.raises(KeyConfigError) as info:
        require_key("worker", {}, home=Path("/nonexistent"))
    message = str(info.value)
    assert "neither PITSTOP_WORKER_KEY nor PITSTOP_WORKER_KEY_FILE is set" in message
    assert "pitstop keys new" in message and "pitstop dev up" in message


def test_a_signature_is_for_one_purpose_one_value_and_survives_rotation() -> None:
    old = parse_keys("worker", KEY, "old")
    rotated = parse_keys("worker", f"{OTHER}\n{KEY}", "rotated")
    value = {"kind": "gate_closed", "body": "x", "receiver": "r"}
    signature = signing.sign(old, "message", value)
    assert signing.valid(old, "message", value, signature)
    assert signing.valid(rotated, "message", value, signature)  # the old key still verifies
    assert signing.sign(rotated, "message", value) != signature  # the new one signs
    assert not signing.valid(old, "state", value, signature)
    assert not signing.valid(old, "message", {**value, "receiver": "s"}, signature)
    assert not signing.valid(parse_keys("worker", OTHER, "other"), "message", value, signature)
    assert not signing.valid(old, "message", value, "")
    # Canonical: the same value in another key order is the same value.
    assert signing.digest({"a": 1, "b": [1.5, "é"]}) == signing.digest({"b": [1.5, "é"], "a": 1})


def test_a_worker_without_a_worker_key_refuses_to_start(tmp_path: Path) -> None:
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PITSTOP_WORKER_KEY", "PITSTOP_VOTE_KEY"))
    }
    env.update(PITSTOP_HOME=str(tmp_path), TEMPORAL_ADDRESS="127.0.0.1:1")
    done = subprocess.run(
        [sys.executable, str(REPO / "worker.py")], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert "pitstop worker: no worker key: neither PITSTOP_WORKER_KEY nor PITSTOP_WORKER_KEY_FILE is set" in (
        done.stderr
    )
    assert "pitstop keys new" in done.stderr
    assert not (tmp_path / "keys").exists()  # nothing made behind the operator's back


def test_the_slack_bridge_refuses_to_start_without_the_vote_key(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PITSTOP_VOTE_KEY", "SLACK_"))}
    env.update(
        PITSTOP_HOME=str(tmp_path),
        SLACK_BOT_TOKEN="xoxb-1",
        SLACK_SIGNING_SECRET="s3cret",
        TEMPORAL_ADDRESS="127.0.0.1:1",
    )
    pitstop = Path(sys.executable).parent / "pitstop"
    done = subprocess.run(
        [str(pitstop), "slack", "serve", "--port", "0"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2
    assert "pitstop slack serve: no vote key: neither PITSTOP_VOTE_KEY nor PITSTOP_VOTE_KEY_FILE is set" in (
        done.stderr
    )
