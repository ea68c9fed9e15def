"""Baccarat and Midibaccarat (543, 545): the shoe's rules as rows, judged on what the table's
state machine sees (rules/table.py): the burn at the start of a shoe, the cover card and the
last hand, cards drawn in error, a card face up in the shoe, too few cards, and each coup
against the drawing rules (543.11 and its Table 1, rules/hands.py). Words verbatim (checked by
tests/test_rules.py)."""

from __future__ import annotations

from tableside.rules.model import Action, FieldRef, Game, Rule, When
from tableside.rules.seen import Coup, DrawnInError, RoundStarts, ShoeBurn

__all__ = ["BACCARAT_RULES"]

_BURN = (
    "Prior to commencement of play, the dealer shall remove the first card from the dealing "
    "shoe and place it, and an additional number of cards equal to the face value of the first "
    "card drawn, in the discard bucket after all cards have been shown to the players. When "
    "determining the face value of the first card removed from the dealing shoe, a 10, jack, "
    "queen or king shall count as ten and an ace shall count as one."
)
_COVER = (
    "Whenever the cover card appears during play, the cover card shall be removed and placed to "
    "the side and the hand will be completed. Upon completion of that hand, the dealer calling "
    "the game shall announce ''last hand.'' At the completion of one more hand, the cards shall "
    "be replaced with new decks of cards."
)
_UNDISCLOSED = (
    "A card drawn in error from the dealing shoe that is not disclosed{comma} shall be used as "
    "the first card of the next hand of play."
)
_DISCLOSED = (
    "If a card dealt in error under the circumstances described in subsection (a) or (b) is "
    "disclosed at the time it is dealt, the {who} shall place the disclosed card and one "
    "additional card drawn face down from the dealing shoe in the discard bucket without "
    "disclosing the additional card."
)
_FACE_UP = (
    "Any card found face up in the dealing shoe {may} be used in the game and shall be placed "
    "in the discard bucket, along with an additional number of cards, drawn face up, equal to "
    "the value of the card found face up in the dealing shoe."
)
_TOO_FEW = (
    "If there are insufficient cards remaining in the dealing shoe to complete a round of play, "
    "that round shall be void and all wagers shall be returned. A new round shall commence "
    "after the entire set of cards has been replaced and the new set of cards have been placed "
    "in the dealing shoe."
)
_NATURAL = (
    "If the Player's Hand or the Banker's Hand after the initial two cards are dealt to each is "
    "a Natural, no more cards {may} dealt to either hand."
)
_PLAYER_THIRD = {
    "543": (
        "A third card dealt to the Player's Hand that is not disclosed, when no third card is "
        "authorized under § 543.11 (relating to rules for determining whether a third card shall "
        "be dealt), shall become the third card of the Banker's Hand if the Banker's Hand is "
        "obliged to draw by § 543.11(c). If the Banker's Hand is required to stay, the card "
        "dealt in error shall become the first card of the next hand."
    ),
    "545": (
        "A third card dealt to the Player's Hand when no third card is authorized under § 545.11 "
        "(relating to rules for determining whether a third card shall be dealt) that is not "
        "disclosed, shall become the third card of the Banker's Hand if the Banker's Hand is "
        "required to draw by § 545.11(c). If the Banker's Hand is required to stay, the card "
        "dealt in error shall become the first card of the next hand."
    ),
}
_PLAYER_DRAWS = (
    "If the Point Count of the Player's Hand and the Banker's Hand on the first two cards is 0 "
    "to 7 inclusive, the Player's Hand shall: Draw (that is, take a third card) if the Player's "
    "{hand} has a Point Count of less than 6."
)
_BANKER = (
    "If the Point Count of the Player's Hand and the Banker's Hand on the first two cards is 0 "
    "to 7 inclusive, the Banker's Hand shall draw (that is, take a third card) or stay (that is, "
    "not take a third card) in accordance with the following requirements:"
)
_VOID = (Action.VOID_ALL_HANDS, Action.RETURN_WAGERS)
_NO_NATURAL = When(Coup, lambda e: e.natural, "==", False)


