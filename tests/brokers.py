"""The MQTT brokers people run, each started by a test on free loopback ports with its own files
in the test's directory, and stopped by its own process id: Mosquitto, RabbitMQ's MQTT plugin,
NATS's MQTT (with JetStream), aedes (Node.js) and amqtt (Python, the demo's embedded broker).

Each class says what it is and what it speaks; ``tests/test_broker_matrix.py`` measures the
rest (retained messages, wills, shared subscriptions, the largest message) and holds each class
to what it declares. ``start`` returns once the broker answers an MQTT 3.1.1 CONNECT with a
CONNACK that accepts it, not merely once its port takes TCP. A broker that is not installed is
``missing()``, with the command that installs it; one that is installed and fails to start
raises ``BrokerFailed`` with its log.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import ClassVar, Literal

from tests.ports import free_port

__all__ = [
    "BROKERS",
    "AedesBroker",
    "AmqttBroker",
    "Broker",
    "BrokerFailed",
    "MosquittoBroker",
    "NatsBroker",
    "RabbitMqBroker",
    "connack",
    "raw_connect",
]

MqttVersion = Literal["5", "3.1.1"]

#: tests/aedes: the aedes package installed by ./dev.sh (npm install --prefix tests/aedes)
AEDES_DIR = Path(__file__).parent / "aedes"
#: Debian's rabbitmq-server: the scripts run as they are (not /usr/sbin's wrapper, which
#: switches to the system's rabbitmq user and its files)
RABBITMQ_LIB = Path("/usr/lib/rabbitmq")


class BrokerFailed(RuntimeError):
    """An installed broker did not start (or stop): what it logged is in the message."""


# -- MQTT 3.1.1 by hand: the readiness probe and the will probe, independent of any client ----


def _utf8(text: str) -> bytes:
    data = text.encode()
    return struct.pack(">H", len(data)) + data


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        n, digit = divmod(n, 128)
        out.append(digit | (0x80 if n else 0))
        if not n:
            return bytes(out)


def connect_packet(
    client_id: str, *, keepalive: int = 60, will: tuple[str, bytes, int, bool] | None = None
) -> bytes:
    """An MQTT 3.1.1 CONNECT (3.1), clean session; ``will``: (topic, payload, QoS, retain)."""
    flags = 0x02
    payload = _utf8(client_id)
    if will is not None:
        topic, message, qos, retain = will
        flags |= 0x04 | qos << 3 | (0x20 if retain else 0)
        payload += _utf8(topic) + struct.pack(">H", len(message)) + message
    body = b"\x00\x04MQTT\x04" + bytes([flags]) + struct.pack(">H", keepalive) + payload
    return b"\x10" + _varint(len(body)) + body


def connack(sock: socket.socket) -> int:
    """The return code of the CONNACK the broker sends (0: accepted); ``ConnectionError`` when
    it closes the connection first or sends something else."""
    data = b""
    while len(data) < 4:
        chunk = sock.recv(4 - len(data))
        if not chunk:
            raise ConnectionError(f"closed before a CONNACK (had {data!r})")
        data += chunk
    if data[:2] != b"\x20\x02":
        raise ConnectionError(f"not a CONNACK: {data!r}")
    return data[3]


def raw_connect(
    port: int,
    client_id: str,
    *,
    will: tuple[str, bytes, int, bool] | None = None,
    timeout: float = 5.0,
) -> socket.socket:
    """A socket on which the broker at 127.0.0.1:``port`` accepted an MQTT 3.1.1 CONNECT."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        sock.sendall(connect_packet(client_id, will=will))
        code = connack(sock)
        if code != 0:
            raise ConnectionError(f"CONNACK return code {code}")
    except BaseException:
        sock.close()
        raise
    return sock


def _answers(port: int) -> bool:
    """Whether the broker accepts an MQTT CONNECT now (then says goodbye with DISCONNECT)."""
    try:
        sock = raw_connect(port, f"ts-ready-{os.getpid()}", timeout=2.0)
    except OSError:
        return False
    with sock, contextlib.suppress(OSError):
        sock.sendall(b"\xe0\x00")
    return True


def _version_of(command: Sequence[str], pattern: str) -> str:
    try:
        out = subprocess.run(command, capture_output=True, text=True, timeout=30, check=False)
    except OSError:
        return "?"
    found = re.search(pattern, out.stdout + out.stderr)
    return found.group(1) if found else "?"


