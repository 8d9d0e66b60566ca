"""Generated arithmetic word problems with step-by-step solutions in GSM8k's answer format.

Training text for the zoo's target (issue 34): the CPU suites send GSM8k questions, and a target
that never saw a word problem answers one with a run of newlines. Each problem is drawn from one of
a dozen story templates with random names, objects and numbers; its solution is a few lines of
``<<a*b=c>>`` calculator steps ending ``#### <answer>``, as GSM8k's references are written. The
templates are this module's own: none is a GSM8k question or a paraphrase of one (a unit test
checks the generated text against GSM8k's test split by n-gram overlap).

Deterministic from the ``random.Random`` passed in.
"""

from __future__ import annotations

import random
from collections.abc import Callable

NAMES = [
    "Amara", "Bruno", "Chen", "Dalia", "Emeka", "Farah", "Gideon", "Hana", "Ivo", "Jun", "Kofi",
    "Leona", "Mateo", "Nadia", "Oskar", "Priya", "Quinn", "Rosa", "Sven", "Tomas", "Uma", "Viktor",
    "Wren", "Ximena", "Yusuf", "Zoe", "Ansel", "Beatrix", "Cyrus", "Delphine", "Ezra", "Flora",
]
THINGS = [
    ("pencil", "pencils"), ("marble", "marbles"), ("sticker", "stickers"), ("apple", "apples"),
    ("book", "books"), ("shell", "shells"), ("card", "cards"), ("candle", "candles"),
    ("button", "buttons"), ("stamp", "stamps"), ("plum", "plums"), ("coin", "coins"),
    ("brick", "bricks"), ("ribbon", "ribbons"), ("lemon", "lemons"), ("notebook", "notebooks"),
]
SHOPS = ["bakery", "hardware store", "bookshop", "garden centre", "market stall", "toy shop", "corner shop"]
GOODS = [
    ("loaf of bread", "loaves of bread"), ("bag of nails", "bags of nails"), ("jar of honey", "jars of honey"),
    ("potted fern", "potted ferns"), ("kite", "kites"), ("box of tea", "boxes of tea"),
    ("pair of socks", "pairs of socks"), ("bottle of juice", "bottles of juice"),
]
JOBS = ["walking dogs", "tutoring", "mowing lawns", "washing cars", "painting fences", "babysitting"]
CONTAINERS = [("crate", "crates"), ("basket", "baskets"), ("box", "boxes"), ("tray", "trays"), ("shelf", "shelves")]
UNITS = [("mile", "miles"), ("kilometre", "kilometres"), ("lap", "laps")]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]

Problem = tuple[str, list[str], int]  # question, solution lines (without the final line), answer


def _n(rng: random.Random, lo: int, hi: int) -> int:
    return rng.randint(lo, hi)


def _two_names(rng: random.Random) -> tuple[str, str]:
    a, b = rng.sample(NAMES, 2)
    return a, b


def collect_and_give(rng: random.Random) -> Problem:
    a, b = _two_names(rng)
    _, things = rng.choice(THINGS)
    start, found, given = _n(rng, 12, 90), _n(rng, 3, 40), 0
    total = start + found
    given = _n(rng, 2, total - 1)
    left = total - given
    q = (f"{a} has {start} {things}. On {rng.choice(DAYS)} {a} finds {found} more, and then gives "
         f"{given} of them to {b}. How many {things} does {a} have now?")
    steps = [f"After finding more, {a} has {start} + {found} = <<{start}+{found}={total}>>{total} {things}.",
             f"After giving {given} to {b}, {a} has {total} - {given} = <<{total}-{given}={left}>>{left} {things}."]
    return q, steps, left


def shopping(rng: random.Random) -> Problem:
    a = rng.choice(NAMES)
    one, many = rng.choice(GOODS)
    k, price = _n(rng, 2, 12), _n(rng, 2, 25)
    budget = k * price + _n(rng, 1, 60)
    cost = k * price
    change = budget - cost
    q = (f"At the {rng.choice(SHOPS)}, one {one} costs ${price}. {a} buys {k} {many} and pays with "
         f"${budget}. How much change does {a} get back?")
    steps = [f"The {many} cost {k} * {price} = $<<{k}*{price}={cost}>>{cost}.",
             f"So {a} gets {budget} - {cost} = $<<{budget}-{cost}={change}>>{change} back."]
    return q, steps, change


