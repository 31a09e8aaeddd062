"""Re-learn the dialogue combiner's weights (memory/search/dialogue_weights.py) from the LoCoMo dev split.

    python bench/retrieval/kind_weights.py DATA_DIR [--dump FILE.json] [--check]

How they were learned (round 13, bench/retrieval/README.md): the default search with the hand-picked
blend for every kind (`SearchTuning(dialogue_order=False)`) runs every dev question of the three
conversations; for each search the first line_order_depth × max_results passed chunks that are dialogue
(memory/search/kinds.py `dialogue_shaped`) give one row of memory/search/kinds.py's FEATURES, labelled 1
when the chunk holds a gold line of the question. A logistic regression with a fixed L2 penalty of 1.0 on
standardised features (Newton's method, combiner_probe.Model; no new dependency) is fitted on all three
conversations and written, with the standardisation, to memory/search/dialogue_weights.py. Its held-out
figures are kind_probe.py's (each conversation scored by the model fitted on the other two). The rows
and the fit are deterministic: the same tree and data give the same file (`--check` says whether the
file in the tree is what this run writes).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import combiner_probe as CP  # noqa: E402
import conversations as C  # noqa: E402
import kind_probe as K  # noqa: E402

from hermit.memory.search import kinds  # noqa: E402

TARGET = HERE.parent.parent / "src" / "hermit" / "memory" / "search" / "dialogue_weights.py"
L2 = 1.0


def rows(data: Path, dump: Path | None) -> list[dict[str, object]]:
    if dump is not None and dump.is_file():
        return list(json.loads(dump.read_text()))
    queries = C.read_jsonl(data / "queries.jsonl")
    gold = {(str(q["conv"]), str(q["query"])): [(str(g["path"]), int(g["line"])) for g in q["gold"]] for q in queries}
    probe = K.KindProbe(gold)
    K.run(data, probe, "record", "the hand-picked blend for every kind, rows recorded", queries)
    if dump is not None:
        dump.write_text(json.dumps(probe.rows))
    return probe.rows


def _floats(values: object) -> str:
    return "".join(f"\n        {float(v)!r}," for v in values) + "\n    "  # type: ignore[attr-defined]


def module(model: CP.Model, n: int, gold: int) -> str:
    names = [CP.FEATURES[c] for c in model.cols]
    assert tuple(names) == kinds.FEATURES, (names, kinds.FEATURES)
    return f'''"""The dialogue combiner's weights (memory.search.kinds). Written by bench/retrieval/kind_weights.py; do not edit.

Learned on the LoCoMo dev split (conversations 26, 30 and 41; the data is not in this repository): {n} passed
dialogue chunks of the default search with the hand-picked blend, {gold} of them holding a gold line; logistic
regression, L2 {L2} on standardised features {", ".join(names)}.
"""

from hermit.memory.search.kinds import Combiner

DIALOGUE_COMBINER = Combiner(
    mean=({_floats(model.mu)}),
    sd=({_floats(model.sd)}),
    weights=({_floats(model.w[:-1])}),
    bias={float(model.w[-1])!r},
)
'''


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--dump", type=Path, help="the recorded rows: read from here when it exists, else written")
    ap.add_argument("--check", action="store_true", help="only say whether the file in the tree is up to date")
    args = ap.parse_args(argv)
    use = [r for r in rows(args.data, args.dump) if r.get("dialogue") and r["kind"] == "passed"]
    convs = sorted({str(r["conv"]) for r in use})
    cols = tuple(k for k, f in enumerate(CP.FEATURES) if f in kinds.FEATURES)
    model = CP.fit(use, convs, "passed", L2, cols)
    text = module(model, len(use), sum(int(r["y"]) for r in use))  # type: ignore[call-overload]
    print(json.dumps(model.weights()))
    if args.check:
        same = TARGET.read_text() == text
        print("up to date" if same else f"{TARGET} differs from what this run writes")
        return 0 if same else 1
    TARGET.write_text(text)
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
