"""The configuration a table runs, as a record (docs/configuration.md, "Changes on the record"):
every key by its path with its value, secrets as digests, its hash, and what differs from the
configuration of the last start (read back from the journal's retained ``config``).

Pure: no I/O."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping

from tableside.daemon.config import Config
from tableside.wire.payloads import ConfigBody, ConfigChange, ConfigPayload

__all__ = ["SECRET_KEYS", "config_message", "flat"]

#: keys whose values are never recorded, only their digest (a change still shows)
SECRET_KEYS = frozenset({"password"})


def flat(value: object, path: str = "") -> dict[str, object]:
    """Nested tables as ``{"a.b.c": value}``; a list is a value."""
    if isinstance(value, Mapping) and (value or not path):
        out: dict[str, object] = {}
        for key, inner in value.items():
            out.update(flat(inner, f"{path}.{key}" if path else str(key)))
        return out
    name = path.rsplit(".", 1)[-1]
    if name in SECRET_KEYS and value is not None:
        digest = hashlib.sha256(str(value).encode()).hexdigest()[:16]
        return {path: f"sha256:{digest}"}
    return {path: value}


def config_message(
    config: Config, previous: bytes | None, environ: Mapping[str, str] = os.environ
) -> ConfigBody:
    """This start's ``config`` record; ``previous``: the last start's payload as
    the journal kept it (None at a first start, or one this version cannot read)."""
    now = flat(config.model_dump(mode="json"))
    canonical = json.dumps(now, sort_keys=True, separators=(",", ":"), default=str)
    before: dict[str, object] = {}
    if previous is not None:
        try:
            before = ConfigPayload.model_validate_json(previous).config
        except ValueError:
            before = {}
    changed = [
        ConfigChange(key=key, old=before.get(key), new=now.get(key))
        for key in sorted(set(now) | set(before))
        if before.get(key) != now.get(key)
    ]
    login = environ.get("SUDO_USER") or environ.get("LOGNAME") or environ.get("USER")
    return ConfigBody(hash=hashlib.sha256(canonical.encode()).hexdigest(), config=now,
                      changed=changed, started_by=login or None)  # fmt: skip
