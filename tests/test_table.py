"""The table's state machine and the rows it feeds, pure: no daemon, no clock."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from tableside.drivers.shoe.plan import Plan
from tableside.errors import Refused
from tableside.rules import Game, TableFacts, evaluate
from tableside.rules.model import Action
from tableside.rules.patterns import dispense_pattern
from tableside.rules.table import Phase, TableState, step

from .events import table_event

T0 = 1_764_400_000.0  # a Unix time; each test moves its own clock
HOUR = 3600.0


def _fitting_plan(game: Game) -> Plan:
    """The game's own dealing procedure for one seat (none for a game without one)."""
    try:
        return dispense_pattern(game, [1])
    except ValueError:
        return ()


class Table:
    """A table driven event by event; collects every ruling's citation."""

    def __init__(self, game: Game = Game.CARIBBEAN_STUD, *, counts: bool = True,
                 devices: Iterable[str] = ("shuffler", "shoe")) -> None:  # fmt: skip
        self.facts = TableFacts(game, shuffler_counts=counts)
        self.state = TableState(devices=frozenset(devices))
        self.now = T0
        self.rulings: list[tuple[str, tuple[Action, ...]]] = []

    def __call__(self, kind: str, **data: Any) -> list[str]:
        if kind == "shoe.deal_started" and "plan" not in data:
            data["plan"] = _fitting_plan(self.facts.game)  # a shoe always announces one
        self.state, seen = step(self.facts, self.state, table_event(kind, self.now, data))
        found = [r for o in seen for r in evaluate(self.facts, o)]
        self.rulings += [(r.rule.citation, r.rule.actions) for r in found]
        return [r.rule.citation.removeprefix("58 Pa. Code § ") for r in found]

    def phase(self) -> Phase:
        return self.state.phase

    def last_actions(self) -> tuple[Action, ...]:
        return self.rulings[-1][1]

    def round(self, *, shuffle: bool = True, deck: str | None = None) -> list[str]:
        """One whole round as the devices and the dealer report it."""
        if shuffle:
            self("shuffler.shuffle_complete", **({"deck": deck} if deck else {}))
        self("bets_open")
        self("no_more_bets")
        found = self("shoe.deal_started")
        self("shoe.deal_complete")
        self("reveal")
        self("round_settled")
        return found


def test_a_round_goes_through_its_phases() -> None:
    table = Table()
    table("open_table")
    assert table.phase() is Phase.OPEN and table.state.cards_in_play_since == T0
    table("shuffler.shuffle_complete")
    table("bets_open")
    assert table.phase() is Phase.BETTING
    table("no_more_bets")
    assert table("shoe.deal_started") == []
    assert table.phase() is Phase.DEALING and table.state.round == 1
    table("shoe.deal_complete")
    assert table.phase() is Phase.DECISIONS
    table("reveal")
    table("round_settled")
    assert table.phase() is Phase.COMPLETE
    assert table.rulings == []


SHUFFLE_EACH_ROUND = [
    (Game.CARIBBEAN_STUD, "555.5(a)"),
    (Game.FOUR_CARD_POKER, "557.5(a)"),
    (Game.LET_IT_RIDE, "559.5(a)"),
]


#: per game: alternating decks, deck age by hand / from a shoe, hand-dealing needs a shuffler,
#: and per dealing method the stub count's (due, outcome) clauses
CLAUSES: dict[Game, dict[str, Any]] = {
    Game.CARIBBEAN_STUD: {
        "both": "555.3(b)(3)", "decks": "555.3(b)(4)",
        "age_hand": "555.3(c)(1)", "age_shoe": "555.3(c)(2)",
        "hand": "555.9(a)(1)",
        "stub": {"automated_shoe": ("555.10(d)", "555.10(f)"),
                 "manual_shoe": ("555.8(f)", "555.8(h)"), "hand": ("555.9(d)", "555.9(f)")},
    },
    Game.FOUR_CARD_POKER: {
        "both": "557.3(b)(3)", "decks": "557.3(b)(4)",
        "age_hand": "557.3(c)(1)", "age_shoe": "557.3(c)(2)",
        "hand": "557.9(a)(1)",
        "stub": {"automated_shoe": ("557.10(d)", "557.10(f)"),
                 "manual_shoe": ("557.8(f)", "557.8(h)"), "hand": ("557.9(d)", "557.9(f)")},
    },
    Game.LET_IT_RIDE: {
        "both": "559.3(b)(3)", "decks": "559.3(b)(4)",
        "age_hand": "559.3(c)(1)", "age_shoe": "559.3(c)(2)",
        # dealt from the hand: 643a.9, the text in force (it replaced 559.11)
        "hand": "643a.9(a)(1)",
        "stub": {"automated_shoe": ("559.12(d)", "559.12(f)"),
                 "manual_shoe": ("559.10(f)", "559.10(h)"), "hand": ("643a.9(d)", "643a.9(f)")},
    },
}  # fmt: skip
POKER = list(CLAUSES)


