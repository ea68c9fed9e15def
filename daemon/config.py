"""One TOML file per table, validated by pydantic; overrides from the environment and the CLI.

Precedence, lowest first: the file, then ``TABLESIDE_BROKER`` / ``TABLESIDE_DEVICE__<NAME>``
from the environment, then ``--broker`` / ``--device NAME=URL`` on the command line.
Every error names where it is: ``file:line: devices.shuffler.url: …``.
"""

from __future__ import annotations

import os
import re
import ssl
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SkipValidation,
    Strict,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError

from tableside.daemon.clock import LabClock
from tableside.drivers.base import DriverOptions
from tableside.drivers.registry import UnknownDriver, available_drivers, get_driver
from tableside.errors import ConfigurationError
from tableside.mqtt.connection import Endpoint
from tableside.rules import paytables
from tableside.rules.model import Game, GamingDay
from tableside.rules.progressive import PayTable

__all__ = [
    "BrokerConfig",
    "ClockConfig",
    "Config",
    "ConfigError",
    "DeviceConfig",
    "JournalConfig",
    "MetricsConfig",
    "ProgressiveConfig",
    "ProofConfig",
    "RulingsConfig",
    "TableConfig",
    "load_config",
    "locate",
    "parse_listen",
    "state_dir_problems",
    "validate_config",
]

_NAME = r"^[a-z0-9][a-z0-9_]{0,31}$"


class _Strict(BaseModel):
    # Strict types: "30" is no number and "yes" no bool (a config is written by hand, and a
    # value quoted by mistake must not change meaning). Paths, enums and the integer keys of
    # a TOML table come as strings and say so below (Strict(False)).
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


#: a path, written as a TOML string
_Path = Annotated[Path, Strict(False)]


