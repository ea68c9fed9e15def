"""Every command a person can give a table, declared once: its typed arguments, the roles that
may give it, the phases it is valid in, who carries it out, and its doc line.

The daemon's role checks, argument checks, phase and halt checks and dispatch, the table's
``step()`` (a table command is a ``TableEvent`` of the same name), docs/commands.md and the
command JSON Schema all come from ``COMMANDS``; nothing else lists commands.

Roles (who may): the dealer, the floorperson, the technician. The role is the topic a request
arrives on (``<prefix>/<table>/command/<role>``); the broker's ACL decides who may publish
there (docs/commands.md).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    field_validator,
)

from tableside.rules.model import Action
from tableside.rules.rulings import MAX_NOTE_CHARS
from tableside.rules.table import DealingMethod, Phase, ShufflingMethod

__all__ = [
    "COMMANDS",
    "Args",
    "Command",
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


# -- arguments: strict (a count is an integer, a flag a boolean; "yes" and 52.0 are refused) --


class Args(BaseModel):
    """A command's arguments: unknown names are refused, and so are wrong types."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    def data(self) -> dict[str, Any]:
        """The arguments as their handler takes them (the table's ``step()``, a driver's
        ``command()``): plain values, the unset left out; an override is the daemon's alone."""
        return self.model_dump(mode="json", exclude_none=True, exclude={"override"})


class NoArgs(Args):
    pass


Seat = Annotated[StrictInt, Field(ge=1, le=7, description="a betting position, 1..7")]
Rank = Literal["A", "2", "3", "4", "5", "6", "7", "8", "9", "10", "J", "Q", "K"]
DeviceClass = Annotated[str, Field(min_length=1, description="e.g. shuffler, shoe, card_reader")]
Hand = Literal["royal_flush", "straight_flush", "four_of_a_kind", "full_house", "flush"]


