"""Campaign schema and loader: every shipped config loads; bad input is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from gwbatch.config import Campaign, apply_override, load_campaign, load_run
from gwbatch.errors import ConfigError

CONFIGS = sorted((Path(__file__).parent.parent / "configs").glob("*.yaml"))


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "campaign.yaml"
    path.write_text(text)
    return path


MINIMAL = "name: t\ndata:\n  store: data/x.zarr\nsearch:\n  kind: pulse\n"


def test_configs_exist():
    assert {p.name for p in CONFIGS} >= {"demo.yaml", "pulsar-j1807.yaml"}


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_config_loads(path):
    loaded = load_run(path)
    for campaign in ([loaded] if isinstance(loaded, Campaign) else loaded.members.values()):
        assert isinstance(campaign, Campaign)
        assert campaign.data.store


def test_minimal_defaults(tmp_path):
    c = load_campaign(write(tmp_path, MINIMAL))
    assert c.search.threshold == 6.0 and c.search.series == "energy"
    assert c.cluster.kind == "auto" and c.backend == "auto"
    assert c.output_dir == Path("runs/t")


def test_unknown_key_named_with_allowed_keys(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_campaign(write(tmp_path, MINIMAL + "  treshold: 5\n"))
    msg = str(err.value)
    assert "search.treshold" in msg and "unknown key" in msg and "threshold" in msg


def test_unknown_top_level_key(tmp_path):
    with pytest.raises(ConfigError, match=r"sarch: unknown key \(allowed here: name, description, data"):
        load_campaign(write(tmp_path, MINIMAL + "sarch: {}\n"))


def test_a_number_or_auto_is_one_line_at_the_key(tmp_path):
    """A setting that takes a number or ``auto`` (a union): one line at the key, both alternatives
    named, the value shown; ``auto`` and numbers are accepted."""
    with pytest.raises(ConfigError) as err:
        load_campaign(write(tmp_path, MINIMAL + "background: {deep_slides: -3}\n"))
    lines = str(err.value).splitlines()
    assert lines[1:] == ["  background.deep_slides: Input should be greater than or equal to 0, or input should be "
                         "'auto' (got -3)"]
    assert load_campaign(write(tmp_path, MINIMAL + "background: {deep_slides: auto}\n")).background.deep_slides == "auto"
    assert load_campaign(write(tmp_path, MINIMAL + "background: {deep_slides: 40}\n")).background.deep_slides == 40
    assert load_campaign(write(tmp_path, MINIMAL)).background.deep_slides == "auto"  # the default


def test_wrong_type_names_key_and_value(tmp_path):
    with pytest.raises(ConfigError) as err:
        load_campaign(write(tmp_path, MINIMAL + "  threshold: high\n"))
    assert "search.threshold" in str(err.value) and "'high'" in str(err.value)


def test_negative_duration_refused(tmp_path):
    text = "name: t\ndata:\n  store: x.zarr\n  duration: -10\nsearch: {kind: pulse}\n"
    with pytest.raises(ConfigError, match=r"data.duration: Input should be greater than 0 \(got -10\)"):
        load_campaign(write(tmp_path, text))


def test_unknown_search_kind_lists_allowed(tmp_path):
    with pytest.raises(ConfigError, match=r"search.kind: 'spiral' is not known \(allowed: 'burst', 'pulse', 'radio', 'spiir'\)"):
        load_campaign(write(tmp_path, "name: t\ndata: {store: x}\nsearch: {kind: spiral}\n"))


def test_missing_required_key(tmp_path):
    with pytest.raises(ConfigError, match="data: required key is missing"):
        load_campaign(write(tmp_path, "name: t\nsearch: {kind: pulse}\n"))


def test_bad_decimation_plan_explained(tmp_path):
    with pytest.raises(ConfigError, match="make the earlier rounds' counts even"):
        load_campaign(write(tmp_path, MINIMAL + "  decimation: [3, 2]\n"))


def test_gating_needs_whitening(tmp_path):
    text = MINIMAL + "conditioning:\n  whiten: false\n  gating: {threshold: 10}\n"
    with pytest.raises(ConfigError, match="needs whiten: true"):
        load_campaign(write(tmp_path, text))


def test_not_a_mapping_and_bad_yaml(tmp_path):
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_campaign(write(tmp_path, "- a\n- b\n"))
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_campaign(write(tmp_path, "name: [unclosed\n"))
    with pytest.raises(ConfigError, match="cannot read"):
        load_campaign(tmp_path / "missing.yaml")


def test_overrides(tmp_path):
    c = load_campaign(write(tmp_path, MINIMAL), ["search.threshold=7.5", "cluster.kind=in-process", "data.ifos=[H1, L1]"])
    assert c.search.threshold == 7.5 and c.cluster.kind == "in-process" and c.data.ifos == ["H1", "L1"]
    with pytest.raises(ConfigError, match="expects key=value"):
        load_campaign(write(tmp_path, MINIMAL), ["search.threshold"])
    with pytest.raises(ConfigError, match=r"search.kind is a value \('pulse'\), not a section"):
        load_campaign(write(tmp_path, MINIMAL), ["search.kind.x=1"])
    with pytest.raises(ConfigError, match=r"search.threshold: Input should be a valid number \(got \{'x': 1\}\)"):
        load_campaign(write(tmp_path, MINIMAL), ["search.threshold.x=1"])
    with pytest.raises(ConfigError, match="search.thresold: unknown key"):
        load_campaign(write(tmp_path, MINIMAL), ["search.thresold=1"])


def test_override_into_missing_section():
    raw = {"name": "t"}
    apply_override(raw, "background.slides=5")
    assert raw == {"name": "t", "background": {"slides": 5}}


@pytest.mark.parametrize("path", sorted((Path(__file__).parent.parent / "configs" / "banks").glob("*.yaml")),
                         ids=lambda p: p.name)
def test_every_bank_config_loads(path):
    from gwbatch.config import load_bank_config

    cfg = load_bank_config(path)
    assert cfg.mass1 and cfg.mass2 and cfg.f_low > 0


def test_shipped_bank_points_lie_in_their_region():
    """A bank config that ships its placed points (``file:``, a path from the repository root) names
    a file that is there, and every point lies in the config's mass and spin ranges."""
    import os

    from gwbatch.config import load_bank_config
    from gwbatch.io.banks import read_bank_file

    root = Path(__file__).parent.parent
    shipped = {}
    for path in sorted((root / "configs" / "banks").glob("*.yaml")):
        cfg = load_bank_config(path)
        if cfg.file is not None:
            assert (root / cfg.file).is_file(), f"{path.name}: {cfg.file} is missing"
            shipped[cfg.name] = (cfg, read_bank_file(root / cfg.file))
    assert len(shipped["bns-nsbh"][1]) == 38928
    for name, (cfg, templates) in shipped.items():
        for key, values in (("mass1", [t.mass1 for t in templates]), ("mass2", [t.mass2 for t in templates]),
                            ("spin1z", [t.spin1z for t in templates]), ("spin2z", [t.spin2z for t in templates])):
            lo, hi = getattr(cfg, key)
            assert lo <= min(values) and max(values) <= hi, (name, key, min(values), max(values))
    assert os.path.getsize(root / shipped["bns-nsbh"][0].file) < 2 * 2**20  # the points, not a built bank


