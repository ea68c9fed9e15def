"""The rows the table's state judges (rules/table.py): shuffling after each round, two decks,
deck age, hand-dealing with a shuffler, the stub count every five rounds and its outcomes,
another method while a device is on the table, and Spanish 21's card reader inspection and
halt. Each row's ``words`` are the clause verbatim (checked by tests/test_rules.py); a clause
cited as (c)(2) is the (c) line followed by its item (2)."""

from __future__ import annotations

import dataclasses

from tableside.drivers.card_reader.events import SelfTestResult
from tableside.rules.model import Action, FieldRef, Game, Rule, Until, When
from tableside.rules.seen import (
    CardExposed,
    ChipsCollected,
    DealtWhileHalted,
    DeviceInstalled,
    DrawnInError,
    FaceUpFound,
    Gated,
    HoleCardChecked,
    InsurancePaid,
    InsurancePlaced,
    OtherMethod,
    RoundStarts,
    StubCount,
    TenFound,
    WagersUnaccounted,
)
from tableside.rules.vocabulary import DealingMethod, Phase

__all__ = ["TABLE_RULES"]

_CS, _FCP, _LIR, _S21 = Game.CARIBBEAN_STUD, Game.FOUR_CARD_POKER, Game.LET_IT_RIDE, Game.SPANISH_21

