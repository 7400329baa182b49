"""Issue #13, YAML hardening: `pitstop validate` refuses billion laughs, deep nesting, explicit
tags, recursive aliases, oversized files and import amplification quickly, with file:line:col,
in a child process with a memory limit and a deadline (`_bounded`). Before, aliases expanded
without bound (validate hung) and tags gave internal errors or odd values. (The same refusals
through `plan.load` are in test_expressions_engine.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from pitstop.runbook import RunbookError, load_runbook
from pitstop.safe_yaml import MAX_YAML_BYTES, YamlLimitError, safe_load
from tests.security._bounded import validate_in_child

TAIL = "hosts: localhost\ntasks:\n  - debug: {msg: hi}\n"


def laughs(levels: int = 9) -> str:
    lines = [
        "name: laughs",
        "vars:",
        '  l0: &l0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]',
    ]
    for level in range(1, levels + 1):
        lines.append(f"  l{level}: &l{level} [{', '.join([f'*l{level - 1}'] * 9)}]")
    return "\n".join(lines) + "\n" + TAIL


def refused(path: Path, text: str) -> str:
    """Validate `text` as `path` in a bounded child; it must exit 1 with one line naming a
    file of the runbook, line and column."""
    path.write_text(text)
    done = validate_in_child(path)
    assert done.returncode == 1, done.stdout + done.stderr
    message = done.stderr.strip()
    assert message.startswith(f"{path.parent}/") and len(message.splitlines()) == 1, message
    return message


def test_billion_laughs_is_refused(tmp_path: Path) -> None:
    message = refused(tmp_path / "laughs.yaml", laughs())
    assert ":8:" in message  # the alias that went over
    assert "once aliases are expanded (MAX_YAML_VALUES)" in message


def test_aliases_for_dry_vars_still_work(tmp_path: Path) -> None:
    runbook = tmp_path / "dry.yaml"
    runbook.write_text(
        "name: dry\nvars:\n  base: &base {zone: a, tier: gpu}\n  canary: *base\n"
        "  fleet: {<<: *base, tier: cpu}\n  small: &s [1, 2]\n  again: [*s, *s]\n" + TAIL
    )
    done = validate_in_child(runbook)
    assert done.returncode == 0, done.stderr
    loaded = load_runbook(runbook)
    assert loaded.vars["canary"] == {"zone": "a", "tier": "gpu"}
    assert loaded.vars["fleet"] == {"zone": "a", "tier": "cpu"}
    assert loaded.vars["again"] == [[1, 2], [1, 2]]


def test_recursive_alias_is_refused(tmp_path: Path) -> None:
    message = refused(tmp_path / "rec.yaml", "name: r\nvars:\n  x: &x [1, *x]\n" + TAIL)
    assert message == (
        f"{tmp_path / 'rec.yaml'}:3:13: alias *x refers to the collection that contains it; "
        "recursive aliases are refused"
    )


@pytest.mark.parametrize(
    ("nesting", "where"),
    [
        ("[" * 100_000 + "]" * 100_000, ":3:70:"),  # flow: ruamel's scanner is quadratic in it
        ("{a: " * 5000 + "1" + "}" * 5000, ":3:"),
    ],
    ids=["brackets", "braces"],
)
def test_deep_flow_nesting_is_refused(tmp_path: Path, nesting: str, where: str) -> None:
    message = refused(tmp_path / "deep.yaml", f"name: deep\nvars:\n  x: {nesting}\n" + TAIL)
    assert where in message and "nest deeper than 64 levels (MAX_YAML_DEPTH)" in message


def test_deep_block_nesting_is_refused(tmp_path: Path) -> None:
    block = "".join("  " * (i + 1) + f"k{i}:\n" for i in range(1500)) + "  " * 1501 + "v\n"
    message = refused(tmp_path / "deep.yaml", "name: deep\nvars:\n" + block + TAIL)
    assert ":65:" in message and "values nest deeper than 64 levels (MAX_YAML_DEPTH)" in message


TAGS = [
    ("!!python/object/apply:os.system ['touch /tmp/pwned']", "!!python/object/apply:os.system"),
    ("!!python/name:os.system", "!!python/name:os.system"),
    ("!!binary aGVsbG8=", "!!binary"),
    ("!!set {a, b}", "!!set"),
    ("!!omap [a: 1, b: 2]", "!!omap"),
    ("!!timestamp 2024-01-01", "!!timestamp"),
    ("!unsafe '{{ x }}'", "!unsafe"),
    ("!vault |\n    $ANSIBLE_VAULT;1.1;AES256", "!vault"),
    ("!custom {a: 1}", "!custom"),
]


@pytest.mark.parametrize(("value", "tag"), TAGS, ids=[t for _, t in TAGS])
def test_explicit_tags_are_refused(tmp_path: Path, value: str, tag: str) -> None:
    marker = tmp_path / "pwned"
    message = refused(tmp_path / "tag.yaml", f"name: t\nvars:\n  x: {value}\n" + TAIL)
    assert message.startswith(f"{tmp_path / 'tag.yaml'}:3:6: explicit tag {tag} is refused"), message
    assert not marker.exists() and not Path("/tmp/pwned").exists()


def test_plain_tags_are_accepted() -> None:
    assert safe_load("a: !!str 1.10\nb: !!int '7'\nc: !!map {d: !!seq [1]}\n") == {
        "a": "1.10",
        "b": 7,
        "c": {"d": [1]},
    }


def test_tags_are_refused_in_inventories_and_task_files(tmp_path: Path) -> None:
    inventory = refused(tmp_path / "inventory.yaml", "all:\n  hosts:\n    h1: {ip: !!binary aGVsbG8=}\n")
    assert ":3:14: explicit tag !!binary is refused" in inventory
    tasks = refused(tmp_path / "tasks.yaml", "- debug: {msg: !!set {a}}\n")
    assert ":1:16: explicit tag !!set is refused" in tasks


def test_oversized_file_is_refused_before_parsing(tmp_path: Path) -> None:
    filler = "# " + "x" * 98 + "\n"
    message = refused(tmp_path / "big.yaml", TAIL + filler * (MAX_YAML_BYTES // len(filler) + 1))
    assert message.startswith(f"{tmp_path / 'big.yaml'}:1:1: the file is ")
    assert "MAX_YAML_BYTES" in message


def test_an_imported_task_file_is_bounded_too(tmp_path: Path) -> None:
    (tmp_path / "tasks.yaml").write_text("- debug: {msg: !!binary aGVsbG8=}\n")
    message = refused(
        tmp_path / "runbook.yaml", "name: i\nhosts: localhost\ntasks:\n  - import_tasks: tasks.yaml\n"
    )
    assert "tasks.yaml:1:16: explicit tag !!binary is refused" in message


def test_import_amplification_is_refused(tmp_path: Path) -> None:
    # Each file imports the next one twice: 2**20 tasks if expanded.
    for level in range(20):
        (tmp_path / f"t{level}.yaml").write_text(f"- import_tasks: t{level + 1}.yaml\n" * 2)
    (tmp_path / "t20.yaml").write_text("- debug: {msg: hi}\n")
    message = refused(
        tmp_path / "runbook.yaml", "name: i\nhosts: localhost\ntasks:\n  - import_tasks: t0.yaml\n"
    )
    assert "more than 2000 tasks once import_tasks are expanded (MAX_RUNBOOK_TASKS)" in message


def test_bounded_loader_is_the_one_data_files_use() -> None:
    # Manifests, compat data and other data files go through safe_load: the same refusals.
    with pytest.raises(YamlLimitError, match="MAX_YAML_VALUES"):
        safe_load(laughs())
    with pytest.raises(YamlLimitError, match="explicit tag !!python/object"):
        safe_load("a: !!python/object:os.system {}\n", all_documents=True)
    from pitstop.kube.manifests import ManifestError, parse_documents

    with pytest.raises(ManifestError, match=r"m.yaml:2:7: invalid YAML: explicit tag !!binary"):
        parse_documents("kind: ConfigMap\ndata: !!binary aGVsbG8=\n", "m.yaml")


def test_runbook_loader_reports_limits_as_runbook_errors(tmp_path: Path) -> None:
    path = tmp_path / "laughs.yaml"
    path.write_text(laughs())
    with pytest.raises(RunbookError) as caught:
        load_runbook(path)
    assert (caught.value.line, caught.value.column) == (8, 42)


def test_cli_bundle_is_capped_before_it_is_read(tmp_path: Path) -> None:
    from pitstop.bundle import MAX_BUNDLE_BYTES, BundleError, collect

    filler = "# " + "x" * 98 + "\n"
    (tmp_path / "tasks.yaml").write_text("- debug: {msg: hi}\n" + filler * (MAX_BUNDLE_BYTES // 100 + 1))
    runbook = tmp_path / "runbook.yaml"
    runbook.write_text("name: b\nhosts: localhost\ntasks:\n  - import_tasks: tasks.yaml\n")
    with pytest.raises(BundleError, match=rf"the limit is {MAX_BUNDLE_BYTES} \(MAX_BUNDLE_BYTES\)"):
        collect(runbook, None)
