"""Bandwidth floors per GPU product and topology, as data (`pitstop/data/gpu-p2p.yaml`), each
with the real output it comes from. A fixed default (it was 300 GB/s) failed healthy HGX A100
nodes, whose slowest pair measures ~265 GB/s; a product with no measurement here has no floor
and is judged against its own baseline."""

from __future__ import annotations

import functools
from importlib import resources

import yaml
from pydantic import BaseModel, ConfigDict, Field


class P2PMeasured(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpus: int = Field(gt=1)
    slowest_pair_gbps: float = Field(gt=0)
    fastest_pair_gbps: float = Field(gt=0)


class P2PProduct(BaseModel):
    model_config = ConfigDict(extra="forbid")

    product: str
    match: list[str] = Field(min_length=1)
    topology: str
    min_unidirectional_gbps: float = Field(gt=0)
    measured: P2PMeasured
    evidence: str
    source: str

    def covers(self, device: str) -> bool:
        return any(part in device for part in self.match)


class P2PTable(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str
    products: list[P2PProduct]


@functools.cache
def p2p_table() -> P2PTable:
    text = resources.files("pitstop").joinpath("data/gpu-p2p.yaml").read_text()
    return P2PTable.model_validate(yaml.safe_load(text))


def p2p_floor(devices: list[str]) -> P2PProduct | None:
    """The entry measured on this hardware: every device the same listed product, and as many
    of them as were measured (an HGX A100 board with 4 GPUs links each pair with 4 NVLinks, not
    through NVSwitch, so the 8-GPU floor does not hold there). None otherwise."""
    for product in p2p_table().products:
        if len(devices) == product.measured.gpus and all(product.covers(d) for d in devices):
            return product
    return None
