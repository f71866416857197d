"""Grammar builder benchmark: render time per built-in tool x format (x wire) and grammar sizes.

Prints ``name: value`` lines. ``render_ms`` is the median of repeated renders with the render cache
cleared (module-level caches of shared pieces, such as the string terminal of a wire, stay warm);
``first_render_ms`` is the very first render of each wire in this process. Target: under 5 ms.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import warnings  # noqa: E402

from tooldecode.grammar import (  # noqa: E402
    FORMATS,
    WIRES,
    GrammarWarning,
    Tool,
    _render_cached,
    load_tool,
    render,
    tool_catalog,
)

REPEAT = 7
# an ordinary user schema: strings with maxLength 256 (narrowed in the delimited wires, see docs/grammar.md)
BOUNDED = Tool(
    "post",
    parameters={
        "type": "object",
        "properties": {
            "title": {"type": "string", "maxLength": 256},
            "body": {"type": "string", "minLength": 1, "maxLength": 256},
        },
        "required": ["title", "body"],
    },
)
# a pattern with length bounds: one rule per automaton state in GBNF / Lark (docs/grammar.md, Strings)
PATTERNED = Tool(
    "mail",
    parameters={
        "type": "object",
        "properties": {
            "to": {"type": "string", "pattern": "^[a-z.]+@[a-z]+\\.[a-z]{2,4}$", "maxLength": 64},
            "slug": {"type": "string", "pattern": "^[a-z]+(-[a-z]+)*$", "minLength": 3, "maxLength": 40},
        },
        "required": ["to"],
    },
)


def ms(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return (time.perf_counter() - t0) * 1000


def main() -> int:
    cat = tool_catalog()
    edit = load_tool("edit")
    for wire in WIRES:
        _render_cached.cache_clear()
        print(
            f"first_render_ms.edit.gbnf.{wire}: {ms(lambda w=wire: render(edit, format='gbnf', wire=w)):.2f}"
        )
    worst = 0.0
    for wire in WIRES:
        for name, tool in cat.items():
            for fmt in FORMATS:
                times = []
                for _ in range(REPEAT):
                    _render_cached.cache_clear()
                    times.append(ms(lambda t=tool, f=fmt, w=wire: render(t, format=f, wire=w)))
                med = statistics.median(times)
                worst = max(worst, med)
                if wire == "json" or name == "edit":
                    print(f"render_ms.{name}.{fmt}.{wire}: {med:.2f}")
    print(f"render_ms.max_median_all_tools_formats_wires: {worst:.2f}")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", GrammarWarning)
        for wire in ("hermes", "antml", "harmony"):
            _render_cached.cache_clear()
            t = ms(lambda w=wire: render(BOUNDED, format="gbnf", wire=w))
            print(f"first_render_ms.maxlength256.gbnf.{wire}: {t:.2f}")
        for wire in ("json", "hermes"):
            _render_cached.cache_clear()
            t = ms(lambda w=wire: render(PATTERNED, format="gbnf", wire=w))
            print(f"first_render_ms.pattern_maxlength.gbnf.{wire}: {t:.2f}")
    for name, tool in cat.items():
        for fmt in FORMATS:
            text = render(tool, format=fmt)
            print(f"grammar_bytes.{name}.{fmt}.json: {len(text.encode())}")
        gb = render(tool, format="gbnf")
        print(f"grammar_rules.{name}.gbnf.json: {sum(1 for line in gb.splitlines() if ' ::= ' in line)}")
    for wire in WIRES:
        print(f"grammar_bytes.edit.gbnf.{wire}: {len(render(edit, format='gbnf', wire=wire).encode())}")
        print(f"grammar_bytes.edit.lark.{wire}: {len(render(edit, format='lark', wire=wire).encode())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
