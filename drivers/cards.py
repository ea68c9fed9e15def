"""One byte per playing card on the wire: high nibble suit, low nibble rank.

Rank 1 = ace … 13 = king; suit 0 = clubs, 1 = diamonds, 2 = hearts, 3 = spades.

A rank a person gives (a command's argument, docs/commands.md "Card ranks") is taken however
it is naturally spelt and kept by its one name (``"A"``, ``"2"`` … ``"10"``, ``"J"``, ``"Q"``,
``"K"``): ``7`` and ``"7"`` are the same card, so are ``"a"``, ``"ace"`` and ``1``, ``"T"``
and ``10``, ``"king"`` and ``"K"``. What could mean two cards is refused: ``11`` (the wire's
jack, or an ace counting eleven), ``12``, ``13``.
"""

from __future__ import annotations

from typing import Annotated, Final, Literal, get_args

from pydantic import BeforeValidator, WithJsonSchema
from pydantic_core import PydanticCustomError

__all__ = ["RANKS", "Rank", "RankName", "card_code", "card_name", "is_card_code", "rank_name"]

#: a rank's one name, as card names (``"10H"``) and the rules spell it
RankName = Literal["A", "2", "3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K"]
RANKS: Final[tuple[RankName, ...]] = get_args(RankName)
_SUITS = "CDHS"

#: the other spellings of a rank a person may type (any case)
_SPELLINGS: Final[dict[str, RankName]] = {
    "1": "A", "ace": "A", "t": "10", "jack": "J", "queen": "Q", "king": "K",
}  # fmt: skip
_TAKES = "A (or ace, 1), 2..10 (or T), J, Q, K (or jack, queen, king), in any case"


def rank_name(value: object) -> RankName:
    """A rank however it is spelt (``7``, ``"7"``, ``"k"``, ``"king"``, ``"T"``) → its name
    (``"7"``, ``"K"``, ``"10"``); ValueError, saying what is taken, for anything else."""
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 10:
        text = str(value)
    elif isinstance(value, str):
        text = value.lower()
    else:
        raise ValueError(f"a card's rank is {_TAKES}; not {value!r}")
    name = _SPELLINGS.get(text, text.upper())
    for rank in RANKS:
        if rank == name:
            return rank
    raise ValueError(f"a card's rank is {_TAKES}; not {value!r}")


def _rank_field(value: object) -> RankName:
    try:
        return rank_name(value)
    except ValueError:  # said once, without the value (a refusal shows what it got)
        raise PydanticCustomError("card_rank", f"a card's rank is {_TAKES}") from None


#: a pydantic field that takes a rank however it is spelt and holds its name
Rank = Annotated[
    RankName,
    BeforeValidator(_rank_field),
    WithJsonSchema({
        "anyOf": [{"enum": list(RANKS)}, {"type": "integer", "minimum": 1, "maximum": 10}],
        "description": f"a card's rank: {_TAKES}",
    }),
]  # fmt: skip


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
    return RANKS[(code & 0x0F) - 1] + _SUITS[code >> 4]