@pytest.mark.parametrize(("game", "clause"), SHUFFLE_EACH_ROUND)
def test_a_round_without_a_shuffle(game: Game, clause: str) -> None:
    table = Table(game)
    table("open_table")
    assert table.round() == []
    assert table.round(shuffle=False) == [clause]


@pytest.mark.parametrize("game", POKER)
def test_two_decks_alternate(game: Game) -> None:
    table = Table(game)
    table("open_table")
    assert table.round(deck="A") == []
    assert table.round(deck="B") == []
    assert table.round(deck="B") == [CLAUSES[game]["decks"]]
    assert table.round(deck="A") == []


@pytest.mark.parametrize("game", POKER)
@pytest.mark.parametrize(
    ("dealing", "hours", "expected"),
    [
        ("hand", 3.9, None),
        ("hand", 4.0, "age_hand"),
        ("automated_shoe", 7.9, None),
        ("automated_shoe", 8.0, "age_shoe"),
        ("manual_shoe", 8.5, "age_shoe"),
    ],
)
def test_deck_age(game: Game, dealing: str, hours: float, expected: str | None) -> None:
    table = Table(game, devices=("shuffler",))
    table("open_table")
    table("declare_method", dealing=dealing)
    table.now += hours * HOUR
    assert table.round() == ([CLAUSES[game][expected]] if expected else [])
    if expected:
        assert table.last_actions() == (Action.REPLACE_CARDS,)
        table("new_cards")
        assert table.round() == []


@pytest.mark.parametrize("game", POKER)
def test_hand_dealing_needs_a_shuffler(game: Game) -> None:
    """Let It Ride cites 643a.9(a)(1), the text in force, not the 559.11(a)(1) it replaced."""
    table = Table(game, devices=())
    table("open_table")
    table("declare_method", dealing="hand", shuffling="manual")
    table("shuffled")  # by hand
    assert table.round(shuffle=False) == [CLAUSES[game]["hand"]]


@pytest.mark.parametrize(
    ("dealing", "due", "outcome"),
    [("automated_shoe", "555.10(d)", "555.10(f)"), ("manual_shoe", "555.8(f)", "555.8(h)"),
     ("hand", "555.9(d)", "555.9(f)")],
)  # fmt: skip
def test_stub_count_every_five_rounds_and_its_outcomes(
    dealing: str, due: str, outcome: str
) -> None:
    table = Table(counts=False)
    table("open_table")
    table("declare_method", dealing=dealing)
    for _ in range(5):
        assert due not in table.round()
    assert due in table.round(), "a sixth round without a stub count"
    assert table.last_actions() == (Action.COUNT_STUB,)
    assert table("stub_count", count=52, misdealt=False) == []
    assert table.state.rounds_since_stub_count == 0
    assert table("stub_count", count=51, misdealt=True) == [outcome]
    assert table.last_actions() == (Action.VOID_ALL_HANDS, Action.RETURN_WAGERS)
    assert table("stub_count", count=51, misdealt=False) == [outcome]
    assert table.last_actions() == (Action.VOID_ALL_HANDS, Action.RETURN_WAGERS,
                                    Action.REMOVE_DECK)  # fmt: skip


@pytest.mark.parametrize(
    ("kind", "args"),
    [("stub_count", {"count": True, "misdealt": False}), ("chips_collected", {"count": True}),
     ("misdeal", {"target": "dealer", "count": True})],
)  # fmt: skip
def test_a_count_of_true_is_refused(kind: str, args: dict[str, object]) -> None:
    """true is no count (Python would take it for 1)."""
    table = Table(counts=False)
    table("open_table")
    with pytest.raises(Refused, match=kind):
        table(kind, **args)