def _chapter(game: Game, ch: str, error: str, burn: str) -> list[Rule]:
    """``error``: the irregularities section (543.14, 545.15); ``burn``: the start-of-shoe
    clause (543.5(g), 545.5(f))."""
    midi = ch == "543"
    natural = _NATURAL.format(may="may be" if midi else "shall be")

    def row(clause: str, name: str, when: tuple[When, ...], actions: tuple[Action, ...],
            words: str, summary: str, *, on: str = "") -> Rule:  # fmt: skip
        return Rule.of(clause, game, name, when, actions, words, summary, on=on)

    return [
        row(burn, "burn", (), (Action.BURN_CARD,), _BURN,
            "A new shoe: burn the first card and as many more as its value.",
            on="table.first_card"),
        row(burn, "burn-count",
            (When(ShoeBurn, lambda e: e.burned, "!=", FieldRef(ShoeBurn, lambda e: e.burn)),),
            (Action.ALERT,), _BURN,
            "The shoe burned another number of cards than the first card's value asks."),
        row(burn, "no-burn", (), (Action.ALERT,), _BURN,
            "A new shoe's first coup was dealt without the first-card burn.",
            on="table.no_burn"),
        row(f"{ch}.10(e)", "cover-card", (), (Action.LAST_HAND,), _COVER,
            "The cover card came out: finish this hand, announce 'last hand', play one more, "
            "then new decks.", on="table.cover_card"),
        row(f"{ch}.10(e)", "past-last-hand",
            (When(RoundStarts, lambda e: e.past_last_hand, "==", True),),
            (Action.ALERT, Action.REPLACE_CARDS), _COVER,
            "A hand is dealt after the last hand: the cards should have been replaced."),
        row(f"{error}(a)", "drawn-in-error",
            (When(DrawnInError, lambda e: e.disclosed, "==", False),), (Action.NEXT_CARD,),
            _UNDISCLOSED.format(comma="" if midi else ","),
            "A card drawn in error, not disclosed: it is the first card of the next hand."),
        row(f"{error}(c)", "drawn-in-error-disclosed",
            (When(DrawnInError, lambda e: e.disclosed, "==", True),),
            (Action.DISCARD_CARD, Action.BURN_CARD),
            _DISCLOSED.format(who="dealer" if midi else "dealer calling the game"),
            "A card drawn in error and disclosed: discard it and burn one more, unseen."),
        row(f"{error}(d)", "face-up", (),
            (Action.DISCARD_CARD, Action.BURN_CARD),
            _FACE_UP.format(may="may not" if midi else "shall not"),
            "A card face up in the shoe: discard it and as many more, face up, as its value.",
            on="table.card_face_up_in_shoe"),
        row(f"{error}(e)", "too-few-cards", (),
            (*_VOID, Action.REPLACE_CARDS), _TOO_FEW,
            "Too few cards to finish the round: the round is void, wagers returned, new cards.",
            on="table.too_few_cards"),
        row(f"{error}(a)", "card-after-the-coup",
            (When(Coup, lambda e: e.extra_cards, ">=", 1),),
            (Action.NEXT_CARD,), _UNDISCLOSED.format(comma="" if midi else ","),
            "A card drawn after both hands had their cards: drawn in error, it is the first "
            "card of the next hand."),
        row(f"{ch}.11(a)", "natural",
            (When(Coup, lambda e: e.natural, "==", True),
             When(Coup, lambda e: e.player_drew, "==", True)), (Action.ALERT,),
            natural, "A third card was dealt to a hand after a Natural."),
        row(f"{ch}.11(a)", "natural-banker",
            (When(Coup, lambda e: e.natural, "==", True),
             When(Coup, lambda e: e.banker_drew, "==", True)), (Action.ALERT,),
            natural, "A third card was dealt to the Banker's Hand after a Natural."),
        row(f"{error}(b)", "player-third-to-banker",
            (_NO_NATURAL, When(Coup, lambda e: e.player_third_goes_to, "==", "banker")),
            (Action.ALERT,),
            _PLAYER_THIRD[ch],
            "The Player's Hand got a third card the rules do not allow; the Banker's Hand must "
            "draw, so that card is the Banker's third card."),
        row(f"{error}(b)", "player-third-to-next-hand",
            (_NO_NATURAL, When(Coup, lambda e: e.player_third_goes_to, "==", "next_hand")),
            (Action.NEXT_CARD,),
            _PLAYER_THIRD[ch],
            "The Player's Hand got a third card the rules do not allow; the Banker's Hand stays, "
            "so that card is the first card of the next hand."),
        row(f"{ch}.11(b)(1)", "player-must-draw",
            (_NO_NATURAL, When(Coup, lambda e: e.player_drew, "==", False),
             When(Coup, lambda e: e.player_should_draw, "==", True)), (Action.ALERT,),
            _PLAYER_DRAWS.format(hand="Hand" if midi else "hand"),
            "The Player's Hand stayed below 6: it must draw."),
        row(f"{ch}.11(c)", "banker-draw",
            (_NO_NATURAL,
             When(Coup, lambda c: c.banker_drew, "!=",
                  FieldRef(Coup, lambda c: c.banker_should_draw))),
            (Action.ALERT,), _BANKER,
            "The Banker's Hand drew or stayed against Table 1."),
    ]  # fmt: skip


BACCARAT_RULES: tuple[Rule, ...] = (
    *_chapter(Game.MIDIBACCARAT, "543", "543.14", "543.5(g)"),
    *_chapter(Game.BACCARAT, "545", "545.15", "545.5(f)"),
)

# 543.11(b)(2) (the Player's Hand stays on 6 or more) has no row of its own: a third card
# against it is player-third-in-error, which 543.14(b) decides.
