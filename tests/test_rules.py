"""The rule engine, pure: each row fires exactly when its clause says, for its game only."""

from __future__ import annotations

import dataclasses
import re
import typing
from pathlib import Path

import pytest

from tableside.drivers.catalog import event_type
from tableside.rules import RULES, Action, Game, Observation, TableFacts, evaluate
from tableside.rules.seen import SEEN_BY_KIND

from .events import typed

REGULATIONS = Path(__file__).parents[2] / "shared" / "regulations"

COUNT_CLAUSE = {
    Game.CARIBBEAN_STUD: "58 Pa. Code § 555.5(b)",
    Game.FOUR_CARD_POKER: "58 Pa. Code § 557.5(b)",
    Game.LET_IT_RIDE: "58 Pa. Code § 559.5(b)",
    Game.SPANISH_21: "58 Pa. Code § 551.3(a)",
}
FAULT_CLAUSE = {
    Game.CARIBBEAN_STUD: "58 Pa. Code § 555.14(e)",
    Game.FOUR_CARD_POKER: "58 Pa. Code § 557.13(e)",
    Game.LET_IT_RIDE: "58 Pa. Code § 559.15(d)",
    Game.SPANISH_21: "58 Pa. Code § 551.16(j)",
}


class Unset:
    """A field a test leaves unset: equal to nothing, and unequal to nothing either."""

    def __eq__(self, other: object) -> bool:
        return False

    def __ne__(self, other: object) -> bool:
        return False

    def __ge__(self, other: object) -> bool:
        return False

    __hash__ = None  # type: ignore[assignment]


def observed(kind: str, device: str, **fields: object) -> Observation:
    """``kind`` as the table sees it (a device's event, or the table's own), with ``fields``
    set and every other field ``Unset``."""
    cls = SEEN_BY_KIND.get(kind.removeprefix("table.")) or event_type(kind)
    assert cls is not None, kind
    seen = object.__new__(cls)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        value = typed(hints[f.name], fields.pop(f.name)) if f.name in fields else Unset()
        object.__setattr__(seen, f.name, value)
    assert not fields, f"{cls.__name__} has no {sorted(fields)}"
    return Observation(kind, device, seen)


def complete(count: int, *, counted: bool = True, device: str = "shuffler") -> Observation:
    return observed("shuffler.shuffle_complete", device, card_count=count, counted=counted)


def fault(name: str) -> Observation:
    return observed("shuffler.fault", "shuffler", fault=name, shuffle_id=1)


@pytest.mark.parametrize("game", [Game.CARIBBEAN_STUD, Game.FOUR_CARD_POKER, Game.LET_IT_RIDE])
@pytest.mark.parametrize("count", [0, 51, 53, 104])
def test_poker_wrong_count_removes_the_deck(game: Game, count: int) -> None:
    (ruling,) = evaluate(TableFacts(game), complete(count))
    assert ruling.rule.citation == COUNT_CLAUSE[game]
    assert ruling.rule.actions == (Action.REMOVE_DECK,)


@pytest.mark.parametrize("game", [Game.CARIBBEAN_STUD, Game.FOUR_CARD_POKER, Game.LET_IT_RIDE])
def test_poker_full_deck_is_no_ruling(game: Game) -> None:
    assert evaluate(TableFacts(game), complete(52)) == []


@pytest.mark.parametrize(
    ("decks", "count", "wrong"),
    [
        (6, 288, False),
        (8, 384, False),
        (6, 384, True),  # a full eight-deck set where six are configured is the wrong set
        (8, 288, True),
        (6, 287, True),
        (6, 52, True),
        (None, 288, False),
        (None, 384, False),
        (None, 336, True),  # seven decks
    ],
)
def test_spanish_21_counts(decks: int | None, count: int, wrong: bool) -> None:
    rulings = evaluate(TableFacts(Game.SPANISH_21, decks=decks), complete(count))
    assert [r.rule.citation for r in rulings] == ([COUNT_CLAUSE[Game.SPANISH_21]] if wrong else [])


