"""Table config: the shipped examples validate; every error says where it is."""

from __future__ import annotations

import os
import subprocess
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
    # colour: which options a device takes is its driver's to say; this one is unknown
    assert len(lines) == 4


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
    # a state_dir this user may write, whoever runs the tests
    text = GOOD.replace('id = "t1"', f'id = "t1"\nstate_dir = "{tmp_path / "state"}"')
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace('url = "socket://127.0.0.1:7001"', 'url = "ftp://x"'))
    good = tmp_path / "good.toml"
    good.write_text(text)
    assert main(["check-config", str(good), str(bad)]) == 1
    out = capsys.readouterr().out
    assert f"{good}: ok (table t1, caribbean_stud" in out
    assert f"{bad}:11: devices.shuffler.url: unknown scheme 'ftp'" in out


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.toml")


def _cert_and_key(directory: Path) -> tuple[Path, Path]:
    """A self-signed certificate and its key (openssl, as an operator would make them)."""
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
         "/CN=t1", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def _broken(tmp_path: Path) -> dict[str, tuple[str, list[str], str, str]]:
    """Broken configs: name → (text, extra run arguments, expected "LINE: key", fragment)."""
    a_file = tmp_path / "a-file"
    a_file.write_text("not a directory\n")
    not_a_cert = tmp_path / "not-a-cert.pem"
    not_a_cert.write_text("-----BEGIN CERTIFICATE-----\nnonsense\n-----END CERTIFICATE-----\n")
    cert, key = _cert_and_key(tmp_path)
    state = f'state_dir = "{tmp_path / "state"}"'
    good = GOOD.replace('game = "caribbean_stud"', f'game = "caribbean_stud"\n{state}')
    tls = 'url = "mqtts://127.0.0.1:8883"'

    def broker(*lines: str) -> str:
        return good.replace('url = "mqtt://127.0.0.1:1883"', "\n".join(lines))

    return {
        "state_dir a file": (good.replace(state, f'state_dir = "{a_file}"'), [],
                             "4: table.state_dir", "is not a directory"),
        "state_dir under a file": (good.replace(state, f'state_dir = "{a_file}/sub"'), [],
                                   "4: table.state_dir", "is not a directory"),
        "keepalive_s a string": (broker('url = "mqtt://127.0.0.1:1883"', 'keepalive_s = "30"'),
                                 [], "8: broker.keepalive_s", "not '30' (a string)"),
        "keepalive_s negative": (broker('url = "mqtt://127.0.0.1:1883"', "keepalive_s = -30"),
                                 [], "8: broker.keepalive_s", "greater than or equal to 5"),
        "publish_card_identities yes": (
            good.replace(state, f'{state}\npublish_card_identities = "yes"'), [],
            "5: table.publish_card_identities", "not 'yes' (a string)"),
        "counts_cards 1": (good + "counts_cards = 1\n", [], "12: devices.shuffler.counts_cards",
                           "not 1 (an integer)"),
        "retries true": (good + "retries = true\n", [], "12: devices.shuffler.retries",
                         "not True (a boolean)"),
        "retries 2.5": (good + "retries = 2.5\n", [], "12: devices.shuffler.retries",
                        "not 2.5 (a number)"),
        "baudrate negative": (good + "baudrate = -9600\n", [], "12: devices.shuffler.baudrate",
                              "greater than 0"),
        "ack_timeout_s a string": (good + 'ack_timeout_s = "0.25"\n', [],
                                   "12: devices.shuffler.ack_timeout_s", "(a string)"),
        "retain_days negative": (good + "\n[journal]\nretain_days = -1\n", [],
                                 "14: journal.retain_days", "greater than 0"),
        "unknown key": (good + 'colour = "red"\n', [], "12: devices.shuffler.colour",
                        "tableside.shuffler takes no option 'colour'"),
        "device url not a url": (good.replace("socket://127.0.0.1:7001", "not a url"), [],
                                 "11: devices.shuffler.url", "expected a tty path"),
        "broker a string, and --broker": (
            'broker = "mqtt://127.0.0.1:1883"\n'
            + good.replace('[broker]\nurl = "mqtt://127.0.0.1:1883"\n', ""),
            ["--broker", "mqtt://127.0.0.1:1884"], "1: broker",
            "not 'mqtt://127.0.0.1:1883' (a string)"),
        "a device a string, and --device": (
            good + '\n[devices]\nshoe = "socket://127.0.0.1:7002"\n',
            ["--device", "shoe=socket://127.0.0.1:7003"], "14: devices.shoe",
            "not 'socket://127.0.0.1:7002' (a string)"),
        "ca_file not a certificate": (broker(tls, f'ca_file = "{not_a_cert}"'), [],
                                      "8: broker.ca_file", "holds no CA certificate"),
        "ca_file missing": (broker(tls, f'ca_file = "{tmp_path / "nope.pem"}"'), [],
                            "8: broker.ca_file", "no such file"),
        "key_file not the key": (
            broker(tls, f'cert_file = "{cert}"', f'key_file = "{not_a_cert}"'), [],
            "6: broker", "not a certificate (PEM) and its key"),
        "cert_file a key": (broker(tls, f'cert_file = "{key}"', f'key_file = "{key}"'), [],
                            "6: broker", "not a certificate (PEM) and its key"),
    }  # fmt: skip


