"""Events of the card reader device."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Literal

from tableside.drivers.card_reader.protocol import ReaderFaultCode, ReaderState
from tableside.drivers.events import DeviceEvent, FaultReport, StatusReport

__all__ = ["HoleCardChecked", "ReaderFault", "ReaderStatus", "SelfTestResult"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ReaderStatus(DeviceEvent, StatusReport):
    kind: ClassVar[str] = "status"
    state: ReaderState
    fault: ReaderFaultCode | None
    reveals_hole_card: bool  # as configured, else as the reader reports (551.16(l))
    reveals_source: Literal["config", "device"]
    checks: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SelfTestResult(DeviceEvent):
    kind: ClassVar[str] = "self_test"
    passed: bool
    code: int
    detail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class HoleCardChecked(DeviceEvent):
    kind: ClassVar[str] = "hole_card_checked"
    check_id: int
    blackjack: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class ReaderFault(DeviceEvent, FaultReport):
    kind: ClassVar[str] = "fault"
    fault: ReaderFaultCode
    detail: str