def weekly_earnings(rng: random.Random) -> Problem:
    a = rng.choice(NAMES)
    job = rng.choice(JOBS)
    rate, hours, days = _n(rng, 6, 30), _n(rng, 1, 6), _n(rng, 2, 6)
    per_day = rate * hours
    total = per_day * days
    q = (f"{a} earns ${rate} an hour {job}. {a} works {hours} hours a day for {days} days this week. "
         f"How much money does {a} earn this week?")
    steps = [f"Each day {a} earns {rate} * {hours} = $<<{rate}*{hours}={per_day}>>{per_day}.",
             f"Over {days} days that is {per_day} * {days} = $<<{per_day}*{days}={total}>>{total}."]
    return q, steps, total


def pack_into(rng: random.Random) -> Problem:
    a = rng.choice(NAMES)
    _, things = rng.choice(THINGS)
    c1, cs = rng.choice(CONTAINERS)
    per, n = _n(rng, 3, 15), _n(rng, 3, 20)
    extra = _n(rng, 1, per - 1)
    total = per * n + extra
    q = (f"{a} packs {total} {things} into {cs}. Each {c1} holds {per} {things}. How many {cs} can "
         f"{a} fill completely?")
    steps = [f"{total} / {per} is {n} with {extra} left over, since {per} * {n} = <<{per}*{n}={per * n}>>{per * n}.",
             f"So {a} fills {n} {cs} and has {total} - {per * n} = <<{total}-{per * n}={extra}>>{extra} {things} left."]
    return q, steps, n


def share_equally(rng: random.Random) -> Problem:
    a = rng.choice(NAMES)
    _, things = rng.choice(THINGS)
    friends, each = _n(rng, 2, 9), _n(rng, 2, 14)
    kept = _n(rng, 0, 10)
    total = friends * each + kept
    q = (f"{a} had {total} {things}, kept {kept} and shared the rest equally among {friends} friends. "
         f"How many {things} did each friend get?")
    rest = total - kept
    steps = [f"{a} shared {total} - {kept} = <<{total}-{kept}={rest}>>{rest} {things}.",
             f"Each friend got {rest} / {friends} = <<{rest}/{friends}={each}>>{each} {things}."]
    return q, steps, each


def travel(rng: random.Random) -> Problem:
    a = rng.choice(NAMES)
    one, units = rng.choice(UNITS)
    speed, hours = _n(rng, 3, 60), _n(rng, 2, 8)
    back = _n(rng, 1, speed * hours - 1)
    out = speed * hours
    rest = out - back
    q = (f"{a} travels {speed} {units} every hour for {hours} hours, then turns around and goes back "
         f"{back} {units}. How many {units} from the start is {a} now?")
    steps = [f"{a} first goes {speed} * {hours} = <<{speed}*{hours}={out}>>{out} {units}.",
             f"After going back, {a} is {out} - {back} = <<{out}-{back}={rest}>>{rest} {units} from the start."]
    return q, steps, rest


def percent_off(rng: random.Random) -> Problem:
    a = rng.choice(NAMES)
    one, _ = rng.choice(GOODS)
    pct = rng.choice([10, 20, 25, 30, 40, 50])
    price = rng.choice([20, 40, 60, 80, 100, 120, 140, 160, 200])
    off = price * pct // 100
    pay = price - off
    q = (f"A {one} normally costs ${price}. This week the {rng.choice(SHOPS)} takes {pct}% off. How "
         f"much does {a} pay for it this week?")
    steps = [f"The discount is {price} * {pct} / 100 = $<<{price}*{pct}/100={off}>>{off}.",
             f"{a} pays {price} - {off} = $<<{price}-{off}={pay}>>{pay}."]
    return q, steps, pay


