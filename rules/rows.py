"""The rules, as rows. Each row's ``words`` are the clause verbatim from 58 Pa. Code
(../shared/regulations); tests/test_rules.py checks every row against those files."""

from __future__ import annotations

from tableside.rules.model import Action, FactRef, Game, Rule, When

__all__ = ["RULES"]

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
    When("counted", "==", True),
    When("card_count", "not in", FactRef.FULL_DECK_COUNTS),
)
_SHUFFLE_FAILED = (When("fault", "in", ("jam", "stopped", "incomplete")),)


def _count_rule(game: Game, section: str) -> Rule:
    return Rule(
        id=f"{section}.shuffler-count",
        games=frozenset({game}),
        trigger="shuffler.shuffle_complete",
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
        trigger="shuffler.fault",
        when=_SHUFFLE_FAILED,
        actions=(Action.RESHUFFLE,),
        citation=f"58 Pa. Code § {section}",
        words=_JAM_WORDS,
        summary="The shuffler jammed, stopped or did not complete its cycle: reshuffle the cards.",
    )


RULES: tuple[Rule, ...] = (
    _count_rule(_CS, "555.5(b)"),
    _count_rule(_FCP, "557.5(b)"),
    _count_rule(_LIR, "559.5(b)"),
    Rule(
        id="551.3(a).shuffler-count",
        games=frozenset({_S21}),
        trigger="shuffler.shuffle_complete",
        when=_WRONG_COUNT,
        actions=(Action.REMOVE_DECK,),
        citation="58 Pa. Code § 551.3(a)",
        words=_S21_DECK_WORDS,
        summary=(
            "The counting shuffler found other than a full set of six or eight 48-card decks: "
            "the decks are wrong and leave the table."
        ),
        needs_counting_shuffler=True,
    ),
    _jam_rule(_CS, "555.14(e)"),
    _jam_rule(_FCP, "557.13(e)"),
    _jam_rule(_LIR, "559.15(d)"),
    _jam_rule(_S21, "551.16(j)"),
)
