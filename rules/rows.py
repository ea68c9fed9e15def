"""The rules, as rows. Each row's ``words`` are the clause verbatim from 58 Pa. Code
(../shared/regulations); tests/test_rules.py checks every row against those files."""

from __future__ import annotations

import dataclasses
import operator

from tableside.drivers.card_reader.events import ReaderFault
from tableside.drivers.shoe.events import CardFaceUp, ShoeFault, StackDispensed
from tableside.drivers.shoe.plan import SEATS, Target
from tableside.drivers.shuffler.events import ShuffleCompleted, ShufflerFault
from tableside.rules.baccarat_rows import BACCARAT_RULES
from tableside.rules.model import Action, FactRef, FieldRef, Game, Rule, When, kind_of
from tableside.rules.seen import (
    DealtWhileHalted,
    FaceUpFound,
    Misdeal,
    ReaderMalfunction,
    RoundStarts,
)
from tableside.rules.table_rows import READER_REPAIRED, TABLE_RULES

__all__ = [
    "DEALT_WHILE_HALTED",
    "FACE_UP_BOTH_WAYS",
    "REPORTED_MISDEALS",
    "RULES",
    "SHOE_RULES",
    "SHUFFLER_RULES",
]

_CS, _FCP, _LIR, _S21 = Game.CARIBBEAN_STUD, Game.FOUR_CARD_POKER, Game.LET_IT_RIDE, Game.SPANISH_21

_COUNT_WORDS = (
    "If an automated card shuffling device that counts the number of cards in the deck after "
    "the completion of each shuffle and indicates whether 52 cards are present is being used "
    "and reveals that an incorrect number of cards are present, the deck shall be removed from "
    "the table."
)

_JAM_WORDS = (
    "If an automated card shuffling device is being used and the device jams, stops shuffling "
    "during a shuffle, or fails to complete a shuffle cycle, the cards shall be reshuffled."
)

_S21_DECK_WORDS = (
    "Spanish 21 shall be played with six or eight decks of cards identical in appearance. The "
    "decks must consist of 48 cards, with the 10 of each suit removed from each deck during the "
    "inspection required under § 551.4 (relating to opening of the table for gaming). Spanish 21 "
    "shall also be played with at least one cutting card."
)

_WRONG_COUNT = (
    When(ShuffleCompleted, lambda e: e.counted, "==", True),
    When(ShuffleCompleted, lambda e: e.card_count, "not in", FactRef.FULL_DECK_COUNTS),
)
_SHUFFLE_FAILED = (When(ShufflerFault, lambda e: e.fault, "in", ("jam", "stopped", "incomplete")),)


def _count_rule(game: Game, section: str) -> Rule:
    return Rule(
        id=f"{section}.shuffler-count",
        games=frozenset({game}),
        when=_WRONG_COUNT,
        actions=(Action.REMOVE_DECK,),
        citation=f"58 Pa. Code § {section}",
        words=_COUNT_WORDS,
        summary="The counting shuffler found other than 52 cards: remove the deck from the table.",
        needs_counting_shuffler=True,
    )


def _jam_rule(game: Game, section: str) -> Rule:
    return Rule(
        id=f"{section}.shuffler-fault",
        games=frozenset({game}),
        when=_SHUFFLE_FAILED,
        actions=(Action.RESHUFFLE,),
        citation=f"58 Pa. Code § {section}",
        words=_JAM_WORDS,
        summary="The shuffler jammed, stopped or did not complete its cycle: reshuffle the cards.",
    )