def test_no_stub_count_due_with_a_counting_shuffler() -> None:
    table = Table(counts=True)
    table("open_table")
    for _ in range(7):
        assert table.round() == []


def test_bad_stub_count_args_are_refused() -> None:
    table = Table()
    with pytest.raises(Refused, match="count"):
        table("stub_count", count="fifty")


@pytest.mark.parametrize(("game", "clause"), [(Game.CARIBBEAN_STUD, "555.14(g)"),
                         (Game.FOUR_CARD_POKER, "557.13(g)"), (Game.LET_IT_RIDE, "559.15(f)"),
                         (Game.SPANISH_21, "551.16(k)")])  # fmt: skip
def test_another_method_while_the_device_is_there(game: Game, clause: str) -> None:
    table = Table(game)
    assert table("declare_method", shuffling="manual") == [clause]
    assert table.last_actions() == (Action.REMOVE_DEVICE,)
    table("device_removed", device_class="shuffler")
    assert table("declare_method", shuffling="manual") == []


@pytest.mark.parametrize(("game", "clause"), [(Game.CARIBBEAN_STUD, "555.14(g)"),
                         (Game.FOUR_CARD_POKER, "557.13(g)"), (Game.LET_IT_RIDE, "559.15(f)"),
                         (Game.SPANISH_21, "551.16(k)")])  # fmt: skip
def test_a_hand_shuffle_reported_with_the_shuffler_there(game: Game, clause: str) -> None:
    """The same fact by another path, the same ruling: the dealer's "shuffled" while the
    shuffler is on the table is another method, and is not the round's shuffle."""
    table = Table(game)
    table("open_table")
    assert table("shuffled") == [clause]
    assert table.last_actions() == (Action.REMOVE_DEVICE,)
    assert not table.state.shuffled_since_last_round
    table("device_removed", device_class="shuffler")
    assert table("shuffled") == []
    assert table.state.shuffled_since_last_round


def test_spanish_21_reader_inspection_and_halt() -> None:
    table = Table(Game.SPANISH_21, devices=("shuffler", "card_reader"))
    table("open_table")
    assert "551.2(e)" in table.round(), "no inspection recorded for the gaming day"
    table("reader_inspected")
    assert table.round() == []
    table.now += 24 * HOUR
    assert "551.2(e)" in table.round(), "yesterday's inspection does not count today"
    table("reader_inspected")
    table("halt", device_class="card_reader")
    assert table.round() == ["551.16(m)"]
    table("device_installed", device_class="card_reader")  # repaired or replaced
    assert table.state.halted_by is None
    assert table.round() == []


def test_state_survives_a_round_trip_through_json() -> None:
    table = Table(counts=False)
    table("open_table")
    table.round(deck="A")
    table("declare_method", dealing="hand")
    again = TableState.from_dict(table.state.to_dict())
    assert again == table.state


@pytest.mark.parametrize(
    ("game", "dealing", "clause"),
    [(Game.CARIBBEAN_STUD, "manual_shoe", "555.8(b)"),
     # Caribbean Stud dealt from the hand or an automated shoe asks for the lock-out only
     # (555.9(a)(3), 555.10(a)(2)): no clause asks for the count
     (Game.CARIBBEAN_STUD, "hand", None), (Game.CARIBBEAN_STUD, "automated_shoe", None),
     (Game.LET_IT_RIDE, "manual_shoe", "559.10(b)"), (Game.LET_IT_RIDE, "hand", "643a.9(a)(3)(i)"),
     (Game.LET_IT_RIDE, "automated_shoe", "559.12(a)(2)")],
)  # fmt: skip
def test_chips_collected_must_match_the_wagers_accepted(
    game: Game, dealing: str, clause: str | None
) -> None:
    """The clause whose words fit the dealing method in use: a Let It Ride round dealt from
    the hand cites 643a.9(a)(3)(i), from a manual shoe 559.10(b)."""
    table = Table(game, devices=("shuffler",))
    table("declare_method", dealing=dealing)
    table("bets_open")
    for seat in (1, 2, 5):
        table("acceptors.wager_accepted", seat=seat, credit=1)
    table("no_more_bets")
    assert table("chips_collected", count=3) == []
    assert table("chips_collected", count=2) == ([clause] if clause else [])
    table("bets_open")  # a new round counts again
    assert table("chips_collected", count=0) == []


