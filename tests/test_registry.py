"""Drivers by name, and a device maker's driver found through the entry point group."""

from __future__ import annotations

from pathlib import Path

import pytest

from tableside.daemon.config import ConfigError, validate_config
from tableside.drivers.base import FramedDriver
from tableside.drivers.registry import UnknownDriver, available_drivers, get_driver

PLUGIN = '''
from typing import ClassVar
from tableside.drivers.base import DriverOptions
from tableside.drivers.shuffler.driver import ShufflerDriver, ShufflerOptions


class AcmeOptions(ShufflerOptions):
    """Its own key beside the shuffler's counts_cards."""

    decks_per_shuffle: int = 1


class AcmeShufflerDriver(ShufflerDriver):
    """A vendor's dialect would translate its own frames here."""

    device_class: ClassVar[str] = "shuffler"
    Options: ClassVar[type[DriverOptions]] = AcmeOptions


NOT_A_DRIVER = object()
'''


@pytest.fixture
def acme_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "acme_tableside.py").write_text(PLUGIN)
    dist = tmp_path / "acme_tableside-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-tableside\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[tableside.drivers]\n"
        "acme.shuffler = acme_tableside:AcmeShufflerDriver\n"
        "acme.broken = acme_tableside:NOT_A_DRIVER\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))


def test_built_in_drivers() -> None:
    names = available_drivers()
    for name in ("tableside.shuffler", "tableside.shoe", "tableside.card_reader",
                 "tableside.progressive_controller", "tableside.acceptors"):  # fmt: skip
        assert names[name] == "built in"
        assert get_driver(name).device_class


def test_an_out_of_tree_driver_is_found_by_its_entry_point(acme_installed: None) -> None:
    driver = get_driver("acme.shuffler")
    assert issubclass(driver, FramedDriver) and driver.__name__ == "AcmeShufflerDriver"
    assert available_drivers()["acme.shuffler"] == "acme_tableside:AcmeShufflerDriver"
    config = validate_config(
        '[table]\nid = "t"\ngame = "let_it_ride"\n'
        '[devices.shuffler]\ndriver = "acme.shuffler"\nurl = "/dev/ttyUSB0"\n',
        use_env=False,
    )
    assert config.devices["shuffler"].driver == "acme.shuffler"
    with pytest.raises(UnknownDriver, match="not a Driver subclass"):
        get_driver("acme.broken")


def test_a_plug_in_driver_declares_its_own_options(acme_installed: None) -> None:
    """Its Options model checks its keys, as a built-in driver's does; the daemon hands the
    driver its options, typed."""
    head = ('[table]\nid = "t"\ngame = "let_it_ride"\n'
            '[devices.shuffler]\ndriver = "acme.shuffler"\nurl = "/dev/ttyUSB0"\n')  # fmt: skip
    config = validate_config(head + "decks_per_shuffle = 2\ncounts_cards = false\n",
                             use_env=False)  # fmt: skip
    options = config.devices["shuffler"].options
    assert type(options).__name__ == "AcmeOptions"
    assert options.model_dump() == {
        "counts_cards": False,
        "recognises_cards": False,
        "decks_per_shuffle": 2,
    }
    with pytest.raises(ConfigError, match=r"t.toml:7: devices.shuffler.decks: acme.shuffler "
                       r"takes no option 'decks' \(its options: counts_cards, recognises_cards, "
                       r"decks_per_shuffle;"):  # fmt: skip
        validate_config(head + "decks = 2\n", "t.toml", use_env=False)
    with pytest.raises(ConfigError, match=r"t.toml:7: devices.shuffler.decks_per_shuffle: "
                       r"Input should be a valid integer, not '2' \(a string\)"):  # fmt: skip
        validate_config(head + 'decks_per_shuffle = "2"\n', "t.toml", use_env=False)
    with pytest.raises(ConfigError, match=r"devices.shuffler.driver: driver 'acme.broken' "
                       "cannot be loaded: .*not a Driver subclass"):  # fmt: skip
        validate_config(head.replace("acme.shuffler", "acme.broken"), use_env=False)


def test_unknown_driver_names_the_known_ones() -> None:
    with pytest.raises(UnknownDriver, match=r"available: .*tableside\.shoe"):
        get_driver("nonesuch")
    with pytest.raises(ConfigError, match="no driver named 'nonesuch'"):
        validate_config(
            '[table]\nid = "t"\ngame = "let_it_ride"\n'
            '[devices.x]\ndriver = "nonesuch"\nurl = "/dev/x"\n',
            use_env=False,
        )


def test_a_table_imports_only_the_drivers_it_names() -> None:
    """The registry is lazy: a shuffler-only table's config (its options checked by the
    shuffler's model) and the daemon never import the ccTalk or USB drivers."""
    import subprocess
    import sys

    code = """if True:
        import sys
        import tableside.daemon.app
        from tableside.daemon.config import validate_config
        toml = '[table]\\nid = "t"\\ngame = "let_it_ride"\\n[devices.s]\\n'
        toml += 'driver = "tableside.shuffler"\\nurl = "/dev/x"\\ncounts_cards = false\\n'
        assert not validate_config(toml, use_env=False).devices["s"].options.counts_cards
        print(sorted(m for m in sys.modules
                     if m.startswith("tableside.drivers.") and m.endswith(".driver")))
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "['tableside.drivers.shuffler.driver']"


def test_the_built_in_names_are_the_packages_entry_points() -> None:
    """The built-in table and pyproject.toml's entry points name the same classes."""
    import tomllib

    from tableside.drivers import registry

    pyproject = Path(__file__).parent.parent / "pyproject.toml"
    declared = tomllib.loads(pyproject.read_text())["project"]["entry-points"]["tableside.drivers"]
    assert declared == registry._BUILTIN
