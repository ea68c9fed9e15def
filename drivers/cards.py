"""One byte per playing card on the wire: high nibble suit, low nibble rank.

Rank 1 = ace … 13 = king; suit 0 = clubs, 1 = diamonds, 2 = hearts, 3 = spades.
"""

from __future__ import annotations

__all__ = ["card_code", "card_name", "is_card_code"]

_RANKS = ["A", "2", "3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K"]
_SUITS = "CDHS"


def card_code(rank: int, suit: int) -> int:
    if not (1 <= rank <= 13 and 0 <= suit <= 3):
        raise ValueError(f"no such card: rank {rank}, suit {suit}")
    return (suit << 4) | rank


def is_card_code(code: int) -> bool:
    return 1 <= (code & 0x0F) <= 13 and (code >> 4) <= 3


def card_name(code: int) -> str:
    """``0x31`` → ``"AS"``; raises ValueError for a byte that is no card."""
    if not is_card_code(code):
        raise ValueError(f"byte 0x{code:02x} is not a card")
    return _RANKS[(code & 0x0F) - 1] + _SUITS[code >> 4]