# Copied from ../shared/regulations, clause by clause.
_WORDS: dict[str, str] = {
    "555.10(b)": (
        "The dealer shall then deal the first stack of cards dispensed by the "
        "automated dealing shoe face down to the player farthest to the dealer's left "
        "who has placed a wager in accordance with § 555.7 (relating to wagers). As "
        "the remaining stacks are dispensed to the dealer by the automated dealing "
        "shoe, the dealer shall, moving clockwise around the table, deliver a stack "
        "face down to each of the other players who has placed a wager in accordance "
        "with § 555.7. The dealer shall then deliver a stack of five cards face down "
        "to the area designated for the dealer's hand."
    ),
    "557.10(b)": (
        "The dealer shall deal the first stack of cards dispensed by the automated "
        "dealing shoe face down to the player farthest to the dealer's left who has "
        "placed an Ante Wager or Aces Up Wager. As the remaining stacks are dispensed "
        "to the dealer by the automated dealing shoe, the dealer shall, moving "
        "clockwise around the table, deal a stack face down to each of the other "
        "players who has placed an Ante Wager or Aces Up Wager. The dealer shall then "
        "deal a stack of five cards face down to himself. When the automated dealing "
        "shoe dispenses the next stack of five cards, the dealer shall remove the "
        "stack from the shoe and place the stack on the layout next to his hand. The "
        "dealer shall spread the cards in the stack face down, with the bottom card of "
        "the stack to the dealer's far left and the top card of the stack to the "
        "dealer's far right. The dealer shall turn the bottom card of the stack (the "
        "card on the dealer's far left) face up on the dealer's hand. The dealer shall "
        "collect the remaining four cards of that stack and place the cards in the "
        "discard rack without revealing the cards."
    ),
    "559.12(b)": (
        "The dealer shall deliver the first stack of cards dispensed by the automated "
        "dealing shoe face down to the player farthest to his left who has placed "
        "three wagers in accordance with § 559.7 (relating to wagers). As the "
        "remaining stacks are dispensed to the dealer by the automated dealing shoe, "
        "the dealer shall, moving clockwise around the table, deliver a stack face "
        "down to each of the other players who has placed three wagers in accordance "
        "with § 559.7. The dealer shall then deliver a stack of three cards face down "
        "to the area designated for the placement of the community cards, and spread "
        "the stack within the designated area so that the top card is to the dealer's "
        "right, the middle card is directly in front of the dealer, and the bottom "
        "card is to the dealer's left. The dealer shall then remove the community card "
        "that is to his left, and place that card in the discard rack face down."
    ),
    "555.5(a)": (
        "Immediately prior to the commencement of play, unless the cards were preshuffled, and "
        "after each round of play has been completed, the dealer shall shuffle the cards, "
        "either manually or by use of an automated card shuffling device, so that the cards are"
        " randomly intermixed. Upon completion of the shuffle, the dealer or device shall place"
        " the deck of cards in a single stack; provided, however, that nothing herein prohibits"
        " the use of an automated card shuffling device which, upon completion of the shuffling"
        " of the cards, inserts the stack of cards directly into a dealing shoe."
    ),
    "555.3(b)(4)": (
        "If an automated card shuffling device is used, a certificate holder shall be permitted"
        " to use a second deck of cards to play the game, provided that: Both decks are "
        "continuously alternated in and out of play, with each deck being used for every other "
        "round of play."
    ),
    "555.3(c)(1)": (
        "The decks of cards used in Caribbean Stud Poker shall be changed: At least every 4 "
        "hours if the cards are dealt by hand."
    ),
    "555.3(c)(2)": (
        "The decks of cards used in Caribbean Stud Poker shall be changed: At least every 8 "
        "hours if the cards are dealt from a manual or automated dealing shoe."
    ),
    "557.5(a)": (
        "Immediately prior to the commencement of play, unless the cards were preshuffled, and "
        "after each round of play has been completed, the dealer shall shuffle the cards, "
        "either manually or by use of an automated card shuffling device, so that the cards are"
        " randomly intermixed. Upon completion of the shuffle, the dealer or device shall place"
        " the deck of cards in a single stack; provided, however, that nothing in this section "
        "prohibits the use of an automated card shuffling device which, upon completion of the "
        "shuffling of the cards, inserts the stack of cards directly into a dealing shoe."
    ),
    "557.3(b)(4)": (
        "If an automated card shuffling device is used, a certificate holder may be permitted "
        "to use a second deck of cards to play the game, provided that: Both decks are "
        "continuously alternated in and out of play, with each deck being used for every other "
        "round of play."
    ),
    "557.3(c)(1)": (
        "The decks of cards used in Four Card Poker shall be changed: At least every 4 hours if"
        " the cards are dealt by hand."
    ),
    "557.3(c)(2)": (
        "The decks of cards used in Four Card Poker shall be changed: At least every 8 hours if"
        " the cards are dealt from a manual or automated dealing shoe."
    ),
    "559.5(a)": (
        "Immediately prior to the commencement of play, unless the cards were preshuffled, and "
        "after each round of play has been completed, the dealer shall shuffle the cards, "
        "either manually or by use of an automated card shuffling device, so that the cards are"
        " randomly intermixed. Upon completion of the shuffle, the dealer or automated card "
        "shuffling device shall place the deck of cards in a single stack; provided, however, "
        "that nothing herein prohibits the use of an automated card shuffling device which, "
        "upon completion of the shuffling of the cards, inserts the stack of cards directly "
        "into a dealing shoe."
    ),
    "559.3(c)(1)": (
        "The decks of cards used in Let It Ride Poker shall be changed: At least every 4 hours "
        "if the cards are dealt by hand."
    ),
    "559.3(c)(2)": (
        "The decks of cards used in Let It Ride Poker shall be changed: At least every 8 hours "
        "if the cards are dealt from a manual or automated dealing shoe."
    ),
    "555.9(a)(1)": (
        "If the cards are dealt from the dealer's hand, the following requirements shall be "
        "observed: An automated shuffling device shall be used to shuffle the cards."
    ),
    "555.14(g)": (
        "An automated card shuffling device or automated dealing shoe shall be removed from a "
        "gaming table before any other method of shuffling or dealing may be utilized at that "
        "table."
    ),
    "559.15(f)": (
        "Any automated card shuffling device or automated dealing shoe shall be removed from a "
        "gaming table before any other method of shuffling or dealing may be utilized at that "
        "table."
    ),
    "551.16(k)": (
        "Any automated card shuffling device shall be removed from a gaming table before any "
        "other method of shuffling may be utilized at that table."
    ),
    "551.2(e)": (
        "A Spanish 21 table must have attached to it a card reader device, approved by the "
        "Bureau of Gaming Operations, which permits the dealer to determine if the dealer has a"
        " Blackjack in accordance with § 551.8 (relating to procedure for dealing the cards). "
        "The floorperson assigned to the Spanish 21 table shall inspect the card reader device "
        "at the beginning of each gaming day to insure that there has been no tampering with "
        "the device and that it is in proper working order."
    ),
    "555.8(f)": (
        "If an automated card shuffling device that counts the number of cards in the deck "
        "after the completion of each shuffle and indicates whether 52 cards are present is not"
        " being used, the dealer shall count the stub at least once every five rounds of play "
        "to determine that the correct number of cards are still present in the deck. The "
        "dealer shall determine the number of cards in the stub by counting the cards face down"
        " on the layout."
    ),
    "555.8(h)": (
        "If the count of the stub indicates that the number of cards in the deck is incorrect, "
        "the dealer shall determine if the cards were misdealt. If the cards have been misdealt"
        " (a player or the area designed for the placement of the dealer's hand has more or "
        "less than five cards) but 52 cards remain in the deck, all hands shall be void and all"
        " wagers shall be returned to the players. If the cards have not been misdealt, all "
        "hands shall be considered void, all wagers shall be returned to the players and the "
        "entire deck of cards shall be removed from the table."
    ),
    "557.8(f)": (
        "If an automated card shuffling device that counts the number of cards in the deck "
        "after the completion of each shuffle and indicates whether 52 cards are present is not"
        " being used, the dealer shall be required to count the stub at least once every five "
        "rounds of play in order to determine that the correct number of cards are still "
        "present in the deck. The dealer shall determine the number of cards in the stub by "
        "counting the cards face down on the layout."
    ),
    "557.8(h)": (
        "If the count of the stub indicates that the number of cards in the deck is incorrect, "
        "the dealer shall determine if the cards were misdealt. If the cards have been misdealt"
        " (a player has more or less than five cards or the dealer has more or less than six "
        "cards) but 52 cards remain in the deck, all hands shall be void and all wagers shall "
        "be returned to the players. If the cards have not been misdealt, all hands shall be "
        "considered void all wagers shall be returned to the players and the entire deck of "
        "cards shall be removed from the table."
    ),
    "557.9(d)": (
        "If an automated card shuffling device that counts the number of cards in the deck "
        "after the completion of each shuffle and indicates whether 52 cards are present is not"
        " being used, the dealer shall be required to count the stub at least once every five "
        "rounds of play to determine that the correct number of cards are still present in the "
        "deck. The dealer shall determine the number of cards in the stub by counting the cards"
        " face down on the layout."
    ),
    "557.9(f)": (
        "If the count of the stub indicates that the number of cards in the deck is incorrect, "
        "the dealer shall determine if the cards were misdealt. If the cards have been misdealt"
        " (a player has more or less than five cards or the dealer has more or less than six "
        "cards) but 52 cards remain in the deck, all hands shall be void and all wagers shall "
        "be returned to the players. If the cards have not been misdealt, all hands shall be "
        "considered void, all wagers shall be returned to the players and the entire deck of "
        "cards shall be removed from the table."
    ),
    "559.10(h)": (
        "If the count of the stub indicates that the number of cards in the deck is incorrect, "
        "the dealer shall determine if the cards were misdealt. If the cards have been misdealt"
        " (a player or the area designed for the placement of the community cards has more or "
        "less than three or two cards) but 52 cards remain in the deck, all hands shall be void"
        " and all wagers shall be returned to the players. If the cards have not been misdealt,"
        " all hands shall be considered void, all wagers shall be returned to the players and "
        "the entire deck of cards shall be removed from the table."
    ),
    "559.12(f)": (
        "If the count of the stub indicates that the number of cards in the deck is incorrect, "
        "the dealer shall determine if the cards were misdealt. If the cards have been misdealt"
        " (a player or the area designed for the placement of the dealer's hand has more or "
        "less than three or two cards) but 52 cards remain in the deck, all hands shall be void"
        " and all wagers shall be returned to the players. If the cards have not been misdealt,"
        " all hands shall be considered void, all wagers shall be returned to the players and "
        "the entire deck of cards shall be removed from the table."
    ),
}
# The same words in another chapter or dealing section:
_WORDS["559.3(b)(4)"] = _WORDS["555.3(b)(4)"]
_WORDS["557.9(a)(1)"] = _WORDS["555.9(a)(1)"]
_WORDS["557.13(g)"] = _WORDS["555.14(g)"]
_WORDS["555.9(d)"] = _WORDS["555.8(f)"]
_WORDS["555.9(f)"] = _WORDS["555.8(h)"]
_WORDS["555.10(d)"] = _WORDS["555.8(f)"]
_WORDS["555.10(f)"] = _WORDS["555.8(h)"]
_WORDS["557.10(d)"] = _WORDS["557.9(d)"]
_WORDS["557.10(f)"] = _WORDS["557.9(f)"]
_WORDS["559.10(f)"] = _WORDS["555.8(f)"]
_WORDS["559.12(d)"] = _WORDS["555.8(f)"]
# Let It Ride dealt from the hand: 643a.9, the text in force (amended 2014 and 2019; it
# replaced 559.11), as ../shared/regulations holds it, its typography kept.
_WORDS["643a.9(a)(1)"] = (
    "If the cards are dealt from the dealer\u2019s hand, the following requirements shall be "
    "observed: An automated shuffling device shall be used to shuffle the cards."
)
_WORDS["643a.9(a)(3)(i)"] = (
    "If the cards are dealt from the dealer\u2019s hand, the following requirements shall be "
    "observed: Prior to dealing any cards, the dealer shall announce \u2018\u2018no more "
    "bets\u2019\u2019 and: If the Five Card Bonus Wager is being offered utilizing a table game "
    "system, use the table game system to prevent the placement of any additional Five Card "
    "Bonus Wagers. If any Five Card Bonus Wagers have been made, the dealer shall collect the "
    "wagers and, on the layout in front of the table inventory container, verify that the "
    "number of value chips wagered equals the number of Five Card Bonus Wagers accepted by the "
    "table game system. The dealer shall then place the value chips into the table inventory "
    "container."
)
_WORDS["643a.9(d)"] = (
    "If an automated card shuffling device, which counts the number of cards in the deck after "
    "the completion of each shuffle and indicates whether 52 cards are present, is not being "
    "used, the dealer shall count the stub at least once every 5 rounds of play to determine if "
    "the correct number of cards are still present in the deck. The dealer shall determine the "
    "number of cards in the stub by counting the cards face down on the layout."
)
_WORDS["643a.9(f)"] = (
    "If the count of the stub indicates that the number of cards in the deck is incorrect, the "
    "dealer shall determine if the cards were misdealt. If the cards were misdealt (a player "
    "has more or less than 3 cards or the area designed for the placement of the community "
    "cards has more or less than 2 cards) but 52 cards remain in the deck, all hands shall be "
    "void and all wagers shall be returned to the players. If the cards were not misdealt, all "
    "hands shall be void, all wagers shall be returned to the players and the entire deck of "
    "cards shall be removed from the table."
)
#: the 2010 clause each 643a.9 row replaced, named beside it for a reader of older records
REPLACED = {
    "643a.9(a)(1)": "559.11(a)(1)",
    "643a.9(a)(3)(i)": "559.11(a)(3)",
    "643a.9(d)": "559.11(d)",
    "643a.9(f)": "559.11(f)",
}
_WORDS["559.10(b)"] = (
    "The dealer shall announce ''no more bets'' prior to dealing any cards. If any Let It Ride "
    "Bonus Wagers have been made, the dealer shall also collect these wagers from the approved "
    "wagering devices and shall then verify, on the layout in front of the table inventory "
    "container, that the number of gaming chips wagered equals the number of wagers "
    "acknowledged or accepted by the wagering devices. The dealer shall then place the gaming "
    "chips into the table inventory container."
)
_WORDS["555.8(b)"] = (
    "Prior to dealing the cards and after all Ante and progressive payout wagers have been "
    "placed, the dealer shall announce ''no more bets'' and use the table game progressive "
    "payout wager system to prevent the placement of any additional progressive payout wagers. "
    "The dealer shall then collect any progressive payout wagers and, on the layout in front of "
    "the table inventory container, verify that the number of gaming chips wagered equals the "
    "number of progressive payout wagers accepted by the table game progressive payout wager "
    "system. The dealer shall then place the gaming chips into the table inventory container."
)
_WORDS["555.2(f)(2)"] = (
    "Each Caribbean Stud Poker table must also have a table game progressive payout wager system "
    "approved by the Bureau of Gaming Laboratory Operations for the placement of progressive "
    "wagers. A table game progressive payout wager system must include: A control device that "
    "controls or monitors the placement of progressive wagers at the gaming table, including a "
    "mechanism, such as a lock-out button, that prevents the recognition of any progressive "
    "wager that a player attempts to place after the dealer has announced ''no more bets.''"
)
_WORDS["559.2(f)(2)"] = (
    "If a certificate holder offers the Let It Ride Bonus Wager authorized under § 559.8, the "
    "Let It Ride Poker table must also include the following equipment or devices, which shall "
    "be approved by the Bureau of Gaming Laboratory Operations: A control device that controls "
    "or monitors the placement of Let It Ride Bonus Wagers at the gaming table, including a "
    "mechanism that prevents the recognition of any Let It Ride Bonus Wager that a player "
    "attempts to place after the dealer has announced ''no more bets.''"
)
_WORDS["559.12(a)(2)"] = (
    "If the cards are dealt from an automated dealing shoe, the following requirements shall be "
    "observed: Prior to the shoe dispensing any stacks of cards, the dealer shall then announce "
    "''no more bets.'' If any Let It Ride Bonus Wagers have been made, the dealer shall also "
    "collect these wagers from the approved wagering devices and shall then verify, on the "
    "layout in front of the table inventory container, that the number of gaming chips wagered "
    "equals the number of wagers acknowledged or accepted by the wagering devices. The dealer "
    "shall then place the gaming chips into the table inventory container."
)
_WORDS["555.14(a)"] = (
    "If a hole card is exposed prior to the dealer announcing ''no more bets,'' all hands shall "
    "be void, all wagers being returned to the players and the cards shall be reshuffled."
)
_WORDS["557.13(d)"] = (
    "If one or more of the dealer's cards is inadvertently exposed prior to the dealer revealing "
    "his cards in accordance with § 557.11(e) (relating to play wagers; procedures for "
    "completion of each round of play), all hands shall be void, all wagers shall be returned "
    "to the players and the cards shall be reshuffled."
)
_WORDS["551.8(e)"] = (
    "If the dealer's first card is an ace, king, queen or jack of any suit, the dealer shall "
    "determine whether the hole card will give the dealer a Blackjack prior to dealing any "
    "additional cards to the players at the table. The dealer shall insert the hole card into "
    "the card reader device by moving the card face down on the layout without exposing it to "
    "anyone, including the dealer, at the table."
)
_S21_L = (
    "If the dealer inserts his hole card into a card reader device when the value of his first "
    "card is not an ace, king, queen or jack, the dealer, after notification to a floorperson or "
    "higher, shall: "
)
_WORDS["551.16(l)(1)"] = _S21_L + (
    "If the particular card reader device in use provides any player with the opportunity to "
    "determine the value of the hole card, call all hands dead, collect the cards and return "
    "each player's wager."
)
_WORDS["551.16(l)(2)"] = _S21_L + (
    "If the particular card reader device in use does not provide any player with the "
    "opportunity to determine the value of the hole card, continue play."
)
_WORDS["551.10(a)"] = (
    "Whenever the first card dealt to the dealer is an ace, each player shall have the right to "
    "make an Insurance Wager, which shall win if the dealer's second card is a king, queen or "
    "jack and shall lose if the dealer's second card is an ace, 2, 3, 4, 5, 6, 7, 8 or 9."
)
_WORDS["551.10(c)"] = "Winning insurance bets shall be paid at odds of 2 to 1."
_WORDS["551.10(b)"] = (
    "An Insurance Wager shall be made by placing on the Insurance line of the layout an amount "
    "not more than half the amount staked on the player's initial wager. A player may wager an "
    "amount in excess of half the initial wager to the next unit that can be wagered in chips, "
    "when because of the limitation of the value of chip denominations, half the initial wager "
    "cannot be bet. Insurance Wagers shall be placed prior to the dealer inserting his hole "
    "card into the card reader device."
)
_WORDS["551.10(d)"] = (
    "Losing Insurance Wagers shall be collected by the dealer immediately after the dealer "
    "inserts his hole card into the card reader device and determines that he does not have a "
    "Blackjack and before he draws any additional cards."
)
_WORDS["551.7(d)"] = (
    "Immediately after the second card is dealt to each player and the dealer, and prior to any "
    "additional cards being dealt to any player at the table or the dealer and before any card "
    "reader device is utilized, losing Match-The-Dealer wagers shall be collected by the "
    "dealer, and all winning Match-The-Dealer wagers shall be paid by the dealer, in accordance "
    "with subsection (e)."
)
_WORDS["551.16(a)"] = (
    "A card found turned face up in the shoe may not be used in the game and shall be placed in "
    "the discard rack. If more than one card is found face up in the shoe during the dealing of "
    "the cards, the round of play shall be void and the cards shall be reshuffled."
)
_WORDS["551.16(b)"] = (
    "If a 10 card of any suit is found in the shoe, it may not be used in the game and shall be "
    "removed from the shoe and torn in half by a floorperson and placed in the box, envelope or "
    "container that the decks came from. If more than one 10 card is found in the shoe during "
    "the dealing of the cards, the round of play shall be void and the decks of cards shall be "
    "removed from play."
)
_WORDS["551.16(g)"] = (
    "If there are insufficient cards remaining in the shoe to complete a round of play, all of "
    "the cards in the discard rack shall be shuffled and cut in accordance with § 551.5 "
    "(relating to shuffle and cut of the cards), the first card shall be drawn face down and "
    "placed in the discard rack, and the dealer shall complete the round of play."
)
_WORDS["555.14(c)"] = _WORDS["557.13(b)"] = (
    "A card drawn in error without its face being exposed shall be used as though it was the "
    "next card from the shoe or the deck."
)
_WORDS["559.15(b)"] = (
    "A card dealt in error without its face being exposed shall be used as though it was the "
    "next card from the shoe or the deck."
)
_B3 = (
    "If an automated card shuffling device is used, a certificate holder {may} permitted to use "
    "a second deck of cards to play the game, provided that: One deck is being shuffled by the "
    "automated card shuffling device while the other deck is being {used}."
)
_WORDS["555.3(b)(3)"] = _B3.format(may="shall be", used="dealt or used to play the game")
_WORDS["557.3(b)(3)"] = _B3.format(may="may be", used="used to play the game")
_WORDS["559.3(b)(3)"] = _B3.format(may="shall be", used="used to play the game")
_WORDS["551.16(m)"] = (
    "If a card reader device malfunctions, the dealer may not continue dealing the game of "
    "Spanish 21 at that table until the card reader device is repaired or replaced."
)