SHUFFLER_RULES: tuple[Rule, ...] = (
    _count_rule(_CS, "555.5(b)"),
    _count_rule(_FCP, "557.5(b)"),
    _count_rule(_LIR, "559.5(b)"),
    Rule(
        id="551.3(a).shuffler-count",
        games=frozenset({_S21}),
        when=(
            *_WRONG_COUNT,
            When(ShuffleCompleted, lambda e: e.card_count, "not in", FactRef.TENS_LEFT_IN_COUNTS),
        ),
        actions=(Action.REMOVE_DECK,),
        citation="58 Pa. Code § 551.3(a)",
        words=_S21_DECK_WORDS,
        summary=(
            "The counting shuffler found other than a full set of six or eight 48-card decks: "
            "the decks are wrong and leave the table."
        ),
        needs_counting_shuffler=True,
    ),
    Rule(
        id="551.3(a).tens-left-in",
        games=frozenset({_S21}),
        when=(
            When(ShuffleCompleted, lambda e: e.counted, "==", True),
            When(ShuffleCompleted, lambda e: e.card_count, "in", FactRef.TENS_LEFT_IN_COUNTS),
        ),
        actions=(Action.REMOVE_DECK,),
        citation="58 Pa. Code § 551.3(a)",
        words=_S21_DECK_WORDS,
        summary=(
            "The counting shuffler found whole 52-card decks (6 × 52 or 8 × 52): the tens were "
            "likely left in at the inspection; the decks leave the table."
        ),
        needs_counting_shuffler=True,
    ),
    _jam_rule(_CS, "555.14(e)"),
    _jam_rule(_FCP, "557.13(e)"),
    _jam_rule(_LIR, "559.15(d)"),
    _jam_rule(_S21, "551.16(j)"),
)


# -- automated dealing shoe ------------------------------------------------------------------
# The clauses' own words, per citation (tests/test_rules.py checks them against the text).
_WORDS = {
    "555.14(b)": (
        "A card that is found face up in the shoe or the deck while the cards are being dealt "
        "may not be used in the game and shall be placed in the discard rack. If more than one "
        "card is found face up in the shoe or the deck during the dealing of the cards, all "
        "hands shall be void, all wagers being returned to the players and the cards shall be "
        "reshuffled."
    ),
    "557.13(a)": (
        "A card that is found face up in the shoe or the deck while the cards are being dealt "
        "shall not be used in the game and shall be placed in the discard rack. If more than "
        "one card is found face up in the shoe or the deck during the dealing of the cards, all "
        "hands shall be void, all wagers shall be returned to the players and the cards shall "
        "be reshuffled."
    ),
    "555.14(d)": (
        "If a player is dealt an incorrect number of cards, that player's hand shall be void. "
        "If the dealer is dealt four cards of the five card hand, the dealer shall deal an "
        "additional card to complete the hand. Any other misdeal to the dealer shall result in "
        "all hands being void, all wagers being returned to the players and the cards shall be "
        "reshuffled."
    ),
    "557.13(c)": (
        "If any player or the dealer is dealt an incorrect number of cards, all hands shall be "
        "void, all wagers shall be returned to the players and the cards shall be reshuffled."
    ),
    "559.15(c)": (
        "If any player or the area designated for the placement of the community cards is dealt "
        "an incorrect number of cards, all hands shall be void, all wagers shall be returned to "
        "the players and the cards shall be reshuffled."
    ),
    "555.14(f)": (
        "If an automated dealing shoe is being used and the device jams, stops dealing cards, or "
        "fails to deal all cards during a round of play, the round of play shall be void, all "
        "wagers being returned to the players and the cards shall be removed from the device and "
        "reshuffled with any cards already dealt."
    ),
    "557.13(f)": (
        "If an automated dealing shoe is being used and the device jams, stops dealing cards, or "
        "fails to deal all cards during a round of play, the round of play shall be void, all "
        "wagers shall be returned to the players and the cards shall be removed from the device "
        "and reshuffled with any cards already dealt."
    ),
    "551.16(m)": (
        "If a card reader device malfunctions, the dealer may not continue dealing the game of "
        "Spanish 21 at that table until the card reader device is repaired or replaced."
    ),
}
_WORDS["559.15(a)"] = _WORDS["557.13(a)"]
_WORDS["559.15(e)"] = _WORDS["557.13(f)"]

_VOID = (Action.VOID_ALL_HANDS, Action.RETURN_WAGERS, Action.RESHUFFLE)
# The game's count, never only the shoe's own plan: a shoe set for another game is misdealing.
_MISCOUNT = (When(StackDispensed, lambda e: e.count, "!=", FactRef.STACK_SIZE),)


