"""Exact text languages of JSON numbers: integers in a range (digit-length decomposition, any size),
decimals (a fraction part, no exponent) in a range, and float bounds turned into exact decimals."""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

from tooldecode.grammar.automata import (
    DFA,
    NOTHING,
    UNIVERSE,
    Chars,
    RNode,
    alt,
    cat,
    cs_diff,
    cs_of,
    lit,
    opt,
    rep,
    star,
    to_dfa,
)

DIGIT = Chars(cs_of("0123456789"))
DIGIT19 = Chars(cs_of("123456789"))

INT_ANY = cat(opt(lit("-")), alt(lit("0"), cat(DIGIT19, star(DIGIT))))
FRAC = cat(lit("."), rep(DIGIT, 1, None))
EXP = cat(Chars(cs_of("eE")), opt(Chars(cs_of("+-"))), rep(DIGIT, 1, None))
NUMBER_ANY = cat(INT_ANY, opt(FRAC), opt(EXP))


# ---------------------------------------------------------------------------------------------
# integers in a range


def _digits_class(a: int, b: int) -> RNode:
    return Chars(((48 + a, 48 + b),))


def _same_len(x: str, y: str) -> RNode:
    """Digit strings of len(x) == len(y) between x and y inclusive (leading zeros allowed)."""
    if x == y:
        return lit(x)
    if len(x) == 1:
        return _digits_class(int(x), int(y))
    i = 0
    while x[i] == y[i]:
        i += 1
    prefix = lit(x[:i])
    x0, y0 = int(x[i]), int(y[i])
    xr, yr = x[i + 1 :], y[i + 1 :]
    n = len(xr)
    parts = []
    lo_first = x0
    if xr and xr != "0" * n:
        parts.append(cat(_digits_class(x0, x0), _same_len(xr, "9" * n)))
        lo_first = x0 + 1
    hi_last = y0
    tail = None
    if yr and yr != "9" * n:
        tail = cat(_digits_class(y0, y0), _same_len("0" * n, yr))
        hi_last = y0 - 1
    if lo_first <= hi_last:
        parts.append(cat(_digits_class(lo_first, hi_last), rep(DIGIT, n, n)))
    if tail is not None:
        parts.append(tail)
    return cat(prefix, alt(*parts))


def _nonneg_range(lo: int, hi: int | None) -> RNode:
    """Canonical decimal texts (no leading zeros) of integers in [lo, hi], lo >= 0."""
    if hi is not None and hi < lo:
        return NOTHING
    parts = []
    ls = str(lo)
    if hi is None:
        top = 10 ** len(ls) - 1
        parts.append(_nonneg_range(lo, top))
        parts.append(cat(DIGIT19, rep(DIGIT, len(ls), None)))
        return alt(*parts)
    hs = str(hi)
    full_run: list[int] = []  # consecutive lengths whose whole range is included

    def flush() -> None:
        if full_run:
            a, b = full_run[0], full_run[-1]
            if a == 1:
                parts.append(
                    _digits_class(0, 9)
                    if b == 1
                    else alt(_digits_class(0, 9), cat(DIGIT19, rep(DIGIT, 1, b - 1)))
                )
            else:
                parts.append(cat(DIGIT19, rep(DIGIT, a - 1, b - 1)))
            full_run.clear()

    for length in range(len(ls), len(hs) + 1):
        a = lo if length == len(ls) else 10 ** (length - 1)
        b = hi if length == len(hs) else 10**length - 1
        if a > b:
            continue
        lo_full = a == (0 if length == 1 else 10 ** (length - 1))
        if lo_full and b == 10**length - 1:
            full_run.append(length)
            continue
        flush()
        if length == 1:
            parts.append(_digits_class(a, b))
        else:
            parts.append(_same_len(str(a), str(b)))
    flush()
    return alt(*parts)


def int_range(lo: int | None, hi: int | None) -> RNode:
    """JSON integer texts (``-?(0|[1-9][0-9]*)``) with value in [lo, hi] (None = unbounded)."""
    if lo is None and hi is None:
        return INT_ANY
    if lo is not None and hi is not None and lo > hi:
        return NOTHING
    parts = []
    # non-negative part
    if hi is None or hi >= 0:
        parts.append(_nonneg_range(max(lo, 0) if lo is not None else 0, hi))
    # negative part: "-" + magnitude in [max(1, -hi), -lo]
    if lo is None or lo < 0:
        mlo = max(1, -hi) if hi is not None else 1
        mhi = -lo if lo is not None else None
        if mhi is None or mlo <= mhi:
            parts.append(cat(lit("-"), _nonneg_range(mlo, mhi)))
    if (lo is None or lo <= 0) and (hi is None or hi >= 0):
        parts.append(lit("-0"))
    return alt(*parts)


# ---------------------------------------------------------------------------------------------
# decimals (texts with a fraction part and no exponent) in a range