def _writable_dir(path: Path) -> Path:
    """The directory the table writes to: a directory (or one that can be made) it may write."""
    existing = path
    try:
        while not existing.exists() and existing.parent != existing:
            existing = existing.parent
        is_dir = existing.is_dir()
    except OSError as exc:  # e.g. a parent this user may not look into
        raise ValueError(f"cannot look at {existing}: {exc.strerror}") from None
    if not is_dir:
        raise ValueError(f"{existing} is not a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        what = "cannot be created in" if existing != path else "is not writable:"
        raise ValueError(f"{path} {what} {existing} (read-only, or not this user's)")
    return path


class TableConfig(_Strict):
    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")]
    game: Annotated[Game, Strict(False)]
    #: Spanish 21 only: 6 or 8 decks of 48 cards (58 Pa. Code § 551.3(a))
    decks: Literal[6, 8] | None = None
    #: where the table keeps its journal (<state_dir>/<id>/journal.sqlite) and its key
    state_dir: _Path = Path("/var/lib/tableside")
    #: card identities stay on the table unless this is true (regulators forbid sending them)
    publish_card_identities: bool = False
    #: the casino's gaming day (551.2(e) "each gaming day"): an IANA time zone and the hour
    #: the gaming day starts there
    timezone: str = "UTC"
    gaming_day_starts: Annotated[int, Field(ge=0, le=23)] = 0
    #: a test lab's table, not one on the casino floor: only a lab table takes [test_clock]
    lab: bool = False
    #: the release manifest the installed software is held to (docs/software.md); unset: the
    #: install's own, <prefix>/share/tableside/manifest.json, when there is one
    software_manifest: _Path | None = None

    @field_validator("timezone")
    @classmethod
    def _known_zone(cls, zone: str) -> str:
        GamingDay(zone)  # raises ValueError naming the zone
        return zone

    @property
    def gaming_day(self) -> GamingDay:
        return GamingDay(self.timezone, self.gaming_day_starts)

    @field_validator("decks")
    @classmethod
    def _decks_only_for_spanish_21(cls, decks: int | None, info: ValidationInfo) -> int | None:
        # a field's own validator: the error names the decks line, not the [table] header
        game = info.data.get("game")
        if decks is not None and game is not None and game is not Game.SPANISH_21:
            raise ValueError(f"decks applies to spanish_21 only, not {game.value}")
        return decks


def _version_name(value: object) -> object:
    """A version is a name: ``mqtt_version = 5`` is version "5" (3.1.1 is no TOML number)."""
    return "5" if type(value) is int and value == 5 else value


class BrokerConfig(_Strict):
    url: str = "mqtt://127.0.0.1:1883"
    topic_prefix: Annotated[str, Field(pattern=r"^[^#+/][^#+]*[^#+/]$|^[^#+/]$")] = "tableside"
    #: default: tableside-<table id>, unique per table
    client_id: str | None = None
    keepalive_s: Annotated[int, Field(ge=5, le=3600)] = 30
    #: "5": requests may ask for a response (response topic and correlation data); "3.1.1" for
    #: a broker that speaks nothing newer
    mqtt_version: Annotated[Literal["5", "3.1.1"], BeforeValidator(_version_name)] = "5"
    username: str | None = None
    password: str | None = None
    #: mqtts:// only: the CA that signed the broker's certificate (default: the system's CAs)
    ca_file: _Path | None = None
    #: mqtts:// only: this table's client certificate and its key, when the broker asks for one
    cert_file: _Path | None = None
    key_file: _Path | None = None

    @field_validator("url")
    @classmethod
    def _mqtt_url(cls, url: str) -> str:
        parts = urlsplit(url)
        if parts.scheme not in ("mqtt", "mqtts") or not parts.hostname:
            raise ValueError(f"expected mqtt://host[:port] or mqtts://host[:port], got {url!r}")
        try:
            parts.port  # noqa: B018  # raises ValueError for a bad port
        except ValueError as exc:
            raise ValueError(f"bad port in {url!r}") from exc
        return url

    @field_validator("ca_file", "cert_file", "key_file")
    @classmethod
    def _readable(cls, path: Path | None) -> Path | None:
        if path is not None and not path.is_file():
            raise ValueError(f"no such file: {path}")
        return path

    @field_validator("ca_file")
    @classmethod
    def _certificates(cls, path: Path | None) -> Path | None:
        if path is not None:
            try:
                ssl.create_default_context().load_verify_locations(cafile=path)
            except (ssl.SSLError, OSError) as exc:
                raise ValueError(f"{path} holds no CA certificate (PEM): {exc}") from None
        return path

    @model_validator(mode="after")
    def _tls_settings(self) -> BrokerConfig:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("cert_file and key_file go together")
        if not self.tls and (self.ca_file or self.cert_file):
            raise ValueError("ca_file, cert_file and key_file need an mqtts:// url")
        if self.cert_file is not None and self.key_file is not None:
            try:
                ssl.create_default_context().load_cert_chain(self.cert_file, self.key_file)
            except (ssl.SSLError, OSError) as exc:
                raise ValueError(
                    f"cert_file and key_file are not a certificate (PEM) and its key: {exc}"
                ) from None
        return self

    @property
    def tls(self) -> bool:
        return Endpoint(self.url).tls

    @property
    def port(self) -> int:
        return Endpoint(self.url).port

    def endpoint(self) -> Endpoint:
        """Where the broker is and how to speak to it (mqtt/connection.py)."""
        return Endpoint(
            self.url, self.username, self.password, self.ca_file, self.cert_file, self.key_file,
            v5=self.mqtt_version == "5",
        )  # fmt: skip


class JournalConfig(_Strict):
    """The durable journal (docs/journal.md). Only records the broker has acknowledged are ever
    deleted, oldest first; unsent records are kept whatever the limits say."""

    #: acknowledged records older than this many days are deleted (unset: kept by age)
    retain_days: Annotated[float, Field(gt=0)] | None = 90
    #: the journal is kept under this size, deleting the oldest acknowledged records
    max_mb: Annotated[float, Field(ge=1)] | None = 2000


class RulingsConfig(_Strict):
    """``[rulings]``: a ruling's lifecycle (rules/rulings.py, docs/mqtt.md)."""

    #: a ruling nobody has acknowledged this many seconds after it was given is escalated (by
    #: the table's clock: monotonic within a run; a lab's test clock runs it faster)
    escalate_after_s: Annotated[float, Field(gt=0, le=86400)] = 120.0


class ClockConfig(_Strict):
    """``[clock]``: when the table trusts its wall clock (daemon/discipline.py, docs/journal.md
    "Time")."""

    #: the clock's estimated error (the kernel's, as its time service says) past this many
    #: seconds, or the clock not synchronised, is an alert; records made meanwhile say so
    max_error_s: Annotated[float, Field(gt=0, le=3600)] = 1.0


class ProofConfig(_Strict):
    """What the table sends for the floor to check (docs/floor.md)."""

    #: a signed checkpoint of the journal's head this often (and on a clean stop)
    checkpoint_interval_s: Annotated[float, Field(ge=0.1, le=86400)] = 60


class ProgressiveConfig(_Strict):
    """Caribbean Stud's progressive pay table (555.13(d)-(e)); amounts in dollars. A table
    below the minimums is refused."""

    #: share of each $1 progressive wager that goes to the meter (555.13(e): at least 70)
    rate_percent: Annotated[float, Field(gt=0, le=100)]
    initial: Annotated[float, Field(ge=0)]
    reset: Annotated[float, Field(ge=0)]
    #: the straight flush pays 10% of the meter, or $5,000 (as the casino designates)
    straight_flush: Literal["ten_percent", "fixed"]
    four_of_a_kind: float = 500
    full_house: float = 100
    flush: float = 50

    def pay_table(self) -> PayTable:
        return PayTable(
            rate_percent=self.rate_percent,
            initial_cents=round(self.initial * 100),
            reset_cents=round(self.reset * 100),
            straight_flush=self.straight_flush,
            four_of_a_kind_cents=round(self.four_of_a_kind * 100),
            full_house_cents=round(self.full_house * 100),
            flush_cents=round(self.flush * 100),
        )

    @model_validator(mode="after")
    def _at_least_the_minimums(self) -> ProgressiveConfig:
        problems = self.pay_table().problems()
        if problems:
            raise ValueError("; ".join(problems))
        return self


#: the pay tables a game may have (rules/paytables.py)
_PAY_TABLES = {
    Game.CARIBBEAN_STUD: ("caribbean_stud_bet",),
    Game.FOUR_CARD_POKER: ("four_card_ante_bonus", "aces_up"),
    Game.LET_IT_RIDE: ("let_it_ride", "let_it_ride_bonus", "three_card_bonus"),
}


_UNKNOWN_OPTION = (
    "{driver} takes no option '{key}' (its options: {takes}; every device has: {common})"
)


class DeviceConfig(_Strict):
    """``[devices.<name>]``: the keys every device has; the rest of its table are its driver's
    own options, checked against the driver's ``Options`` model (drivers/base.py
    ``DriverOptions``; docs/drivers.md). Only the drivers a config names are imported."""

    #: driver name from the registry (tableside.shuffler, or an installed plug-in)
    driver: str
    #: /dev/ttyUSB0, socket://host:port, rfc2217://host:port or usb://VID:PID[?serial=S]
    url: Annotated[str, Field(min_length=1)]
    baudrate: Annotated[int, Field(gt=0)] = 9600
    heartbeat_timeout_s: Annotated[float, Field(gt=0, le=600)] = 3.0
    ack_timeout_s: Annotated[float, Field(gt=0, le=10)] = 0.25
    retries: Annotated[int, Field(ge=0, le=10)] = 3
    #: frames a second the table takes from this device (a second's worth at once) before
    #: slowing it and reporting it ``flooding`` (docs/drivers.md, "Flooding")
    max_frames_per_s: Annotated[float, Field(gt=0, le=100_000)] = 100
    #: the driver's own keys, validated by its ``Options`` model; in the file they sit beside
    #: the keys above (``seats = {…}``, not ``options.seats``)
    options: Annotated[DriverOptions, SkipValidation] = DriverOptions()

    @model_validator(mode="before")
    @classmethod
    def _driver_keys_to_options(cls, data: object) -> object:
        if not isinstance(data, dict) or "options" in data:
            return data
        common = cls.model_fields.keys()
        options = {k: v for k, v in data.items() if k not in common}
        return {**{k: v for k, v in data.items() if k in common}, "options": options}

    @field_validator("options", mode="before")
    @classmethod
    def _driver_options(cls, options: object, info: ValidationInfo) -> DriverOptions:
        """The driver's own model checks its keys (the driver's module is imported here, for
        the drivers a config names only); a key it does not take is refused by name. The
        errors are the option's own (``devices.<name>.options.<key>``), so each names its
        line."""
        name = info.data.get("driver")
        if name is None:  # an unknown driver, or one that cannot be loaded: said on its line
            return DriverOptions()
        model = get_driver(name).Options  # loaded by _known_driver
        if isinstance(options, DriverOptions):  # given as a model (in Python, not in a file)
            if not isinstance(options, model):
                raise ValueError(f"{name} takes {model.__name__}, not {type(options).__name__}")
            return options
        if not isinstance(options, dict):
            return model.model_validate(options)
        fields = model.model_fields
        errors = [
            InitErrorDetails(
                type=PydanticCustomError("unknown_option", _UNKNOWN_OPTION, {
                    "driver": name, "key": key, "takes": ", ".join(fields) or "none",
                    "common": ", ".join(k for k in cls.model_fields if k != "options")}),
                loc=(key,),
                input=value,
            )
            for key, value in options.items()
            if key not in fields
        ]  # fmt: skip
        try:
            valid = model.model_validate({k: v for k, v in options.items() if k in fields})
        except ValidationError as exc:
            errors += [InitErrorDetails(type=e["type"], loc=e["loc"], input=e["input"],
                                        ctx=e.get("ctx", {})) for e in exc.errors()]  # fmt: skip
        if errors:
            raise ValidationError.from_exception_data(model.__name__, errors)
        return valid

    @field_validator("driver")
    @classmethod
    def _known_driver(cls, name: str) -> str:
        known = available_drivers()
        if name not in known:
            raise ValueError(f"no driver named {name!r} (available: {', '.join(sorted(known))})")
        try:
            get_driver(name)  # imported now: its Options check the device's other keys
        except (UnknownDriver, ImportError) as exc:  # a plug-in that cannot be loaded
            raise ValueError(f"driver {name!r} cannot be loaded: {exc}") from None
        return name

    @field_validator("url")
    @classmethod
    def _device_url(cls, url: str) -> str:
        scheme = urlsplit(url).scheme
        if scheme in ("socket", "rfc2217"):
            parts = urlsplit(url)
            if not parts.hostname or parts.port is None:
                raise ValueError(f"expected {scheme}://host:port, got {url!r}")
        elif scheme == "usb":
            from tableside.drivers.usb import parse_usb_url

            parse_usb_url(url)
        elif scheme == "" and not url.startswith("/"):
            raise ValueError(
                f"expected a tty path (/dev/ttyUSB0), socket://host:port, rfc2217://host:port "
                f"or usb://VID:PID, got {url!r}"
            )
        elif scheme not in ("", "file"):
            raise ValueError(
                f"unknown scheme {scheme!r} in {url!r} "
                "(use a tty path, socket://host:port, rfc2217://host:port or usb://VID:PID)"
            )
        return url


class LabClockConfig(_Strict):
    """``[test_clock]``: a lab's clock for hardware-in-the-loop runs (daemon/clock.py); a table
    without ``[table] lab = true`` refuses it."""

    #: the table's time runs this many times as fast as real time (3600: an hour a second)
    speed: Annotated[float, Field(gt=0, le=1_000_000)] = 1.0
    #: the table's time starts this far from the wall clock (seconds; negative: the past)
    offset_s: float = 0.0

    def clock(self) -> LabClock:
        return LabClock(self.speed, self.offset_s)


class MetricsConfig(_Strict):
    """``[metrics]``: Prometheus metrics on ``http://<listen>/metrics`` (daemon/metrics.py).
    Without this section the daemon serves none."""

    #: HOST:PORT to listen on, e.g. "127.0.0.1:9464" (127.0.0.1 keeps it to this machine)
    listen: str

    @field_validator("listen")
    @classmethod
    def _host_port(cls, listen: str) -> str:
        parse_listen(listen)
        return listen


def parse_listen(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:9464`` for IPv6) → (host, port); ValueError says what is wrong."""
    host, sep, port = text.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected HOST:PORT (e.g. 127.0.0.1:9464), got {text!r}")
    return host, int(port)


class Config(_Strict):
    table: TableConfig
    broker: BrokerConfig = BrokerConfig()
    journal: JournalConfig = JournalConfig()
    rulings: RulingsConfig = RulingsConfig()
    proof: ProofConfig = ProofConfig()
    clock: ClockConfig = ClockConfig()
    test_clock: LabClockConfig | None = None
    progressive: ProgressiveConfig | None = None
    metrics: MetricsConfig | None = None
    #: the casino's pay tables, checked against the chapter's minimums (rules/paytables.py)
    pay_tables: dict[str, dict[str, float] | str] = Field(default_factory=dict)
    devices: dict[Annotated[str, Field(pattern=_NAME)], DeviceConfig]

    # Each check on one key is that key's own validator, so its error names the key's line
    # (not the file's first line); ``info.data`` has the keys declared before it.

    @field_validator("test_clock")
    @classmethod
    def _lab_only(cls, clock: LabClockConfig | None, info: ValidationInfo) -> LabClockConfig | None:
        table = info.data.get("table")
        if clock is not None and isinstance(table, TableConfig) and not table.lab:
            raise ValueError(
                "[test_clock] is for a lab table (set [table] lab = true); a table on the "
                "casino floor keeps real time"
            )
        return clock

    @field_validator("progressive")
    @classmethod
    def _caribbean_stud_only(
        cls, progressive: ProgressiveConfig | None, info: ValidationInfo
    ) -> ProgressiveConfig | None:
        table = info.data.get("table")
        game = table.game if isinstance(table, TableConfig) else None
        if progressive is not None and game is not None and game is not Game.CARIBBEAN_STUD:
            raise ValueError(
                "[progressive] is Caribbean Stud's progressive pay table (555.13); "
                f"not for {game.value}"
            )
        return progressive

    @field_validator("pay_tables")
    @classmethod
    def _pay_tables_of_the_game(
        cls, pay_tables: dict[str, dict[str, float] | str], info: ValidationInfo
    ) -> dict[str, dict[str, float] | str]:
        table = info.data.get("table")
        if not isinstance(table, TableConfig):
            return pay_tables
        allowed = _PAY_TABLES.get(table.game, ())
        problems = []
        for kind, pays in pay_tables.items():
            if kind not in allowed:
                problems.append(f"{kind} is no pay table of {table.game.value} (its: "
                                f"{', '.join(allowed) or 'none'})")  # fmt: skip
            else:
                problems += paytables.check(kind, pays)
        if problems:
            raise ValueError("; ".join(problems))
        return pay_tables

    @field_validator("devices")
    @classmethod
    def _has_devices(cls, devices: dict[str, DeviceConfig]) -> dict[str, DeviceConfig]:
        if not devices:
            raise ValueError("a table needs at least one device under [devices.<name>]")
        return devices

    @property
    def client_id(self) -> str:
        # the username where there is one: a broker binding client ids to logins
        # (use_username_as_clientid, systemd/mosquitto-tableside.conf) gives it that id anyway
        return self.broker.client_id or self.broker.username or f"tableside-{self.table.id}"


_DEVICE_ENV = "TABLESIDE_DEVICE__"


def _env_overrides(environ: Mapping[str, str]) -> tuple[str | None, dict[str, str]]:
    """``TABLESIDE_BROKER`` and ``TABLESIDE_DEVICE__<NAME>`` (the name in any case), as systemd
    units set them: the broker URL and device URLs that override the file."""
    devices = {key[len(_DEVICE_ENV):].lower(): value for key, value in environ.items()
               if key.upper().startswith(_DEVICE_ENV) and len(key) > len(_DEVICE_ENV)}  # fmt: skip
    return environ.get("TABLESIDE_BROKER"), devices


@dataclass(frozen=True, slots=True)
class Problem:
    where: str  # "file:line" or "file"
    path: str  # "devices.shuffler.url"
    message: str

    def __str__(self) -> str:
        path = f"{self.path}: " if self.path else ""
        return f"{self.where}: {path}{self.message}"


class ConfigError(ConfigurationError):
    """Every problem found in a config, each with where it is."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))


def _find_line(text: str, loc: Sequence[str | int]) -> int | None:
    """Best-effort line of a key path in a TOML text (tables and dotted headers)."""
    keys = [str(k) for k in loc]
    lines = text.splitlines()
    header_re = re.compile(r"^\s*\[\s*([^\]]+?)\s*\]\s*(#.*)?$")
    current: list[str] = []
    best: int | None = None
    for number, line in enumerate(lines, 1):
        m = header_re.match(line)
        if m:
            current = [part.strip().strip('"') for part in m.group(1).split(".")]
            if current == keys[: len(current)] and best is None:
                best = number
            if current == keys:
                return number
            continue
        key = line.split("=", 1)[0].strip().strip('"') if "=" in line else None
        if key is not None and [*current, key] == keys[: len(current) + 1]:
            return number
    return best


def _apply_overrides(
    data: dict[str, object], broker: str | None, devices: Mapping[str, str]
) -> list[Problem]:
    """Put the overrides in. Where the file has no table to put one in (``broker = "…"``), the
    override is left out: the validation names that line."""
    problems = []
    if broker and isinstance(section := data.setdefault("broker", {}), dict):
        section["url"] = broker
    table_devices = data.get("devices", {})
    for name, url in devices.items():
        if not isinstance(table_devices, dict) or name not in table_devices:
            problems.append(Problem("override", f"devices.{name}", "no such device in the config"))
        elif isinstance(device := table_devices[name], dict):
            device["url"] = url
    return problems


#: pydantic's error types for a value of the wrong type: the message says what was given
_WRONG_TYPE = re.compile(r"_type$|^(int|float|bool)_parsing$|^literal_error$|^enum$")


def _message(err: Mapping[str, object]) -> str:
    # our own checks' words, without pydantic's "Value error, " before them
    message = str(err["msg"]).removeprefix("Value error, ")
    if _WRONG_TYPE.search(str(err["type"])):
        given = err.get("input")
        shown = repr(given) if not isinstance(given, dict | list) else type(given).__name__
        message += f", not {shown[:60]} ({_toml_type(given)})"
    return message


def _toml_type(value: object) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string",
             dict: "a table", list: "an array"}  # fmt: skip
    return names.get(type(value), type(value).__name__)