def _row(
    section: str,
    game: Game,
    name: str,
    when: tuple[When, ...],
    actions: tuple[Action, ...],
    summary: str,
    affects: str = "",
) -> Rule:
    return Rule.of(section, game, name, when, actions, _WORDS[section], summary, affects)


_SHOE_SECTIONS = ((_CS, "555.14(f)", "555.14(b)"), (_FCP, "557.13(f)", "557.13(a)"),
                  (_LIR, "559.15(e)", "559.15(a)"))  # fmt: skip

_SHOE_BY_GAME: tuple[Rule, ...] = tuple(
    rule
    for game, stopped, face_up in _SHOE_SECTIONS
    for rule in (
        _row(
            stopped,
            game,
            "shoe-fault",
            (When(ShoeFault, lambda e: e.fault, "in", ("jam", "stopped", "short_deal")),),
            _VOID,
            "The shoe jammed, stopped or could not deal every card: the round is void, wagers "
            "go back, and the cards come out of the shoe to be reshuffled with those dealt.",
        ),
        _row(
            face_up,
            game,
            "face-up-one",
            (When(CardFaceUp, lambda e: e.total, "==", 1),),
            (Action.DISCARD_CARD,),
            "A card was found face up: it is not used; discard it.",
        ),
        _row(
            face_up,
            game,
            "face-up-more",
            (When(CardFaceUp, lambda e: e.total, "not in", (0, 1)),),
            _VOID,
            "More than one card was found face up in the deal: all hands void, reshuffle.",
        ),
    )
)

SHOE_RULES: tuple[Rule, ...] = (
    *_SHOE_BY_GAME,
    # 555.14(d): a player's wrong count voids that hand; the dealer with four of five gets one
    # more card; any other misdeal to the dealer voids the round.
    _row("555.14(d)", _CS, "player-misdeal",
         (*_MISCOUNT, When(StackDispensed, lambda e: e.target, "in", SEATS)),
         (Action.VOID_HAND,),
         "A player's stack has the wrong number of cards: that player's hand is void.",
         affects="target"),
    _row("555.14(d)", _CS, "dealer-four-cards",
         (*_MISCOUNT, When(StackDispensed, lambda e: e.target, "==", Target.DEALER),
          When(StackDispensed, lambda e: e.count, "==", 4)),
         (Action.DEAL_ADDITIONAL_CARD,),
         "The dealer's stack has four cards: deal the dealer one more card.", affects="dealer"),
    _row("555.14(d)", _CS, "dealer-misdeal",
         (*_MISCOUNT, When(StackDispensed, lambda e: e.target, "==", Target.DEALER),
          When(StackDispensed, lambda e: e.count, "!=", 4)), _VOID,
         "The dealer's stack has the wrong number of cards: all hands void, reshuffle."),
    _row("557.13(c)", _FCP, "misdeal", _MISCOUNT, _VOID,
         "A stack has the wrong number of cards: all hands void, wagers back, reshuffle."),
    _row("559.15(c)", _LIR, "misdeal", _MISCOUNT, _VOID,
         "A stack has the wrong number of cards: all hands void, wagers back, reshuffle."),
    # -- card reader device ------------------------------------------------------------------
    dataclasses.replace(
        _row("551.16(m)", _S21, "reader-malfunction",
             (When(ReaderFault, lambda e: e.fault, "==", "malfunction"),),
             (Action.HALT_DEALING, Action.ALERT),
             "The card reader malfunctioned: no more dealing at this table, the round in play "
             "included, until it is repaired or replaced; nothing is void (its wagers stand)."),
        until=READER_REPAIRED,
    ),
    # the same fact by the reader's other words: its status says it malfunctions (it came up
    # so, or says so there only), or its self-test failed (rules/table.py reader_malfunction)
    dataclasses.replace(
        _row("551.16(m)", _S21, "reader-not-working",
             (When(ReaderMalfunction, lambda e: e.how, "in", ("status", "self_test")),),
             (Action.HALT_DEALING, Action.ALERT),
             "The card reader says it is not in working order (its status, or a failed "
             "self-test): no more dealing at this table, the round in play included, until it "
             "is repaired or replaced; nothing is void (its wagers stand)."),
        until=READER_REPAIRED,
    ),
)  # fmt: skip