def ages(rng: random.Random) -> Problem:
    a, b = _two_names(rng)
    age_b, factor, years = _n(rng, 3, 15), _n(rng, 2, 4), _n(rng, 2, 12)
    age_a = age_b * factor
    later = age_a + years
    q = (f"{a} is {factor} times as old as {b}. {b} is {age_b} years old. How old will {a} be in "
         f"{years} years?")
    steps = [f"{a} is {age_b} * {factor} = <<{age_b}*{factor}={age_a}>>{age_a} years old now.",
             f"In {years} years {a} will be {age_a} + {years} = <<{age_a}+{years}={later}>>{later}."]
    return q, steps, later


def rows_and_columns(rng: random.Random) -> Problem:
    a = rng.choice(NAMES)
    plant = rng.choice(["tulips", "carrots", "pepper plants", "sunflowers", "onions", "rose bushes"])
    rows, cols, beds = _n(rng, 2, 12), _n(rng, 2, 12), _n(rng, 2, 5)
    per_bed = rows * cols
    total = per_bed * beds
    q = (f"{a} plants {plant} in {beds} garden beds. Each bed has {rows} rows with {cols} {plant} in "
         f"each row. How many {plant} does {a} plant in all?")
    steps = [f"Each bed holds {rows} * {cols} = <<{rows}*{cols}={per_bed}>>{per_bed} {plant}.",
             f"All {beds} beds hold {per_bed} * {beds} = <<{per_bed}*{beds}={total}>>{total} {plant}."]
    return q, steps, total


def saving_up(rng: random.Random) -> Problem:
    a = rng.choice(NAMES)
    one, _ = rng.choice(GOODS)
    weekly, have = _n(rng, 3, 20), _n(rng, 0, 30)
    weeks = _n(rng, 2, 10)
    price = have + weekly * weeks
    need = price - have
    q = (f"{a} wants a {one} that costs ${price}. {a} has saved ${have} and puts away ${weekly} every "
         f"week. How many weeks will it take {a} to afford it?")
    steps = [f"{a} still needs {price} - {have} = $<<{price}-{have}={need}>>{need}.",
             f"At ${weekly} a week that takes {need} / {weekly} = <<{need}/{weekly}={weeks}>>{weeks} weeks."]
    return q, steps, weeks


def three_step_mix(rng: random.Random) -> Problem:
    a, b = _two_names(rng)
    _, things = rng.choice(THINGS)
    x = _n(rng, 4, 30)
    more = _n(rng, 2, 15)
    y = x + more
    z = (x + y) * 2
    q = (f"{a} collected {x} {things}. {b} collected {more} more than {a}. Their teacher then gave "
         f"them twice as many as they had together. How many {things} did the teacher give them?")
    steps = [f"{b} collected {x} + {more} = <<{x}+{more}={y}>>{y} {things}.",
             f"Together they had {x} + {y} = <<{x}+{y}={x + y}>>{x + y} {things}.",
             f"The teacher gave them {x + y} * 2 = <<{x + y}*2={z}>>{z} {things}."]
    return q, steps, z


def time_spent(rng: random.Random) -> Problem:
    a = rng.choice(NAMES)
    task = rng.choice(["reading", "practising the violin", "drawing", "swimming", "studying maths"])
    mins, days = rng.choice([15, 20, 30, 40, 45, 60, 90]), _n(rng, 2, 7)
    total = mins * days
    hours, rest = divmod(total, 60)
    q = (f"{a} spends {mins} minutes {task} each day for {days} days. How many minutes does {a} spend "
         f"{task} in total?")
    steps = [f"{a} spends {mins} * {days} = <<{mins}*{days}={total}>>{total} minutes {task}.",
             f"That is {hours} hours and {rest} minutes."]
    return q, steps, total


TEMPLATES: list[Callable[[random.Random], Problem]] = [
    collect_and_give, shopping, weekly_earnings, pack_into, share_equally, travel, percent_off, ages,
    rows_and_columns, saving_up, three_step_mix, time_spent,
]


def word_problem(rng: random.Random) -> tuple[str, str]:
    """One problem: ``(question, solution)``, the solution in GSM8k's format (ends ``#### <n>``)."""
    q, steps, answer = rng.choice(TEMPLATES)(rng)
    return q, "\n".join([*steps, f"#### {answer}"])