#: per game: (manual shoe, hand, automated shoe) sections, each with (due, outcome) letters
_STUB_SECTIONS = {
    _CS: (("555.8", "f", "h"), ("555.9", "d", "f"), ("555.10", "d", "f")),
    _FCP: (("557.8", "f", "h"), ("557.9", "d", "f"), ("557.10", "d", "f")),
    _LIR: (("559.10", "f", "h"), ("643a.9", "d", "f"), ("559.12", "d", "f")),
}
_METHODS = (DealingMethod.MANUAL_SHOE, DealingMethod.HAND, DealingMethod.AUTOMATED_SHOE)
_CHAPTER = {_CS: "555", _FCP: "557", _LIR: "559"}
_OTHER_METHOD = {_CS: "555.14(g)", _FCP: "557.13(g)", _LIR: "559.15(f)"}
_HAND_DEALING = {_CS: "555.9(a)(1)", _FCP: "557.9(a)(1)", _LIR: "643a.9(a)(1)"}
_SHOE_DEALING = {_CS: "555.10(b)", _FCP: "557.10(b)", _LIR: "559.12(b)"}
_VOID = (Action.VOID_ALL_HANDS, Action.RETURN_WAGERS)


#: 551.16(m) "until the card reader device is repaired or replaced": it passes its self-test
#: (repaired), or a reader is installed in its place (replaced)
READER_REPAIRED = (
    Until((When(SelfTestResult, lambda e: e.passed, "==", True),)),
    Until(
        (When(DeviceInstalled, lambda e: e.device_class, "==", "card_reader"),),
    ),
)
#: 551.2(e): the floorperson's inspection of the card reader for the gaming day
READER_INSPECTED = (Until(on="table.reader_inspected"),)


