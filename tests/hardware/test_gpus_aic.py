"""The GPUs of the operator tables: B300, GB200 and GB300 read off the package's system specs,
every GPU's table system id, and those ids as aliases."""

from __future__ import annotations

import pytest
import yaml

from tidal.core.errors import ConfigError
from tidal.hardware.gpus import GIB, GPUS, get_gpu
from tidal.hardware.hf_config import package_dir

ROOT = package_dir()
pytestmark = pytest.mark.skipif(ROOT is None, reason="aiconfigurator-core not installed")


def test_every_gpu_but_the_a40_names_a_system_with_tables():
    assert GPUS["a40"].aic_system == ""
    assert ROOT is not None
    for gpu in GPUS.values():
        if gpu.aic_system:
            assert (ROOT / "systems" / f"{gpu.aic_system}.yaml").is_file(), gpu.name
            assert (ROOT / "systems" / "data" / gpu.aic_system / "gemm").is_dir(), gpu.name


@pytest.mark.parametrize("name", ["b300", "gb200", "gb300"])
def test_blackwell_specs_match_the_package_system_files(name):
    gpu = GPUS[name]
    assert ROOT is not None
    spec = yaml.safe_load((ROOT / "systems" / f"{gpu.aic_system}.yaml").read_text())
    g, node = spec["gpu"], spec["node"]
    assert gpu.bf16_tflops * 1e12 == g["bfloat16_tc_flops"]
    assert gpu.fp8_tflops is not None
    assert gpu.fp8_tflops * 1e12 == g["fp8_tc_flops"]
    assert gpu.mem_bw == g["mem_bw"]
    assert gpu.nvlink_gbs * 1e9 == node["intra_node_bw"]
    assert gpu.pcie_gbs * 1e9 == node["pcie_bw"]
    # the driver reports nvidia-smi's total less ≈ 0.58 GiB
    assert gpu.mem_bytes == pytest.approx(g["mem_capacity"] - 0.58 * GIB, abs=0.01 * GIB)


def test_table_system_ids_are_aliases():
    for gpu in GPUS.values():
        if gpu.aic_system:
            assert get_gpu(gpu.aic_system) is gpu
    assert get_gpu("h100_sxm@2TBs").mem_bw_tbs == 2.0
    with pytest.raises(ConfigError, match="h100_sxm"):
        get_gpu("h100-sxm")
