# ruff: noqa: T201
"""Write the testbed's prompt set: the first 128 ShareGPT first turns of 60 to 1500 characters.

usage: python3 make_prompts.py SOURCE.json OUT.json
SOURCE is a ShareGPT JSON array (the shared `sharegpt_v3_filtered_500.json`). Each kept entry
gets a placeholder assistant turn, because SGLang's bench_serving drops conversations with fewer
than two turns; the output length is fixed on both tools, so the placeholder is never used.
`specproxy replay` reads the same file and sends the first human turn as raw text, as
bench_serving does with `--backend sglang`. run_levels.py cuts the first N entries per level.
"""

import json
import sys

N, LO, HI = 128, 60, 1500


def main() -> None:
    src, out = sys.argv[1], sys.argv[2]
    kept = []
    with open(src) as f:
        entries = json.load(f)
    for entry in entries:
        turns = entry.get("conversations") or []
        human = next((t["value"] for t in turns if t.get("from") == "human"), "")
        if LO <= len(human.strip()) <= HI:
            kept.append(
                {
                    "id": entry.get("id"),
                    "conversations": [
                        {"from": "human", "value": human},
                        {"from": "gpt", "value": "(placeholder: the output length is fixed)"},
                    ],
                }
            )
        if len(kept) == N:
            break
    if len(kept) < N:
        sys.exit(f"only {len(kept)} prompts of {LO}-{HI} characters in {src}")
    with open(out, "w") as f:
        json.dump(kept, f, indent=0)
    print(f"{out}: {len(kept)} prompts")


if __name__ == "__main__":
    main()