def _row(
    citation: str, game: Game, name: str, when: tuple[When, ...], actions: tuple[Action, ...],
    summary: str, *, on: str = "",
) -> Rule:  # fmt: skip
    """A row; what triggers it ``on`` only where its conditions' type does not say it
    (rules/model.py ``Rule.trigger``)."""
    replaced = REPLACED.get(citation, "")
    if replaced:
        summary += f" (§ {citation}, in force; it replaced § {replaced})"
    rule = Rule.of(citation, game, name, when, actions, _WORDS[citation], summary,
                   on=on)  # fmt: skip
    return dataclasses.replace(rule, replaces=replaced and f"58 Pa. Code § {replaced}")


def _game_rows(game: Game) -> list[Rule]:
    ch = _CHAPTER[game]
    rows = [
        _row(f"{ch}.5(a)", game, "shuffle-each-round",
             (When(RoundStarts, lambda e: e.shuffled, "==", False),), (Action.ALERT,),
             "A round is being dealt without a shuffle since the last round."),
        _row(f"{ch}.3(b)(4)", game, "decks-alternate",
             (When(RoundStarts, lambda e: e.same_deck, "==", True),), (Action.ALERT,),
             "The same deck is dealt two rounds running: the two decks must alternate."),
        _row(f"{ch}.3(b)(3)", game, "deck-shuffled-while-in-play", (),
             (Action.ALERT,),
             "The shuffler delivered the deck that is in play this round: both decks in play.",
             on="table.deck_in_both"),
        _row(f"{ch}.3(c)(1)", game, "deck-age-hand",
             (When(RoundStarts, lambda e: e.by_hand, "==", True),
              When(RoundStarts, lambda e: e.deck_age_h, ">=", 4)),
             (Action.REPLACE_CARDS,),
             "Cards dealt by hand have been in play 4 hours or more: change the decks."),
        _row(f"{ch}.3(c)(2)", game, "deck-age-shoe",
             (When(RoundStarts, lambda e: e.from_shoe, "==", True),
              When(RoundStarts, lambda e: e.deck_age_h, ">=", 8)),
             (Action.REPLACE_CARDS,),
             "Cards dealt from a shoe have been in play 8 hours or more: change the decks."),
        _row(_HAND_DEALING[game], game, "hand-needs-shuffler",
             (When(RoundStarts, lambda e: e.by_hand, "==", True),
              When(RoundStarts, lambda e: e.shuffler_on_table, "==", False)),
             (Action.ALERT,),
             "Cards are dealt by hand without an automated shuffler: one must be used."),
        _row(_SHOE_DEALING[game], game, "shoe-plan", (), (Action.ALERT,),
             "The shoe's plan for the round is not the game's dealing procedure (stack sizes, "
             "the dealer's or community stack): it is set for another game or misconfigured.",
             on="table.deal_plan"),
        _row(_OTHER_METHOD[game], game, "device-first", (),
             (Action.REMOVE_DEVICE,),
             "Another shuffling or dealing method while the device is on the table: remove "
             "the device first.", on="table.other_method"),
    ]  # fmt: skip
    for method, (section, due, outcome) in zip(_METHODS, _STUB_SECTIONS[game], strict=True):
        in_round = When(RoundStarts, lambda e: e.dealing, "==", method)
        in_count = in_round.on(StubCount)
        rows += [
            _row(f"{section}({due})", game, "stub-count-due",
                 (in_round, When(RoundStarts, lambda e: e.counting_shuffler, "==", False),
                  When(RoundStarts, lambda e: e.stub_count_overdue, "==", True)),
                 (Action.COUNT_STUB,),
                 "Five rounds without a stub count and no counting shuffler: count the stub."),
            _row(f"{section}({outcome})", game, "stub-misdealt",
                 (in_count, When(StubCount, lambda e: e.full, "==", False),
                  When(StubCount, lambda e: e.misdealt, "==", True)), _VOID,
                 "The stub count is wrong and the cards were misdealt: all hands void, "
                 "wagers returned."),
            _row(f"{section}({outcome})", game, "stub-wrong",
                 (in_count, When(StubCount, lambda e: e.full, "==", False),
                  When(StubCount, lambda e: e.misdealt, "==", False)),
                 (*_VOID, Action.REMOVE_DECK),
                 "The stub count is wrong and nothing was misdealt: all hands void, wagers "
                 "returned, the deck leaves the table."),
        ]  # fmt: skip
    return rows