def validate_config(
    text: str,
    source: str = "<config>",
    *,
    broker: str | None = None,
    devices: Mapping[str, str] | None = None,
    use_env: bool = True,
) -> Config:
    """Parse and validate; raise ConfigError listing every problem with its place."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        m = re.search(r"line (\d+)", str(exc))
        where = f"{source}:{m.group(1)}" if m else source
        raise ConfigError([Problem(where, "", f"not valid TOML: {exc}")]) from exc
    env_broker, env_devices = _env_overrides(os.environ) if use_env else (None, {})
    merged_devices = {**env_devices, **(devices or {})}
    problems = _apply_overrides(data, broker or env_broker, merged_devices)
    try:
        config = Config.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            loc = [str(x) for x in err["loc"]]
            if loc[:1] == ["devices"] and loc[2:3] == ["options"]:
                del loc[2]  # a driver's option sits beside the common keys in the file
            line = _find_line(text, loc)
            where = f"{source}:{line}" if line else source
            problems.append(Problem(where, ".".join(loc), _message(err)))
        raise ConfigError(problems) from exc
    if problems:
        raise ConfigError(problems)
    return config


def locate(path: str | Path, loc: Sequence[str]) -> str:
    """``file:line`` of a key in a config file (``file`` when it cannot be found)."""
    try:
        line = _find_line(Path(path).read_text(encoding="utf-8"), loc)
    except (OSError, UnicodeDecodeError):
        line = None
    return f"{path}:{line}" if line else str(path)


def state_dir_problems(config: Config, source: str | Path) -> list[Problem]:
    """Whether this user may keep the table's journal in ``state_dir`` (``run`` and
    ``check-config`` ask; a monitor or an auditor reading the config need not write there)."""
    table_dir = config.table.state_dir / config.table.id
    try:
        _writable_dir(table_dir if table_dir.exists() else config.table.state_dir)
    except ValueError as exc:
        return [Problem(locate(source, ["table", "state_dir"]), "table.state_dir", str(exc))]
    return []


def load_config(
    path: str | Path,
    *,
    broker: str | None = None,
    devices: Mapping[str, str] | None = None,
    use_env: bool = True,
    writable: bool = False,
) -> Config:
    """Read and validate a config file; ``writable``: the state directory must be writable by
    this user too (the daemon's, and check-config's, question)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError([Problem(str(path), "", f"cannot read: {exc.strerror}")]) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:  # TOML is UTF-8 (toml.io): say where it is not
        line = raw[: exc.start].count(b"\n") + 1
        column = exc.start - (raw.rfind(b"\n", 0, exc.start) + 1) + 1
        message = f"not UTF-8: byte 0x{raw[exc.start]:02x} at column {column}"
        raise ConfigError([Problem(f"{path}:{line}", "", message)]) from exc
    config = validate_config(text, str(path), broker=broker, devices=devices, use_env=use_env)
    if writable and (problems := state_dir_problems(config, path)):
        raise ConfigError(problems)
    return config