def test_exposed_cards() -> None:
    table = Table(Game.CARIBBEAN_STUD)
    table("open_table")
    table("bets_open")
    assert table("card_exposed", card="hole") == ["555.14(a)"]
    assert table.last_actions() == (Action.VOID_ALL_HANDS, Action.RETURN_WAGERS, Action.RESHUFFLE)
    table("no_more_bets")
    assert table("card_exposed", card="hole") == [], "after no more bets: not this clause"
    four = Table(Game.FOUR_CARD_POKER)
    four("open_table")
    four("bets_open")
    four("no_more_bets")
    four("shoe.deal_started")
    assert four("card_exposed", card="dealer") == ["557.13(d)"]
    four("reveal")
    assert four("card_exposed", card="dealer") == [], "revealed already"
    with pytest.raises(Refused, match="card: Input should be 'hole' or 'dealer'"):
        four("card_exposed", card="player")


@pytest.mark.parametrize(
    ("game", "target", "count", "clause", "actions"),
    [
        (Game.CARIBBEAN_STUD, "seat2", 4, "555.14(d)", (Action.VOID_HAND,)),
        (Game.CARIBBEAN_STUD, "dealer", 4, "555.14(d)", (Action.DEAL_ADDITIONAL_CARD,)),
        (Game.FOUR_CARD_POKER, "dealer", 5, "557.13(c)",
         (Action.VOID_ALL_HANDS, Action.RETURN_WAGERS, Action.RESHUFFLE)),
        (Game.LET_IT_RIDE, "community", 3, "559.15(c)",
         (Action.VOID_ALL_HANDS, Action.RETURN_WAGERS, Action.RESHUFFLE)),
    ],
)  # fmt: skip
def test_a_misdeal_the_dealer_reports(
    game: Game, target: str, count: int, clause: str, actions: tuple[Action, ...]
) -> None:
    table = Table(game)
    assert table("misdeal", target=target, count=count) == [clause]
    assert table.last_actions() == actions
    right = {"seat2": 5, "dealer": 5 if game is Game.CARIBBEAN_STUD else 6, "community": 2}
    assert table("misdeal", target=target, count=right[target]) == []
    with pytest.raises(Refused, match="misdeal: count: Field required"):
        table("misdeal", target="seat2")


def spanish_21(reveals: bool = False) -> Table:
    table = Table(Game.SPANISH_21, devices=("shuffler", "card_reader"))
    table("card_reader.status", state="ready", reveals_hole_card=reveals)
    table("open_table")
    table("reader_inspected")
    table("shuffler.shuffle_complete")
    table("start_round")
    return table


def test_spanish_21_up_card_gate() -> None:
    table = spanish_21()
    table("up_card", rank="K")
    assert table("more_cards") == ["551.8(e)"], "more cards before the hole card was checked"
    assert table("card_reader.hole_card_checked", check_id=1, blackjack=False) == []
    assert table("more_cards") == []
    with pytest.raises(Refused, match="rank"):
        table("up_card", rank="Z")


@pytest.mark.parametrize(
    ("reveals", "clause", "actions"),
    [
        (True, "551.16(l)(1)", (Action.ALERT, Action.VOID_ALL_HANDS, Action.RETURN_WAGERS)),
        (False, "551.16(l)(2)", (Action.ALERT,)),
    ],
)
def test_spanish_21_reader_used_on_a_wrong_up_card(
    reveals: bool, clause: str, actions: tuple[Action, ...]
) -> None:
    table = spanish_21(reveals)
    table("up_card", rank="7")
    assert table("card_reader.hole_card_checked", check_id=1, blackjack=False) == [clause]
    assert table.last_actions() == actions


