"""The table's own words, declared once each as an enum: the game, the phase of its round, how
its cards are dealt and shuffled. Every layer carries the member (the state machine, what the
table sees, the rows); the word is spelt only where JSON is written or read. No I/O."""

from __future__ import annotations

import enum

__all__ = ["DealingMethod", "Game", "Phase", "ShufflingMethod"]


class Game(enum.StrEnum):
    CARIBBEAN_STUD = "caribbean_stud"  # 58 Pa. Code Chapter 555
    FOUR_CARD_POKER = "four_card_poker"  # Chapter 557
    LET_IT_RIDE = "let_it_ride"  # Chapter 559
    SPANISH_21 = "spanish_21"  # Chapter 551
    MIDIBACCARAT = "midibaccarat"  # Chapter 543
    BACCARAT = "baccarat"  # Chapter 545


class Phase(enum.StrEnum):
    CLOSED = "closed"
    OPEN = "open"
    BETTING = "betting"
    NO_MORE_BETS = "no_more_bets"
    DEALING = "dealing"
    DECISIONS = "decisions"
    SETTLEMENT = "settlement"
    COMPLETE = "complete"


class DealingMethod(enum.StrEnum):
    AUTOMATED_SHOE = "automated_shoe"
    MANUAL_SHOE = "manual_shoe"
    HAND = "hand"


class ShufflingMethod(enum.StrEnum):
    DEVICE = "device"
    MANUAL = "manual"
