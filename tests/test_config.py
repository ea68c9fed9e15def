"""Table config: the shipped examples validate; every error says where it is."""

from __future__ import annotations

from pathlib import Path

import pytest

from tableside.cli import main
from tableside.daemon.config import ConfigError, load_config, validate_config
from tableside.rules.model import Game

CONFIG_DIR = Path(__file__).parents[1] / "config"

GOOD = """\
[table]
id = "t1"
game = "caribbean_stud"

[broker]
url = "mqtt://127.0.0.1:1883"

[devices.shuffler]
driver = "tableside.shuffler"
url = "socket://127.0.0.1:7001"
"""


@pytest.fixture(autouse=True)
def _no_env_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("TABLESIDE_BROKER", "TABLESIDE_DEVICE__SHUFFLER"):
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize("path", sorted(CONFIG_DIR.glob("*.toml")), ids=lambda p: p.name)
def test_shipped_examples_are_valid(path: Path) -> None:
    config = load_config(path)
    assert config.devices["shuffler"].driver == "tableside.shuffler"


def test_an_example_for_each_game() -> None:
    games = {load_config(p).table.game for p in CONFIG_DIR.glob("*.toml")}
    assert games == set(Game)


def test_every_error_is_reported_with_its_line() -> None:
    text = """\
[table]
id = "t1"
game = "baccarat_royale"

[broker]
url = "http://broker"

[devices.shuffler]
driver = "acme.nonesuch"
url = "socket://127.0.0.1"
colour = "red"
"""
    with pytest.raises(ConfigError) as caught:
        validate_config(text, "table.toml", use_env=False)
    lines = [str(p) for p in caught.value.problems]
    assert any(s.startswith("table.toml:3: table.game:") for s in lines), lines
    assert any(s.startswith("table.toml:6: broker.url:") and "mqtt://" in s for s in lines)
    assert any(
        s.startswith("table.toml:9: devices.shuffler.driver:") and "acme" in s for s in lines
    )
    assert any(s.startswith("table.toml:10: devices.shuffler.url:") for s in lines)
    assert any(s.startswith("table.toml:11: devices.shuffler.colour:") for s in lines)
    assert len(lines) == 5


def test_toml_syntax_error_names_the_line() -> None:
    with pytest.raises(ConfigError, match=r"t.toml:2: not valid TOML"):
        validate_config('[table]\nid = "unterminated\n', "t.toml")


def test_decks_belong_to_spanish_21() -> None:
    with pytest.raises(ConfigError, match="decks applies to spanish_21 only"):
        validate_config(
            GOOD.replace('game = "caribbean_stud"', 'game = "caribbean_stud"\ndecks = 6')
        )
    s21 = validate_config(GOOD.replace('"caribbean_stud"', '"spanish_21"\ndecks = 8'))
    assert s21.table.decks == 8
    with pytest.raises(ConfigError, match="decks"):
        validate_config(GOOD.replace('"caribbean_stud"', '"spanish_21"\ndecks = 7'))


def test_the_gaming_day_is_configured_with_its_zone() -> None:
    shifted = GOOD.replace('"caribbean_stud"', '"caribbean_stud"\ntimezone = "America/New_York"'
                           "\ngaming_day_starts = 6")  # fmt: skip
    table = validate_config(shifted, use_env=False).table
    assert (table.gaming_day.timezone, table.gaming_day.starts_at_hour) == ("America/New_York", 6)
    bad = GOOD.replace('"caribbean_stud"', '"caribbean_stud"\ntimezone = "Eastern"')
    with pytest.raises(ConfigError, match=r"t.toml:4: table.timezone: .*no time zone 'Eastern'"):
        validate_config(bad, "t.toml", use_env=False)
    late = GOOD.replace('"caribbean_stud"', '"caribbean_stud"\ngaming_day_starts = 24')
    with pytest.raises(ConfigError, match=r"t.toml:4: table.gaming_day_starts:"):
        validate_config(late, "t.toml", use_env=False)


def test_overrides_env_then_command_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TABLESIDE_BROKER", "mqtt://10.0.0.5:1883")
    monkeypatch.setenv("TABLESIDE_DEVICE__SHUFFLER", "/dev/ttyS4")
    from_env = validate_config(GOOD)
    assert from_env.broker.url == "mqtt://10.0.0.5:1883"
    assert from_env.devices["shuffler"].url == "/dev/ttyS4"
    from_cli = validate_config(
        GOOD, broker="mqtt://127.0.0.1:1884", devices={"shuffler": "socket://127.0.0.1:7009"}
    )
    assert from_cli.broker.port == 1884
    assert from_cli.devices["shuffler"].url == "socket://127.0.0.1:7009"


def test_override_of_an_unknown_device_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"devices.shoe: no such device"):
        validate_config(GOOD, devices={"shoe": "socket://127.0.0.1:1"})


def test_client_id_defaults_to_table() -> None:
    assert validate_config(GOOD).client_id == "tableside-t1"


def test_check_config_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(GOOD.replace('url = "socket://127.0.0.1:7001"', 'url = "ftp://x"'))
    good = tmp_path / "good.toml"
    good.write_text(GOOD)
    assert main(["check-config", str(good), str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"{good}: ok (table t1, caribbean_stud" in out
    assert f"{bad}:10: devices.shuffler.url: Value error, unknown scheme 'ftp'" in out


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.toml")