def test_spanish_21_a_ten_is_never_the_up_card() -> None:
    """No tens are in play (551.3(a)): a 10 given as the up card is a ten found (551.16(b)),
    and the table still waits for the dealer's real up card."""
    table = spanish_21()
    assert table("up_card", rank="10") == ["551.16(b)"]
    assert table.last_actions() == (Action.DISCARD_CARD, Action.ALERT)
    assert table.state.up_card is None and table.state.tens_found == 1
    assert table("up_card", rank="10") == ["551.16(b)"]
    assert table.last_actions() == (Action.VOID_ALL_HANDS, Action.RETURN_WAGERS, Action.REMOVE_DECK)
    table("up_card", rank="K")
    assert table.state.up_card == "K"


def test_spanish_21_each_card_found_cites_only_its_own_fields() -> None:
    """A card face up cites how many were found this round; a ten also whether the dealer gave
    it as the up card. Neither cites the other's fields."""
    table = spanish_21()

    def cited(kind: str, **data: Any) -> list[dict[str, object]]:
        table.state, seen = step(table.facts, table.state, table_event(kind, table.now, data))
        return [o.seen.data() for o in seen if o.kind == f"table.{kind}"]

    round_ = table.state.round
    assert cited("card_face_up") == [{"round": round_, "found": 1}]
    assert cited("ten_found") == [{"round": round_, "found": 1, "up_card": False}]
    up_card = [
        o.seen.data()
        for o in step(table.facts, table.state, table_event("up_card", table.now, {"rank": "10"}))[
            1
        ]
    ]
    assert up_card == [{"round": round_, "found": 2, "up_card": True}]


def test_spanish_21_insurance_and_match_the_dealer_order() -> None:
    table = spanish_21()
    table("up_card", rank="A")
    assert table("match_the_dealer_settled") == []
    assert table("insurance_placed") == []
    assert table("insurance_collected") == ["551.10(d)"], "before the reader said no Blackjack"
    table("card_reader.hole_card_checked", check_id=1, blackjack=False)
    assert table("insurance_collected") == []
    assert table("insurance_placed") == ["551.10(b)"]
    assert table("match_the_dealer_settled") == ["551.7(d)"]


def test_spanish_21_shoe_irregularities() -> None:
    table = spanish_21()
    assert table("card_face_up") == ["551.16(a)"]
    assert table.last_actions() == (Action.DISCARD_CARD,)
    assert table("card_face_up") == ["551.16(a)"]
    assert table.last_actions() == (Action.VOID_ALL_HANDS, Action.RETURN_WAGERS, Action.RESHUFFLE)
    assert table("ten_found") == ["551.16(b)"]
    assert table.last_actions() == (Action.DISCARD_CARD, Action.ALERT)
    assert table("ten_found") == ["551.16(b)"]
    assert table.last_actions() == (Action.VOID_ALL_HANDS, Action.RETURN_WAGERS, Action.REMOVE_DECK)
    assert table("too_few_cards") == ["551.16(g)"]
    assert table.last_actions() == (Action.RESHUFFLE, Action.BURN_CARD)
    table("shuffler.shuffle_complete")
    table("start_round")  # a new round counts again
    assert table("card_face_up") == ["551.16(a)"]
    assert table.last_actions() == (Action.DISCARD_CARD,)


#: each baccarat chapter's clauses, written out (docs/rules.md credits a test by the clauses
#: it names)
BACCARAT: dict[Game, dict[str, str]] = {
    Game.MIDIBACCARAT: {
        "burn": "543.5(g)", "cover": "543.10(e)", "face_up": "543.14(d)",
        "undisclosed": "543.14(a)", "disclosed": "543.14(c)", "too_few": "543.14(e)",
        "natural": "543.11(a)", "player_third": "543.14(b)", "player_draws": "543.11(b)(1)",
        "after_coup": "543.14(a)",
        "banker": "543.11(c)",
    },
    Game.BACCARAT: {
        "burn": "545.5(f)", "cover": "545.10(e)", "face_up": "545.15(d)",
        "undisclosed": "545.15(a)", "disclosed": "545.15(c)", "too_few": "545.15(e)",
        "natural": "545.11(a)", "player_third": "545.15(b)", "player_draws": "545.11(b)(1)",
        "after_coup": "545.15(a)",
        "banker": "545.11(c)",
    },
}  # fmt: skip