# -- the brokers ---------------------------------------------------------------------------


class Broker(ABC):
    """One broker process this test owns: ``start``, ``stop``, its ``url`` and its log."""

    #: the matrix's name for it
    name: ClassVar[str]
    #: the MQTT versions it speaks, as ``[broker] mqtt_version`` spells them
    versions: ClassVar[tuple[MqttVersion, ...]] = ("3.1.1",)
    #: what test_broker_matrix.py measured and holds it to: a retained message is kept for a
    #: later subscriber; a will is sent when a client vanishes; ``$share/<group>/<filter>``
    #: gives each message to one member of the group
    retains: ClassVar[bool] = True
    wills: ClassVar[bool] = True
    shared_subscriptions: ClassVar[bool] = False
    #: of test_broker_matrix.PROBE_SIZES, the largest payload a subscriber receives
    largest_payload: ClassVar[int]
    #: how long a start may take here before it is a failure (a loaded 2-core machine)
    start_within_s: ClassVar[float] = 20.0

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"mqtt://127.0.0.1:{self.port}"
        self.log_file = directory / f"{self.name}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        #: seconds from the process's start to its first accepted CONNECT
        self.started_in: float | None = None

    @classmethod
    @abstractmethod
    def missing(cls) -> str | None:
        """Why this broker cannot run here (and what installs it); None when it can."""

    @abstractmethod
    def command(self) -> list[str]:
        """The broker's command line (its files written first)."""

    @abstractmethod
    def version(self) -> str:
        """The broker's own version, as it reports it."""

    def environment(self) -> dict[str, str] | None:
        return None

    def start(self) -> None:
        reason = self.missing()
        if reason is not None:
            raise BrokerFailed(reason)
        command = self.command()
        began = time.monotonic()
        with self.log_file.open("ab") as log:
            # a session of its own: what it starts (RabbitMQ's shell wrapper starts the VM) is
            # stopped with it, by this process's id
            proc = self.proc = subprocess.Popen(
                command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=self.environment(), start_new_session=True, cwd=self.directory,
            )  # fmt: skip
        _RUNNING.add(self)
        deadline = began + self.start_within_s
        while not _answers(self.port):
            if proc.poll() is not None:
                self.stop()
                raise BrokerFailed(f"{self.name} exited ({proc.returncode}):\n{self.log()}")
            if time.monotonic() > deadline:
                self.stop()
                raise BrokerFailed(
                    f"{self.name} did not answer a CONNECT on 127.0.0.1:{self.port} within "
                    f"{self.start_within_s:.0f} s:\n{self.log()}"
                )
            time.sleep(0.05)
        self.started_in = time.monotonic() - began

    def stop(self) -> None:
        _RUNNING.discard(self)
        proc = self.proc
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                # the process group this broker's own session made, and nothing else
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        self.proc = None

    def log(self, tail: int = 60) -> str:
        """The last ``tail`` lines the broker wrote."""
        try:
            lines = self.log_file.read_text(encoding="utf-8", errors="replace").splitlines()
        except FileNotFoundError:
            return "(no log)"
        return "\n".join(lines[-tail:])

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.url}>"


class MosquittoBroker(Broker):
    """Eclipse Mosquitto 2 (Debian's ``mosquitto``): MQTT 5 and 3.1.1, no persistence."""

    name = "mosquitto"
    versions = ("5", "3.1.1")
    shared_subscriptions = True
    largest_payload = 16 * 1024 * 1024
    PROGRAM = shutil.which("mosquitto") or "/usr/sbin/mosquitto"

    @classmethod
    def missing(cls) -> str | None:
        if not Path(cls.PROGRAM).exists():
            return "mosquitto not installed: apt-get install mosquitto"
        return None

    def command(self) -> list[str]:
        conf = self.directory / "mosquitto.conf"
        # user root: run as the test's user (it owns the files); notices: each connection
        # and why it ended, for a failure's report
        conf.write_text(
            f"user root\nlistener {self.port} 127.0.0.1\nallow_anonymous true\n"
            "persistence false\nlog_dest stderr\nlog_type error\nlog_type warning\n"
            "log_type notice\nlog_type information\n",
            encoding="utf-8",
        )
        return [self.PROGRAM, "-c", str(conf)]

    def version(self) -> str:
        return _version_of([self.PROGRAM, "-h"], r"mosquitto version (\S+)")


