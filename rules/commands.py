"""Every command a person can give a table, declared once: its typed arguments, the roles that
may give it, the phases it is valid in, who carries it out, and its doc line.

The daemon's role checks, argument checks, phase and halt checks and dispatch, the table's
``step()`` (a table command is a ``TableEvent`` of the same name), docs/commands.md and the
command JSON Schema all come from ``COMMANDS``; nothing else lists commands.

Roles (who may): the dealer, the floorperson, the technician, and the auditor (the floor's
collector, which may ask for replays from the journal and nothing else). The role is the topic
a request arrives on (``<prefix>/<table>/command/<role>``); the broker's ACL decides who may
publish there (docs/commands.md).
"""

from __future__ import annotations

import dataclasses
import enum
import unicodedata
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated, Any, Literal, TypeVar

from pydantic import (
    AfterValidator,
    Field,
    PlainValidator,
    StrictBool,
    StrictInt,
    ValidationError,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

import tableside.drivers.commands as device
from tableside.drivers.cards import Rank
from tableside.drivers.commands import Args, NoArgs, Seat, TargetName
from tableside.drivers.events import DeviceEvent
from tableside.errors import Refused
from tableside.rules import seen
from tableside.rules.baccarat import burn, coup
from tableside.rules.hands import FiveCard
from tableside.rules.model import Action, Game
from tableside.rules.paytables import MINIMUMS
from tableside.rules.progressive import PAYING_HANDS, payout
from tableside.rules.rulings import MAX_NOTE_CHARS, acknowledge, resolve
from tableside.rules.table import (
    EVENT_TRANSITIONS,
    Claim,
    DealingMethod,
    Phase,
    Said,
    ShufflingMethod,
    TableState,
    Turn,
    coup_begins,
    dealt,
    gate,
    hand_cards,
    leads_to,
    meter,
    new_cards,
    open_betting,
    round_begins,
    shuffled,
    stays_in,
    ten_found,
)

if TYPE_CHECKING:
    from tableside.rules.progressive import PayTable

__all__ = [
    "COMMANDS",
    "MAX_REPLAY",
    "REPLAY",
    "TRANSITIONS",
    "Args",
    "Command",
    "Handler",
    "NoArgs",
    "Refused",
    "Role",
    "admit",
    "authorise",
]


class Role(enum.StrEnum):
    DEALER = "dealer"
    FLOORPERSON = "floorperson"
    TECHNICIAN = "technician"
    #: the floor's collector (docs/floor.md): may ask for replays and nothing else
    AUDITOR = "auditor"


# -- arguments: strict (a count is an integer, a flag a boolean; "yes" and 52.0 are refused) --


A = TypeVar("A", bound=Args)


DeviceClass = Annotated[str, Field(min_length=1, description="e.g. shuffler, shoe, card_reader")]


def _paying_hand(value: object) -> FiveCard:
    for hand in PAYING_HANDS:
        if value is hand or value == hand.spelt():
            return hand
    # said as the schema's enum says it
    *most, last = (repr(name) for name in _PAYING_NAMES)
    raise PydanticCustomError("literal_error", f"Input should be {', '.join(most)} or {last}")


_PAYING_NAMES = [h.spelt() for h in PAYING_HANDS]
#: a progressive payout hand (555.13), by its name
Hand = Annotated[FiveCard, PlainValidator(_paying_hand),
                 WithJsonSchema({"enum": _PAYING_NAMES, "type": "string"})]  # fmt: skip


class _Ranked(Args):
    @field_validator("*", mode="before")
    @classmethod
    def _upper(cls, value: object, info: ValidationInfo) -> object:
        """Card ranks are taken in either case (``k`` is ``K``); a floorperson's reason is
        kept as written."""
        if info.field_name == "override":
            return value
        if isinstance(value, str):
            return value.upper()
        if isinstance(value, list):
            return [v.upper() if isinstance(v, str) else v for v in value]
        return value


#: a floorperson's reason for dealing while the rules halt it
Reason = Annotated[str, Field(min_length=3)]


class Override(Args):
    """A deal the rules would refuse (dealing halted, 551.16(m) …) goes ahead only when a
    floorperson gives the reason; the reason is journaled with the result."""

    override: Reason | None = None


class StubCount(Args):
    count: Annotated[StrictInt, Field(ge=0, description="cards in the deck by the stub count")]
    misdealt: StrictBool = False


class DeclareMethod(Args):
    dealing: DealingMethod | None = None
    shuffling: ShufflingMethod | None = None


class DeviceOnTable(Args):
    device_class: DeviceClass


class ProgressiveHand(Args):
    seat: Seat
    hand: Hand


class AtSeat(Args):
    seat: Seat


class PayBonus(Args):
    seat: Seat
    hand: Annotated[str, Field(min_length=1, description="a Let It Ride Bonus hand")]


class ChipsCollected(Args):
    count: Annotated[StrictInt, Field(ge=0, description="the wager chips collected")]


class CardExposed(Args):
    card: Literal["hole", "dealer"]


class Misdeal(Args):
    target: TargetName
    count: Annotated[StrictInt, Field(ge=0)]
    expected: Annotated[StrictInt, Field(ge=1)] | None = None


class UpCard(_Ranked):
    rank: Rank


class DealtCard(UpCard):
    """A card dealt to the round in play (Spanish 21's up card): dealing, so refused while a
    rule halts it unless a floorperson overrides."""

    override: Reason | None = None


#: an amount in whole chips of the table's smallest denomination (dollars at a $1 table)
Chips = Annotated[StrictInt, Field(ge=1, description="whole chips of the table's smallest "
                                   "denomination (dollars at a $1 table)")]  # fmt: skip


class InsuranceWager(Args):
    """Spanish 21's Insurance Wager; with its ``amount`` and the player's initial ``wager`` the
    table judges 551.10(b)'s "not more than half" (to the next chip)."""

    amount: Chips | None = None
    wager: Chips | None = None

    @model_validator(mode="after")
    def _together(self) -> InsuranceWager:
        if (self.amount is None) != (self.wager is None):
            raise ValueError("amount and wager go together (the Insurance Wager and the "
                             "player's initial wager)")  # fmt: skip
        return self


class InsurancePayout(Args):
    """Winning Insurance Wagers paid: the ``wager`` and what was ``paid`` on it (551.10(c))."""

    wager: Chips | None = None
    paid: Annotated[StrictInt, Field(ge=0)] | None = None

    @model_validator(mode="after")
    def _together(self) -> InsurancePayout:
        if (self.wager is None) != (self.paid is None):
            raise ValueError("wager and paid go together (the Insurance Wager and its payout)")
        return self


class DrawnInError(Args):
    disclosed: StrictBool


class Coup(_Ranked):
    player: Annotated[list[Rank], Field(min_length=2, max_length=3)]
    banker: Annotated[list[Rank], Field(min_length=2, max_length=3)]
    extra: list[Rank] = Field(default_factory=list)
    override: Reason | None = None


class DealRound(Override):
    positions: Annotated[list[Seat], Field(min_length=1, max_length=7)]
    round: Annotated[StrictInt, Field(ge=1)] | None = None


# -- a ruling's lifecycle (rules/rulings.py) ---------------------------------------------------

RulingId = Annotated[
    StrictInt, Field(ge=0, description="the ruling's id: the seq of its ruling message")
]


def _hidden(text: str, *, line_breaks: bool) -> None:
    """A character that would make what a person typed read otherwise in an audit trail:
    control characters (but line breaks where allowed), direction overrides and isolates
    (U+202A-U+202E, U+2066-U+2069: a note read backwards), zero-width characters and every
    other Unicode format character (words hidden), line and paragraph separators."""
    for at, char in enumerate(text):
        kind = unicodedata.category(char)
        if (kind == "Cc" and not (line_breaks and char == "\n")) or kind in ("Cf", "Zl", "Zp"):
            name = unicodedata.name(char, "a control character")
            raise ValueError(f"U+{ord(char):04X} ({name}) at character {at + 1}: it would "
                             "hide or reorder what was typed")  # fmt: skip


def _name(text: str) -> str:
    if text != text.strip():
        raise ValueError("a name of printable characters, without spaces around it")
    _hidden(text, line_breaks=False)
    return text


def _note(text: str) -> str:
    _hidden(text, line_breaks=True)
    return text


#: a person's name as the casino knows them: printable, no surrounding spaces
Person = Annotated[
    str,
    Field(min_length=1, max_length=64, description="the floorperson's name, as the casino "
          "knows them"),
    AfterValidator(_name),
]  # fmt: skip


class AcknowledgeRuling(Args):
    ruling: RulingId
    by: Person


class ResolveRuling(Args):
    ruling: RulingId
    action: Annotated[Action, Field(description="what was done: one of the ruling's actions")]
    by: Person
    note: Annotated[
        str,
        Field(max_length=MAX_NOTE_CHARS, description="anything more to say (line breaks allowed)"),
        AfterValidator(_note),
    ] = ""


# -- the commands --------------------------------------------------------------------------

#: the people at and around the table (not the auditor, who may only ask for replays)
_EVERYONE = frozenset(Role) - {Role.AUDITOR}
_DEALERS = frozenset({Role.DEALER, Role.FLOORPERSON})
_FLOOR = frozenset({Role.FLOORPERSON})
_FLOOR_AND_TECH = frozenset({Role.FLOORPERSON, Role.TECHNICIAN})
_TECH = frozenset({Role.TECHNICIAN})

#: a table command's handler: the table as it was and the arguments as parsed → the table
Handler = Callable[[Turn, A], TableState]

#: the games a dealing command deals in (``deals=True``: every game)
_ALL_GAMES = frozenset(Game)


@dataclass(frozen=True, slots=True, eq=False)
class Command:
    """One command: what it is called, who may give it, with what arguments, and (for the
    table's) its handler. When it is taken and what phase it leads to: its row of
    ``TRANSITIONS``, keyed by the command itself. Each is declared once: equal only to
    itself."""

    name: str
    doc: str
    roles: frozenset[Role]
    args: type[Args] = NoArgs
    #: who carries it out: "table" (its ``run``), or the device class whose driver does it
    #: ("shoe"), or "device" for any device whose driver has it
    target: str = "table"
    #: the games in which it deals cards (a round starts, or cards go to the round in play):
    #: refused there while a rule halts dealing, in any phase, unless a floorperson overrides
    #: with a reason (daemon/routing.py); a table command's dealing is judged by the rows
    #: (rules/table.py ``dealt``)
    deals: frozenset[Game] = frozenset()
    #: why these roles, for docs/commands.md
    why: str = ""
    #: arguments that work, for the docs and the tests that send every command
    example: Mapping[str, object] = field(default_factory=dict)
    #: the device command that carries it out, when it is not its own name (``deal_round``
    #: becomes the shoe's ``deal`` with the game's dispense pattern)
    via: str | None = None
    #: the phases in which only a floorperson may give it (``bets_open`` once "no more bets"
    #: was said: reopening betting in the middle of a round)
    supervised_in: frozenset[Phase] = frozenset()
    #: the table's handler (a table command's; None for a device's)
    run: Callable[[Turn, Args], TableState] | None = field(default=None, compare=False)

    @property
    def device_command(self) -> str:
        return self.via or self.name

    def deals_in(self, game: Game) -> bool:
        """Whether it deals cards at a table of ``game``."""
        return game in self.deals

    @property
    def phases(self) -> frozenset[Phase] | None:
        """The phases it is taken in (TRANSITIONS; None: any)."""
        row = TRANSITIONS.get(self)
        return None if row is None else frozenset(row)

    def refusal(self, phase: Phase) -> str | None:
        """Why it is not taken while the table is in ``phase`` (None: it is)."""
        row = TRANSITIONS.get(self)
        if row is None or phase in row:
            return None
        valid = ", ".join(p.value for p in Phase if p in row)
        return (f"{self.name!r} is refused while the table is {phase.value} (it is taken when "
                f"the table is {valid})")  # fmt: skip

    def parse(self, raw: Mapping[str, object]) -> Args:
        """Its arguments, typed; ``Refused`` says what is wrong with them, and where."""
        try:
            return self.args.model_validate(dict(raw))
        except ValidationError as exc:
            raise Refused(f"{self.name}: {_problems(exc)}") from None

    def said(self, args: Args, at: float) -> Said:
        """This table command with its parsed arguments, for the table's ``step``."""
        run = self.run
        if run is None:
            raise Refused(f"{self.name!r} is carried out by a device, not the table")
        return Said(self.name, at, lambda turn: run(turn, args), TRANSITIONS.get(self))


_DECLARED: list[Command] = []


def _device(
    carried: device.DeviceCommand,
    target: str,
    doc: str,
    roles: frozenset[Role],
    *,
    why: str = "",
    example: Mapping[str, object] | None = None,
    deals: bool = False,
    name: str | None = None,
    args: type[Args] | None = None,
) -> Command:
    """A command a device's driver carries out, as drivers/commands.py declares it (its name and
    arguments); or, with ``name``, a person's command that becomes that device command."""
    command = Command(name or carried.name, doc, roles, args or carried.args, target,
                      _ALL_GAMES if deals else frozenset(), why, example or {},
                      carried.name if name else None)  # fmt: skip
    _DECLARED.append(command)
    return command


def _table(
    name: str,
    doc: str,
    roles: frozenset[Role],
    args: type[A],
    *,
    why: str = "",
    example: Mapping[str, object] | None = None,
    deals: bool | frozenset[Game] = False,
    supervised_in: frozenset[Phase] = frozenset(),
) -> Callable[[Handler[A]], Command]:
    """A command the table itself takes, declared on its handler, which the declaration
    replaces with the ``Command`` (click's way: ``OPEN_TABLE`` is the command, its handler its
    ``run``). One that ``deals`` (in every game, or in those named) has its dealing judged
    while dealing is halted (rules/table.py ``dealt``), whatever its handler does."""
    games = _ALL_GAMES if deals is True else frozenset() if deals is False else deals
    if games and "override" not in args.model_fields:
        raise TypeError(f"{name} deals: its arguments take a floorperson's override")

    def declare(handler: Handler[A]) -> Command:
        def run(turn: Turn, given: Args) -> TableState:
            if not isinstance(given, args):
                raise TypeError(f"{name} takes {args.__name__}, not {type(given).__name__}")
            new = handler(turn, given)
            if turn.facts.game in games and not any(
                what == "dealt_while_halted" for what, _, _ in turn.notes
            ):  # a round's start judged it already (rules/table.py round_begins)
                dealt(turn)
            return new

        command = Command(name, doc, roles, args, "table", games, why, example or {}, None,
                          supervised_in, run)  # fmt: skip
        _DECLARED.append(command)
        return command

    return declare


#: cards shuffled by hand while a shuffler is on the table
_MANUAL_SHUFFLE = seen.OtherMethod(method=ShufflingMethod.MANUAL, device_class="shuffler")


def _same(turn: Turn, args: Args) -> TableState:
    """The table's phase moves (TRANSITIONS) and nothing else."""
    return turn.state


def _observed(turn: Turn, args: Args) -> TableState:
    """The rows judge it (``table.<command>``) and the table stays as it is."""
    turn.observe(turn.kind)
    return turn.state


def _round_so_far(state: TableState) -> dict[str, Any]:
    """Spanish 21: what a step of the round is judged against: the up card, the reader, what
    it said, and whether additional cards were dealt (551.8(e), 551.10, 551.7(d))."""
    return {"up_card": state.up_card, "gate": gate(state),
            "hole_card_checked": state.hole_card_checked, "blackjack": state.blackjack,
            "more_cards_dealt": state.more_cards_dealt}  # fmt: skip


def _gated(turn: Turn, args: Args) -> TableState:
    """Spanish 21: the rows judge it against the round so far (551.8(e) …)."""
    turn.observe(turn.kind, seen.Gated(**_round_so_far(turn.state)))
    return turn.state


# -- devices ---------------------------------------------------------------------------------
_device(device.START_SHUFFLE, "shuffler", "the shuffler shuffles the deck", _EVERYONE)
DEAL_ROUND = _device(
    device.DEAL,
    "shoe",
    "deal a round to the seats with a wager, in the game's dispense pattern (555.10(b), "
    "557.10(b), 559.12(b))",
    _DEALERS,
    name="deal_round",
    args=DealRound,
    deals=True,
    why="dealing a round is the dealer's",
    example={"positions": [1, 3]},
)
_device(device.SET_LIGHTS, "progressive_controller", "light these seats' acceptors (555.12(b)(2))",
        _EVERYONE, example={"seats": [2]})  # fmt: skip
_device(
    device.LOCK_OUT,
    "device",
    'the acceptors refuse wagers: "no more bets" by hand (555.2(f))',
    _DEALERS,
    why='closing bets by hand, where no control device says "no more bets"',
)
_device(
    device.RELEASE,
    "device",
    "the acceptors take wagers again, whatever the table's phase",
    _FLOOR,
    why="releasing the lock-out outside the round's flow (bets_open is the dealer's next round)"
    " is a supervisor's decision",
)
_device(device.SET_METER, "progressive_controller", "set the progressive meter's display", _FLOOR,
        why="the progressive meter is a supervisor's",
        example={"cents": 100000})  # fmt: skip
DEAL = _device(
    device.DEAL,
    "shoe",
    "the shoe dispenses these stacks as they are (testing a shoe)",
    _TECH,
    why="raw stacks from the shoe are for testing a shoe, not for dealing a round",
    example={"round": 90, "stacks": [{"target": 1, "size": 5}]},
    # the shoe's deal starts a round at the table all the same (rules/table.py)
    deals=True,
)
_device(device.SELF_TEST, "card_reader", "the card reader tests itself (551.2(e))", _EVERYONE)
_device(device.QUERY_STATUS, "device", "the device reports its status", _EVERYONE)
_device(device.QUERY_IDENTITY, "device",
        "the device says who it is: model, serial, firmware and its hash", _EVERYONE)  # fmt: skip


# -- the table: the round --------------------------------------------------------------------
@_table("open_table", "the cards were inspected; the table opens (deck age starts, 555.4)",
        _FLOOR, NoArgs, why="opening a table is a supervisor's")  # fmt: skip
def OPEN_TABLE(turn: Turn, args: NoArgs) -> TableState:
    since = turn.state.cards_in_play_since or turn.at
    return dataclasses.replace(turn.state, cards_in_play_since=since)


CLOSE_TABLE = _table("close_table", "the table closes", _FLOOR, NoArgs)(_same)


@_table(
    "bets_open",
    "betting opens for the next round (when no control device says so); with a progressive "
    "system its acceptors take wagers again, as the control device's button does",
    _DEALERS,
    NoArgs,
    supervised_in=frozenset({Phase.NO_MORE_BETS}),
    why="opening the next round's betting is the dealer's, as pressing the control device's "
    'button is (555.2(f)(2): "no more bets" is the dealer\'s announcement); reopening betting '
    'after "no more bets" (the lock-out released in the middle of a round) is a '
    "floorperson's",
)
def BETS_OPEN(turn: Turn, args: NoArgs) -> TableState:
    return open_betting(turn.state)


NO_MORE_BETS = _table(
    "no_more_bets",
    '"no more bets", where no control device says so: the table\'s phase, and the acceptors '
    "are locked out exactly as the control device's button does (555.2(f)(2); "
    "lockout_applied, or lockout_failed per seat)",
    _DEALERS,
    NoArgs,
)(_same)


@_table("start_round", "dealing starts (when no automated shoe says so)", _DEALERS, Override,
        deals=True)  # fmt: skip
def START_ROUND(turn: Turn, args: Override) -> TableState:
    return round_begins(turn)


DEAL_DONE = _table("deal_done", "every card of the round is out (when no automated shoe says "
                   "so)", _DEALERS, NoArgs)(_same)  # fmt: skip
REVEAL = _table("reveal", "decisions are made; the dealer reveals (Spanish 21: turns the hole "
                "card and draws the dealer's additional cards, 551.8(h))", _DEALERS, Override,
                deals=frozenset({Game.SPANISH_21}))(_same)  # fmt: skip
ROUND_SETTLED = _table("round_settled", "every wager of the round is settled", _DEALERS,
                       NoArgs)(_same)  # fmt: skip


@_table("shuffled", "the cards were shuffled by hand (when no shuffler says so)", _DEALERS,
        NoArgs)  # fmt: skip
def SHUFFLED(turn: Turn, args: NoArgs) -> TableState:
    if "shuffler" in turn.state.devices:
        # A hand shuffle reported while the shuffler is on the table: another method before
        # the device was removed (555.14(g) and its like: the game's rows say whether it is a
        # ruling), the same as a declared manual shuffle; not the round's shuffle.
        turn.observe("other_method", _MANUAL_SHUFFLE)
        return turn.state
    return shuffled(turn, None)


@_table(
    "stub_count",
    "the stub count (555.8(f)-(h) and their like): 52 resets the five-round count; a wrong "
    "count is a ruling",
    _DEALERS,
    StubCount,
    example={"count": 52, "misdealt": False},
)
def STUB_COUNT(turn: Turn, args: StubCount) -> TableState:
    state = turn.state
    turn.observe("stub_count", seen.StubCount(count=args.count, misdealt=args.misdealt,
                                              full=args.count in turn.facts.full_deck_counts,
                                              dealing=state.dealing))  # fmt: skip
    return dataclasses.replace(state, rounds_since_stub_count=0)


@_table(
    "new_cards",
    "new decks in play (deck age starts again, 555.3(c); baccarat: a new shoe, its burn due)",
    _DEALERS,
    NoArgs,
)
def NEW_CARDS(turn: Turn, args: NoArgs) -> TableState:
    return new_cards(turn, turn.state)


@_table(
    "declare_method",
    "how the table deals (automated_shoe, manual_shoe, hand) and shuffles (device, manual) "
    "now; another method while the device is on the table is a ruling (555.14(g))",
    _FLOOR,
    DeclareMethod,
    example={"dealing": "automated_shoe"},
)
def DECLARE_METHOD(turn: Turn, args: DeclareMethod) -> TableState:
    state = turn.state
    dealt = args.dealing or state.dealing
    shuffling = args.shuffling or state.shuffling
    # 555.14(g): another method while the device is still on the table
    if shuffling is ShufflingMethod.MANUAL and "shuffler" in state.devices:
        turn.observe("other_method", _MANUAL_SHUFFLE)
    if dealt is not DealingMethod.AUTOMATED_SHOE and "shoe" in state.devices:
        turn.observe("other_method", seen.OtherMethod(method=dealt, device_class="shoe"))
    return dataclasses.replace(state, dealing=dealt, shuffling=shuffling)


@_table("device_removed", "a device leaves the table", _FLOOR_AND_TECH, DeviceOnTable,
        example={"device_class": "shuffler"})  # fmt: skip
def DEVICE_REMOVED(turn: Turn, args: DeviceOnTable) -> TableState:
    return dataclasses.replace(turn.state, devices=turn.state.devices - {args.device_class})


@_table(
    "device_installed",
    "a device joins the table (again); a card reader installed in place of one that "
    'malfunctioned ends its halt on dealing (551.16(m): "until … replaced")',
    _FLOOR_AND_TECH,
    DeviceOnTable,
    example={"device_class": "shuffler"},
)
def DEVICE_INSTALLED(turn: Turn, args: DeviceOnTable) -> TableState:
    turn.observe("device_installed", seen.DeviceInstalled(device_class=args.device_class))
    return dataclasses.replace(turn.state, devices=turn.state.devices | {args.device_class})


@_table(
    "reader_inspected",
    "the floorperson inspected the card reader for this gaming day (551.2(e)); it ends the "
    "halt on dealing a missing inspection gave",
    _FLOOR,
    NoArgs,
    why="551.2(e): the floorperson inspects the card reader each gaming day",
)
def READER_INSPECTED(turn: Turn, args: NoArgs) -> TableState:
    turn.observe("reader_inspected")
    return dataclasses.replace(turn.state, reader_inspected_on=turn.facts.gaming_day.of(turn.at))


# -- the table: progressive and bonus payouts --------------------------------------------------


def _progressive_table(turn: Turn, kind: str) -> PayTable:
    if turn.facts.progressive is None:
        raise Refused(f"{kind}: this table has no progressive pay table ([progressive])")
    return turn.facts.progressive


def _unpaid_claim(turn: Turn, kind: str, seat: int) -> Claim:
    _progressive_table(turn, kind)
    claim = turn.state.claim(seat)
    if claim is None:
        raise Refused(f"{kind}: no progressive hand recorded at seat {seat} this round")
    if claim.paid_cents is not None:
        raise Refused(f"{kind}: seat {seat} has been paid this round")
    return claim


@_table(
    "progressive_hand",
    "a winning progressive hand at that seat (555.12(b)(1)); a shoe that reads cards records "
    "it by itself from the player's stack, ranked as 555.6 ranks it",
    _DEALERS,
    ProgressiveHand,
    example={"seat": 2, "hand": "flush"},
    why="555.12(b): the dealer verifies the hand and the light",
)
def PROGRESSIVE_HAND(turn: Turn, args: ProgressiveHand) -> TableState:
    _progressive_table(turn, "progressive_hand")
    claim = turn.state.claim(args.seat)
    if claim is not None and claim.paid_cents is not None:
        raise Refused(f"progressive_hand: seat {args.seat} has been paid this round")
    return turn.state.with_claim(Claim(args.seat, args.hand))


@_table("validate_payout", "a floorperson validated that seat's payout (555.12(b)(3))", _FLOOR,
        AtSeat, example={"seat": 2}, why="555.12(b)(3): a floorperson validates")  # fmt: skip
def VALIDATE_PAYOUT(turn: Turn, args: AtSeat) -> TableState:
    claim = _unpaid_claim(turn, "validate_payout", args.seat)
    return turn.state.with_claim(dataclasses.replace(claim, validated=True))


@_table(
    "pay_progressive",
    "pay it: refused unless the hand was recorded, the seat's light is lit (555.12(b)(2)) and "
    "it was validated; refused out of turn (from the dealer's right, seat 7 first); paid at "
    "the meter as it stands (555.13(f)); royal flushes share the meter",
    _DEALERS,
    AtSeat,
    example={"seat": 2},
)
def PAY_PROGRESSIVE(turn: Turn, args: AtSeat) -> TableState:
    """555.12(b): every step, and in turn (from the dealer's right: the highest seat first);
    555.13(f): paid at the meter as it stands at its turn, and royal flushes share it."""
    state, seat = turn.state, args.seat
    claim = _unpaid_claim(turn, "pay_progressive", seat)
    missing = claim.missing()
    if missing:
        raise Refused(f"pay_progressive: not paid: {'; '.join(missing)}")
    before = [c.seat for c in state.claims if c.seat > seat and c.paid_cents is None]
    if before:
        raise Refused(f"pay_progressive: seat {before[-1]} is paid first (from the dealer's "
                      "right)")  # fmt: skip
    hand = claim.hand
    sharing = [c for c in state.claims if c.hand is FiveCard.ROYAL_FLUSH]
    if hand is not FiveCard.ROYAL_FLUSH:
        sharing = [claim]
    waiting = [m for c in sharing for m in c.missing()]
    if waiting:
        raise Refused("pay_progressive: the royal flushes share the meter and are paid "
                      f"together: {'; '.join(waiting)}")  # fmt: skip
    before_cents = meter(turn.facts, state)
    paytable = _progressive_table(turn, "pay_progressive")
    share, after = payout(paytable, hand, before_cents, royal_flushes=len(sharing))
    new = state
    for paid in sharing:
        new = new.with_claim(dataclasses.replace(paid, paid_cents=share))
        turn.observe("progressive_paid", seen.ProgressivePaid(
            seat=paid.seat, hand=paid.hand, cents=share, meter_cents_before=before_cents // 1000,
            shared_by=len(sharing)))  # fmt: skip
    return dataclasses.replace(new, meter_millicents=after)


@_table(
    "pay_bonus",
    "Let It Ride: pay the Let It Ride Bonus at the table's amounts "
    "([pay_tables.let_it_ride_bonus], else the 559.14(d) minimums); a lesser hand is refused "
    "(it loses the wager)",
    _DEALERS,
    PayBonus,
    example={"seat": 1, "hand": "flush"},
)
def PAY_BONUS(turn: Turn, args: PayBonus) -> TableState:
    """Let It Ride Bonus (559.8(c)): a winning hand is paid the amount of the pay table,
    559.14(d) or the casino's higher one; three of a kind or better wins."""
    if turn.facts.game is not Game.LET_IT_RIDE:
        raise Refused("pay_bonus: the Let It Ride Bonus is Let It Ride's (559.8)")
    table = turn.facts.bonus_pays or MINIMUMS["let_it_ride_bonus"]
    if args.hand not in table:
        raise Refused(f"pay_bonus: hand must be one of {', '.join(table)} (559.14(d)); "
                      "a lesser hand loses the wager")  # fmt: skip
    turn.observe(
        "bonus_paid", seen.BonusPaid(seat=args.seat, hand=args.hand, dollars=table[args.hand])
    )
    return turn.state


@_table(
    "chips_collected",
    "the progressive (or bonus) wager chips collected; a count other than the wagers the "
    "acceptors accepted since betting opened is a ruling, by the clause of the dealing method "
    "in use (555.8(b); Let It Ride 559.10(b), 643a.9(a)(3)(i), 559.12(a)(2))",
    _DEALERS,
    ChipsCollected,
    example={"count": 0},
)
def CHIPS_COLLECTED(turn: Turn, args: ChipsCollected) -> TableState:
    state = turn.state
    turn.observe("chips_collected", seen.ChipsCollected(
        count=args.count, accepted=state.wagers_accepted,
        events_unaccounted=state.events_unaccounted, resets_unaccounted=state.resets_unaccounted,
        game=turn.facts.game, dealing=state.dealing))  # fmt: skip
    return state


# -- the table: a ruling's lifecycle (rules/rulings.py) ----------------------------------------
@_table(
    "acknowledge_ruling",
    "a named floorperson has seen the ruling (open or escalated → acknowledged); refused for "
    "an unknown id or one already acknowledged or resolved",
    _FLOOR,
    AcknowledgeRuling,
    why="a ruling's alert is for a floorperson (\"after notification to a floorperson or "
    'higher", 551.16(l)); the dealer gives the rulings and a technician repairs devices: '
    "neither is the floorperson's notice",
    example={"ruling": 21, "by": "ann"},
)
def ACKNOWLEDGE_RULING(turn: Turn, args: AcknowledgeRuling) -> TableState:
    rulings = acknowledge(turn.state.rulings, args.ruling, args.by, turn.at)
    return dataclasses.replace(turn.state, rulings=rulings)


@_table(
    "resolve_ruling",
    f"what was done, one of the ruling's own actions, and a note (at most {MAX_NOTE_CHARS} "
    "characters): acknowledged → resolved; refused before it is acknowledged, and for an "
    "action the ruling does not require. A halting ruling (halt_dealing, remove_deck) halts "
    "dealing until it is resolved, or until the end its clause names is seen (551.16(m): the "
    "card reader repaired or replaced; 551.2(e): the day's inspection)",
    _FLOOR,
    ResolveRuling,
    why="clearing an irregularity is a floorperson's, as the clauses give a floorperson or "
    "above the validations (555.12(b)(3)) and the torn ten (551.16(b)); a dealer never clears "
    "a ruling on their own game, and a technician's repair is device_installed",
    example={"ruling": 21, "action": "remove_deck", "note": "deck 4411 out", "by": "ann"},
)
def RESOLVE_RULING(turn: Turn, args: ResolveRuling) -> TableState:
    rulings = resolve(turn.state.rulings, args.ruling, args.action, args.by, args.note, turn.at)
    return dataclasses.replace(turn.state, rulings=rulings)


# -- the table: irregularities the dealer reports ------------------------------------------------
@_table(
    "card_exposed",
    'a card was exposed; the phase decides the ruling (555.14(a): a hole card before "no '
    "more bets\"; 557.13(d): a dealer's card before the reveal)",
    _DEALERS,
    CardExposed,
    example={"card": "hole"},
)
def CARD_EXPOSED(turn: Turn, args: CardExposed) -> TableState:
    turn.observe("card_exposed", seen.CardExposed(card=args.card, phase=turn.state.phase))
    return turn.state


@_table(
    "misdeal",
    "a hand got the wrong number of cards, dealt by hand or from a manual shoe: the same "
    "rulings as a shoe's miscounted stack (555.14(d), 557.13(c), 559.15(c))",
    _DEALERS,
    Misdeal,
    example={"target": "seat1", "count": 5},
)
def MISDEAL(turn: Turn, args: Misdeal) -> TableState:
    expected = args.expected or hand_cards(turn.facts.game, args.target)
    if expected is None:
        raise Refused(f"misdeal: args expected (the cards {args.target} should get): the "
                      "game has no rule for it")  # fmt: skip
    turn.observe("misdeal", seen.Misdeal(target=args.target, count=args.count, expected=expected))
    return turn.state


@_table(
    "up_card",
    "Spanish 21: the dealer's first card; A, K, Q, J send the hole card through the reader "
    "before more cards (551.8(e)); another rank in the reader is a ruling by the reader's "
    "model (551.16(l)(1) or (2)); a 10 is no up card (no tens are in play, 551.3(a)) but a "
    "ten found in the shoe (551.16(b))",
    _DEALERS,
    DealtCard,
    example={"rank": "K"},
    deals=True,
)
def UP_CARD(turn: Turn, args: DealtCard) -> TableState:
    state = turn.state
    if args.rank == "10" and turn.facts.game is Game.SPANISH_21:
        # No tens are in play (551.3(a)): a 10 is not the dealer's card but a card found in
        # the shoe, torn up (551.16(b)); the up card is still to come.
        return _a_ten(turn, up_card=True)
    new = dataclasses.replace(state, up_card=args.rank)
    if state.up_card is None and turn.facts.game is Game.SPANISH_21:
        _judged_again(turn, state, new)
    return new


def _judged_again(turn: Turn, before: TableState, now: TableState) -> None:
    """Spanish 21: the up card given after the reader checked the hole card, or after more
    cards were dealt: those steps are judged against it now, as they would have been had it
    come first (551.16(l): the reader used on an up card that needs none; 551.8(e): more cards
    before the reader on an ace or a face card)."""
    if before.hole_card_checked:
        turn.observe("hole_card_checked", seen.HoleCardChecked(
            up_card=now.up_card, gate=gate(now), reveals=now.reader_reveals))  # fmt: skip
    elif before.more_cards_dealt:
        turn.observe("more_cards", seen.Gated(**_round_so_far(now)))


@_table("more_cards", "Spanish 21: the dealer starts dealing the players' additional cards "
        "(551.8(e): after the reader, when the up card is A, K, Q or J)", _DEALERS, Override,
        deals=True)  # fmt: skip
def MORE_CARDS(turn: Turn, args: Override) -> TableState:
    _gated(turn, args)
    return dataclasses.replace(turn.state, more_cards_dealt=True)


@_table(
    "insurance_placed",
    "Spanish 21: an Insurance Wager was placed: only on an ace up (551.10(a)), before the hole "
    "card goes into the reader and, with its amount and the player's initial wager, not more "
    "than half of it, to the next chip (551.10(b))",
    _DEALERS,
    InsuranceWager,
    example={"amount": 5, "wager": 10},
)
def INSURANCE_PLACED(turn: Turn, args: InsuranceWager) -> TableState:
    over = None
    if args.amount is not None and args.wager is not None:
        over = args.amount > (args.wager + 1) // 2  # half, or the next chip when half is none
    turn.observe("insurance_placed", seen.InsurancePlaced(**_round_so_far(turn.state),
                                                          over_half=over))  # fmt: skip
    return turn.state


@_table(
    "insurance_paid",
    "Spanish 21: winning Insurance Wagers were paid: only when the reader said Blackjack "
    "(551.10(a): the dealer's second card a king, queen or jack) and, with the wager and the "
    "payout, at 2 to 1 (551.10(c))",
    _DEALERS,
    InsurancePayout,
    example={"wager": 5, "paid": 10},
)
def INSURANCE_PAID(turn: Turn, args: InsurancePayout) -> TableState:
    odds = None if args.wager is None or args.paid is None else args.paid == 2 * args.wager
    turn.observe("insurance_paid", seen.InsurancePaid(**_round_so_far(turn.state),
                                                      two_to_one=odds))  # fmt: skip
    return turn.state


INSURANCE_COLLECTED = _table(
    "insurance_collected", "Spanish 21: losing Insurance Wagers were collected: right after "
    "the reader said no Blackjack and before any additional card (551.10(d))", _DEALERS, NoArgs,
)(_gated)  # fmt: skip
MATCH_THE_DEALER_SETTLED = _table(
    "match_the_dealer_settled", "Spanish 21: Match-The-Dealer wagers were settled: after the "
    "up card, before any additional card and before the reader (551.7(d))", _DEALERS, NoArgs,
)(_gated)  # fmt: skip


@_table("card_face_up", "a card found face up in the shoe or the deck, dealt by hand or from a "
        "manual shoe (an automated shoe says so itself): the first this round is discarded, a "
        "second voids the round (555.14(b), 557.13(a), 559.15(a); Spanish 21: 551.16(a))",
        _DEALERS, NoArgs)  # fmt: skip
def CARD_FACE_UP(turn: Turn, args: NoArgs) -> TableState:
    """A card found face up this round: counted with those a shoe found, and judged."""
    found = turn.state.face_up_found + 1
    turn.observe("card_face_up", seen.FaceUpFound(found=found))
    return dataclasses.replace(turn.state, face_up_found=found)


@_table("ten_found", "Spanish 21: a 10 found in the shoe; the first this round is torn up, a "
        "second voids the round (551.16(b))", _DEALERS, NoArgs)  # fmt: skip
def TEN_FOUND(turn: Turn, args: NoArgs) -> TableState:
    if turn.facts.game is not Game.SPANISH_21:
        raise Refused("ten_found: tens are in play in this game; only Spanish 21 plays "
                      "without them (551.3(a))")  # fmt: skip
    return _a_ten(turn, up_card=False)


def _a_ten(turn: Turn, *, up_card: bool) -> TableState:
    """A ten found in the shoe this round, or given as the dealer's up card (rules/table.py
    ``ten_found``)."""
    return ten_found(turn, turn.state, up_card=up_card)


TOO_FEW_CARDS = _table(
    "too_few_cards",
    "too few cards for the round: Spanish 21 shuffles the discards, burns one and finishes the "
    "round (551.16(g)); baccarat voids it (543.14(e))",
    _DEALERS,
    NoArgs,
)(_observed)


@_table(
    "first_card",
    "baccarat: the first card of a new shoe; burn it and as many more as its value (543.5(g), "
    "545.5(f)); refused once a coup is dealt from the shoe",
    _DEALERS,
    UpCard,
    example={"rank": "7"},
)
def FIRST_CARD(turn: Turn, args: UpCard) -> TableState:
    dealt = turn.state.coups_in_shoe
    if dealt:
        raise Refused(
            f"first_card: {dealt} coups were dealt from this shoe; the first card is burned "
            "before a new shoe's first coup (543.5(g), 545.5(f))"
        )
    turn.observe("first_card", seen.Burn(burn=burn(args.rank, first=True)))
    return dataclasses.replace(turn.state, burn_due=False)


@_table(
    "cover_card",
    "baccarat: the cover card came out: this hand, then the last hand, then new decks "
    "(543.10(e)); a hand dealt after that is a ruling",
    _DEALERS,
    NoArgs,
)
def COVER_CARD(turn: Turn, args: NoArgs) -> TableState:
    turn.observe("cover_card")
    return dataclasses.replace(turn.state, cover_card_round=turn.state.round)


@_table(
    "drawn_in_error",
    "a card drawn in error: in poker, one not exposed is the next card (555.14(c), 557.13(b), "
    "559.15(b)); in baccarat, 543.14(a), (c)",
    _DEALERS,
    DrawnInError,
    example={"disclosed": False},
)
def DRAWN_IN_ERROR(turn: Turn, args: DrawnInError) -> TableState:
    turn.observe(
        "drawn_in_error",
        seen.DrawnInError(disclosed=args.disclosed, burn=1 if args.disclosed else 0),
    )
    return turn.state


@_table(
    "card_face_up_in_shoe",
    "baccarat: a card found face up in the shoe: discard it and as many more, face up, as its "
    "value (543.14(d), 543.6: a 10 or court card is zero)",
    _DEALERS,
    UpCard,
    example={"rank": "4"},
)
def CARD_FACE_UP_IN_SHOE(turn: Turn, args: UpCard) -> TableState:
    turn.observe("card_face_up_in_shoe", seen.Burn(burn=burn(args.rank, first=False)))
    return turn.state


@_table(
    "coup",
    "baccarat: the coup against the drawing rules (543.11 and Table 1): a third card after a "
    "Natural, a Player's third card not allowed (543.14(b)), a Player who stayed below 6, a "
    "Banker who drew or stayed against Table 1",
    _DEALERS,
    Coup,
    example={"player": ["K", "7"], "banker": ["5", "Q", "2"]},
    deals=True,
)
def COUP(turn: Turn, args: Coup) -> TableState:
    new = coup_begins(turn, turn.state)
    turn.observe("coup", coup(args.player, args.banker, args.extra))
    return new


COMMANDS: dict[str, Command] = {c.name: c for c in _DECLARED}


# -- the table's phases: every move in one table --------------------------------------------

_OPEN = frozenset(Phase) - {Phase.CLOSED}
#: a round may start at an open table, never while bets are being taken (555.10(a)(2): "no
#: more bets" comes first) nor while a round is being dealt; the last round's decisions and
#: settlement may go unreported
_ROUND_MAY_START = frozenset(
    {Phase.OPEN, Phase.NO_MORE_BETS, Phase.DECISIONS, Phase.SETTLEMENT, Phase.COMPLETE}
)
_IN_ROUND = frozenset({Phase.DEALING, Phase.DECISIONS, Phase.SETTLEMENT})

#: what moves the table's phase, h11's way, keyed by what makes the move: a declared command
#: (the object itself: a name no command declares cannot be written) or a device's event (its
#: type, rules/table.py ``EVENT_TRANSITIONS``) → {a phase it is taken in: the phase it leads
#: to}. A command is refused in a phase not in its row (``Command.refusal``, asked by ``admit``
#: before the command reaches the table) and one with no row is taken in any phase and leaves
#: it as it is; its row goes to the table with it (``Said.moves``). A device's event is never
#: refused (the device says what happened): in a phase not in its row it leaves the phase as
#: it is, and so does a command ``step`` is given there directly.
TRANSITIONS: Mapping[Command | type[DeviceEvent], Mapping[Phase, Phase]] = {
    OPEN_TABLE: {Phase.CLOSED: Phase.OPEN},
    CLOSE_TABLE: leads_to(Phase.CLOSED, _OPEN),
    BETS_OPEN: leads_to(Phase.BETTING, (Phase.OPEN, Phase.COMPLETE, Phase.NO_MORE_BETS)),
    NO_MORE_BETS: leads_to(Phase.NO_MORE_BETS, (Phase.OPEN, Phase.BETTING, Phase.COMPLETE)),
    START_ROUND: leads_to(Phase.DEALING, _ROUND_MAY_START),
    DEAL_ROUND: stays_in(_ROUND_MAY_START),  # the shoe's deal_started moves it
    DEAL: stays_in(frozenset(Phase) - _IN_ROUND),
    DEAL_DONE: {Phase.DEALING: Phase.DECISIONS},
    REVEAL: leads_to(Phase.SETTLEMENT, (Phase.DEALING, Phase.DECISIONS)),
    # a payout is recorded at an open table (a table with no shoe and no dealer's word on its
    # phases may never reach "decisions"); 555.12(b)'s steps are what the table enforces
    ROUND_SETTLED: leads_to(Phase.COMPLETE, _OPEN),
    **{command: stays_in(_OPEN) for command in (
        PROGRESSIVE_HAND, VALIDATE_PAYOUT, PAY_PROGRESSIVE, PAY_BONUS,
        CHIPS_COLLECTED, CARD_EXPOSED, CARD_FACE_UP, TEN_FOUND, TOO_FEW_CARDS,
        FIRST_CARD, COVER_CARD, DRAWN_IN_ERROR, CARD_FACE_UP_IN_SHOE, COUP)},
    **{command: stays_in(_IN_ROUND) for command in (
        MISDEAL, UP_CARD, MORE_CARDS, INSURANCE_PLACED, INSURANCE_COLLECTED,
        INSURANCE_PAID, MATCH_THE_DEALER_SETTLED)},
    **{event: row for event, row in EVENT_TRANSITIONS.items()},  # (a Mapping is invariant)
}  # fmt: skip


# -- the auditor: records sent again from the journal (docs/floor.md) ---------------------

#: the most records one ``replay`` asks for (a 64 KiB request cannot ask a table for gigabytes)
MAX_REPLAY = 5_000


class Replay(Args):
    from_seq: Annotated[StrictInt, Field(ge=0, description="the first seq to send again")]
    to_seq: Annotated[StrictInt, Field(ge=0, description="the last seq to send again")]

    @model_validator(mode="after")
    def _a_range(self) -> Replay:
        if self.to_seq < self.from_seq:
            raise ValueError(f"to_seq {self.to_seq} is before from_seq {self.from_seq}")
        if self.to_seq - self.from_seq + 1 > MAX_REPLAY:
            raise ValueError(f"{self.to_seq - self.from_seq + 1} records asked for: at most "
                             f"{MAX_REPLAY} a request (ask again for the rest)")  # fmt: skip
        return self


REPLAY = Command(
    "replay",
    "send these journal records again, each as it was journaled, on "
    "`<prefix>/<table>/replay` (not journaled: a repeat); the result says how many went and, "
    "when retention deleted some, `pruned_before` (docs/floor.md)",
    frozenset({Role.AUDITOR}),
    Replay,
    "table",
    why="the floor repairs a gap from the table's journal; the auditor may ask for nothing else",
    example={"from_seq": 0, "to_seq": 2},
)
COMMANDS[REPLAY.name] = REPLAY


class VerifySoftware(Args):
    """No arguments: the table's configured manifest is the one it is held to."""


VERIFY_SOFTWARE = Command(
    "verify_software",
    "hold the installed software to its release manifest now (docs/software.md): the outcome "
    "is the retained `software` record; a mismatch gives a ruling that halts dealing, and a "
    "check that passes ends that halt (the ruling stays for a floorperson)",
    frozenset({Role.TECHNICIAN}),
    VerifySoftware,
    "table",
    why="the software is a technician's to install and verify, as a device's repair is; the "
    "check reads every installed file (carried out by the daemon, not the table's rules)",
    example={},
)
COMMANDS[VERIFY_SOFTWARE.name] = VERIFY_SOFTWARE


def authorise(name: str, role: str) -> Command:
    """The command, when ``role`` may give it; ``Refused`` says why not."""
    try:
        who = Role(role)
    except ValueError:
        raise Refused(f"unknown role {role!r} (roles: {', '.join(Role)})") from None
    command = COMMANDS.get(name)
    if command is None:
        raise Refused(f"unknown command {name!r} (commands: {', '.join(sorted(COMMANDS))})")
    if who not in command.roles:
        may = ", ".join(sorted(r.value for r in command.roles))
        article = "an" if who.value[0] in "aeiou" else "a"
        raise Refused(f"{article} {who.value} may not give {name!r} (it needs: {may})")
    return command


def admit(name: str, role: str, args: Mapping[str, object], phase: Phase) -> tuple[Command, Args]:
    """The command and its typed arguments, or ``Refused`` with the reason, checked in this
    order: a known role, a known command, one that role may give, arguments of the right names
    and types, a phase the command is taken in (``TRANSITIONS``), and in that phase a role that
    may give it there."""
    command = authorise(name, role)
    typed = command.parse(args)
    why = command.refusal(phase)
    if why is not None:
        raise Refused(why)
    if phase in command.supervised_in and role != Role.FLOORPERSON:
        article = "an" if role[0] in "aeiou" else "a"
        raise Refused(f"{article} {role} may not give {name!r} while the table is {phase.value} "
                      "(it needs: floorperson)")  # fmt: skip
    return command, typed


def _problems(exc: ValidationError) -> str:
    """Pydantic's errors as one line: ``count: Input should be a valid integer (got 'many')``."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(x) for x in error["loc"]) or "args"
        given = f" (got {error['input']!r})" if error["type"] != "missing" else ""
        message = "unknown argument" if error["type"] == "extra_forbidden" else error["msg"]
        parts.append(f"{where}: {message}{given}"[:200])
    return "; ".join(parts)


# -- docs/commands.md and the request's JSON Schema, from the declarations ------------------

BEGIN = "<!-- generated from rules/commands.py by `tableside commands docs/commands.md` -->"
END = "<!-- end of the generated command table -->"


def _args_doc(args: type[Args]) -> str:
    schema = args.model_json_schema()
    props: Mapping[str, Any] = schema.get("properties", {})
    required = set(schema.get("required", ()))
    out = []
    for name, prop in props.items():
        kind = _kind(prop, schema.get("$defs", {}))
        out.append(f"`{name}`{'' if name in required else '?'}: {kind}")
    return "; ".join(out)


def _kind(prop: Mapping[str, Any], defs: Mapping[str, Any]) -> str:
    if "$ref" in prop:
        return _kind(defs[prop["$ref"].rsplit("/", 1)[1]], defs)
    if "anyOf" in prop:
        kinds = [_kind(p, defs) for p in prop["anyOf"] if p.get("type") != "null"]
        return " or ".join(kinds)
    if "enum" in prop:
        return " / ".join(str(v) for v in prop["enum"])
    if prop.get("type") == "array":
        return f"[{_kind(prop.get('items', {}), defs)}]"
    if prop.get("type") == "object":
        return "{" + ", ".join(f"{k}: {_kind(v, defs)}" for k, v in
                               prop.get("properties", {}).items()) + "}"  # fmt: skip
    kind = str(prop.get("type", "any"))
    low, high = prop.get("minimum"), prop.get("maximum")
    if low is not None and high is not None:
        kind += f" {low}..{high}"
    elif low is not None:
        kind += f" ≥ {low}"
    return kind


def render_table() -> str:
    """The generated part of docs/commands.md: every command, who may give it, its arguments,
    the phases it is taken in, and what it does."""
    lines = [
        BEGIN,
        "",
        f"| command | device | {' | '.join(Role)} | args | taken when the table is "
        "| what it does |",
        f"| --- | --- | {' | '.join(':-:' for _ in Role)} | --- | --- | --- |",
    ]
    for c in COMMANDS.values():
        device = {"table": "`table`", "device": "any that has it"}.get(c.target, c.target)
        marks = " | ".join("✓" if r in c.roles else "" for r in Role)
        phases = ("any" if c.phases is None
                  else ", ".join(p.value for p in Phase if p in c.phases))  # fmt: skip
        what = c.doc + (f" — {c.why}" if c.why else "")
        if c.deals:
            where = "" if c.deals == _ALL_GAMES else " (" + ", ".join(
                sorted(g.value for g in c.deals)) + ")"  # fmt: skip
            who = ("a floorperson may give `override`" if "override" in c.args.model_fields
                   else "nobody overrides it")  # fmt: skip
            what += f"; it deals{where}: refused in any phase while a rule halts dealing ({who})"
        lines.append(f"| `{c.name}` | {device} | {marks} | {_args_doc(c.args)} | {phases} "
                     f"| {what} |")  # fmt: skip
    lines += ["", END]
    return "\n".join(lines)


def request_schema(envelope: Mapping[str, Any] | None = None) -> dict[str, object]:
    """The JSON Schema of a request on ``<prefix>/<table>/command/<role>``: one branch per
    command, with that command's arguments; ``envelope`` (the request model's own schema) gives
    the limits of ``device`` and ``request_id``."""
    base: Mapping[str, Any] = (envelope or {}).get("properties", {})
    branches = []
    defs: dict[str, object] = {}
    for c in COMMANDS.values():
        args = c.args.model_json_schema(ref_template="#/$defs/{model}")
        defs.update(args.pop("$defs", {}))
        device: dict[str, object] = ({"const": "table"} if c.target == "table" else
                                  {**base.get("device", {"type": "string"}),
                                   "not": {"const": "table"}})  # fmt: skip
        branches.append({
            "title": c.name,
            "description": c.doc,
            "type": "object",
            "properties": {
                "command": {"const": c.name},
                "device": device,
                "args": args,
                "request_id": base.get("request_id", {"type": ["string", "null"]}),
            },
            "required": ["command", "device"],
            "additionalProperties": False,
        })  # fmt: skip
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "CommandRequest",
        "description": "<prefix>/<table>/command/<role>: ask the table to do something "
        "(docs/commands.md)",
        "oneOf": branches,
        "$defs": defs,
    }
