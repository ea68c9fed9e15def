"""The ``tableside`` command as a user runs it: separate processes, real signals."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tableside.cli import main
from tableside.daemon.discipline import DISCIPLINE_FILE_ENV

from .conftest import Mosquitto, free_port, shipped_config
from .hil import Subscriber, ruling, stop

ROOT = Path(__file__).parents[1]
CMD = [sys.executable, "-m", "tableside"]


def _env() -> dict[str, str]:
    # no TABLESIDE_ override reaches the config; the clock's lab hook does (tests/conftest.py)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("TABLESIDE_") or k == DISCIPLINE_FILE_ENV}  # fmt: skip
    env["PYTHONUNBUFFERED"] = "1"
    return env


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(10)
        for stream in (proc.stdout, proc.stderr):
            if stream is not None:
                stream.close()


def spawn(processes: list[subprocess.Popen[str]], *args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [*CMD, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
    )
    processes.append(proc)
    return proc


def write_config(path: Path, state_dir: Path) -> Path:
    path.write_text(shipped_config(state_dir).replace("keepalive_s = 30", "keepalive_s = 5"))
    return path


async def test_run_and_simulate_as_processes(
    mosquitto: Mosquitto, tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    sim = spawn(
        processes, "simulate", "shuffler", "--pty", "--interval", "0.2", "--fault", "count=51@2"
    )
    assert sim.stdout is not None
    pty_path = (await asyncio.to_thread(sim.stdout.readline)).strip()
    assert pty_path.startswith("/dev/pts/"), pty_path
    config = write_config(tmp_path / "cs.toml", tmp_path / "state")
    sub = Subscriber(mosquitto.url, "tableside/cs-01/#")
    sub_task = asyncio.create_task(sub.run())
    try:
        await asyncio.wait_for(sub.connected.wait(), 10)
        args = [
            "run",
            "--config",
            str(config),
            "--broker",
            mosquitto.url,
            "--device",
            f"shuffler={pty_path}",
        ]
        daemon = spawn(processes, *args)
        (found,) = await sub.wait_for(ruling())
        assert found.payload["clause"] == "58 Pa. Code § 555.5(b)"
        # SIGKILL: the broker announces the last will, marked as such.
        daemon.kill()
        await asyncio.to_thread(daemon.wait, 10)
        (will,) = await sub.wait_for(lambda m: m.kind == "status" and bool(m.payload.get("will")))
        assert will.payload["status"] == "offline"
        # Started again it carries on; SIGTERM is a clean stop with its own offline message.
        daemon = spawn(processes, *args)
        await sub.wait_for(
            lambda m: m.kind == "status" and m.payload["status"] == "online", count=2
        )
        daemon.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(daemon.wait, 20) == 0
        (bye,) = await sub.wait_for(
            lambda m: (
                m.kind == "status" and m.payload["status"] == "offline" and not m.payload["will"]
            )
        )
        live = [m.payload["seq"] for m in sub.fresh()]
        assert bye.payload["seq"] == max(live)
        assert len(live) == len(set(live))
    finally:
        await stop(sub_task)
    sim.terminate()
    assert await asyncio.to_thread(sim.wait, 10) == 0


def test_demo_with_embedded_broker() -> None:
    unused = f"mqtt://127.0.0.1:{free_port()}"
    result = subprocess.run(
        [*CMD, "demo", "--rounds", "3", "--interval", "0.2", "--broker", unused,
         "--embedded", "amqtt"],
        capture_output=True, text=True, env=_env(), timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "embedded broker on mqtt://127.0.0.1:" in out
    assert "floor: not started: the embedded broker speaks MQTT 3.1.1" in out
    assert "RULING  58 Pa. Code § 555.5(b) → remove_deck" in out
    assert "RULING  58 Pa. Code § 555.14(e) → reshuffle" in out
    done = re.search(
        r"done: 3 shuffles, (\d+) rulings, \d+ messages seen by the monitor, 0 seq gaps", out
    )
    assert done, out[-300:]
    # the shuffler's two (count 51, jam) and whatever the shoe's faults brought by then
    assert int(done.group(1)) >= 2


def test_demo_without_the_embedded_broker_says_what_to_install() -> None:
    """A table installed without the demo extra has no amqtt: one line, no traceback."""
    unused = f"mqtt://127.0.0.1:{free_port()}"
    code = (
        "import sys; sys.modules['amqtt'] = None\n"  # as if not installed
        "from tableside.cli import main\n"
        f"sys.exit(main(['demo', '--rounds', '1', '--broker', {unused!r},\n"
        "               '--embedded', 'amqtt']))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=_env(), timeout=60)  # fmt: skip
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert "pip install 'tableside[demo]'" in result.stderr


@pytest.mark.parametrize(
    ("game", "shown"),
    [
        ("let_it_ride", ["shoe       deal_started", "acceptors  lockout_applied", "wager_"]),
        ("four_card_poker", ["target=dealer_extra", "shoe       fault: round=2 fault=jam"]),
    ],
)
def test_demo_runs_every_device_of_the_game(
    mosquitto: Mosquitto, game: str, shown: list[str]
) -> None:
    command = [*CMD, "demo", "--game", game, "--rounds", "4", "--interval", "0.6"]
    result = subprocess.run(
        [*command, "--broker", mosquitto.url],
        capture_output=True,
        text=True,
        env=_env(),
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    for text in shown:
        assert text in result.stdout, text
    assert "0 seq gaps" in result.stdout


def test_demo_uses_a_broker_that_answers(mosquitto: Mosquitto) -> None:
    result = subprocess.run(
        [*CMD, "demo", "--game", "spanish_21", "--rounds", "2", "--interval", "0.2",
         "--broker", mosquitto.url, "--fault", "count=287@1"],
        capture_output=True, text=True, env=_env(), timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"{mosquitto.url} answers (MQTT 5); using it" in result.stdout
    assert "RULING  58 Pa. Code § 551.3(a) → remove_deck" in result.stdout
    assert "card_reader on usb://1209:7ab1" in result.stdout  # the reader, on the simulated bus
    assert "card_reader hole_card_checked" in result.stdout


def test_a_second_demo_on_the_same_broker_starts_clean(mosquitto: Mosquitto) -> None:
    """The demo's journal is new each run: what the broker retained for its table from the
    run before is cleared, so the floor beside it never meets the old run's seqs (it asked the
    new table for records up to the old run's highest seq: "beyond the table's newest")."""
    command = [*CMD, "demo", "--game", "four_card_poker", "--rounds", "3", "--interval", "0.3",
               "--broker", mosquitto.url]  # fmt: skip
    runs = [subprocess.run(command, capture_output=True, text=True, env=_env(), timeout=120)
            for _ in range(2)]  # fmt: skip
    for run in runs:
        assert run.returncode == 0, run.stderr
    assert "retained messages an earlier demo left" not in runs[0].stdout
    assert "-- broker: cleared " in runs[1].stdout
    assert "retained messages an earlier demo left for demo-four-card-poker" in runs[1].stdout
    assert "beyond the table's newest record" not in runs[1].stderr + runs[1].stdout


