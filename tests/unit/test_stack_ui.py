"""Which Temporal UI links point at (pitstop/stack_ui.py): the stack actually in use, not the
default port. The home's stack.json is written as `pitstop dev up` writes it."""

from __future__ import annotations

from pathlib import Path

from pitstop.devstack import StackConfig
from pitstop.settings import Settings
from pitstop.slack.config import SlackSettings
from pitstop.stack_ui import stack_state_path, stack_ui_url


def _up(home: Path, **ports: int) -> Path:
    """The state `pitstop dev up --ui-port ...` leaves in its home."""
    config = StackConfig(home=home, **ports)  # type: ignore[arg-type]
    path = stack_state_path(home)
    path.parent.mkdir(parents=True)
    path.write_text(config.model_dump_json(indent=2))
    return home


def test_the_embedded_stack_of_the_home_gives_its_ui_port(tmp_path: Path) -> None:
    home = _up(tmp_path, temporal_port=7233, ui_port=9233)
    assert stack_ui_url(home, "127.0.0.1:7233", {}) == "http://127.0.0.1:9233"
    assert stack_ui_url(home, "localhost:7233", {}) == "http://127.0.0.1:9233"


def test_an_explicit_ui_url_wins(tmp_path: Path) -> None:
    home = _up(tmp_path, ui_port=9233)
    env = {"PITSTOP_UI_URL": "https://temporal.example.com"}
    assert stack_ui_url(home, "127.0.0.1:7233", env) == "https://temporal.example.com"


def test_a_stack_of_another_temporal_is_not_the_one_in_use(tmp_path: Path) -> None:
    home = _up(tmp_path, temporal_port=17233, ui_port=9233)
    assert stack_ui_url(home, "127.0.0.1:7233", {}) == "http://127.0.0.1:8233"
    assert stack_ui_url(home, "127.0.0.1:7233", {"PITSTOP_UI_PORT": "18233"}) == "http://127.0.0.1:18233"


def test_without_a_stack_the_ui_port_variable_then_the_default(tmp_path: Path) -> None:
    assert stack_ui_url(tmp_path, "127.0.0.1:7233", {"PITSTOP_UI_PORT": "9233"}) == "http://127.0.0.1:9233"
    assert stack_ui_url(tmp_path, "127.0.0.1:7233", {}) == "http://127.0.0.1:8233"


def test_cli_worker_and_slack_settings_read_the_same_ui(tmp_path: Path) -> None:
    home = _up(tmp_path / "home", temporal_port=27233, ui_port=29233)
    env = {"PITSTOP_HOME": str(home), "TEMPORAL_ADDRESS": "127.0.0.1:27233"}
    assert Settings.from_env(env).ui_url == "http://127.0.0.1:29233"
    assert SlackSettings.from_env(env).ui_url == "http://127.0.0.1:29233"
    assert Settings.from_env({**env, "PITSTOP_UI_URL": "https://ui.example"}).ui_url == "https://ui.example"
