"""`topologies:` and a flavor's `topology`: what loads, and every problem with its path and line."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from kuota.cli import app
from quota.loader import ConfigError, load_config_text

GOOD = """\
topologies:
  - name: gpu-fabric
    levels: [topology.kuota.dev/block, topology.kuota.dev/rack, kubernetes.io/hostname]
flavors:
  - {name: h100, nodeLabels: {gpu: h100}, topology: gpu-fabric}
  - {name: cpu}
teams: [{name: a}]
"""


def test_topologies_load_and_flavors_name_them() -> None:
    config = load_config_text(GOOD)
    topology = config.topology_of("h100")
    assert topology is not None and topology.name == "gpu-fabric"
    assert topology.levels == ("topology.kuota.dev/block", "topology.kuota.dev/rack", "kubernetes.io/hostname")
    assert config.topology_of("cpu") is None
    assert config.topology_of("missing") is None


def _problems(text: str) -> str:
    with pytest.raises(ConfigError) as caught:
        load_config_text(text, source="q.yaml")
    return caught.value.render()


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            "topologies: [{name: t, levels: [a/rack]}]\nflavors: [{name: f, topology: nope}]\n",
            "flavors[0].topology (line 2): topology 'nope' is not declared under topologies",
        ),
        (
            "topologies:\n  - name: t\n    levels: []\n",
            "topologies[0].levels (line 3): a topology needs at least one level",
        ),
        (
            "topologies:\n  - name: t\n    levels:\n      - x/rack\n      - x/rack\n",
            "topologies[0].levels[1] (line 5): level 'x/rack' is listed twice (first at levels[0])",
        ),
        (
            "topologies:\n  - name: t\n    levels: ['not a label']\n",
            "topologies[0].levels[0] (line 3): level 'not a label' is not a node label key",
        ),
        (
            "topologies:\n  - {name: t, levels: [a]}\n  - {name: t, levels: [b]}\n",
            "topologies[1].name (line 3): topology 't' is declared twice",
        ),
        ("topologies:\n  - {name: t}\n", "topologies[0].levels (line 2): Field required"),
    ],
)
def test_topology_problems_name_path_and_line(body: str, expected: str) -> None:
    assert expected in _problems(body)


def test_kuota_validate_reports_every_topology_problem(tmp_path: Path) -> None:
    bad = tmp_path / "quota.yaml"
    bad.write_text(
        "topologies:\n"
        "  - name: fabric\n"
        "    levels: [topology.kuota.dev/rack, topology.kuota.dev/rack]\n"
        "flavors:\n"
        "  - {name: h100, topology: fabrik}\n"
        "teams: [{name: ml, queues: [ml/ml], quotas: [{flavor: h100, resources: {nvidia.com/gpu: {nominal: 8}}}]}]\n"
    )
    result = CliRunner().invoke(app, ["validate", str(bad)])
    assert result.exit_code == 2
    assert "topologies[0].levels[1] (line 3): level 'topology.kuota.dev/rack' is listed twice" in result.output
    assert "flavors[0].topology (line 5): topology 'fabrik' is not declared under topologies" in result.output
    good = tmp_path / "good.yaml"
    good.write_text(GOOD)
    assert CliRunner().invoke(app, ["validate", str(good)]).exit_code == 0
