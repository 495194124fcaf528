"""Write the experiment's built-in quality task: items with checkable answers, for lm-eval.

    .venv/bin/python scripts/make_quality_task.py     # rewrites workbench_basics.jsonl (same seed, same file)

Each item asks for one short answer a small instruct model can get right some of the time:
copying a phrase, pulling a field out of a record, arithmetic on small numbers, a word in
capitals, the larger of two numbers, the next item of a list. Each line is {"id", "kind",
"instruction", "question", "answer", "match", "example_question", "example_answer"}: the
task shows the example (another question of the same kind, answered) as an earlier chat turn,
which is what makes a 135M model answer in the format asked for about half the time.
`match` is "exact" where case is part of the format (capitals), "caseless" elsewhere. The kinds are interleaved, so the first N items
(lm-eval's --limit, the quick pass) hold every kind in equal share.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = (Path(__file__).resolve().parent.parent / "workbench" / "experiment" / "quality_tasks" / "workbench_basics"
       / "workbench_basics.jsonl")
SEED = 36
PER_KIND = 50

WORDS = ["river", "stone", "light", "garden", "copper", "window", "orange", "silver", "harbor", "pencil", "meadow",
         "candle", "forest", "planet", "marble", "violet", "ticket", "bridge", "rabbit", "island", "lemon", "cloud",
         "anchor", "basket", "castle", "desert", "engine", "falcon", "ginger", "hammer", "jacket", "kettle", "ladder",
         "magnet", "needle", "oyster", "pepper", "rocket", "saddle", "tunnel", "velvet", "walnut", "yellow", "zipper"]
NAMES = ["Maria Lopez", "Tom Becker", "Aiko Tanaka", "Omar Haddad", "Lena Novak", "Ravi Patel", "Sara Jensen",
         "Paul Dubois", "Nina Petrova", "Jon Evans", "Grace Okafor", "Luis Romero"]
CITIES = ["Lyon", "Oslo", "Lima", "Cairo", "Perth", "Porto", "Quito", "Turin", "Dakar", "Hanoi", "Bergen", "Leeds"]
COLORS = ["red", "green", "blue", "black", "white", "brown", "gray", "purple"]
SEQUENCES = [
    ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"],
    ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October", "November",
     "December"],
    ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"],
    ["A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K", "L", "M"],
]


def copy_item(rng: random.Random) -> tuple[str, str, str]:
    phrase = " ".join(rng.sample(WORDS, rng.randint(3, 5)))
    return f"Text: {phrase}", phrase, "caseless"


def extract_item(rng: random.Random) -> tuple[str, str, str]:
    fields = {"name": rng.choice(NAMES), "city": rng.choice(CITIES), "year": str(rng.randint(1950, 2020)),
              "color": rng.choice(COLORS)}
    order = list(fields)
    rng.shuffle(order)
    record = "; ".join(f"{k}: {fields[k]}" for k in order)
    field = rng.choice(order)
    return f"Record: {record}\nWhat is the {field}?", fields[field], "caseless"


def arithmetic_item(rng: random.Random) -> tuple[str, str, str]:
    op = rng.choice(["+", "-", "x"])
    if op == "+":
        a, b = rng.randint(1, 20), rng.randint(1, 20)
        value = a + b
    elif op == "-":
        a = rng.randint(5, 30)
        b = rng.randint(1, a)
        value = a - b
    else:
        a, b = rng.randint(2, 9), rng.randint(2, 9)
        value = a * b
    return f"What is {a} {op} {b}?", str(value), "caseless"


def capitals_item(rng: random.Random) -> tuple[str, str, str]:
    word = rng.choice(WORDS)
    return f"Word: {word}", word.upper(), "exact"


def larger_item(rng: random.Random) -> tuple[str, str, str]:
    a, b = rng.sample(range(1, 100), 2)
    return f"Which is larger, {a} or {b}?", str(max(a, b)), "caseless"


def next_item(rng: random.Random) -> tuple[str, str, str]:
    sequence = rng.choice(SEQUENCES)
    shown = rng.randint(3, 4)
    start = rng.randint(0, len(sequence) - shown - 1)
    items = ", ".join(sequence[start:start + shown])
    return f"List: {items}, ...", sequence[start + shown], "caseless"


# kind -> (what to do, how to make one question)
KINDS = {
    "copy": ("Copy the text exactly.", copy_item),
    "extract": ("Answer with the value from the record only.", extract_item),
    "arithmetic": ("Answer with the number only.", arithmetic_item),
    "capitals": ("Write the word in capital letters.", capitals_item),
    "larger": ("Answer with the larger number only.", larger_item),
    "next": ("Answer with the next item of the list only.", next_item),
}


def items() -> list[dict[str, str]]:
    rng = random.Random(SEED)
    out: list[dict[str, str]] = []
    seen: set[str] = set()
    while len(out) < PER_KIND * len(KINDS):
        for kind, (instruction, make) in KINDS.items():
            for _ in range(100):  # a fresh question for this kind (no item twice)
                question, answer, match = make(rng)
                if question not in seen:
                    break
            seen.add(question)
            example = make(rng)
            while example[0] == question:
                example = make(rng)
            out.append({"id": f"{kind}-{len(out) // len(KINDS) + 1:03d}", "kind": kind, "instruction": instruction,
                        "question": question, "answer": answer, "match": match,
                        "example_question": example[0], "example_answer": example[1]})
    return out


def main() -> None:
    OUT.parent.mkdir(parents=True, exist_ok=True)
    rows = items()
    OUT.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    print(f"wrote {len(rows)} items ({PER_KIND} per kind: {', '.join(KINDS)}) to {OUT.name}")


if __name__ == "__main__":
    main()