@pytest.mark.parametrize(("decks", "count"), [(6, 312), (8, 416), (None, 312), (None, 416)])
def test_spanish_21_whole_decks_say_the_tens_were_left_in(decks: int | None, count: int) -> None:
    """6 x 52 or 8 x 52 cards: one ruling, 551.3(a), that says the tens are likely still in."""
    (ruling,) = evaluate(TableFacts(Game.SPANISH_21, decks=decks), complete(count))
    assert ruling.rule.id == "551.3(a).tens-left-in"
    assert ruling.rule.actions == (Action.REMOVE_DECK,)
    assert "tens were likely left in" in ruling.rule.summary


def test_count_rule_needs_a_counting_shuffler() -> None:
    assert evaluate(TableFacts(Game.CARIBBEAN_STUD, shuffler_counts=False), complete(51)) == []
    assert evaluate(TableFacts(Game.CARIBBEAN_STUD), complete(51, counted=False)) == []


def test_with_two_shufflers_the_count_rule_follows_the_one_that_reported() -> None:
    """One table's facts: a shuffler configured not to count gets no count ruling, while the
    counting one beside it still does (each device had its own facts before)."""
    facts = TableFacts(Game.CARIBBEAN_STUD, not_counting=frozenset({"spare"}))
    spare = complete(51, device="spare")
    assert evaluate(facts, spare) == []
    (ruling,) = evaluate(facts, complete(51))
    assert ruling.rule.citation == COUNT_CLAUSE[Game.CARIBBEAN_STUD]


@pytest.mark.parametrize("game", list(FAULT_CLAUSE))
@pytest.mark.parametrize("name", ["jam", "stopped", "incomplete"])
def test_shuffle_failure_means_reshuffle(game: Game, name: str) -> None:
    (ruling,) = evaluate(TableFacts(game, shuffler_counts=False), fault(name))
    assert ruling.rule.citation == FAULT_CLAUSE[game]
    assert ruling.rule.actions == (Action.RESHUFFLE,)


def test_door_open_is_no_shuffle_ruling() -> None:
    assert evaluate(TableFacts(Game.CARIBBEAN_STUD), fault("door_open")) == []


def test_other_events_are_no_ruling() -> None:
    facts = TableFacts(Game.LET_IT_RIDE)
    assert evaluate(facts, observed("shuffler.shuffle_started", "s", shuffle_id=1)) == []
    assert evaluate(facts, observed("shuffler.fault", "s", fault="door_open")) == []


def test_rule_ids_are_unique() -> None:
    ids = [r.id for r in RULES]
    assert len(ids) == len(set(ids))


_ROMAN = ("i", "ii", "iii", "iv", "v", "vi", "vii", "viii", "ix", "x")


def _labelled(body: str) -> list[tuple[tuple[str, ...], str]]:
    """Each labelled line of a section (``(a) …``, ``(1) …``, ``(i) …``, indented or not, the
    label followed by spaces or no-break spaces) with its place: ``(("a", "3", "i"), text)``.
    ``(i)`` after a numbered item is its first roman item, after ``(h)`` the next letter."""
    out: list[tuple[tuple[str, ...], str]] = []
    letter, number, roman = "", "", ""
    for m in re.finditer(r"(?m)^\s*\(([a-z]+|\d+)\)\s+(.*?)\s*$", body):
        label, text = m.groups()
        next_roman = _ROMAN[_ROMAN.index(roman) + 1] if roman else "i"
        if label.isdigit():
            number, roman = label, ""
        elif number and label == next_roman:
            roman = label
        elif len(label) == 1 and label == (chr(ord(letter) + 1) if letter else "a"):
            letter, number, roman = label, "", ""
        elif label in _ROMAN:
            roman = label
        else:
            continue  # not a clause's label (a line that happens to start with one)
        out.append((tuple(x for x in (letter, number, roman) if x), text))
    return out


