"""Caribbean Stud's progressive payout (555.12, 555.13(d)-(f)), pure: the pay table and its
minimums, the meter, and the steps before a progressive hand is paid.

Readings (docs/rules.md has the rows; the note of the session that wrote this has the why):

* The meter moves in millicents (1/1000 cent) so that a rate like 72.5% of a $1 wager adds
  exactly 72.5 cents; it shows whole cents.
* Fixed amounts (four of a kind $500, full house $100, flush $50, and a straight flush when the
  casino designates $5,000) are paid by the casino, not from the meter; the royal flush (100%)
  and a straight flush at 10% are paid from the meter. The meter never goes down otherwise.
* After a royal flush the meter starts again at the reset amount.
* The dealer pays from the right: seat 7 first, seat 1 last (555.12, "when it is the player's
  turn to be paid"); a payout asked for out of turn is refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tableside.rules.hands import FiveCard

__all__ = ["MINIMUMS_CENTS", "MINIMUM_RATE_PERCENT", "PAYING_HANDS", "PayTable", "payout"]

#: 555.13(e): "shall be no less than 70%"
MINIMUM_RATE_PERCENT = 70.0
#: 555.13(d): the fixed amounts, at least
MINIMUMS_CENTS: dict[FiveCard, int] = {
    FiveCard.FOUR_OF_A_KIND: 500_00,
    FiveCard.FULL_HOUSE: 100_00,
    FiveCard.FLUSH: 50_00,
}
STRAIGHT_FLUSH_FIXED_CENTS = 5_000_00
PAYING_HANDS = (FiveCard.ROYAL_FLUSH, FiveCard.STRAIGHT_FLUSH, *MINIMUMS_CENTS)


@dataclass(frozen=True, slots=True)
class PayTable:
    """The casino's progressive pay table (its Rules Submission), checked against 555.13."""

    rate_percent: float
    initial_cents: int
    reset_cents: int
    straight_flush: Literal["ten_percent", "fixed"]
    four_of_a_kind_cents: int = 500_00
    full_house_cents: int = 100_00
    flush_cents: int = 50_00
    wager_cents: int = 100  # 555.7(c): a $1 gaming chip

    def problems(self) -> list[str]:
        """Every way this table falls short of 555.13(d)-(e), or nothing."""
        out = []
        if self.rate_percent < MINIMUM_RATE_PERCENT:
            out.append(f"rate_percent {self.rate_percent} is below the 70% of 555.13(e)")
        if self.rate_percent > 100:
            out.append(f"rate_percent {self.rate_percent} is more than the wager")
        for hand, cents in self.fixed_cents().items():
            least = MINIMUMS_CENTS[hand]
            if cents < least:
                out.append(f"{hand.name.lower()} pays ${cents / 100:,.2f}, below the "
                           f"${least / 100:,.2f} of 555.13(d)")  # fmt: skip
        if self.initial_cents < 0 or self.reset_cents < 0:
            out.append("initial and reset amounts cannot be negative")
        return out

    def fixed_cents(self) -> dict[FiveCard, int]:
        return {
            FiveCard.FOUR_OF_A_KIND: self.four_of_a_kind_cents,
            FiveCard.FULL_HOUSE: self.full_house_cents,
            FiveCard.FLUSH: self.flush_cents,
        }

    def contribution_millicents(self) -> int:
        """What one accepted wager adds to the meter."""
        return round(self.wager_cents * 1000 * self.rate_percent / 100)


def payout(
    table: PayTable, hand: FiveCard, meter_millicents: int, royal_flushes: int = 1
) -> tuple[int, int]:
    """(the payout in cents, the meter after it) for one hand paid at this moment of the meter.
    ``royal_flushes``: how many royal flushes share the meter this round (555.13(f))."""
    meter_cents = meter_millicents // 1000
    if hand is FiveCard.ROYAL_FLUSH:
        return meter_cents // max(1, royal_flushes), table.reset_cents * 1000
    if hand is FiveCard.STRAIGHT_FLUSH:
        if table.straight_flush == "fixed":
            return STRAIGHT_FLUSH_FIXED_CENTS, meter_millicents
        amount = meter_cents // 10
        return amount, meter_millicents - amount * 1000
    if hand in MINIMUMS_CENTS:
        return table.fixed_cents()[hand], meter_millicents
    raise ValueError(f"a {hand.name.lower().replace('_', ' ')} wins nothing from the progressive")