@pytest.mark.parametrize("game", list(BACCARAT))
def test_baccarat_shoe_rules(game: Game) -> None:
    clause = BACCARAT[game]
    table = Table(game, devices=())
    assert table("first_card", rank="K") == [clause["burn"]]
    assert table.last_actions() == (Action.BURN_CARD,)
    assert table("first_card", rank="7") == [clause["burn"]]
    assert table("card_face_up_in_shoe", rank="A") == [clause["face_up"]]
    assert table("drawn_in_error", disclosed=False) == [clause["undisclosed"]]
    assert table("drawn_in_error", disclosed=True) == [clause["disclosed"]]
    assert table("too_few_cards") == [clause["too_few"]]
    assert table.last_actions() == (Action.VOID_ALL_HANDS, Action.RETURN_WAGERS,
                                    Action.REPLACE_CARDS)  # fmt: skip
    # The cover card: this hand, one more ("last hand"), then new decks.
    table("start_round")
    assert table("cover_card") == [clause["cover"]]
    assert table.last_actions() == (Action.LAST_HAND,)
    assert clause["cover"] not in table("start_round"), "the last hand"
    assert clause["cover"] in table("start_round"), "one hand too many"
    table("new_cards")
    assert clause["cover"] not in table("start_round")


@pytest.mark.parametrize("game", list(BACCARAT))
@pytest.mark.parametrize(
    ("player", "banker", "expected"),
    [
        (["K", "7"], ["5", "Q"], ["banker"]),  # player stood on 7: banker on 5 must draw
        (["9", "K"], ["2", "3"], []),  # a Natural: no more cards
        (["9", "K"], ["2", "3", "4"], ["natural"]),  # a card after a Natural
        (["2", "3", "4"], ["K", "6"], []),  # player drew on 5; banker 6 stays on a 4
        (["2", "3", "6"], ["K", "6"], ["banker"]),  # banker 6 must draw on a 6: it did not
        # player drew on 6: not allowed; B 2 must draw, so the 2 is the Banker's third and the
        # Banker's own 9 is a card too many (drawn in error: the next hand's first card)
        (["K", "6", "2"], ["K", "2", "9"], ["after_coup", "player_third"]),
        (["K", "6", "2"], ["K", "2"], ["player_third"]),  # the 2 became the Banker's third
        # P 7 and B 7 both stand: the Player's third goes to the next hand, the Banker is
        # not judged with it
        (["K", "7", "4"], ["K", "7"], ["player_third"]),
        (["K", "4"], ["K", "7"], ["player_draws"]),  # player stayed on 4
    ],
)
def test_each_coup_against_the_drawing_rules(
    game: Game, player: list[str], banker: list[str], expected: list[str]
) -> None:
    table = Table(game, devices=())
    assert table("coup", player=player, banker=banker) == [BACCARAT[game][e] for e in expected]
    with pytest.raises(Refused, match=r"coup: player\.0: a card's rank is A"):
        table("coup", player=["X", "2"], banker=["3", "4"])


DRAWN_IN_ERROR = [
    (Game.CARIBBEAN_STUD, "555.14(c)"),
    (Game.FOUR_CARD_POKER, "557.13(b)"),
    (Game.LET_IT_RIDE, "559.15(b)"),
]


@pytest.mark.parametrize(("game", "clause"), DRAWN_IN_ERROR)
def test_a_card_drawn_in_error_is_the_next_card(game: Game, clause: str) -> None:
    table = Table(game)
    assert table("drawn_in_error", disclosed=False) == [clause]
    assert table.last_actions() == (Action.NEXT_CARD,)
    assert table("drawn_in_error", disclosed=True) == [], "a card exposed: not this clause"


def test_coups_from_a_shoe_that_reads_cards() -> None:
    table = Table(Game.BACCARAT, devices=("shoe",))

    def coup(round_: int, *cards: str) -> list[str]:
        found = []
        for index, card in enumerate(cards):
            found += table("shoe.card_drawn", round=round_, index=index, card=card)
        return found

    assert coup(1, "2S", "3H", "4D", "KC", "5S") == []  # P 6 stays, B 3 draws: 5 cards, right
    assert table.state.round == 1 and "coup" not in table.state.to_dict(), "values stay here"
    assert coup(2, "9S", "KH", "KD", "2C") == []  # a Natural: four cards
    assert coup(2, "4H") == ["545.11(a)"], "one card too many, after a Natural"
    # P 4 must draw, and B 0 too; the dealer went on to the next coup: judged short then
    assert coup(3, "2S", "KH", "2D", "KC") == []
    assert coup(4, "KS") == ["545.11(b)(1)", "545.11(c)"]


