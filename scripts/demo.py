"""`make demo`: the main experiment on the default model, small N, with its report.

Step 1 is a channel check: the same model in llama.cpp and in transformers, greedy completion and
the top-5 next-token probabilities at one position, side by side. Step 2 runs the demo experiment
(E1 strict vs loose and E5 close-brace probe at small N) and writes the report.
"""

from __future__ import annotations

import argparse
import sys

from tooldecode.models import DEFAULT_MODEL


def channel_check(model: str, n_tokens: int = 16) -> None:
    from tooldecode.trial import channel_agreement

    print("\n" + "\n".join(channel_agreement(model, n_tokens=n_tokens).lines()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--skip-channel-check", action="store_true")
    args = ap.parse_args(argv)
    if not args.skip_channel_check:
        channel_check(args.model)
    from tooldecode.experiments import run_demo

    return run_demo(args.model)


if __name__ == "__main__":
    sys.exit(main())