def _clause_text(citation: str) -> str:
    """The clause's own words: for ``(c)(2)`` the (c) line, a space, then its item (2); for
    ``(a)(3)(i)`` the (a) line, its item (3) and that item's (i), each after a space."""
    m = re.fullmatch(r"58 Pa\. Code § (\d{3}a?)\.(\d+)((?:\([a-z0-9]+\))+)", citation)
    assert m, citation
    chapter, number, labels = m.groups()
    path = tuple(re.findall(r"\(([a-z0-9]+)\)", labels))
    section = f"{chapter}.{number}"
    text = "\n".join(p.read_text(encoding="utf-8") for p in sorted(REGULATIONS.glob("*.txt")))
    # The section runs from its heading to the next section's; a "§ 555.7. The dealer …" inside
    # a sentence is a reference, not the heading. The later texts put a no-break space after §.
    heading = re.compile(rf"§[ \xa0]{re.escape(section)}\.[ \xa0](?!The )")
    found = heading.search(text)
    assert found, f"no § {section}"
    after = re.compile(rf"§[ \xa0]{chapter}\.{int(number) + 1}\.[ \xa0]").search(text, found.end())
    body = text[found.start() : after.start() if after else None]
    lines = dict(_labelled(body))
    words = [lines.get(path[: i + 1]) for i in range(len(path))]
    assert all(w is not None for w in words), f"no {labels} in § {section}"
    return " ".join(w for w in words if w is not None)


@pytest.mark.skipif(
    not REGULATIONS.is_dir(), reason=f"regulations not beside the repo: {REGULATIONS}"
)
@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.id)
def test_words_are_the_clause_verbatim(rule: object) -> None:
    from tableside.rules.model import Rule

    assert isinstance(rule, Rule)
    assert _clause_text(rule.citation) == rule.words


SHOE_STOP = {Game.CARIBBEAN_STUD: "555.14(f)", Game.FOUR_CARD_POKER: "557.13(f)",
             Game.LET_IT_RIDE: "559.15(e)"}  # fmt: skip
FACE_UP = {Game.CARIBBEAN_STUD: "555.14(b)", Game.FOUR_CARD_POKER: "557.13(a)",
           Game.LET_IT_RIDE: "559.15(a)"}  # fmt: skip
VOID = (Action.VOID_ALL_HANDS, Action.RETURN_WAGERS, Action.RESHUFFLE)


def shoe(kind: str, **data: object) -> Observation:
    return observed(f"shoe.{kind}", "shoe", **data)


@pytest.mark.parametrize("game", list(SHOE_STOP))
@pytest.mark.parametrize("fault_name", ["jam", "stopped", "short_deal"])
def test_shoe_that_cannot_finish_voids_the_round(game: Game, fault_name: str) -> None:
    (ruling,) = evaluate(TableFacts(game), shoe("fault", fault=fault_name, round=1, index=1))
    assert ruling.rule.citation == f"58 Pa. Code § {SHOE_STOP[game]}"
    assert ruling.rule.actions == VOID
    assert evaluate(TableFacts(game), shoe("fault", fault="door_open", round=1, index=1)) == []


@pytest.mark.parametrize("game", list(FACE_UP))
def test_one_card_face_up_is_discarded_more_voids(game: Game) -> None:
    (one,) = evaluate(TableFacts(game), shoe("card_face_up", round=1, index=0, total=1))
    (two,) = evaluate(TableFacts(game), shoe("card_face_up", round=1, index=2, total=2))
    assert one.rule.citation == two.rule.citation == f"58 Pa. Code § {FACE_UP[game]}"
    assert one.rule.actions == (Action.DISCARD_CARD,)
    assert one.rule.affected(one.observation) == []  # the card goes; the hands stand
    assert two.rule.actions == VOID
    assert two.rule.affected(two.observation) == ["all"]


