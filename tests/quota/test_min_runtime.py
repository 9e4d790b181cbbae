"""minRuntime on priority classes and teams: both spellings and the team's override (bad values: test_loader)."""

from quota.loader import load_config_text

BASE = "flavors: [{name: f}]\n"


def test_both_spellings_and_the_team_override() -> None:
    config = load_config_text(
        BASE
        + "priorityClasses:\n"
        + "  - {name: prod, value: 10, minRuntime: 2h}\n"
        + "  - {name: research, value: 1, default: true, minRuntime: {duration: 30m, exceptReclaim: true}}\n"
        + "  - {name: dev, value: 0}\n"
        + "teams:\n"
        + "  - {name: a}\n"
        + "  - {name: b, minRuntime: 0s}\n"
        + "  - {name: c, minRuntime: 90}\n"
    )
    prod = config.min_runtime("a", "prod")
    assert prod is not None and prod.duration == 7_200_000 and not prod.except_reclaim
    research = config.min_runtime("a", "research")
    assert research is not None and research.duration == 1_800_000 and research.except_reclaim
    assert config.min_runtime("a", "dev") is None
    default = config.min_runtime("a", None)
    assert default is not None and default.duration == 1_800_000, "no class: the default class's"
    assert config.min_runtime("b", "prod") is None, "a team's 0s turns its classes' minimum runtime off"
    team_c = config.min_runtime("c", "research")
    assert team_c is not None and team_c.duration == 90_000 and not team_c.except_reclaim