def test_spiir_needs_whitening_and_a_known_psd(tmp_path):
    spiir = "name: t\ndata:\n  store: data/x.zarr\nsearch:\n  kind: spiir\n  bank: configs/banks/bbh.yaml\n"
    with pytest.raises(ConfigError, match="set conditioning.whiten: true"):
        load_campaign(write(tmp_path, spiir + "conditioning: {whiten: false}\n"))
    with pytest.raises(ConfigError, match="must be 'data' or a design curve"):
        load_campaign(write(tmp_path, spiir + "  psd: LIGO\n"))


def test_bank_spin_ranges_need_stochastic_placement(tmp_path):
    from gwbatch.config import load_bank_config

    path = tmp_path / "bank.yaml"
    path.write_text("name: b\nmass1: [1, 2]\nmass2: [1, 2]\nspin1z: [-0.5, 0.5]\nplacement: {method: grid}\n")
    with pytest.raises(ConfigError, match="use placement method 'stochastic'"):
        load_bank_config(path)
    path.write_text("name: b\nmass1: [1, 2]\nmass2: [1, 2]\nspin1z: [-0.5, 0.5]\n")
    assert load_bank_config(path).spin1z == [-0.5, 0.5]


SUITE = """name: s
data: {store: data/x.zarr}
conditioning: {f_low: 25.0}
background: {slides: 30}
searches:
  burst:
    search: {kind: burst}
    background: {slide_step: 0.5}
  pulse:
    search: {kind: pulse, threshold: 5.0}
    conditioning: {f_low: 30.0}
"""