def test_caribbean_stud_misdeals_555_14_d() -> None:
    facts = TableFacts(Game.CARIBBEAN_STUD)

    def stack(target: str, count: int, expected: int | None = 5) -> list[object]:
        found = evaluate(facts, shoe("stack_dispensed", round=1, index=0, target=target,
                                     count=count, expected=expected))  # fmt: skip
        return [(r.rule.actions, r.rule.affected(r.observation)) for r in found]

    assert stack("seat3", 4) == [((Action.VOID_HAND,), ["seat3"])]
    assert stack("seat3", 6) == [((Action.VOID_HAND,), ["seat3"])]
    assert stack("dealer", 4) == [((Action.DEAL_ADDITIONAL_CARD,), ["dealer"])]
    assert stack("dealer", 6) == [(VOID, ["all"])]
    assert stack("seat1", 5) == []
    # The game's count judges, not the shoe's own plan: a shoe set to deal four (or three, as
    # for Let It Ride) misdeals every hand, whatever it expected.
    assert stack("seat1", 4, expected=None) == [((Action.VOID_HAND,), ["seat1"])]
    assert stack("seat1", 4, expected=4) == [((Action.VOID_HAND,), ["seat1"])]
    assert stack("seat2", 3, expected=3) == [((Action.VOID_HAND,), ["seat2"])]
    assert stack("dealer", 3, expected=3) == [(VOID, ["all"])]


@pytest.mark.parametrize(("game", "section"), [(Game.FOUR_CARD_POKER, "557.13(c)"),
                                               (Game.LET_IT_RIDE, "559.15(c)")])  # fmt: skip
@pytest.mark.parametrize("target", ["seat2", "dealer", "dealer_extra", "community"])
def test_other_games_void_every_misdeal(game: Game, section: str, target: str) -> None:
    (ruling,) = evaluate(TableFacts(game), shoe("stack_dispensed", round=1, index=0,
                                                target=target, count=2, expected=3))  # fmt: skip
    assert ruling.rule.citation == f"58 Pa. Code § {section}"
    assert ruling.rule.actions == VOID


def test_card_reader_malfunction_halts_dealing() -> None:
    facts = TableFacts(Game.SPANISH_21)
    (ruling,) = evaluate(facts, observed("card_reader.fault", "reader", fault="malfunction"))
    assert ruling.rule.citation == "58 Pa. Code § 551.16(m)"
    assert ruling.rule.actions == (Action.HALT_DEALING, Action.ALERT)
    assert evaluate(facts, observed("card_reader.fault", "reader", fault="tamper")) == []
    # a poker table has no card reader rule
    malfunction = observed("card_reader.fault", "r", fault="malfunction")
    assert evaluate(TableFacts(Game.LET_IT_RIDE), malfunction) == []


def test_every_clause_of_the_index_is_enforced_somewhere() -> None:
    """docs/rules.md lists every clause of ../shared/regulations/README.md's index: by a row,
    or in the table of clauses enforced elsewhere (config checks, payouts, the lock-out)."""
    from tableside.rules.report import ENFORCED_ELSEWHERE, index_clauses

    index = Path(__file__).parents[2] / "shared" / "regulations" / "README.md"
    if not index.exists():
        pytest.skip("../shared/regulations is not beside the repository")
    cited = {r.citation.removeprefix("58 Pa. Code § ") for r in RULES}
    missing = {c for c in index_clauses(index) if c not in cited and c not in ENFORCED_ELSEWHERE}
    # a section cited whole (555.3(b)) is in force through its items' rows (555.3(b)(4))
    missing = {
        c for c in missing if not any(x.startswith(c) for x in cited | set(ENFORCED_ELSEWHERE))
    }
    assert not missing, sorted(missing)


def _literal_eq(rule: object) -> bool:
    from tableside.rules.model import FactRef, FieldRef, Rule

    assert isinstance(rule, Rule)
    return all(w.op == "==" and not isinstance(w.value, (FactRef, FieldRef)) for w in rule.when)


@pytest.mark.parametrize("rule", [r for r in RULES if _literal_eq(r)], ids=lambda r: r.id)
def test_rules_indexed_by_trigger_rule_as_every_row_tried(rule: object) -> None:
    """The engine tries an observation against its own kind's rows only: it finds each rule an
    observation made to satisfy it triggers, and exactly what trying every row finds."""
    from tableside.rules.model import Rule

    assert isinstance(rule, Rule)
    observation = observed(rule.trigger, "dev", **{w.field: w.value for w in rule.when})
    for game in rule.games:
        facts = TableFacts(game=game)
        indexed = evaluate(facts, observation)
        assert rule in [r.rule for r in indexed]
        assert indexed == evaluate(facts, observation, list(RULES))


