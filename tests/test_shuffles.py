"""daemon/shuffles.py without a daemon: which orders stay sealed, and what a tested order makes.
tests/test_shuffle_integrity.py runs it in the real daemon."""

from __future__ import annotations

import random

from tableside.daemon.shuffles import INTEGRITY_ALERT, ShuffleIntegrity, alert_rule
from tableside.drivers.cards import Card
from tableside.drivers.shuffler.events import ShuffleOrdered
from tableside.drivers.shuffler.protocol import Deck
from tableside.shuffle.deck import new_deck, spell


def _order(shuffle_id: int, deck: Deck = Deck.SINGLE, seed: int = 0) -> ShuffleOrdered:
    cards = list(new_deck())
    random.Random(seed).shuffle(cards)
    return ShuffleOrdered(device="shuffler", shuffle_id=shuffle_id, deck=deck, output_count=52,
                          input_count=0, output_cards=tuple(Card.of(c) for c in cards))  # fmt: skip


def test_an_order_is_released_by_the_next_shuffle_of_its_own_deck_only() -> None:
    held = ShuffleIntegrity()
    a1, b2 = _order(1, Deck.A), _order(2, Deck.B)
    held.seal(a1)
    assert held.release("shuffler", "A", 1) is None  # its own completion: still to be dealt
    held.seal(b2)
    assert held.sealed("shuffler") == 2
    assert held.release("other", "A", 3) is None  # another shuffler's deck
    assert held.release("shuffler", "A", 3) == a1  # deck A shuffled again: A's old order
    assert held.release("shuffler", "A", 5) is None
    assert held.sealed("shuffler") == 1  # B's, until B is shuffled again


def test_a_newer_order_of_a_deck_replaces_the_one_never_dealt_from() -> None:
    held = ShuffleIntegrity()
    held.seal(_order(1))
    newer = _order(2, seed=1)
    held.seal(newer)
    assert held.release("shuffler", "single", 3) == newer and held.sealed("shuffler") == 0


def test_a_tested_order_gives_statistics_and_a_sorted_deck_an_alert() -> None:
    held = ShuffleIntegrity()
    statistics, alert = held.observe(_order(1))
    assert alert is None and statistics.shuffles == 1 and statistics.with_input == 0
    assert {t["test"] for t in statistics.tests} >= {"colour changes", "card positions"}
    sorted_deck = tuple(Card.of(c) for c in new_deck())
    ordered = ShuffleOrdered(device="shuffler", shuffle_id=2, deck=Deck.SINGLE, output_count=52,
                             input_count=0, output_cards=sorted_deck)  # fmt: skip
    statistics, alert = held.observe(ordered)
    assert alert is not None and alert.test == "sorted output" and statistics.alerts == 1
    rule = alert_rule(alert)
    assert rule.citation == INTEGRITY_ALERT.citation == "COMAR 36.05.02.17(F)"
    assert "not a Pennsylvania ruling" in rule.summary and "sorted output" in rule.summary
    assert not any(card in rule.summary.split() for card in spell(new_deck()))


def test_an_order_that_is_no_deck_is_skipped_not_tested() -> None:
    held = ShuffleIntegrity()
    ace = Card.named("AS")
    twice = ShuffleOrdered(device="shuffler", shuffle_id=1, deck=Deck.SINGLE, output_count=2,
                           input_count=0, output_cards=(ace, ace))  # fmt: skip
    statistics, alert = held.observe(twice)
    assert alert is None and statistics.skipped == 1 and statistics.shuffles == 0