def test_suite_members_merge_shared_and_own_sections(tmp_path):
    suite = load_run(write(tmp_path, SUITE), ["searches.burst.background.slides=7"])
    burst, pulse = suite.members["burst"], suite.members["pulse"]
    assert burst.search.kind == "burst" and burst.background.slides == 7 and burst.background.slide_step == 0.5
    assert burst.conditioning.f_low == 25.0 and pulse.conditioning.f_low == 30.0
    assert pulse.background.slides == 30 and pulse.search.threshold == 5.0
    assert burst.output_dir == Path("runs/s/burst") and suite.output_dir == Path("runs/s")
    with pytest.raises(ConfigError, match="load it with load_run"):
        load_campaign(write(tmp_path, SUITE))


@pytest.mark.parametrize("text,message", [
    ("searches: {a: {search: {kind: pulse}, cluster: {kind: local}}}", r"searches\.a\.cluster: unknown key"),
    ("searches: {}", "searches must map member names"),
    ("search: {kind: pulse}\nsearches: {a: {search: {kind: pulse}}}", "not both"),
    ("searches: {a: {search: {kind: pulse, threshold: high}}}", r"(?s)\(searches\.a\).*search\.threshold"),
    ("searches: {a: {plan: {chunk: 64}}}", "at least a search section"),
])
def test_bad_suites_refused_by_name(tmp_path, text, message):
    with pytest.raises(ConfigError, match=message):
        load_run(write(tmp_path, "name: t\ndata: {store: data/x.zarr}\n" + text + "\n"))


def test_yaml_object_tags_are_never_constructed(tmp_path):
    """Campaign files and --set values are read with safe_load: a Python object tag is refused."""
    from gwbatch.config import load_run

    marker = tmp_path / "ran"
    text = f"name: t\ndata: {{store: x}}\nsearch: !!python/object/apply:os.system ['touch {marker}']\n"
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_run(write(tmp_path, text))
    with pytest.raises(ConfigError, match="--set search.kind: value .*: not valid YAML"):
        load_run(write(tmp_path, "name: t\ndata: {store: x}\nsearch: {kind: pulse}\n"),
                 [f"search.kind=!!python/object/apply:os.system ['touch {marker}']"])
    assert not marker.exists()


@pytest.mark.parametrize("bad", ["../escape", "a/b", "..", "/abs", ".hidden", "x\\y", ""])
def test_names_that_become_paths_cannot_leave_the_output_directory(tmp_path, bad):
    """Campaign, member and bank names are used in file names: no separators, no leading dot."""
    import yaml

    from gwbatch.config import load_bank_config

    with pytest.raises(ConfigError, match="name"):
        load_run(write(tmp_path, yaml.safe_dump({"name": bad, "data": {"store": "x"}, "search": {"kind": "pulse"}})))
    with pytest.raises(ConfigError, match="searches"):
        load_run(write(tmp_path, yaml.safe_dump({"name": "t", "data": {"store": "x"},
                                                 "searches": {bad: {"search": {"kind": "pulse"}}}})))
    bank = Path("configs/banks/bns-day.yaml").resolve()
    with pytest.raises(ConfigError, match="name"):
        load_bank_config(bank, [f"name={bad}"] if bad else ["name="])