BROKEN = [
    "state_dir a file", "state_dir under a file", "keepalive_s a string", "keepalive_s negative",
    "publish_card_identities yes", "counts_cards 1", "retries true", "retries 2.5",
    "baudrate negative", "ack_timeout_s a string", "retain_days negative", "unknown key",
    "device url not a url", "broker a string, and --broker", "a device a string, and --device",
    "ca_file not a certificate", "ca_file missing", "key_file not the key", "cert_file a key",
]  # fmt: skip


def _one_line_each(
    path: Path, extra: list[str], capsys: pytest.CaptureFixture[str]
) -> tuple[str, str]:
    """What check-config printed and what run printed, each asserted one line, no traceback."""
    assert main(["check-config", str(path)]) == 1
    checked = capsys.readouterr()
    assert main(["run", "--config", str(path), *extra]) == 2
    ran = capsys.readouterr()
    for out in (checked.out, ran.err):
        assert "Traceback" not in out
        assert len(out.strip().splitlines()) == 1, out
    return checked.out.strip(), ran.err.strip()


@pytest.mark.slow  # `run` as a process, for each case
@pytest.mark.parametrize("case", BROKEN)
def test_a_broken_config_is_one_line_from_check_config_and_run(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, extra, where, fragment = _broken(tmp_path)[case]
    path = tmp_path / "table.toml"
    path.write_text(text, encoding="utf-8")
    checked, ran = _one_line_each(path, extra, capsys)
    for line in (checked, ran):
        assert line.startswith(f"{path}:{where}: "), line
        assert fragment in line, line


def test_a_file_not_in_utf8(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes(GOOD.replace('id = "t1"', 'id = "t1" # Tisch für Poker').encode("latin-1"))
    for line in _one_line_each(path, [], capsys):
        assert line == f"{path}:2: not UTF-8: byte 0xfc at column 20", line


def _read_only_dirs(tmp_path: Path) -> list[Path]:
    """Directories this user cannot write: a mode 555 one (not for root, who may), and /proc/sys
    where it is mounted read-only (as in most containers)."""
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    found = [p for p in (locked, Path("/proc/sys")) if p.is_dir() and not os.access(p, os.W_OK)]
    if not found:
        pytest.skip("no directory here that this user cannot write")
    return found


def test_a_state_dir_that_cannot_be_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for read_only in _read_only_dirs(tmp_path):
        for state_dir in (read_only, read_only / "tableside"):
            path = tmp_path / "table.toml"
            setting = f'game = "caribbean_stud"\nstate_dir = "{state_dir}"'
            path.write_text(GOOD.replace('game = "caribbean_stud"', setting))
            for line in _one_line_each(path, [], capsys):
                assert line.startswith(f"{path}:4: table.state_dir: "), line
                assert "read-only, or not this user's" in line, line


def test_reading_a_config_needs_no_write_access(tmp_path: Path) -> None:
    """A monitor or an auditor loads the table's config without writing to its state_dir;
    run and check-config ask for it (writable=True)."""
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    path = tmp_path / "table.toml"
    setting = f'game = "caribbean_stud"\nstate_dir = "{a_file}/state"'
    path.write_text(GOOD.replace('game = "caribbean_stud"', setting))
    assert load_config(path, use_env=False).table.state_dir == a_file / "state"
    with pytest.raises(ConfigError, match=r"table.toml:4: table.state_dir: .* not a directory"):
        load_config(path, use_env=False, writable=True)


def test_a_check_on_one_key_names_that_keys_line() -> None:
    """Not the table's header line: decks (line 4), [progressive] (its header, line 8)."""
    text = GOOD.replace('game = "caribbean_stud"', 'game = "let_it_ride"\ndecks = 6')
    with pytest.raises(ConfigError) as caught:
        validate_config(text, "t.toml", use_env=False)
    assert [str(p) for p in caught.value.problems] == [
        "t.toml:4: table.decks: decks applies to spanish_21 only, not let_it_ride"
    ]
    text = GOOD.replace('game = "caribbean_stud"', 'game = "four_card_poker"') + (
        "\n[progressive]\nrate_percent = 75\ninitial = 10000\nreset = 8000\n"
        'straight_flush = "fixed"\n'
    )
    with pytest.raises(ConfigError, match=r"t.toml:1[0-9]: progressive: .*Caribbean Stud's"):
        validate_config(text, "t.toml", use_env=False)


def test_the_proof_section_is_checked_strictly() -> None:
    """[proof] checkpoint_interval_s: a number of seconds, 0.1 to a day; a quoted number, a
    zero and an unknown key are each refused at their line."""
    assert validate_config(GOOD, use_env=False).proof.checkpoint_interval_s == 60
    tuned = validate_config(GOOD + "[proof]\ncheckpoint_interval_s = 15\n", use_env=False)
    assert tuned.proof.checkpoint_interval_s == 15
    for value, complaint in (('"60"', "valid number"), ("0", "greater than or equal to 0.1"),
                             ("100000", "less than or equal to 86400")):  # fmt: skip
        text = GOOD + f"[proof]\ncheckpoint_interval_s = {value}\n"
        with pytest.raises(ConfigError, match=rf"t.toml:12: proof.checkpoint_interval_s: .*"
                           rf"{complaint}"):  # fmt: skip
            validate_config(text, "t.toml", use_env=False)
    with pytest.raises(ConfigError, match=r"t.toml:12: proof.interval_s: "):
        validate_config(GOOD + "[proof]\ninterval_s = 5\n", "t.toml", use_env=False)


ACCEPTORS = (
    GOOD
    + """
[devices.bus]
driver = "tableside.acceptors"
url = "socket://127.0.0.1:7002"
seats = { 1 = 3, 2 = 4 }
"""
)


def test_each_driver_checks_its_own_options(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A device's keys besides the common ones are its driver's options, checked by the
    driver's own model: a misspelt one and a wrong type are refused naming the file, the line,
    the device and the key; another driver's option is no option of this one."""
    bus = validate_config(ACCEPTORS, use_env=False).devices["bus"].options
    assert bus.model_dump() == {"seats": {1: 3, 2: 4}, "echo": True, "poll_interval_s": None,
                                "reply_timeout_s": 0.1}  # fmt: skip
    path = tmp_path / "table.toml"
    cases = {
        "eco = false": "16: devices.bus.eco: tableside.acceptors takes no option 'eco' (its "
        "options: seats, echo, poll_interval_s, reply_timeout_s;",
        'echo = "no"': "16: devices.bus.echo: Input should be a valid boolean, not 'no' (a string)",
        "poll_interval_s = 20": "16: devices.bus.poll_interval_s: Input should be less than "
        "or equal to 10",
        # the shuffler's option, on the acceptors
        "counts_cards = true": "16: devices.bus.counts_cards: tableside.acceptors takes no "
        "option 'counts_cards'",
    }
    for line, said in cases.items():
        path.write_text(ACCEPTORS + line + "\n")
        assert main(["check-config", str(path)]) == 1
        out = capsys.readouterr().out.strip()
        assert out.startswith(f"{path}:{said}"), out
    path.write_text(ACCEPTORS.replace("seats = { 1 = 3, 2 = 4 }", "seats = { 1 = 3, 2 = 3 }"))
    with pytest.raises(ConfigError, match=r"table.toml:15: devices.bus.seats: two seats share one"):
        load_config(path, use_env=False)
    # a device whose driver takes no options takes none
    with pytest.raises(ConfigError, match=r"t.toml:11: devices.shoe.seats: tableside.shoe "
                       r"takes no option 'seats' \(its options: none;"):  # fmt: skip
        validate_config(
            GOOD.replace('"tableside.shuffler"', '"tableside.shoe"').replace(
                "devices.shuffler", "devices.shoe"
            )
            + "seats = { 1 = 3 }\n",
            "t.toml",
            use_env=False,
        )


def test_options_given_in_python_are_the_drivers_own_model() -> None:
    """A DeviceConfig built in code takes the driver's Options model, or its keys; another
    driver's model is refused before a driver is made."""
    from pydantic import ValidationError

    from tableside.daemon.config import DeviceConfig
    from tableside.drivers.card_reader.driver import CardReaderOptions
    from tableside.drivers.shuffler.driver import ShufflerOptions

    made = DeviceConfig(driver="tableside.card_reader", url="/dev/x",
                        options=CardReaderOptions(reveals_hole_card=False))  # fmt: skip
    assert made.options == CardReaderOptions(reveals_hole_card=False)
    with pytest.raises(ValidationError, match=r"tableside\.card_reader takes CardReaderOptions, "
                       r"not ShufflerOptions"):  # fmt: skip
        DeviceConfig(driver="tableside.card_reader", url="/dev/x", options=ShufflerOptions())


def test_a_version_is_a_name_however_it_is_written() -> None:
    """``mqtt_version = 5`` (a TOML integer) is version "5" (it was refused: "Input should be
    '5' or '3.1.1'"); a version nobody speaks is still refused."""
    for written in ("5", '"5"'):
        text = GOOD.replace('url = "mqtt://127.0.0.1:1883"',
                            f'url = "mqtt://127.0.0.1:1883"\nmqtt_version = {written}')  # fmt: skip
        assert validate_config(text).broker.mqtt_version == "5"
    for bad in ("4", "3", "5.0", "true", '"v5"'):
        text = GOOD.replace('url = "mqtt://127.0.0.1:1883"',
                            f'url = "mqtt://127.0.0.1:1883"\nmqtt_version = {bad}')  # fmt: skip
        with pytest.raises(ConfigError, match=r"broker\.mqtt_version: Input should be '5'"):
            validate_config(text)


@pytest.mark.parametrize(
    ("section", "line"),
    [("table", 'gaming_day_starts = "6"'), ("table", 'decks = "6"'),
     ("table", 'lab = "true"'), ("broker", 'keepalive_s = "30"'),
     ("journal", 'retain_days = "90"'), ("journal", 'max_mb = "2000"'),
     ("rulings", 'escalate_after_s = "120"'), ("proof", 'checkpoint_interval_s = "60"'),
     ("devices.shuffler", 'heartbeat_timeout_s = "3"'), ("devices.shuffler", 'retries = "3"'),
     ("devices.shuffler", 'max_frames_per_s = "100"'), ("devices.shuffler", 'baudrate = "9600"'),
     ("devices.shuffler", 'counts_cards = "false"')],
)  # fmt: skip
def test_a_number_or_a_flag_quoted_is_refused(section: str, line: str) -> None:
    """Strict where it protects: a quoted number is a string, never the number (docs/
    configuration.md, "What each key takes")."""
    text = GOOD if f"[{section}]" in GOOD else GOOD + f"\n[{section}]\n"
    text = text.replace(f"[{section}]\n", f"[{section}]\n{line}\n", 1)
    key = line.split(" =")[0]
    with pytest.raises(ConfigError, match=rf"{section}\.{key}: .*\(a string\)"):
        validate_config(text)