_RESHUFFLE_VOID = (Action.VOID_ALL_HANDS, Action.RETURN_WAGERS, Action.RESHUFFLE)
_CHIPS_DIFFER = (
    When(ChipsCollected, lambda e: e.count, "!=", FieldRef(ChipsCollected, lambda e: e.accepted)),
)
#: the clause that asks the dealer to count the wager chips against the wagers the system
#: accepted, by game and dealing method: each dealing section has its own words. Caribbean Stud
#: asks it of a manual shoe only (555.8(b)); dealt from the hand or an automated shoe it asks
#: for the lock-out alone (555.9(a)(3), 555.10(a)(2)), so a count there is no ruling.
CHIP_COUNT = {
    (_CS, DealingMethod.MANUAL_SHOE): "555.8(b)",
    (_LIR, DealingMethod.MANUAL_SHOE): "559.10(b)",
    (_LIR, DealingMethod.HAND): "643a.9(a)(3)(i)",
    (_LIR, DealingMethod.AUTOMATED_SHOE): "559.12(a)(2)",
}
_CHIP_WHAT = {_CS: "progressive wager", _LIR: "bonus wager"}


def _chip_rows() -> list[Rule]:
    rows = []
    for (game, method), clause in CHIP_COUNT.items():
        what = _CHIP_WHAT[game]
        rows += [
            _row(clause, game, "chips-match-wagers",
                 (When(ChipsCollected, lambda e: e.dealing, "==", method), *_CHIPS_DIFFER),
                 (Action.ALERT,),
                 f"The {what} chips collected differ from the wagers the system accepted."),
            _row(clause, game, "wagers-unaccounted",
                 (When(WagersUnaccounted, lambda e: e.dealing, "==", method),),
                 (Action.ALERT,),
                 "A seat's acceptor took events that cannot be read (more than its buffer "
                 "holds, or a reset): its wagers are unaccounted for; reconcile the "
                 f"{what} chips collected against the wagers by hand."),
        ]  # fmt: skip
    return rows