class _Ranked(Args):
    @field_validator("*", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        """Card ranks are taken in either case (``k`` is ``K``)."""
        if isinstance(value, str):
            return value.upper()
        if isinstance(value, list):
            return [v.upper() if isinstance(v, str) else v for v in value]
        return value


class Override(Args):
    """A deal the rules would refuse (dealing halted, 551.16(m) …) goes ahead only when a
    floorperson gives the reason; the reason is journaled with the result."""

    override: Annotated[str, Field(min_length=3)] | None = None


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
    target: Annotated[str, Field(pattern=r"^(seat[1-7]|dealer|dealer_extra|community)$")]
    count: Annotated[StrictInt, Field(ge=0)]
    expected: Annotated[StrictInt, Field(ge=1)] | None = None


class UpCard(_Ranked):
    rank: Rank


class DrawnInError(Args):
    disclosed: StrictBool


class Coup(_Ranked):
    player: Annotated[list[Rank], Field(min_length=2, max_length=3)]
    banker: Annotated[list[Rank], Field(min_length=2, max_length=3)]
    extra: list[Rank] = []


class DealRound(Override):
    positions: Annotated[list[Seat], Field(min_length=1, max_length=7)]
    round: Annotated[StrictInt, Field(ge=1)] | None = None


class StackArg(Args):
    target: str | StrictInt
    size: Annotated[StrictInt, Field(ge=1, le=52)]


class Deal(Args):
    round: Annotated[StrictInt, Field(ge=1)]
    stacks: Annotated[list[StackArg], Field(min_length=1)]


class SetLights(Args):
    seats: list[Seat]


class SetMeter(Args):
    cents: Annotated[StrictInt, Field(ge=0, lt=2**32)]


# -- a ruling's lifecycle (rules/rulings.py) ---------------------------------------------------

RulingId = Annotated[
    StrictInt, Field(ge=0, description="the ruling's id: the seq of its ruling message")
]


def _name(text: str) -> str:
    if text != text.strip() or any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise ValueError("a name of printable characters, without spaces around it")
    return text


def _note(text: str) -> str:
    if any((ord(c) < 32 and c != "\n") or ord(c) == 127 for c in text):
        raise ValueError("text and line breaks, no other control characters")
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

_EVERYONE = frozenset(Role)
_DEALERS = frozenset({Role.DEALER, Role.FLOORPERSON})
_FLOOR = frozenset({Role.FLOORPERSON})
_FLOOR_AND_TECH = frozenset({Role.FLOORPERSON, Role.TECHNICIAN})
_TECH = frozenset({Role.TECHNICIAN})

_OPEN = frozenset(Phase) - {Phase.CLOSED}
#: a round may start at an open table, never while bets are being taken (555.10(a)(2): "no
#: more bets" comes first) nor while a round is being dealt; the last round's decisions and
#: settlement may go unreported
_ROUND_MAY_START = frozenset(
    {Phase.OPEN, Phase.NO_MORE_BETS, Phase.DECISIONS, Phase.SETTLEMENT, Phase.COMPLETE}
)
_IN_ROUND = frozenset({Phase.DEALING, Phase.DECISIONS, Phase.SETTLEMENT})
#: a payout is recorded at an open table (a table with no shoe and no dealer's word on its
#: phases may never reach "decisions"); 555.12(b)'s steps are what the table enforces
_PAYING = _OPEN


@dataclass(frozen=True, slots=True)
class Command:
    """One command: what it is called, who may give it, with what arguments, when."""

    name: str
    doc: str
    roles: frozenset[Role]
    args: type[Args] = NoArgs
    #: who carries it out: "table" (the table's state, rules/table.py), or the device class
    #: whose driver does it ("shoe"), or "device" for any device whose driver has it
    target: str = "table"
    #: the table phases it may be given in (None: any)
    phases: frozenset[Phase] | None = None
    #: it deals (a round starts): refused while a rule halts dealing, unless a floorperson
    #: overrides with a reason
    deals: bool = False
    #: why these roles, for docs/commands.md
    why: str = ""
    #: arguments that work, for the docs and the test that sends every command
    example: Mapping[str, Any] = field(default_factory=dict)
    #: the device command that carries it out, when it is not its own name (``deal_round``
    #: becomes the shoe's ``deal`` with the game's dispense pattern)
    via: str | None = None

    @property
    def device_command(self) -> str:
        return self.via or self.name


def _device(name: str, target: str, doc: str, roles: frozenset[Role], args: type[Args] = NoArgs,
            phases: frozenset[Phase] | None = None, *, why: str = "",
            example: Mapping[str, Any] | None = None, deals: bool = False,
            via: str | None = None) -> Command:  # fmt: skip
    return Command(name, doc, roles, args, target, phases, deals, why, example or {}, via)


def _table(name: str, doc: str, roles: frozenset[Role], args: type[Args] = NoArgs,
           phases: frozenset[Phase] | None = None, **more: Any) -> Command:  # fmt: skip
    """A command the table itself takes (its ``step()``)."""
    return _device(name, "table", doc, roles, args, phases, **more)


COMMANDS: dict[str, Command] = {
    c.name: c
    for c in (
        # -- devices ---------------------------------------------------------------------------
        _device("start_shuffle", "shuffler", "the shuffler shuffles the deck", _EVERYONE),
        _device(
            "deal_round",
            "shoe",
            "deal a round to the seats with a wager, in the game's "
            "dispense pattern (555.10(b), 557.10(b), 559.12(b))",
            _DEALERS,
            DealRound,
            _ROUND_MAY_START,
            deals=True,
            why="dealing a round is the dealer's",
            example={"positions": [1, 3]},
            via="deal",
        ),
        _device(
            "set_lights",
            "progressive_controller",
            "light these seats' acceptors (555.12(b)(2))",
            _EVERYONE,
            SetLights,
            example={"seats": [2]},
        ),
        _device(
            "lock_out",
            "device",
            'the acceptors refuse wagers: "no more bets" by hand (555.2(f))',
            _DEALERS,
            why='closing bets by hand, where no control device says "no more bets"',
        ),
        _device(
            "release",
            "device",
            "the acceptors take wagers again",
            _FLOOR,
            why="reopening betting by hand is a supervisor's decision",
        ),
        _device(
            "set_meter",
            "progressive_controller",
            "set the progressive meter's display",
            _FLOOR,
            SetMeter,
            why="the progressive meter is a supervisor's",
            example={"cents": 100000},
        ),
        _device(
            "deal",
            "shoe",
            "the shoe dispenses these stacks as they are (testing a shoe)",
            _TECH,
            Deal,
            frozenset(Phase) - _IN_ROUND,
            why="raw stacks from the shoe are for testing a shoe, not for dealing a round",
            example={"round": 90, "stacks": [{"target": 1, "size": 5}]},
        ),
        _device("self_test", "card_reader", "the card reader tests itself (551.2(e))", _EVERYONE),
        _device("query_status", "device", "the device reports its status", _EVERYONE),
        _device(
            "query_identity",
            "device",
            "the device says who it is: model, serial, firmware and its hash",
            _EVERYONE,
        ),
        # -- the table: the round ----------------------------------------------------------------
        _table(
            "open_table",
            "the cards were inspected; the table opens (deck age starts, 555.4)",
            _FLOOR,
            phases=frozenset({Phase.CLOSED}),
            why="opening a table is a supervisor's",
        ),
        _table("close_table", "the table closes", _FLOOR, phases=_OPEN),
        _table(
            "bets_open",
            "betting opens for the next round (when no control device says so); "
            "with a progressive system its acceptors take wagers again",
            _FLOOR,
            phases=frozenset({Phase.OPEN, Phase.COMPLETE, Phase.NO_MORE_BETS}),
            why="it releases the acceptors' lock-out, as release does: a supervisor's",
        ),
        _table(
            "no_more_bets",
            '"no more bets", where no control device says so: the table\'s phase, and the '
            "acceptors are locked out exactly as the control device's button does "
            "(555.2(f)(2); lockout_applied, or lockout_failed per seat)",
            _DEALERS,
            phases=frozenset({Phase.OPEN, Phase.BETTING, Phase.COMPLETE}),
        ),
        _table(
            "start_round",
            "dealing starts (when no automated shoe says so)",
            _DEALERS,
            Override,
            _ROUND_MAY_START,
            deals=True,
        ),
        _table(
            "deal_done",
            "every card of the round is out (when no automated shoe says so)",
            _DEALERS,
            phases=frozenset({Phase.DEALING}),
        ),
        _table(
            "reveal",
            "decisions are made; the dealer reveals",
            _DEALERS,
            phases=frozenset({Phase.DEALING, Phase.DECISIONS}),
        ),
        _table("round_settled", "every wager of the round is settled", _DEALERS, phases=_PAYING),
        _table("shuffled", "the cards were shuffled by hand (when no shuffler says so)", _DEALERS),
        _table(
            "stub_count",
            "the stub count (555.8(f)-(h) and their like): 52 resets the five-round count; a "
            "wrong count is a ruling",
            _DEALERS,
            StubCount,
            example={"count": 52, "misdealt": False},
        ),
        _table(
            "new_cards",
            "new decks in play (deck age starts again, 555.3(c); baccarat: a new shoe, its "
            "burn due)",
            _DEALERS,
        ),
        _table(
            "declare_method",
            "how the table deals (automated_shoe, manual_shoe, hand) and shuffles (device, "
            "manual) now; another method while the device is on the table is a ruling "
            "(555.14(g))",
            _FLOOR,
            DeclareMethod,
            example={"dealing": "automated_shoe"},
        ),
        _table(
            "device_removed",
            "a device leaves the table",
            _FLOOR_AND_TECH,
            DeviceOnTable,
            example={"device_class": "shuffler"},
        ),
        _table(
            "device_installed",
            "a device joins the table (again); it clears a halt it caused (551.16(m))",
            _FLOOR_AND_TECH,
            DeviceOnTable,
            example={"device_class": "shuffler"},
        ),
        _table(
            "reader_inspected",
            "the floorperson inspected the card reader for this gaming day (551.2(e))",
            _FLOOR,
            why="551.2(e): the floorperson inspects the card reader each gaming day",
        ),
        # -- the table: progressive and bonus payouts ----------------------------------------------
        _table(
            "progressive_hand",
            "a winning progressive hand at that seat (555.12(b)(1)); a shoe that reads cards "
            "records it by itself from the player's stack, ranked as 555.6 ranks it",
            _DEALERS,
            ProgressiveHand,
            _PAYING,
            example={"seat": 2, "hand": "flush"},
            why="555.12(b): the dealer verifies the hand and the light",
        ),
        _table(
            "validate_payout",
            "a floorperson validated that seat's payout (555.12(b)(3))",
            _FLOOR,
            AtSeat,
            _PAYING,
            example={"seat": 2},
            why="555.12(b)(3): a floorperson validates",
        ),
        _table(
            "pay_progressive",
            "pay it: refused unless the hand was recorded, the seat's light is lit "
            "(555.12(b)(2)) and it was validated; refused out of turn (from the dealer's "
            "right, seat 7 first); paid at the meter as it stands (555.13(f)); royal flushes "
            "share the meter",
            _DEALERS,
            AtSeat,
            _PAYING,
            example={"seat": 2},
        ),
        _table(
            "pay_bonus",
            "Let It Ride: pay the Let It Ride Bonus at the table's amounts "
            "([pay_tables.let_it_ride_bonus], else the 559.14(d) minimums); a lesser hand is "
            "refused (it loses the wager)",
            _DEALERS,
            PayBonus,
            _PAYING,
            example={"seat": 1, "hand": "flush"},
        ),
        _table(
            "chips_collected",
            "the progressive (or bonus) wager chips collected; a count other than the wagers "
            "the acceptors accepted since betting opened is a ruling (555.8(b), 559.12(a)(2))",
            _DEALERS,
            ChipsCollected,
            _OPEN,
            example={"count": 0},
        ),
        # -- the table: a ruling's lifecycle (rules/rulings.py) --------------------------------
        _table(
            "acknowledge_ruling",
            "a named floorperson has seen the ruling (open or escalated → acknowledged); "
            "refused for an unknown id or one already acknowledged or resolved",
            _FLOOR,
            AcknowledgeRuling,
            why="a ruling's alert is for a floorperson (\"after notification to a floorperson "
            'or higher", 551.16(l)); the dealer gives the rulings and a technician repairs '
            "devices: neither is the floorperson's notice",
            example={"ruling": 21, "by": "ann"},
        ),
        _table(
            "resolve_ruling",
            "what was done, one of the ruling's own actions, and a note (at most 500 "
            "characters): acknowledged → resolved; refused before it is acknowledged, and for "
            "an action the ruling does not require. Only its resolution lifts a ruling's halt "
            "on dealing (halt_dealing, remove_deck)",
            _FLOOR,
            ResolveRuling,
            why="clearing an irregularity is a floorperson's, as the clauses give a floorperson "
            "or above the validations (555.12(b)(3)) and the torn ten (551.16(b)); a dealer "
            "never clears a ruling on their own game, and a technician's repair is "
            "device_installed",
            example={"ruling": 21, "action": "remove_deck", "note": "deck 4411 out", "by": "ann"},
        ),
        # -- the table: irregularities the dealer reports ------------------------------------------
        _table(
            "card_exposed",
            "a card was exposed; the phase decides the ruling (555.14(a): a hole card before "
            '"no more bets"; 557.13(d): a dealer\'s card before the reveal)',
            _DEALERS,
            CardExposed,
            _OPEN,
            example={"card": "hole"},
        ),
        _table(
            "misdeal",
            "a hand got the wrong number of cards, dealt by hand or from a manual shoe: the "
            "same rulings as a shoe's miscounted stack (555.14(d), 557.13(c), 559.15(c))",
            _DEALERS,
            Misdeal,
            _IN_ROUND,
            example={"target": "seat1", "count": 5},
        ),
        _table(
            "up_card",
            "Spanish 21: the dealer's first card; A, K, Q, J send the hole card through the "
            "reader before more cards (551.8(e)); another rank in the reader is a ruling by "
            "the reader's model (551.16(l)(1) or (2)); a 10 is no up card (no tens are in "
            "play, 551.3(a)) but a ten found in the shoe (551.16(b))",
            _DEALERS,
            UpCard,
            _IN_ROUND,
            example={"rank": "K"},
        ),
        _table(
            "more_cards",
            "Spanish 21: the dealer starts dealing the players' additional cards",
            _DEALERS,
            phases=_IN_ROUND,
        ),
        _table(
            "insurance_placed",
            "Spanish 21: an Insurance Wager was placed (551.10(b))",
            _DEALERS,
            phases=_IN_ROUND,
        ),
        _table(
            "insurance_collected",
            "Spanish 21: losing Insurance Wagers were collected (551.10(d))",
            _DEALERS,
            phases=_IN_ROUND,
        ),
        _table(
            "match_the_dealer_settled",
            "Spanish 21: Match-The-Dealer wagers were settled (551.7(d))",
            _DEALERS,
            phases=_IN_ROUND,
        ),
        _table(
            "card_face_up",
            "Spanish 21: a card found face up in the shoe; the first this round is discarded,"
            " a second voids the round (551.16(a))",
            _DEALERS,
            phases=_OPEN,
        ),
        _table(
            "ten_found",
            "Spanish 21: a 10 found in the shoe; the first this round is torn up, a second "
            "voids the round (551.16(b))",
            _DEALERS,
            phases=_OPEN,
        ),
        _table(
            "too_few_cards",
            "too few cards for the round: Spanish 21 shuffles the discards, burns one and "
            "finishes the round (551.16(g)); baccarat voids it (543.14(e))",
            _DEALERS,
            phases=_OPEN,
        ),
        _table(
            "first_card",
            "baccarat: the first card of a new shoe; burn it and as many more as "
            "its value (543.5(g), 545.5(f)); refused once a coup is dealt from the shoe",
            _DEALERS,
            UpCard,
            _OPEN,
            example={"rank": "7"},
        ),
        _table(
            "cover_card",
            "baccarat: the cover card came out: this hand, then the last hand, then new decks"
            " (543.10(e)); a hand dealt after that is a ruling",
            _DEALERS,
            phases=_OPEN,
        ),
        _table(
            "drawn_in_error",
            "a card drawn in error: in poker, one not exposed is the next card (555.14(c), "
            "557.13(b), 559.15(b)); in baccarat, 543.14(a), (c)",
            _DEALERS,
            DrawnInError,
            _OPEN,
            example={"disclosed": False},
        ),
        _table(
            "card_face_up_in_shoe",
            "baccarat: a card found face up in the shoe: discard it and as many more, face "
            "up, as its value (543.14(d), 543.6: a 10 or court card is zero)",
            _DEALERS,
            UpCard,
            _OPEN,
            example={"rank": "4"},
        ),
        _table(
            "coup",
            "baccarat: the coup against the drawing rules (543.11 and Table 1): a third card "
            "after a Natural, a Player's third card not allowed (543.14(b)), a Player who "
            "stayed below 6, a Banker who drew or stayed against Table 1",
            _DEALERS,
            Coup,
            _OPEN,
            example={"player": ["K", "7"], "banker": ["5", "Q", "2"]},
        ),
    )
}


class Refused(ValueError):
    """A request the table does not take; the message says why."""


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
        raise Refused(f"a {who.value} may not give {name!r} (it needs: {may})")
    return command


def admit(name: str, role: str, args: Mapping[str, Any], phase: Phase) -> tuple[Command, Args]:
    """The command and its typed arguments, or ``Refused`` with the reason, checked in this
    order: a known role, a known command, one that role may give, arguments of the right names
    and types, a phase the command is valid in."""
    command = authorise(name, role)
    try:
        typed = command.args.model_validate(dict(args))
    except ValidationError as exc:
        raise Refused(f"{name}: {_problems(exc)}") from None
    if command.phases is not None and phase not in command.phases:
        valid = ", ".join(p.value for p in Phase if p in command.phases)
        raise Refused(f"{name!r} is refused while the table is {phase.value} (it is taken when "
                      f"the table is {valid})")  # fmt: skip
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
        "| command | device | dealer | floorperson | technician | args | taken when the table is "
        "| what it does |",
        "| --- | --- | :-: | :-: | :-: | --- | --- | --- |",
    ]
    for c in COMMANDS.values():
        device = {"table": "`table`", "device": "any that has it"}.get(c.target, c.target)
        marks = " | ".join("✓" if r in c.roles else "" for r in Role)
        phases = ("any" if c.phases is None
                  else ", ".join(p.value for p in Phase if p in c.phases))  # fmt: skip
        what = c.doc + (f" — {c.why}" if c.why else "")
        if c.deals:
            what += "; refused while a rule halts dealing (a floorperson may give `override`)"
        lines.append(f"| `{c.name}` | {device} | {marks} | {_args_doc(c.args)} | {phases} "
                     f"| {what} |")  # fmt: skip
    lines += ["", END]
    return "\n".join(lines)


def request_schema(envelope: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The JSON Schema of a request on ``<prefix>/<table>/command/<role>``: one branch per
    command, with that command's arguments; ``envelope`` (the request model's own schema) gives
    the limits of ``device`` and ``request_id``."""
    base: Mapping[str, Any] = (envelope or {}).get("properties", {})
    branches = []
    defs: dict[str, Any] = {}
    for c in COMMANDS.values():
        args = c.args.model_json_schema(ref_template="#/$defs/{model}")
        defs.update(args.pop("$defs", {}))
        device: dict[str, Any] = ({"const": "table"} if c.target == "table" else
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