class RabbitMqBroker(Broker):
    """RabbitMQ (Debian's ``rabbitmq-server``) with its ``rabbitmq_mqtt`` plugin: MQTT 3.1.1
    (3.10 speaks nothing newer). A node of its own (``ts-<port>@localhost``): its own epmd on
    a free port, its own AMQP, distribution and MQTT ports, Mnesia, logs, config, enabled
    plugins and Erlang cookie, all in the test's directory; never the machine's node."""

    name = "rabbitmq"
    largest_payload = 16 * 1024 * 1024
    #: the Erlang VM and the broker's boot steps: seconds on an idle machine, more when loaded
    start_within_s = 90.0

    def __init__(self, directory: Path) -> None:
        super().__init__(directory)
        self.amqp_port = free_port()
        self.dist_port = free_port()
        self.epmd_port = free_port()
        self.node = f"ts-{self.port}@localhost"
        self.epmd: subprocess.Popen[bytes] | None = None

    @classmethod
    def missing(cls) -> str | None:
        if not (RABBITMQ_LIB / "bin" / "rabbitmq-server").exists():
            return "rabbitmq-server not installed: apt-get install rabbitmq-server"
        if not list(RABBITMQ_LIB.glob("lib/rabbitmq_server-*/plugins/rabbitmq_mqtt-*")):
            return f"no rabbitmq_mqtt plugin under {RABBITMQ_LIB}/lib: reinstall rabbitmq-server"
        if shutil.which("epmd") is None:
            return "no epmd (Erlang): apt-get install rabbitmq-server"
        return None

    def version(self) -> str:
        found = sorted(RABBITMQ_LIB.glob("lib/rabbitmq_server-*"))
        return found[-1].name.removeprefix("rabbitmq_server-") if found else "?"

    def environment(self) -> dict[str, str]:
        d = self.directory
        return {
            **os.environ,
            # the cookie is made in HOME: this node's own, not the machine's
            "HOME": str(d),
            "ERL_EPMD_PORT": str(self.epmd_port),
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.amqp_port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
            "RABBITMQ_LOG_BASE": str(d / "log"),
            "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(d / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"),
            # not /etc/rabbitmq/rabbitmq-env.conf (the machine's node name)
            "RABBITMQ_CONF_ENV_FILE": str(d / "rabbitmq-env.conf"),
            "RABBITMQ_PID_FILE": str(d / "rabbitmq.pid"),
        }

    def command(self) -> list[str]:
        d = self.directory
        (d / "rabbitmq-env.conf").write_text("", encoding="utf-8")
        (d / "enabled_plugins").write_text("[rabbitmq_mqtt].\n", encoding="utf-8")
        # the guest user, which anonymous MQTT connections use, may log in from loopback only
        (d / "rabbitmq.conf").write_text(
            f"listeners.tcp.1 = 127.0.0.1:{self.amqp_port}\n"
            f"mqtt.listeners.tcp.1 = 127.0.0.1:{self.port}\n"
            "mqtt.allow_anonymous = true\n"
            "log.console = true\nlog.console.level = info\nlog.console.use_colors = off\n"
            "log.file = false\n",
            encoding="utf-8",
        )
        # an epmd of its own on a free port, in the foreground: stopped by its pid
        self.epmd = subprocess.Popen(
            ["epmd", "-port", str(self.epmd_port), "-address", "127.0.0.1"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 10
        while socket.socket().connect_ex(("127.0.0.1", self.epmd_port)) != 0:
            if time.monotonic() > deadline or self.epmd.poll() is not None:
                raise BrokerFailed(f"epmd did not listen on 127.0.0.1:{self.epmd_port}")
            time.sleep(0.02)
        return [str(RABBITMQ_LIB / "bin" / "rabbitmq-server")]

    def stop(self) -> None:
        try:
            super().stop()  # SIGTERM: the wrapper stops the VM and waits for it
        finally:
            if self.epmd is not None:
                self.epmd.terminate()
                self.epmd.wait(timeout=10)
                self.epmd = None


class NatsBroker(Broker):
    """NATS Server (Debian's ``nats-server``) with its MQTT listener: MQTT 3.1.1, which needs
    JetStream (in the test's directory) and a ``server_name``."""

    name = "nats"
    largest_payload = 16 * 1024 * 1024
    PROGRAM = shutil.which("nats-server") or "/usr/sbin/nats-server"

    @classmethod
    def missing(cls) -> str | None:
        if not Path(cls.PROGRAM).exists():
            return "nats-server not installed: apt-get install nats-server"
        return None

    def command(self) -> list[str]:
        conf = self.directory / "nats.conf"
        # JetStream's limits kept small: a shared machine
        conf.write_text(
            f'server_name: "ts-{self.port}"\n'
            f"listen: 127.0.0.1:{free_port()}\n"
            f'jetstream {{ store_dir: "{self.directory / "jetstream"}", '
            "max_memory_store: 268435456, max_file_store: 1073741824 }\n"
            f"mqtt {{ listen: 127.0.0.1:{self.port} }}\n",
            encoding="utf-8",
        )
        return [self.PROGRAM, "-c", str(conf)]

    def version(self) -> str:
        return _version_of([self.PROGRAM, "--version"], r"\bv(\d\S*)")


class AedesBroker(Broker):
    """aedes (npm), in memory, on Node.js: MQTT 3.1.1. tests/aedes/broker.js, with the
    version tests/aedes/package.json pins, which ./dev.sh installs into tests/aedes."""

    name = "aedes"
    largest_payload = 16 * 1024 * 1024

    @classmethod
    def missing(cls) -> str | None:
        node = shutil.which("node")
        if node is None:
            return "node not installed: apt-get install nodejs npm, then ./dev.sh installs aedes"
        if not (AEDES_DIR / "node_modules" / "aedes" / "package.json").exists():
            return "aedes not installed: npm install --prefix tests/aedes (./dev.sh does)"
        major = _version_of([node, "--version"], r"v(\d+)")
        if not major.isdigit() or int(major) < 20:
            return f"aedes needs Node.js 20 or newer; this node is v{major}"
        return None

    def command(self) -> list[str]:
        return [shutil.which("node") or "node", str(AEDES_DIR / "broker.js"), str(self.port)]

    def version(self) -> str:
        package = AEDES_DIR / "node_modules" / "aedes" / "package.json"
        aedes = json.loads(package.read_text(encoding="utf-8"))["version"]
        node = _version_of([shutil.which("node") or "node", "--version"], r"(v\S+)")
        return f"{aedes} (Node.js {node})"


#: amqtt configured as the demo's embedded broker (daemon/broker.py), in a process of its own
_AMQTT = """\
import asyncio, logging, signal, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                    format="%(asctime)s %(name)s %(levelname)s %(message)s")
from amqtt.broker import Broker

async def main(port):
    broker = Broker({
        "listeners": {"default": {"type": "tcp", "bind": f"127.0.0.1:{port}"}},
        "plugins": {"amqtt.plugins.authentication.AnonymousAuthPlugin": {"allow_anonymous": True}},
    })
    await broker.start()
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await broker.shutdown()

asyncio.run(main(int(sys.argv[1])))
"""


class AmqttBroker(Broker):
    """amqtt (pip, the ``demo`` extra), configured as ``tableside demo`` embeds it
    (daemon/broker.py), in a Python process of its own: MQTT 3.1.1."""

    name = "amqtt"
    largest_payload = 16 * 1024 * 1024

    @classmethod
    def missing(cls) -> str | None:
        if importlib.util.find_spec("amqtt") is None:
            return "amqtt not installed: pip install 'tableside[demo]' (./dev.sh does)"
        return None

    def command(self) -> list[str]:
        return [sys.executable, "-c", _AMQTT, str(self.port)]

    def version(self) -> str:
        try:
            return version("amqtt")
        except PackageNotFoundError:
            return "?"


#: every broker of the matrix, by name
BROKERS: dict[str, type[Broker]] = {
    b.name: b for b in (MosquittoBroker, RabbitMqBroker, NatsBroker, AedesBroker, AmqttBroker)
}

#: started and not stopped yet: stopped when the test process exits, whatever happened
_RUNNING: set[Broker] = set()


@atexit.register
def _stop_all() -> None:
    for broker in list(_RUNNING):
        with contextlib.suppress(Exception):
            broker.stop()
