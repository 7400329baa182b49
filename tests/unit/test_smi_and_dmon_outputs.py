"""`nvidia-smi -q` ECC sections on real outputs nobody here wrote (tests/fixtures/real/nvidia_smi/,
sources in its README and each `.expected.yaml`; the expected values were read from the files by
a person), `dcgmi dmon` in the layouts of NVIDIA/DCGM's DeviceMonitor.cpp, and the simulator's
answers to both as the real tools give them in a container with or without GPUs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pitstop.gpu import emit
from pitstop.gpu.dcgm import dcgmi_diag_command, dcgmi_dmon_command
from pitstop.gpu.dmon import DmonParseError, parse_dmon
from pitstop.gpu.smi import SmiParseError, parse_nvidia_smi_q
from pitstop.module_args.acceptance import AcceptanceArgs
from pitstop_sim.models import NodeHealth, NodeProfile
from pitstop_sim.validation_logs import HOSTENGINE_REACHABLE, produce

REAL = Path(__file__).resolve().parents[1] / "fixtures" / "real" / "nvidia_smi"


def real(name: str) -> str:
    return (REAL / name).read_text()


H100 = "q_565.57.01_8xH100-80GB-HBM3_clean_thamada.txt"
A100_PENDING = "q_510.73.08_A100-SXM4-80GB_pending_remap_stas00_ml-engineering_CUT.txt"
V100_470 = "q_470.129.06_V100-PCIE-32GB_sbe_retired_page_bsyonline_blog.txt"
H800_OFF = "q_525.105.17_H800_ecc_disabled_liguodongiot_llm-action.txt"
GH200 = "q_550.127.05_GH200-480GB_aggregate_dram_uncorrectable_remapped_idx9343709936_CUT.txt"
V100_D_ECC = "q_d_ECC_580.105.08_V100-SXM2-32GB-LS_single_double_bit_scuffedsquared_idx66831183617.txt"


@pytest.mark.parametrize(
    ("name", "driver", "attached", "bus_ids", "ecc_mode", "problems"),
    [
        (H100, "565.57.01", 8, ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"], "Enabled", []),
        (A100_PENDING, "510.73.08", 8, ["10"], None,  # the author cut ECC Mode out
         ["GPU 00000000:10:1C.0: a row remap is pending (Remapped Rows Pending: Yes; the GPU needs a "
          "reset)"]),
        (V100_470, "470.129.06", 8, ["1C"], "Enabled", []),
        (H800_OFF, "525.105.17", 8, ["18"], "Disabled", []),
        (GH200, "550.127.05", 1, ["DD"], "Enabled", []),
        (V100_D_ECC, "580.105.08", 4, ["41"], "Enabled", []),
    ],
)  # fmt: skip
def test_smi_reads_every_driver_generation_as_printed(
    name: str, driver: str, attached: int, bus_ids: list[str], ecc_mode: str | None, problems: list[str]
) -> None:
    report = parse_nvidia_smi_q(real(name))
    assert (report.driver_version, report.attached_gpus) == (driver, attached)
    assert [g.bus_id.split(":")[1] for g in report.gpus] == bus_ids
    assert {g.ecc_mode for g in report.gpus} == {ecc_mode}
    assert report.problems() == problems
    assert all(not g.unreadable for g in report.gpus)


def test_smi_counters_of_the_r550_split_layout_and_a_remapped_lifetime_error() -> None:
    [gpu] = parse_nvidia_smi_q(real(GH200)).gpus
    assert gpu.product == "NVIDIA GH200 480GB"
    assert gpu.volatile_uncorrectable == {
        "SRAM Uncorrectable Parity": 0, "SRAM Uncorrectable SEC-DED": 0, "DRAM Uncorrectable": 0,
    }  # fmt: skip
    assert gpu.aggregate_uncorrectable["DRAM Uncorrectable"] == 1
    remap = (gpu.remapped_uncorrectable, gpu.remap_pending, gpu.remap_failure)
    assert (gpu.sram_threshold_exceeded, *remap) == (False, 1, False, False)
    # History, not a failure: the row was remapped and nothing happened since the driver loaded.
    assert gpu.problems() == []
    assert gpu.history() == ["aggregate DRAM Uncorrectable 1", "1 rows remapped for uncorrectable errors"]


def test_smi_counters_of_the_older_layouts() -> None:
    [v100] = parse_nvidia_smi_q(real(V100_470)).gpus
    assert (v100.volatile_uncorrectable, v100.aggregate_correctable) == (
        {"Double Bit Total": 0}, {"Single Bit Total": 3},
    )  # fmt: skip
    assert (v100.retired_sbe, v100.retired_dbe, v100.retired_pending, v100.remap_pending) == (
        1,
        0,
        False,
        None,
    )
    [a100] = parse_nvidia_smi_q(real(A100_PENDING)).gpus
    assert a100.volatile_correctable == {"SRAM Correctable": 0, "DRAM Correctable": 177}
    assert (a100.remapped_correctable, a100.remapped_uncorrectable, a100.remap_pending) == (1, 0, True)
    # `-d ECC` alone: no Retired Pages, no Remapped Rows section.
    [dflag] = parse_nvidia_smi_q(real(V100_D_ECC)).gpus
    assert (dflag.volatile_uncorrectable, dflag.retired_pending, dflag.remap_pending) == (
        {"Double Bit Total": 0}, None, None,
    )  # fmt: skip


def test_smi_with_ecc_off_counts_nothing_and_says_so() -> None:
    report = parse_nvidia_smi_q(real(H800_OFF))
    assert report.ecc_off() == ["GPU 00000000:18:00.0"]
    assert report.gpus[0].volatile_uncorrectable == {}


def test_smi_never_reads_an_unreadable_counter_as_zero() -> None:
    text = real(GH200).replace(
        "            DRAM Uncorrectable            : 0\n",
        "            DRAM Uncorrectable            : [Unknown Error]\n",
        1,
    )
    assert parse_nvidia_smi_q(text).problems() == [
        "GPU 00000000:DD:00.0: volatile DRAM Uncorrectable reads '[Unknown Error]'"
    ]


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("No devices were found\n", "nvidia-smi sees no GPU in the container: No devices were found"),
        ("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the "
         "latest NVIDIA driver is installed and running.\n\n",
         "nvidia-smi could not talk to the driver: NVIDIA-SMI has failed because it couldn't communicate"),
        ("sh: 1: nvidia-smi: not found\n",
         "nvidia-smi is not in the container (it comes with the GPUs): sh: 1: "),
        ("Timestamp : now\nsomething else\n",
         "no 'GPU <PCI bus id>' section in the nvidia-smi output; it starts with: "
         "'Timestamp : now something else'"),
        ("\nAttached GPUs                             : 1\nGPU 00000000:18:00.0\n    Product Name : x\n",
         "GPU 00000000:18:00.0 has no ECC Errors, Retired Pages or Remapped Rows section"),
    ],
)  # fmt: skip
def test_smi_refuses_what_is_not_its_ecc_output_in_its_own_words(text: str, said: str) -> None:
    with pytest.raises(SmiParseError) as raised:
        parse_nvidia_smi_q(text)
    assert str(raised.value).startswith(said)


def _region(text: str, first_bus: str) -> list[str]:
    """One GPU's lines from `ECC Mode` (or `ECC Errors`) through its remapped rows' histogram."""
    lines = text.splitlines()
    start = lines.index(f"GPU {first_bus}")
    body = lines[start + 1 :]
    at = next(i for i, line in enumerate(body) if line.strip() in ("ECC Mode", "Ecc Mode", "ECC Errors"))
    end = next((i for i, line in enumerate(body) if line.startswith("    Temperature")), len(body))
    return [line for line in body[at:end] if line.strip() != "[...]"]


@pytest.mark.parametrize(
    ("real_file", "product", "driver"),
    [
        (H100, "NVIDIA H100 80GB HBM3", "565.57.01"),
        (A100_PENDING, "NVIDIA A100-SXM4-80GB", "510.73.08"),
        (V100_470, "Tesla V100-PCIE-32GB", "470.129.06"),
    ],
)
def test_the_simulators_smi_lines_are_the_real_drivers_lines(
    real_file: str, product: str, driver: str
) -> None:
    """The simulator's ECC sections, key by key and column by column, are those the same driver
    printed for the same GPU (values aside: the real ones have their own counters)."""
    real_text = real(real_file)
    first = real_text.split("\nGPU ", 1)[1].splitlines()[0]
    ours = emit.nvidia_smi_q_ecc(product, driver, [(0, emit.GpuMemoryState())])
    real_lines = _region(real_text, first)

    def keys(lines: list[str]) -> list[str]:
        return [line.split(":")[0] if ":" in line else line for line in lines]

    ours_lines = _region(ours, emit.bus_id(0))
    if real_file == A100_PENDING:  # the author cut ECC Mode out of his block
        ours_lines = ours_lines[3:]
    assert keys([line.replace("Ecc Mode", "ECC Mode") for line in ours_lines]) == keys(
        [line.replace("Ecc Mode", "ECC Mode") for line in real_lines]
    )
    if real_file == H100:  # a clean H100 on that driver: the very same lines
        assert ours_lines == real_lines


# --- dcgmi dmon -------------------------------------------------------------------------------


@pytest.mark.parametrize(("version", "entity_width"), [("3.3.7", 10), ("4.2.3", 11), ("4.6.0", 16)])
def test_dmon_reads_the_table_of_each_dcgm_layout(version: str, entity_width: int) -> None:
    text = emit.dcgmi_dmon(
        [230, 310, 311], {0: {230: 79, 310: 4, 311: 0}, 1: {230: None, 310: 0, 311: 2}}, version
    )
    names = "".join(name.ljust(13) for name in ("XIDER", "ESVTL", "EDVTL"))
    assert text.splitlines()[0] == "#Entity".ljust(entity_width) + names
    reading = parse_dmon(text)
    assert reading.columns == ["XIDER", "ESVTL", "EDVTL"]
    assert reading.gpu_values(230) == {0: 79, 1: None}
    assert reading.gpu_values(311) == {0: 0, 1: 2}


def test_dmon_of_dcgm_2_right_aligned_and_a_blank_cell() -> None:
    # DCGM 2.1 (DeviceMonitor.cpp SetHeaderForOutput: "#" + setw(7) "Entity", setw(width+2) names).
    old = (
        "# Entity      XIDER      EDVTL\n      Id                      \n"
        "    GPU 0        N/A          0\n    GPU 1         13          1\n"
    )
    assert parse_dmon(old).gpu_values(230) == {0: None, 1: 13}
    # 3.x with an entity that has no such field: the cell is blank, read by column position.
    blank = (
        "#Entity   XIDER        EDVTL        \nID                                 \n"
        "GPU 0                  0            \n"
    )
    assert parse_dmon(blank).gpu_values(230) == {0: None}
    assert parse_dmon(blank).gpu_values(311) == {0: 0}


def test_dmon_reports_dcgmis_own_words_and_refuses_other_text() -> None:
    refused = (
        "Error: unable to establish a connection to the specified host: nvidia-dcgm.gpu-operator.svc:5555\n"
        "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n"
    )
    said = (
        r"^dcgmi dmon: Error: unable to establish a connection to the specified host: "
        r"nvidia-dcgm.gpu-operator.svc:5555 Error: Unable to connect"
    )
    with pytest.raises(DmonParseError, match=said):
        parse_dmon(refused)
    with pytest.raises(
        DmonParseError, match=r"^no '#Entity' header in the dcgmi dmon output; it starts with"
    ):
        parse_dmon("Segmentation fault\n")
    with pytest.raises(DmonParseError, match=r"printed no XIDER column \(field 230\); its columns: EDVTL"):
        parse_dmon(emit.dcgmi_dmon([311], {0: {311: 0}})).gpu_values(230)


def test_dmon_commands_reach_the_same_hostengine_as_diag() -> None:
    assert dcgmi_dmon_command([230, 310, 311], "nvidia-dcgm.gpu-operator.svc:5555") == [
        "dcgmi", "dmon", "--host", "nvidia-dcgm.gpu-operator.svc:5555", "-e", "230,310,311", "-c", "1",
    ]  # fmt: skip
    assert dcgmi_dmon_command([230]) == ["sh", "-c", "nv-hostengine && dcgmi dmon -e 230 -c 1"]
    assert dcgmi_diag_command(3) == ["sh", "-c", "nv-hostengine && dcgmi diag -r 3 -j"]
    assert dcgmi_diag_command(2, "h:5555") == ["dcgmi", "diag", "--host", "h:5555", "-r", "2", "-j"]


# --- the simulator's containers ---------------------------------------------------------------


def profile(**health: Any) -> NodeProfile:
    return NodeProfile(
        name="gpu-node-001",
        domain="zone-a",
        gpu_product="NVIDIA-H100-80GB-HBM3",
        gpus=8,
        driver_version="550.90.07",
        firmware_version="fw",
        kernel_version="k",
        os_image="os",
        kubelet_version="v1.32.4",
        container_runtime="containerd://1.7.20",
        health=NodeHealth.model_validate(health),
    )


def pod(
    command: list[str], *, gpus: int = 0, env: dict[str, str] | None = None, reachable: bool = False
) -> Any:
    container: dict[str, Any] = {
        "image": "nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04",
        "command": command,
    }
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    notes = {HOSTENGINE_REACHABLE: "true"} if reachable else {}
    return {"metadata": {"annotations": notes}, "spec": {"containers": [container]}}


SMI = ["sh", "-c", "nvidia-smi -q -d ECC,ROW_REMAPPER,PAGE_RETIREMENT"]
SICK = {
    "xid_errors": [79, 48],
    "ecc": [{"gpu": 3, "volatile_uncorrectable": 2}, {"gpu": 6, "remap_failure": True}],
}


def test_the_simulators_nvidia_smi_needs_gpus_in_the_container() -> None:
    bare = produce("ecc", profile(), pod(SMI))
    assert (bare.succeeded, bare.log) == (False, "sh: 1: nvidia-smi: not found\n")
    none = produce("ecc", profile(), pod(SMI, env={"NVIDIA_VISIBLE_DEVICES": "none"}))
    assert (none.succeeded, none.log) == (False, "No devices were found\n")
    two = produce("ecc", profile(**SICK), pod(SMI, gpus=2))
    assert two.succeeded and len(parse_nvidia_smi_q(two.log).gpus) == 2
    every = parse_nvidia_smi_q(
        produce("ecc", profile(**SICK), pod(SMI, env={"NVIDIA_VISIBLE_DEVICES": "all"})).log
    )
    assert every.problems() == [
        "GPU 00000000:5D:00.0: volatile DRAM Uncorrectable 2",
        "GPU 00000000:BA:00.0: Remapping Failure Occurred: Yes",
    ]
    # A scenario regression overrides health with model_copy: its `ecc` entries arrive as dicts.
    regressed = profile()
    regressed.health = NodeHealth().model_copy(update={"ecc": [{"gpu": 1, "remap_pending": True}]})
    assert parse_nvidia_smi_q(produce("ecc", regressed, pod(SMI, gpus=8)).log).problems() == [
        "GPU 00000000:2A:00.0: a row remap is pending (Remapped Rows Pending: Yes; the GPU needs a reset)"
    ]
    broken = produce("ecc", profile(fails_validation=["ecc"]), pod(SMI, gpus=8))
    assert not broken.succeeded and broken.log.startswith("NVIDIA-SMI has failed because it couldn't")


def test_the_simulators_dmon_sees_past_xids_only_through_the_nodes_hostengine() -> None:
    remote = ["dcgmi", "dmon", "--host", "nvidia-dcgm.gpu-operator.svc:5555", "-e", "230,310,311", "-c", "1"]
    unreachable = produce("xid", profile(**SICK), pod(remote))
    assert not unreachable.succeeded
    assert unreachable.log.startswith(
        "Error: unable to establish a connection to the specified host: nvidia-dcgm.gpu-operator.svc:5555"
    )
    reading = parse_dmon(produce("xid", profile(**SICK), pod(remote, reachable=True)).log)
    assert reading.gpu_values(230) == {0: 79, 1: 48, **{i: None for i in range(2, 8)}}
    assert reading.gpu_values(311)[3] == 2
    # A hostengine started in the probe has seen no Xid; the ECC counters it reads all the same.
    embedded = parse_dmon(produce("xid", profile(**SICK), pod(dcgmi_dmon_command([230, 311]), gpus=8)).log)
    assert set(embedded.gpu_values(230).values()) == {None}
    assert embedded.gpu_values(311)[3] == 2
    # The dmesg path is unchanged.
    assert (
        produce("xid", profile(**SICK), pod(["sh", "-c", "dmesg"])).log
        == "dmesg: klogctl: Operation not permitted\n"
    )


def test_the_xid_source_resolves_from_the_hostengine_and_refuses_dcgm_without_one() -> None:
    assert AcceptanceArgs().xid_from == "kernel_log"
    assert AcceptanceArgs(dcgm_hostengine="nvidia-dcgm.gpu-operator.svc:5555").xid_from == "dcgm"
    assert AcceptanceArgs(dcgm_hostengine="h:5555", xid_source="kernel_log").xid_from == "kernel_log"
    with pytest.raises(ValueError, match=r"xid_source: dcgm reads the Xids a running nv-hostengine recorded"):
        AcceptanceArgs(xid_source="dcgm")