#: the same misdeal rules when the dealer reports the stack (dealt by hand or a manual shoe)
# The dealer reports a hand, not a stack: the table gives its expected size (a Four Card Poker
# dealer's hand is six cards, a Let It Ride community two, after the discards).
_HAND_MISCOUNT = When(Misdeal, lambda e: e.count, "!=", FieldRef(Misdeal, lambda e: e.expected))
REPORTED_MISDEALS: tuple[Rule, ...] = tuple(
    dataclasses.replace(
        rule,
        id=f"{rule.id}-reported",
        on="",  # triggered by what its conditions read: table.misdeal
        when=tuple(_HAND_MISCOUNT if w in _MISCOUNT else w.on(Misdeal) for w in rule.when),
    )
    for rule in SHOE_RULES
    if rule.trigger == kind_of(StackDispensed)
)

#: a card found face up, however it is reported: a shoe's count (card_face_up, with its
#: ``total``) and the dealer's word (``card_face_up``, counted by the table, ``found``) reach
#: the same clause in every game (555.14(b) "in the shoe or the deck"; 551.16(a))
_FIELD_OF = {CardFaceUp: "total", FaceUpFound: "found"}


def _face_up_twin(rule: Rule, of: type[CardFaceUp] | type[FaceUpFound]) -> Rule:
    """``rule`` judged on ``of``: triggered by what ``of`` is seen as."""
    when = tuple(When(of, operator.attrgetter(_FIELD_OF[of]), w.op, w.value) for w in rule.when)
    suffix = "reported" if of is FaceUpFound else "shoe"
    return dataclasses.replace(rule, id=f"{rule.id}-{suffix}", on="", when=when)


FACE_UP_BOTH_WAYS: tuple[Rule, ...] = (
    *(_face_up_twin(r, FaceUpFound)
      for r in SHOE_RULES if r.trigger == kind_of(CardFaceUp)),
    *(_face_up_twin(r, CardFaceUp)
      for r in TABLE_RULES if r.trigger == kind_of(FaceUpFound)),
)  # fmt: skip

_GIVEN: tuple[Rule, ...] = (*SHUFFLER_RULES, *SHOE_RULES, *REPORTED_MISDEALS, *FACE_UP_BOTH_WAYS,
                            *TABLE_RULES, *BACCARAT_RULES)  # fmt: skip
#: what halts dealing until a floorperson resolves it (rules/rulings.py HALTING)
_HALTS = frozenset({Action.HALT_DEALING, Action.REMOVE_DECK})


def _dealt_while_halted(rule: Rule) -> Rule:
    """``rule``'s ruling halts dealing, and cards were dealt all the same (a floorperson's
    override, or a device that deals by itself): the same clause, said again. A row that
    judges every round already judges a round dealt under its own halt."""
    when = [When(DealtWhileHalted, lambda e: e.halting, "has", rule.id)]
    if rule.trigger == kind_of(RoundStarts):
        when.append(When(DealtWhileHalted, lambda e: e.round_start, "==", False))
    return dataclasses.replace(
        rule, id=f"{rule.id}-dealt-while-halted", on="", when=tuple(when),
        actions=(Action.ALERT,), affects="none", needs_counting_shuffler=False, until=(),
        summary=f"Cards were dealt while this clause's ruling halts dealing ({rule.summary})",
    )  # fmt: skip


#: a halting ruling's clause, said again of cards dealt while it halts (whichever way they
#: came: rules/table.py ``dealt``). A device's own halt (551.16(m): the reader) is judged by
#: its table row instead, for as long as the device is not repaired or replaced.
DEALT_WHILE_HALTED: tuple[Rule, ...] = tuple(
    _dealt_while_halted(rule)
    for rule in _GIVEN
    if _HALTS & set(rule.actions)
    and rule.trigger != kind_of(DealtWhileHalted)
    # a device's halt (it ends with the device's repair): its halted-reader row judges it
    and not any(u.trigger.split(".")[0] != "table" for u in rule.until)
)

#: every rule, in the order rulings are given
RULES: tuple[Rule, ...] = (*_GIVEN, *DEALT_WHILE_HALTED)