def _frac_cmp(fb: str, op: str) -> RNode:
    """Fraction digit strings F (non-empty) with 0.F op 0.fb (fb without trailing zeros)."""
    parts = []
    if op in (">=", ">"):
        for i, ch in enumerate(fb):
            d = int(ch)
            if d < 9:
                parts.append(cat(lit(fb[:i]), _digits_class(d + 1, 9), star(DIGIT)))
        if op == ">=":
            parts.append(cat(lit(fb), star(DIGIT)) if fb else rep(DIGIT, 1, None))
        else:
            parts.append(cat(lit(fb), star(DIGIT), DIGIT19, star(DIGIT)))
        return alt(*parts)
    # <=, <
    for i, ch in enumerate(fb):
        d = int(ch)
        if d > 0:
            parts.append(cat(lit(fb[:i]), _digits_class(0, d - 1), star(DIGIT)))
    # proper non-empty prefixes of fb (followed by nothing): smaller since fb has a non-zero tail
    for j in range(1, len(fb)):
        parts.append(lit(fb[:j]))
    if op == "<=":
        parts.append(cat(lit(fb), star(lit("0"))) if fb else rep(lit("0"), 1, None))
    return alt(*parts)


def _split(b: Decimal) -> tuple[int, str]:
    """Non-negative decimal -> (integer part, fraction digits without trailing zeros)."""
    s = format(b, "f")
    if "." in s:
        ip, fp = s.split(".")
        fp = fp.rstrip("0")
    else:
        ip, fp = s, ""
    return int(ip), fp


def _mag_range(lo: Decimal | None, lo_incl: bool, hi: Decimal | None, hi_incl: bool) -> RNode:
    """Texts ``(0|[1-9]d*).d+`` whose value m satisfies the bounds (bounds >= 0 or None)."""
    lo_i, lo_f = _split(lo) if lo is not None else (0, "")
    lo_op = ">=" if lo_incl or lo is None else ">"
    if lo is None:
        lo_incl = True
    if hi is None:
        parts = [
            cat(_nonneg_range(lo_i + 1, None), FRAC),
            cat(lit(str(lo_i)), lit("."), _frac_cmp(lo_f, lo_op)),
        ]
        return alt(*parts)
    hi_i, hi_f = _split(hi)
    hi_op = "<=" if hi_incl else "<"
    if lo_i == hi_i:
        both = _intersect_ast(_frac_cmp(lo_f, lo_op), _frac_cmp(hi_f, hi_op))
        return cat(lit(str(lo_i)), lit("."), both)
    parts = [cat(lit(str(lo_i)), lit("."), _frac_cmp(lo_f, lo_op))]
    if lo_i + 1 <= hi_i - 1:
        parts.append(cat(_nonneg_range(lo_i + 1, hi_i - 1), FRAC))
    parts.append(cat(lit(str(hi_i)), lit("."), _frac_cmp(hi_f, hi_op)))
    return alt(*parts)


def _intersect_ast(a: RNode, b: RNode) -> RNode:
    from tooldecode.grammar.automata import product, to_regex

    return to_regex(product([to_dfa(a), to_dfa(b)]))


def decimal_range(
    lo: Decimal | None, lo_incl: bool, hi: Decimal | None, hi_incl: bool, nonzero_frac: bool = False
) -> RNode:
    """Texts ``-?(0|[1-9]d*).d+`` with decimal value in the range; ``nonzero_frac``: fraction not all 0."""
    parts = []
    zero = Decimal(0)
    # non-negative texts: value m
    if hi is None or hi > zero or (hi == zero and hi_incl):
        plo, plo_incl = (lo, lo_incl) if lo is not None and lo > zero else (zero, True)
        if lo is not None and lo == zero:
            plo_incl = lo_incl
        parts.append(_mag_range(plo, plo_incl, hi, hi_incl))
    # negative texts "-m": value -m; -m >= lo <=> m <= -lo ; -m <= hi <=> m >= -hi
    if lo is None or lo < zero or (lo == zero and lo_incl):
        mlo, mlo_incl = (-hi, hi_incl) if hi is not None and hi < zero else (zero, True)
        if hi is not None and hi == zero:
            mlo_incl = hi_incl
        mhi, mhi_incl = (-lo, lo_incl) if lo is not None else (None, True)
        parts.append(cat(lit("-"), _mag_range(mlo, mlo_incl, mhi, mhi_incl)))
    out = alt(*parts)
    if nonzero_frac:
        out = _intersect_ast(
            out, cat(opt(lit("-")), INT_UNSIGNED, lit("."), star(DIGIT), DIGIT19, star(DIGIT))
        )
    return out


INT_UNSIGNED = alt(lit("0"), cat(DIGIT19, star(DIGIT)))
NONINT_ANY = cat(opt(lit("-")), INT_UNSIGNED, lit("."), star(DIGIT), DIGIT19, star(DIGIT))


# ---------------------------------------------------------------------------------------------
# float bounds -> exact decimals for texts that parse as floats