def test_every_row_reads_fields_of_what_its_trigger_names() -> None:
    """A row reads the fields of what its trigger names (a device's event, drivers/catalog.py,
    or the table's own, rules/seen.py), named through that type: a misspelt name fails the
    type check and here as the row is made; a row reading another type, or triggered by
    something nothing reports, is named."""
    import dataclasses

    from tableside.drivers.shoe.events import CardFaceUp, StackDispensed
    from tableside.rules.engine import row_problems
    from tableside.rules.model import FieldRef, Rule, When
    from tableside.rules.seen import RoundStarts

    assert row_problems() == []
    stack = next(r for r in RULES if r.trigger == "shoe.stack_dispensed")
    assert isinstance(stack, Rule)
    # conditions on two types say no one trigger: named, it is checked against them
    other = dataclasses.replace(stack, on="shoe.stack_dispensed", when=(
        When(StackDispensed, lambda e: e.count, "==", 2),
        When(CardFaceUp, lambda e: e.total, "==", 2)))  # fmt: skip
    table = dataclasses.replace(
        stack, when=(When(StackDispensed, lambda e: e.count, "!=", FieldRef(RoundStarts,
                                                                          lambda r: r.shuffled)),)
    )  # fmt: skip
    elsewhere = dataclasses.replace(stack, when=(), on="shoe.stack_dropped")
    assert row_problems([other, table, elsewhere]) == [
        f"{stack.id}: reads CardFaceUp, not StackDispensed (shoe.stack_dispensed)",
        f"{stack.id}: reads RoundStarts, not StackDispensed (shoe.stack_dispensed)",
        f"{stack.id}: nothing the table sees is 'shoe.stack_dropped'",
    ]
    with pytest.raises(TypeError, match="one field of StackDispensed"):
        When(StackDispensed, lambda e: e.cuont, "==", 1)  # type: ignore[attr-defined]


def test_a_row_says_what_triggers_it_once() -> None:
    """Issue 29, point 4: a row's trigger is the kind the type its conditions read is seen as
    (``When(ShuffleCompleted, …)`` is ``shuffler.shuffle_complete``); a row names it (``on``)
    only where that type says none, and one that says it twice, or not at all, is refused as
    it is made. Rebuilt on other conditions, a row follows them."""
    import dataclasses

    from tableside.drivers.shoe.events import CardFaceUp
    from tableside.drivers.shuffler.events import ShuffleCompleted
    from tableside.rules.model import Until, When, kind_of
    from tableside.rules.seen import Gated, OtherMethod

    counted = When(ShuffleCompleted, lambda e: e.counted, "==", True)
    count = next(r for r in RULES if When(ShuffleCompleted, lambda e: e.counted, "==", True)
                 in r.when)  # fmt: skip
    assert count.trigger == "shuffler.shuffle_complete" and count.on == ""
    assert kind_of(ShuffleCompleted) == "shuffler.shuffle_complete"
    assert kind_of(OtherMethod) == "table.other_method" and kind_of(Gated) is None
    with pytest.raises(TypeError, match=r"name it once, by them, not again as 'shuffler\.x'"):
        dataclasses.replace(count, on="shuffler.x")
    with pytest.raises(TypeError, match=r"on Gated\) say no one kind that triggers it"):
        dataclasses.replace(count, when=(When(Gated, lambda e: e.gate, "==", True),))
    with pytest.raises(TypeError, match=r"on nothing\) say no one kind"):
        dataclasses.replace(count, when=())
    moved = dataclasses.replace(count, when=(When(CardFaceUp, lambda e: e.total, "==", 2),))
    assert moved.trigger == "shoe.card_face_up"
    assert Until((counted,)).trigger == "shuffler.shuffle_complete"
    assert Until(on="table.reader_inspected").trigger == "table.reader_inspected"
    more = next(r for r in RULES if r.on == "table.more_cards")  # Gated: three kinds share it
    assert more.trigger == "table.more_cards" and {w.of for w in more.when} == {Gated}
