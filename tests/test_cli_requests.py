"""``tableside command`` refuses at once what the table would refuse of any request, before it
connects: an unknown role, command or argument (with the nearest spelling), an argument of the
wrong type, a role that may not give the command. It waited 10 s for an answer that never came.
And ``tableside floor`` without the ``floor`` extra says which to install."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tableside.cli import main
from tableside.floor.cli import FLOOR_EXTRA

ROOT = Path(__file__).parents[1]

#: a broker address where nothing listens: a request that got as far as connecting fails there
NOWHERE = ["--table", "t1", "--broker", "mqtt://127.0.0.1:9"]


@pytest.mark.parametrize(
    ("request_words", "said"),
    [
        (["dealer", "table", "start_rnd"], "command 'start_rnd': did you mean 'start_round'?"),
        (["dealr", "table", "open_table"], "unknown role 'dealr': did you mean 'dealer'?"),
        (["dealer", "table", "stub_count", "cunt=3"], "argument 'cunt': did you mean 'count'?"),
        (["dealer", "table", "stub_count", "count=abc"], "stub_count: count:"),
        (["floorperson", "table", "open_table", "note=x"], "open_table takes no arguments"),
        (["dealer", "table", "xyzzy"], "unknown command 'xyzzy' (one of: "),
    ],
)  # fmt: skip
def test_a_request_the_table_would_refuse_is_refused_before_it_is_sent(
    request_words: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["command", *NOWHERE, *request_words]) == 2
    assert said in capsys.readouterr().err


def test_a_role_that_may_not_give_the_command_is_told_which_may(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["command", *NOWHERE, "dealer", "table", "resolve_ruling", "seq=3"]) == 2
    assert "may not give 'resolve_ruling'" in capsys.readouterr().err


def test_the_floor_without_its_extra_says_which_to_install(tmp_path: Path) -> None:
    """``pip install tableside`` then ``tableside floor run --http …``: one line naming the
    ``floor`` extra, not a traceback (aiohttp hidden as if it were not installed)."""
    users = tmp_path / "users"
    hide = "import sys; sys.modules['aiohttp'] = None; from tableside.cli import main; "
    run = [sys.executable, "-c", hide + "sys.exit(main(sys.argv[1:]))", "floor", "run",
           "--broker", "mqtt://127.0.0.1:9", "--store", str(tmp_path / "f.db"),
           "--http", "127.0.0.1:0", "--users", str(users)]  # fmt: skip
    done = subprocess.run(run, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 2, done.stderr
    assert "pip install 'tableside[floor]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_floor_extra_named_is_the_one_declared() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    packages = declared["project"]["optional-dependencies"]["floor"]
    names = {re.split(r"[\[<>=]", p)[0] for p in packages}
    assert names == FLOOR_EXTRA