def test_a_card_after_a_complete_coup_is_drawn_in_error() -> None:
    table = Table(Game.MIDIBACCARAT, devices=("shoe",))
    found = []
    # P 2+3+4 = 9 drew on 5; B 0 draws on anything: six cards, then one too many
    for index, card in enumerate(["2S", "KH", "3D", "QC", "4S", "5H", "9C"]):
        found += table("shoe.card_drawn", round=1, index=index, card=card)
    assert found == ["543.14(a)"]
    assert table.last_actions() == (Action.NEXT_CARD,)


@pytest.mark.parametrize("game", POKER)
def test_the_deck_in_play_is_not_the_one_shuffled(game: Game) -> None:
    table = Table(game)
    table("open_table")
    table.round(deck="A")
    table("shuffler.shuffle_complete", deck="B")
    table("shoe.deal_started")
    assert table("shuffler.shuffle_complete", deck="A") == [], "the other deck: right"
    table("round_settled")
    table("shoe.deal_started")  # deck A in play now
    assert table("shuffler.shuffle_complete", deck="A") == [CLAUSES[game]["both"]]


def test_the_control_devices_buttons_move_the_betting_phase() -> None:
    table = Table()
    table("progressive_controller.button", button="bets_open")
    assert table.phase() is Phase.BETTING
    table("progressive_controller.button", button="no_more_bets")
    assert table.phase() is Phase.NO_MORE_BETS
    table("progressive_controller.button", button="something_else")
    assert table.phase() is Phase.NO_MORE_BETS
    table("shuffler.status", state="idle")  # what does not move the table leaves it
    assert table.phase() is Phase.NO_MORE_BETS


@pytest.mark.parametrize("game", list(BACCARAT))
@pytest.mark.parametrize(("kind", "rank", "burn"), [
    ("first_card", "K", 10), ("first_card", "10", 10), ("first_card", "A", 1),
    ("first_card", "7", 7),
    # 543.6(a)(2) / 545.6(a)(2): a face-up 10 or court card has a value of zero
    ("card_face_up_in_shoe", "K", 0), ("card_face_up_in_shoe", "10", 0),
    ("card_face_up_in_shoe", "A", 1), ("card_face_up_in_shoe", "9", 9),
])  # fmt: skip
def test_baccarat_burns_by_the_clause_that_asks(
    game: Game, kind: str, rank: str, burn: int
) -> None:
    """Only the first card of a shoe counts a ten or a court card as ten."""
    _, seen = step(TableFacts(game), TableState(phase=Phase.OPEN, devices=frozenset()),
                   table_event(kind, T0, {"rank": rank}))  # fmt: skip
    assert [o.seen.data()["burn"] for o in seen] == [burn]


@pytest.mark.parametrize(
    ("game", "clause", "plan"),
    [
        (Game.CARIBBEAN_STUD, "555.10(b)", [("seat1", 4), ("seat2", 4), ("dealer", 5)]),
        (Game.CARIBBEAN_STUD, "555.10(b)", [("seat1", 3), ("seat2", 3), ("community", 3)]),
        (Game.CARIBBEAN_STUD, "555.10(b)", [("seat1", 5), ("seat2", 5)]),  # no dealer stack
        (Game.FOUR_CARD_POKER, "557.10(b)", [("seat1", 5), ("dealer", 5)]),  # no sixth card
        (Game.LET_IT_RIDE, "559.12(b)", [("seat3", 5), ("dealer", 5)]),
    ],
)
def test_a_shoe_plan_that_is_not_the_games_is_a_ruling(
    game: Game, clause: str, plan: list[tuple[str, int]]
) -> None:
    table = Table(game)
    stacks = [{"target": t, "size": n} for t, n in plan]
    assert clause in table("shoe.deal_started", round=1, plan=stacks)
    assert table.state.phase is Phase.DEALING  # the round is dealt; each stack is judged too


