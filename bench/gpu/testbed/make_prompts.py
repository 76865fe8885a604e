"""Write the testbed's prompt sets (ShareGPT-format JSON, one placeholder answer turn each).

usage: python3 make_prompts.py SOURCE.json OUT.json
       python3 make_prompts.py --fresh SHAREGPT.json MTBENCH.jsonl OUT.json.gz

First form: the first 128 ShareGPT first turns of 60 to 1500 characters (SOURCE is the shared
`sharegpt_v3_filtered_500.json`): `prompts_sharegpt128.json`, the set every level replays.

Second form (`--fresh`): as many distinct prompts as the two public sets give, for runs in which
no prompt may be sent twice (NGRAM learns from the prompts it has served): every distinct human
turn of SHAREGPT and both turns of every MT-Bench question; a text longer than 400 characters
is cut at a sentence or line end (else a space) into pieces of at most 400 characters, pieces
under 20 characters are dropped, duplicates are dropped, and the order is shuffled with seed 0
(so the pieces of one long text are spread over the file). Written gzip-compressed with a fixed
mtime, so the same inputs give the same bytes: `prompts_fresh.json.gz` (973 prompts, mean 210
characters).

Each kept entry gets a placeholder assistant turn, because SGLang's bench_serving drops
conversations with fewer than two turns; the output length is fixed on both tools, so the
placeholder is never used. `specproxy replay` reads the same file and sends the first human
turn as raw text, as bench_serving does with `--backend sglang`.
"""

import gzip
import json
import random
import sys
from typing import Any

N, LO, HI = 128, 60, 1500
PIECE, MIN_PIECE = 400, 20
PLACEHOLDER = "(placeholder: the output length is fixed)"


def entry(ident: str | None, text: str) -> dict[str, Any]:
    return {
        "id": ident,
        "conversations": [{"from": "human", "value": text}, {"from": "gpt", "value": PLACEHOLDER}],
    }


def first_turns(src: str, out: str) -> None:
    kept = []
    with open(src) as f:
        entries = json.load(f)
    for e in entries:
        turns = e.get("conversations") or []
        human = next((t["value"] for t in turns if t.get("from") == "human"), "")
        if LO <= len(human.strip()) <= HI:
            kept.append(entry(e.get("id"), human))
        if len(kept) == N:
            break
    if len(kept) < N:
        sys.exit(f"only {len(kept)} prompts of {LO}-{HI} characters in {src}")
    with open(out, "w") as f:
        json.dump(kept, f, indent=0)
    print(f"{out}: {len(kept)} prompts")


def pieces(text: str) -> list[str]:
    """``text`` cut into pieces of at most PIECE characters, at a sentence or line end if any."""
    out = []
    while len(text) > PIECE:
        cut = max(text.rfind(". ", 0, PIECE), text.rfind("\n", 0, PIECE))
        if cut < PIECE // 3:
            cut = text.rfind(" ", 0, PIECE)
        if cut <= 0:
            cut = PIECE - 1
        out.append(text[: cut + 1].strip())
        text = text[cut + 1 :].strip()
    if text:
        out.append(text)
    return out


def fresh(sharegpt: str, mtbench: str, out: str) -> None:
    texts: list[tuple[str, str]] = []
    with open(sharegpt) as f:
        for e in json.load(f):
            for k, t in enumerate(e.get("conversations") or []):
                if t.get("from") == "human":
                    texts.append((f"{e.get('id')}-{k}", t["value"].strip()))
    with open(mtbench) as f:
        for line in f:
            q = json.loads(line)
            texts += [
                (f"mtbench{q['question_id']}-{k}", t.strip()) for k, t in enumerate(q["turns"])
            ]
    seen: set[str] = set()
    kept = []
    for ident, text in texts:
        for j, piece in enumerate(pieces(text)):
            if len(piece) >= MIN_PIECE and piece not in seen:
                seen.add(piece)
                kept.append(entry(f"{ident}-{j}", piece))
    random.Random(0).shuffle(kept)
    with open(out, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
        f.write(json.dumps(kept, indent=0).encode())
    mean = sum(len(e["conversations"][0]["value"]) for e in kept) / len(kept)
    print(f"{out}: {len(kept)} prompts, mean {mean:.0f} characters")


def main() -> None:
    if sys.argv[1:2] == ["--fresh"] and len(sys.argv) == 5:
        fresh(*sys.argv[2:5])
    elif len(sys.argv) == 3:
        first_turns(sys.argv[1], sys.argv[2])
    else:
        sys.exit(__doc__.split("\n\n")[1])


if __name__ == "__main__":
    main()
