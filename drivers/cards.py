"""One byte per playing card on the wire: high nibble suit, low nibble rank.

Rank 1 = ace … 13 = king; suit 0 = clubs, 1 = diamonds, 2 = hearts, 3 = spades.

A rank a person gives (a command's argument, docs/commands.md "Card ranks") is taken however
it is naturally spelt and kept by its one name (``"A"``, ``"2"`` … ``"10"``, ``"J"``, ``"Q"``,
``"K"``): ``7`` and ``"7"`` are the same card, so are ``"a"``, ``"ace"`` and ``1``, ``"T"``
and ``10``, ``"king"`` and ``"K"``. What could mean two cards is refused: ``11`` (the wire's
jack, or an ace counting eleven), ``12``, ``13``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Final, Literal, get_args

from pydantic import BeforeValidator, GetCoreSchemaHandler, WithJsonSchema
from pydantic_core import PydanticCustomError, core_schema

from tableside.drivers.named import Named, spelling_schema

__all__ = [
    "RANKS",
    "Card",
    "Rank",
    "RankName",
    "card_code",
    "card_name",
    "is_card_code",
    "rank_name",
]

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


@dataclass(frozen=True, slots=True)
class Card(Named):
    """A playing card, from the byte that names it on the link to the rule that reads it;
    spelt ``"AS"``, ``"10H"`` only in JSON. ``Card(0x31)`` refuses a byte that is no card
    (ValueError); ``Card.of`` and ``Card.named`` give the one instance of each card."""

    #: its byte on the link: high nibble suit (0 clubs … 3 spades), low nibble rank (1 ace …)
    code: int

    def __post_init__(self) -> None:
        if not is_card_code(self.code):
            raise ValueError(f"byte 0x{self.code:02x} is not a card")

    @classmethod
    def of(cls, code: int) -> Card:
        """The card a byte names; ValueError for a byte that names none."""
        card = _BY_CODE.get(code)
        if card is None:
            raise ValueError(f"byte 0x{code:02x} is not a card")
        return card

    @classmethod
    def named(cls, name: str) -> Card:
        """The card of a name as the table spells it (``"AS"``, ``"10H"``, exactly);
        ValueError for anything else."""
        card = _BY_NAME.get(name)
        if card is None:
            raise ValueError(f"{name!r} is no card (spelt as AS, 10H, QC)")
        return card

    @property
    def number(self) -> int:
        """Its rank as a number: 1 ace … 10, 11 jack, 12 queen, 13 king."""
        return self.code & 0x0F

    @property
    def rank(self) -> RankName:
        return RANKS[(self.code & 0x0F) - 1]

    @property
    def suit(self) -> int:
        """0 clubs, 1 diamonds, 2 hearts, 3 spades."""
        return self.code >> 4

    @property
    def name(self) -> str:
        return RANKS[(self.code & 0x0F) - 1] + _SUITS[self.code >> 4]

    def spelt(self) -> str:
        return self.name

    def __str__(self) -> str:
        return self.name

    def __repr__(self) -> str:
        return f"Card({self.name})"

    @classmethod
    def __get_pydantic_core_schema__(
        cls, source: object, handler: GetCoreSchemaHandler
    ) -> core_schema.CoreSchema:
        """Read from its name, written as its name, described as a string."""
        return spelling_schema(cls, cls.named, core_schema.str_schema())


#: the 52 cards, each one instance, by byte and by name
_BY_CODE: Final[dict[int, Card]] = {
    code: Card(code) for code in (card_code(r, s) for s in range(4) for r in range(1, 14))
}
_BY_NAME: Final[dict[str, Card]] = {card.name: card for card in _BY_CODE.values()}