@pytest.mark.parametrize("game", [Game.CARIBBEAN_STUD, Game.FOUR_CARD_POKER, Game.LET_IT_RIDE])
def test_the_games_own_plan_is_no_ruling(game: Game) -> None:
    from tableside.rules.patterns import dispense_pattern

    table = Table(game)
    table("shuffler.shuffle_complete")
    assert table("shoe.deal_started", round=1, plan=dispense_pattern(game, [1, 4, 7])) == []


@pytest.mark.parametrize("game", list(BACCARAT))
def test_the_players_third_in_error_goes_where_the_clause_puts_it(game: Game) -> None:
    """543.14(b) / 545.15(b): the Banker's third when the Banker must draw, else the next
    hand's first card; the ruling says which."""
    table = Table(game, devices=())
    assert table("coup", player=["K", "6", "2"], banker=["K", "2"]) == [
        BACCARAT[game]["player_third"]
    ]
    assert table.last_actions() == (Action.ALERT,)
    assert table("coup", player=["K", "7", "4"], banker=["K", "7"]) == [
        BACCARAT[game]["player_third"]
    ]
    assert table.last_actions() == (Action.NEXT_CARD,)


@pytest.mark.parametrize("game", list(BACCARAT))
def test_the_burn_opens_a_new_shoe(game: Game) -> None:
    """543.5(g) / 545.5(f): a new shoe burns first; its first coup without the burn is a ruling
    (by the dealer's word or the reading shoe's), and first_card is refused mid-shoe."""
    table = Table(game, devices=("shoe",))
    table("shoe.cards_loaded", count=416)
    assert table("shoe.first_card_burned", card="KS", burned=10) == []
    assert table("coup", player=["2", "3", "4"], banker=["K", "6"]) == []
    with pytest.raises(Refused, match="1 coups were dealt from this shoe"):
        table("first_card", rank="7")
    # a new shoe without a burn: ruled at its first coup, once
    table("shoe.cards_loaded", count=416)
    assert table("shoe.card_drawn", round=7, index=0, card="2S") == [BACCARAT[game]["burn"]]
    assert table.last_actions() == (Action.ALERT,)
    assert table("shoe.card_drawn", round=7, index=1, card="3S") == []
    # the shoe burned another number than the first card's value
    table("new_cards")
    assert table("shoe.first_card_burned", card="7H", burned=5) == [BACCARAT[game]["burn"]]
    assert table.last_actions() == (Action.ALERT,)
    # the dealer's own word opens a new shoe as well
    table("new_cards")
    assert table("first_card", rank="4") == [BACCARAT[game]["burn"]]
    assert table("coup", player=["2", "3", "4"], banker=["K", "6"]) == []


def test_the_gaming_day_is_the_casinos() -> None:
    """551.2(e) "each gaming day": a gaming day starting at 06:00 in New York, not the UTC date.
    An inspection at 07:00 holds through 05:59 the next morning, across midnight UTC."""
    from datetime import datetime
    from zoneinfo import ZoneInfo

    from tableside.rules.model import GamingDay

    ny = ZoneInfo("America/New_York")

    def at(day: int, hour: int, minute: int = 0) -> float:
        return datetime(2026, 12, day, hour, minute, tzinfo=ny).timestamp()

    table = Table(Game.SPANISH_21, devices=("shuffler", "card_reader"))
    table.facts = TableFacts(Game.SPANISH_21, gaming_day=GamingDay("America/New_York", 6))
    table.now = at(1, 7)
    table("open_table")
    table("reader_inspected")
    for hour, minute, day in ((19, 30, 1), (23, 59, 1), (0, 30, 2), (5, 59, 2)):
        table.now = at(day, hour, minute)  # 00:30 UTC and later: another UTC date, same day
        assert "551.2(e)" not in table.round(), (day, hour)
    table.now = at(2, 6, 1)
    assert "551.2(e)" in table.round(), "a new gaming day at 06:00"


def test_a_gaming_day_of_no_zone_is_refused() -> None:
    from tableside.rules.model import GamingDay

    with pytest.raises(ValueError, match="no time zone 'Mars/Olympus'"):
        GamingDay("Mars/Olympus")
    with pytest.raises(ValueError, match=r"hour 0\.\.23"):
        GamingDay("UTC", 24)