TABLE_RULES: tuple[Rule, ...] = (
    *_game_rows(_CS),
    *_game_rows(_FCP),
    *_game_rows(_LIR),
    *_chip_rows(),
    # -- the progressive / bonus wager system's acceptors (their events, not the table's) -----
    *(
        _row(clause, game, "lockout-failed", (), (Action.ALERT,),
             "A seat's acceptor did not confirm the lock-out: a floorperson stops wagers at "
             "that seat by hand; none it takes after \"no more bets\" is recognised.",
             on="acceptors.lockout_failed")
        for game, clause in ((_CS, "555.2(f)(2)"), (_LIR, "559.2(f)(2)"))
    ),
    _row("555.14(a)", _CS, "hole-card-exposed",
         (When(CardExposed, lambda e: e.card, "==", "hole"),
          When(CardExposed, lambda e: e.phase, "in", (Phase.OPEN, Phase.BETTING))), _RESHUFFLE_VOID,
         "A hole card was exposed before \"no more bets\": all hands void, reshuffle."),
    _row("557.13(d)", _FCP, "dealer-card-exposed",
         (When(CardExposed, lambda e: e.card, "==", "dealer"),
          When(CardExposed, lambda e: e.phase, "in",
               (Phase.NO_MORE_BETS, Phase.DEALING, Phase.DECISIONS))),
          _RESHUFFLE_VOID,
         "A dealer's card was exposed before the dealer revealed: all hands void, reshuffle."),
    *(
        _row(clause, game, "drawn-in-error",
             (When(DrawnInError, lambda e: e.disclosed, "==", False),), (Action.NEXT_CARD,),
             "A card drawn in error, its face not exposed: use it as the next card.")
        for game, clause in ((_CS, "555.14(c)"), (_FCP, "557.13(b)"), (_LIR, "559.15(b)"))
    ),
    _row("551.16(k)", _S21, "device-first",
         (When(OtherMethod, lambda e: e.device_class, "==", "shuffler"),), (Action.REMOVE_DEVICE,),
         "Another shuffling method while the shuffler is on the table: remove it first."),
    # -- Spanish 21: the card reader and the shoe --------------------------------------------
    _row("551.8(e)", _S21, "reader-before-more-cards",
         (When(Gated, lambda e: e.gate, "==", True),
          When(Gated, lambda e: e.hole_card_checked, "==", False)), (Action.ALERT,),
         "More cards are dealt before the hole card went through the reader (up card A, K, Q "
         "or J).", on="table.more_cards"),
    _row("551.16(l)(1)", _S21, "reader-wrong-up-card-reveals",
         (When(HoleCardChecked, lambda e: e.gate, "==", False),
          When(HoleCardChecked, lambda e: e.reveals, "==", True)),
         (Action.ALERT, Action.VOID_ALL_HANDS, Action.RETURN_WAGERS),
         "The hole card went into a reader that lets players learn it, on an up card that "
         "needs no check: all hands dead, wagers returned."),
    _row("551.16(l)(2)", _S21, "reader-wrong-up-card",
         (When(HoleCardChecked, lambda e: e.gate, "==", False),
          When(HoleCardChecked, lambda e: e.reveals, "==", False)), (Action.ALERT,),
         "The hole card went into the reader on an up card that needs no check; this reader "
         "shows players nothing: tell a floorperson, play continues."),
    # 551.10 whole: an ace up (a), before the reader and at most half the wager (b), paid at
    # 2 to 1 when the reader said Blackjack (a, c), collected right after it said none and
    # before any additional card (d)
    _row("551.10(a)", _S21, "insurance-without-an-ace",
         (When(InsurancePlaced, lambda e: e.up_card, "!=", "A"),), (Action.ALERT,),
         "An Insurance Wager was placed, but the dealer's first card is not an ace (or none "
         "was given): insurance is the players' right on an ace only."),
    _row("551.10(b)", _S21, "insurance-before-reader",
         (When(InsurancePlaced, lambda e: e.hole_card_checked, "==", True),), (Action.ALERT,),
         "An Insurance Wager was placed after the hole card went into the reader."),
    _row("551.10(b)", _S21, "insurance-over-half",
         (When(InsurancePlaced, lambda e: e.over_half, "==", True),), (Action.ALERT,),
         "An Insurance Wager of more than half the player's initial wager (rounded up to the "
         "next chip)."),
    _row("551.10(a)", _S21, "insurance-paid-without-blackjack",
         (When(InsurancePaid, lambda e: e.blackjack, "!=", True),), (Action.ALERT,),
         "Insurance Wagers were paid, but the reader did not say Blackjack (it said none, or "
         "has not been used): insurance wins only on a king, queen or jack under the ace."),
    _row("551.10(c)", _S21, "insurance-odds",
         (When(InsurancePaid, lambda e: e.two_to_one, "==", False),), (Action.ALERT,),
         "Winning Insurance Wagers were paid at other odds than 2 to 1."),
    _row("551.10(d)", _S21, "insurance-collected-after-reader",
         (When(Gated, lambda e: e.hole_card_checked, "==", False),), (Action.ALERT,),
         "Losing Insurance Wagers were collected before the reader said \"no Blackjack\".",
         on="table.insurance_collected"),
    _row("551.10(d)", _S21, "insurance-collected-on-blackjack",
         (When(Gated, lambda e: e.blackjack, "==", True),), (Action.ALERT,),
         "Insurance Wagers were collected though the reader said Blackjack: they won (paid 2 "
         "to 1, 551.10(c)); only losing ones are collected, after it says none.",
         on="table.insurance_collected"),
    _row("551.10(d)", _S21, "insurance-collected-after-more-cards",
         (When(Gated, lambda e: e.more_cards_dealt, "==", True),), (Action.ALERT,),
         "Losing Insurance Wagers were collected after additional cards were dealt: they are "
         "collected before any.", on="table.insurance_collected"),
    _row("551.7(d)", _S21, "match-the-dealer-before-reader",
         (When(Gated, lambda e: e.hole_card_checked, "==", True),), (Action.ALERT,),
         "Match-The-Dealer wagers were settled after the card reader was used.",
         on="table.match_the_dealer_settled"),
    _row("551.7(d)", _S21, "match-the-dealer-after-more-cards",
         (When(Gated, lambda e: e.more_cards_dealt, "==", True),), (Action.ALERT,),
         "Match-The-Dealer wagers were settled after additional cards were dealt: they are "
         "settled before any.", on="table.match_the_dealer_settled"),
    _row("551.7(d)", _S21, "match-the-dealer-before-the-up-card",
         (When(Gated, lambda e: e.up_card, "==", None),), (Action.ALERT,),
         "Match-The-Dealer wagers were settled before the dealer's up card was given: they "
         "are settled against it, once the first two cards are dealt.",
         on="table.match_the_dealer_settled"),
    _row("551.16(a)", _S21, "face-up-one",
         (When(FaceUpFound, lambda e: e.found, "==", 1),),
         (Action.DISCARD_CARD,), "A card was found face up in the shoe: discard it."),
    _row("551.16(a)", _S21, "face-up-more",
         (When(FaceUpFound, lambda e: e.found, ">=", 2),),
         (Action.VOID_ALL_HANDS, Action.RETURN_WAGERS, Action.RESHUFFLE),
         "More than one card was found face up in the shoe: the round is void, reshuffle."),
    _row("551.16(b)", _S21, "ten-one",
         (When(TenFound, lambda e: e.found, "==", 1),),
         (Action.DISCARD_CARD, Action.ALERT),
         "A 10 was found in the shoe: a floorperson removes it and tears it in half."),
    _row("551.16(b)", _S21, "ten-more",
         (When(TenFound, lambda e: e.found, ">=", 2),),
         (Action.VOID_ALL_HANDS, Action.RETURN_WAGERS, Action.REMOVE_DECK),
         "More than one 10 was found in the shoe: the round is void, the decks leave play."),
    _row("551.16(g)", _S21, "too-few-cards", (),
         (Action.RESHUFFLE, Action.BURN_CARD),
         "Too few cards to finish the round: shuffle the discards, burn one, finish the round.",
         on="table.too_few_cards"),
    dataclasses.replace(
        _row("551.2(e)", _S21, "reader-inspection",
             (When(RoundStarts, lambda e: e.reader_inspected_today, "==", False),),
             (Action.HALT_DEALING, Action.ALERT),
             "No floorperson inspection of the card reader is recorded for this gaming day."),
        until=READER_INSPECTED,
    ),
    dataclasses.replace(
        _row("551.16(m)", _S21, "halted-reader",
             (When(DealtWhileHalted, lambda e: e.halted_by, "==", "card_reader"),),
             (Action.HALT_DEALING, Action.ALERT),
             "Cards are dealt (a round, or more cards in the round in play) while dealing is "
             "halted for the card reader: no more until it is repaired or replaced."),
        until=READER_REPAIRED,
    ),
)  # fmt: skip