def _next_double(x: float, up: bool) -> float:
    import math

    return math.nextafter(x, math.inf if up else -math.inf)


def float_lower(b: Fraction, strict: bool) -> Decimal | None:
    """Smallest double D with D >= b (> b if strict), as an exact Decimal; None if none exists."""
    import math

    try:
        d = float(b)
    except OverflowError:
        return None
    if math.isinf(d):
        return None if d > 0 else Decimal(-1.7976931348623157e308)
    while Fraction(d) < b or (strict and Fraction(d) == b):
        d = _next_double(d, True)
        if math.isinf(d):
            return None
    while True:
        p = _next_double(d, False)
        if Fraction(p) > b or (not strict and Fraction(p) == b):
            d = p
        else:
            break
    return Decimal(d)


MAG = Decimal(10) ** 30  # numeric bounds are exact for magnitudes in [1e-30, 1e30]
SIG = 20


def _round_sig(d: Decimal, up: bool) -> Decimal:
    from decimal import ROUND_CEILING, ROUND_FLOOR, localcontext

    if d == 0:
        return d
    with localcontext() as ctx:
        ctx.prec = 60
        exp = Decimal(1).scaleb(d.adjusted() - (SIG - 1))
        return d.quantize(exp, rounding=ROUND_CEILING if up else ROUND_FLOOR)


def safe_lower(d: Decimal) -> Decimal | None:
    """A short decimal D' >= d (so x >= D' implies x >= d); None when no decimal text is kept."""
    r = _round_sig(d, up=True)
    if r > MAG:
        return None
    if r < -MAG:
        return -MAG
    if 0 < r < 1 / MAG:
        return 1 / MAG
    if -1 / MAG < r < 0:
        return Decimal(0)
    return r.normalize() if r != 0 else Decimal(0)


def _exact(f: Fraction) -> Decimal:
    from decimal import localcontext

    with localcontext() as ctx:
        ctx.prec = 1200
        return Decimal(f.numerator) / Decimal(f.denominator)


def frac_lower(b: Fraction, strict: bool) -> Decimal | None:
    """A short decimal L such that every decimal text x >= L parses to a float satisfying ``x >= b``
    (``x > b`` if strict); None when no decimal text is kept.

    D is the smallest double that satisfies the bound and L = repr(D), the shortest decimal that
    parses to D: rounding is monotone, so x >= L implies float(x) >= D. (Decimals below L that still
    round to D are left out: a sound subset.) L is then clamped to [-1e30, 1e30] and away from tiny
    magnitudes.
    """
    d = float_lower(b, strict)
    if d is None:
        return None
    return safe_lower(Decimal(repr(float(d))))


def frac_upper(b: Fraction, strict: bool) -> Decimal | None:
    r = frac_lower(-b, strict)
    return None if r is None else -r


INT_MAG = 10**30


def clamp_int_bounds(lo: int | None, hi: int | None) -> tuple[int | None, int | None, bool]:
    """Finite integer bounds beyond 1e30 are tightened to 1e30 (a sound subset); (lo, hi, empty)."""
    if lo is not None and lo > INT_MAG or hi is not None and hi < -INT_MAG:
        return lo, hi, True
    if lo is not None and lo < -INT_MAG:
        lo = -INT_MAG
    if hi is not None and hi > INT_MAG:
        hi = INT_MAG
    return lo, hi, False


def ceil_frac(b: Fraction) -> int:
    return -((-b.numerator) // b.denominator)


def floor_frac(b: Fraction) -> int:
    return b.numerator // b.denominator


def multiple_dfa(k: int, residues: frozenset[int]) -> DFA:
    """Integer texts whose value modulo k is in ``residues`` (value may be negative)."""
    # states: 0 start, 1 after '-', 2 '0' read (value 0), 3 '-0', 4+r remainder r (positive magnitude)
    #         4+k+r remainder r after '-', dead = 4+2k
    neg_res = frozenset((-r) % k for r in residues)
    dead = 4 + 2 * k
    digits = [cs_of(str(i)) for i in range(10)]
    minus = cs_of("-")
    rest = cs_diff(UNIVERSE, cs_of("-0123456789"))
    atoms = [minus] + digits + [rest]
    delta = [[dead] * len(atoms) for _ in range(dead + 1)]
    delta[0][0] = 1
    delta[0][1] = 2
    delta[1][1] = 3
    for dg in range(1, 10):
        delta[0][1 + dg] = 4 + dg % k
        delta[1][1 + dg] = 4 + k + dg % k
    for r in range(k):
        for dg in range(10):
            delta[4 + r][1 + dg] = 4 + (r * 10 + dg) % k
            delta[4 + k + r][1 + dg] = 4 + k + (r * 10 + dg) % k
    accept = set()
    if 0 in residues:
        accept |= {2, 3}
    accept |= {4 + r for r in residues}
    accept |= {4 + k + r for r in neg_res}
    return DFA(atoms, delta, accept, 0).minimize()