def test_bad_fault_is_refused_clearly(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "shuffler", "--pty", "--fault", "explode@2"]) == 2
    assert "unknown fault 'explode'" in capsys.readouterr().err
    assert main(["simulate", "shuffler", "--pty", "--fault", "count@2"]) == 2
    assert "count needs a value" in capsys.readouterr().err
    assert main(["simulate", "shuffler", "--pty", "--fault", "jam"]) == 2
    assert "expected NAME[=VALUE]@N" in capsys.readouterr().err


def test_scenario_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text('interval = 1\nfautls = ["jam@1"]\n')
    assert main(["simulate", "shuffler", "--pty", "--scenario", str(bad)]) == 2
    assert "unknown keys ['fautls'] for the shuffler simulator" in capsys.readouterr().err
    bad.write_text("interval = 1\n[identity]\nserial = 5\n")  # a serial is text
    assert main(["simulate", "shuffler", "--pty", "--scenario", str(bad)]) == 2
    assert "[identity]: each of ['serial'] is a string" in capsys.readouterr().err


def test_shipped_scenarios_are_valid() -> None:
    from tableside.simulators.registry import build_simulator
    from tableside.simulators.scenario import load_scenario

    scenarios = sorted((ROOT / "simulators" / "scenarios").glob("*.toml"))
    assert scenarios
    for path in scenarios:
        scenario = load_scenario(path)
        device_class = path.stem.split("-", 1)[0]
        sim = build_simulator(device_class, scenario.settings, scenario.faults, scenario.identity)
        assert sim.faults


