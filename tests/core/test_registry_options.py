"""Every registry has the same options hook (an entry's ``Options`` model, read at
``<section>.<options_key>``) and builds its CLI help from its entries: batching, ordering and
placement alike, with no policy named in the generic code."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import BaseModel, ConfigDict, Field
from typer.testing import CliRunner

from tests.cluster.helpers import FakeBackend
from tidal.augment.bundles import SERVING_POLICIES
from tidal.augment.predictor import PREDICTORS
from tidal.cli import app
from tidal.cli.flags import PLACEMENT_NAMES, SIMULATE
from tidal.cluster.config import ClusterConfig
from tidal.cluster.controller import ClusterController
from tidal.cluster.policies import PLACEMENTS
from tidal.cluster.policies.dedicated import Dedicated
from tidal.core.errors import ConfigError
from tidal.core.registry import Registry
from tidal.engine.ordering import ORDERINGS
from tidal.engine.policy import BATCHING
from tidal.sim.config import load_config


class PinOptions(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    spare_gpus: int = Field(default=0, ge=0)


class PinnedDedicated(Dedicated):
    """Dedicated placement that keeps spare GPUs."""

    name = "pinned-test"
    Options = PinOptions


@pytest.fixture
def pinned():
    PLACEMENTS.register("pinned-test")(PinnedDedicated)
    yield
    PLACEMENTS._items.pop("pinned-test")  # keep the registry as the package defines it


def _cluster(placement: str, **options):
    return {
        "workload": {"trace": "azure_llm_2023/AzureLLMInferenceTrace_code.csv.gz"},
        "cluster": {
            "spec": "1x4:h100",
            "models": ["llama-2-7b"],
            "placement": placement,
            "placement_options": options,
        }
    }


def test_a_placement_policy_declares_its_options_like_a_batching_policy(pinned):
    cfg = ClusterConfig(
        spec="1x4:h100", models=["llama-2-7b"], placement="pinned-test",
        placement_options={"spare_gpus": 2},
    )  # fmt: skip
    ctl = ClusterController(cfg, FakeBackend(), np.zeros(0, dtype=np.int64))
    assert ctl.policy.options == PinOptions(spare_gpus=2)
    assert "pinned-test (Dedicated placement that keeps spare GPUs) [options: " \
        "cluster.placement_options]" in PLACEMENTS.describe()  # fmt: skip


def test_the_config_validates_placement_options_against_the_model(pinned):
    assert load_config(_cluster("pinned-test", spare_gpus=1)).cluster.placement_options == {
        "spare_gpus": 1
    }
    with pytest.raises(ConfigError, match="spare_gpu"):
        load_config(_cluster("pinned-test", spare_gpu=1))
    with pytest.raises(ConfigError, match=r"cluster\.placement_options: 'dedicated' takes no"):
        load_config(_cluster("dedicated", spare_gpus=1))


def test_one_hook_for_every_registry():
    """The generic code reads ``Options`` and ``options_key`` only: an entry of any registry
    that declares them gets validation and help, one that does not gets neither."""

    class Knobs(BaseModel):
        level: int = 1

    class Plain:
        """A plain entry."""

    class Tuned:
        """A tuned entry."""

        Options = Knobs
        options_key = "tuned"

    reg: Registry[type] = Registry("thing", section="part")
    reg.register("plain")(Plain)
    reg.register("tuned")(Tuned)
    assert reg.options_path("plain") == "part.options"
    assert reg.options_path("tuned") == "part.tuned"
    assert reg.validate_options("plain", {}) is None
    assert reg.validate_options("tuned", {"level": 3}, at="part.tuned") == Knobs(level=3)
    with pytest.raises(ValueError, match=r"part\.options: 'tuned' takes no options there "
                       r"\(its options are part\.tuned\)"):  # fmt: skip
        reg.validate_options("tuned", {"level": 3})
    with pytest.raises(ValueError, match=r"part\.options: 'plain' takes no options there$"):
        reg.validate_options("plain", {"level": 3})
    assert reg.describe() == "plain (A plain entry); tuned (A tuned entry) [options: part.tuned]"
    assert reg.describe(summaries=False) == "plain | tuned"


def test_the_help_lists_every_registered_name():
    runner = CliRunner()
    res = runner.invoke(app, ["simulate", "--help"], env={"COLUMNS": "300"})
    text = " ".join(res.output.split())
    for registry in (BATCHING, ORDERINGS, PLACEMENTS, SERVING_POLICIES, PREDICTORS):
        for name in registry:
            assert name in text, (registry.kind, name)
    batching = SIMULATE["batching"].help  # (the rendered help wraps it in a box)
    assert BATCHING.describe() in batching
    assert "eb (Exclusive batching" in batching
    assert "[options: scheduler.eb]" in batching  # EB's options key, read from the class
    assert tuple(PLACEMENTS) == PLACEMENT_NAMES  # --placement's help, listed without importing
    assert " | ".join(PLACEMENTS) in SIMULATE["placement"].help
