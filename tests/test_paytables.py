"""Pay tables against the chapters' minimums: 555.13(c), 557.12(a)(2)-(3), 559.14(b), (d), (e);
a config below them is refused before the table starts."""

from __future__ import annotations

import pytest

from tableside.daemon.config import ConfigError, validate_config
from tableside.rules.paytables import MINIMUMS, TABLES, check


@pytest.mark.parametrize("kind", list(MINIMUMS))
def test_the_minimums_themselves_pass_and_one_less_fails(kind: str) -> None:
    table = dict(MINIMUMS[kind])
    assert check(kind, table) == []
    hand = next(iter(table))
    table[hand] -= 1
    (problem,) = check(kind, table)
    assert problem.startswith(f"{kind}: {hand} pays ")


def test_caribbean_stud_bet_wager_clause_and_numbers() -> None:
    low = dict(MINIMUMS["caribbean_stud_bet"], full_house=6)
    assert check("caribbean_stud_bet", low) == [
        "caribbean_stud_bet: full_house pays 6, below 7 (555.13(c))"
    ]
    missing = {k: v for k, v in MINIMUMS["let_it_ride_bonus"].items() if k != "straight"}
    assert check("let_it_ride_bonus", missing) == [
        "let_it_ride_bonus: straight is missing (at least 25) (559.14(d))"
    ]


def test_aces_up_names_one_of_tables_i_to_vii() -> None:
    assert all(check("aces_up", name) == [] for name in TABLES["aces_up"])
    assert check("aces_up", "VIII") == [
        "aces_up must name one of Tables I, II, III, IV, V, VI, VII (557.12(a)(3))"
    ]


def test_three_card_bonus_no_less_than_one_of_tables_a_to_f() -> None:
    # Table C's odds, with no mini-royal: fine (Tables A-C have none).
    assert check("three_card_bonus", {"straight_flush": 40, "three_of_a_kind": 30,
                                      "straight": 6, "flush": 3, "pair": 1}) == []  # fmt: skip
    # A flush at 3 and a straight at 5: below every table.
    assert check("three_card_bonus", {"straight_flush": 40, "three_of_a_kind": 30,
                                      "straight": 5, "flush": 3, "pair": 1}) == [
        "three_card_bonus pays less than every one of Tables A-F (559.14(e))"
    ]  # fmt: skip
    assert check("three_card_bonus", {"royal": 1})[0].startswith("three_card_bonus: no such hand")


def test_a_config_below_the_minimums_is_refused() -> None:
    base = (
        '[table]\nid = "t"\ngame = "four_card_poker"\n'
        '[devices.shuffler]\ndriver = "tableside.shuffler"\nurl = "/dev/x"\n'
    )
    ok = validate_config(base + '[pay_tables]\naces_up = "V"\n', "t.toml", use_env=False)
    assert ok.pay_tables == {"aces_up": "V"}
    with pytest.raises(ConfigError, match=r"aces_up must name one of Tables"):
        validate_config(base + '[pay_tables]\naces_up = "IX"\n', "t.toml", use_env=False)
    low = "[pay_tables.four_card_ante_bonus]\nfour_of_a_kind = 20\nstraight_flush = 20\n"
    with pytest.raises(
        ConfigError, match=r"four_of_a_kind pays 20, below 25 \(557\.12\(a\)\(2\)\)"
    ):
        validate_config(base + low + "three_of_a_kind = 2\n", "t.toml", use_env=False)
    with pytest.raises(ConfigError, match="let_it_ride_bonus is no pay table of four_card_poker"):
        validate_config(base + "[pay_tables.let_it_ride_bonus]\nflush = 50\n", "t.toml",
                        use_env=False)  # fmt: skip