def test_run_refuses_a_bad_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "t.toml"
    config.write_text("[table]\nid = 'x'\ngame = 'poker'\n")
    assert main(["run", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"{config}:3: table.game" in err
    assert f"{config}: devices: Field required" in err


def test_schemas_in_docs_are_current(tmp_path: Path) -> None:
    assert main(["schemas", str(tmp_path)]) == 0
    shipped_dir = ROOT / "docs" / "schemas"
    generated = {str(p.relative_to(tmp_path)): json.loads(p.read_text())
                 for p in tmp_path.rglob("*.json")}  # fmt: skip
    shipped = {str(p.relative_to(shipped_dir)): json.loads(p.read_text())
               for p in shipped_dir.rglob("*.json")}  # fmt: skip
    assert generated == shipped, "run: tableside schemas docs/schemas"
    # one per device event, from its type (drivers/catalog.py)
    stack = generated["events/shoe.stack_dispensed.schema.json"]
    assert stack["required"] == ["round", "index", "target", "count", "expected"]
    assert stack["additionalProperties"] is False and "cards" in stack["properties"]
    assert "events/any_device.connection.schema.json" in generated


def test_rules_page_is_current(tmp_path: Path) -> None:
    out = tmp_path / "rules.md"
    assert main(["rules", str(out), "--tests", str(ROOT / "tests")]) == 0
    shipped = (ROOT / "docs" / "rules.md").read_text(encoding="utf-8")
    assert out.read_text(encoding="utf-8") == shipped, "run: tableside rules docs/rules.md"
    assert "**none**" not in shipped, "every rule is proved by a test that names its clause"


@pytest.mark.parametrize(
    ("command", "typed", "sent"),
    [("up_card", ["rank=7"], {"rank": "7"}), ("up_card", ["rank=king"], {"rank": "K"}),
     ("resolve_ruling", ["ruling=3", "action=halt_dealing", "by=2024", "note=30"],
      {"ruling": 3, "action": "halt_dealing", "by": "2024", "note": "30"}),
     ("resolve_ruling", ["ruling=3", "action=alert", "by=Ann Lee", 'note="true"'],
      {"ruling": 3, "action": "alert", "by": "Ann Lee", "note": "true"}),
     ("deal_round", ["positions=1,3"], {"positions": [1, 3]}),
     ("deal_round", ["positions=[2]", "override=reader replaced"],
      {"positions": [2], "override": "reader replaced"}),
     ("coup", ["player=7,K", "banker=[1, 10]"], {"player": ["7", "K"], "banker": ["A", "10"]}),
     ("stub_count", ["count=52", "misdealt=false"], {"count": 52, "misdealt": False}),
     ("pay_bonus", ["seat=1", "hand=flush"], {"seat": 1, "hand": "flush"})],
)  # fmt: skip
def test_command_arguments_are_read_as_the_command_types_them(
    command: str, typed: list[str], sent: dict[str, object]
) -> None:
    """``KEY=VALUE`` from the command line: a string argument is the text as typed (``note=30``
    was sent as the number 30 and refused), a list may go without brackets, the rest are TOML
    values; what the table's model makes of them is what was meant."""
    from tableside.cli.command import _command_args
    from tableside.rules.commands import COMMANDS

    args = COMMANDS[command].args.model_validate(_command_args(command, typed))
    assert args.model_dump(exclude_unset=True) == sent


@pytest.mark.parametrize(
    ("command", "typed", "refused"),
    [("stub_count", ["count=many"], "count"), ("stub_count", ["count=52", "misdealt=yes"],
     "misdealt"), ("stub_count", ["count=\"52\""], "count"), ("up_card", ["rank=11"], "rank"),
     ("deal_round", ["positions=1,9"], "positions.1"), ("stub_count", ["cuont=52"], "count cuont")],
)  # fmt: skip
def test_command_arguments_of_the_wrong_type_are_still_refused(
    command: str, typed: list[str], refused: str
) -> None:
    from pydantic import ValidationError

    from tableside.cli.command import _command_args
    from tableside.rules.commands import COMMANDS

    with pytest.raises(ValidationError) as caught:
        COMMANDS[command].args.model_validate(_command_args(command, typed))
    assert " ".join(sorted(".".join(map(str, e["loc"])) for e in caught.value.errors())) == refused


@pytest.mark.parametrize(
    ("argv", "said"),
    [(["shuffler", "--set", 'interval="5"'], "shuffler simulator: interval: Input should be a "
      "valid number, not '5'"),
     (["shuffler", "--set", "two_deck=1"], "two_deck: Input should be a valid boolean, not 1"),
     (["shoe", "--set", 'deck_size="52"'], "deck_size: Input should be a valid integer"),
     (["progressive", "--seats", "1=3,2=x"], "--seats '2=x': expected SEAT=ADDRESS"),
     (["progressive", "--seats", "1=3,1=4"], "--seats '1=4': expected SEAT=ADDRESS, each seat "
      "once")],
)  # fmt: skip
def test_simulator_settings_of_the_wrong_type_are_refused(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A quoted number is no number for a simulator either (``--set interval="5"`` was taken and
    failed later, inside the simulator); ``--seats`` says which pair is wrong."""
    assert main(["simulate", *argv, "--pty"]) == 2
    assert said in capsys.readouterr().err


def test_key_prints_the_hex_for_scripts_and_the_numbered_groups_for_a_person(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The floor's enrolment page asks a supervisor to type one group of the fingerprint by its
    number (docs/floor.md): counting four-digit groups along 64 digits by hand is how a person
    compares the wrong one."""
    config = write_config(tmp_path / "t.toml", tmp_path / "state")
    assert main(["key", "--config", str(config), "--create"]) == 0
    out, err = capsys.readouterr()
    key_hex = out.strip()
    assert re.fullmatch(r"[0-9a-f]{64}", key_hex)
    numbered = dict(re.findall(r"(\d+): ([0-9a-f]{4})", err))
    assert sorted(map(int, numbered)) == list(range(1, 17))
    assert "".join(numbered[str(n)] for n in range(1, 17)) == key_hex
