"""String languages of the schema IR: decoded strings under length bounds, patterns, formats, value
sets and exclusions (``StrLang``), and the formats asserted as regular languages (``FORMAT_PATTERNS``)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

from tooldecode.grammar import automata as A
from tooldecode.grammar.ecma import pattern_ast

FORMAT_PATTERNS = {
    "date": (
        r"^(?:\d{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12]\d|3[01])|(?:0[469]|11)-(?:0[1-9]|[12]\d|30)"
        r"|02-(?:0[1-9]|1\d|2[0-8]))|(?:\d\d(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)"
        r"-02-29)$"
    ),
    "uuid": r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$",
    # RFC 3339 full-time: upper-case Z, no leap second (a sound subset: 23:59:60 is valid only in UTC)
    "time": r"^(?:[01]\d|2[0-3]):[0-5]\d:[0-5]\d(?:\.\d+)?(?:Z|[+-](?:[01]\d|2[0-3]):[0-5]\d)$",
    "ipv4": r"^(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)$",
}
_U = r"A-Za-z0-9\-._~"  # unreserved
_PCT = r"%[0-9A-Fa-f]{2}"
_SUB = r"!$&'()*+,;="
_PCHAR = rf"(?:[{_U}{_SUB}:@]|{_PCT})"
_AUTH = rf"(?:(?:[{_U}{_SUB}:]|{_PCT})*@)?(?:[{_U}{_SUB}]|{_PCT})*(?::\d*)?"  # no IP literals (a subset)
_QF = rf"(?:\?(?:{_PCHAR}|[/?])*)?(?:#(?:{_PCHAR}|[/?])*)?"
_SEGS = rf"(?:/{_PCHAR}*)*"
# a label of 1..30 characters whose third character is not '-' (so never an "xn--" style label)
_LTAIL = r"(?:[A-Za-z0-9]|[A-Za-z0-9-][A-Za-z0-9](?:[A-Za-z0-9-]{0,26}[A-Za-z0-9])?)?"
_LABEL = rf"[A-Za-z0-9]{_LTAIL}"
_TLD = rf"[A-Za-z]{_LTAIL}"
# at most 8 labels of at most 30 characters: never longer than 253 characters (a subset of RFC 1123)
_HOST = rf"(?:{_LABEL}\.){{0,7}}{_TLD}"
_DUR_T = r"T(?:\d+H(?:\d+M(?:\d+S)?)?|\d+M(?:\d+S)?|\d+S)"
FORMAT_PATTERNS.update(
    {
        # RFC 3986 URI (ASCII, no IP-literal hosts)
        "uri": rf"^[A-Za-z][A-Za-z0-9+\-.]*:(?://{_AUTH}{_SEGS}|/(?:{_PCHAR}+{_SEGS})?|{_PCHAR}+{_SEGS}|){_QF}$",
        "uri-reference": (
            rf"^(?:[A-Za-z][A-Za-z0-9+\-.]*:(?://{_AUTH}{_SEGS}|/(?:{_PCHAR}+{_SEGS})?|{_PCHAR}+{_SEGS}|)"
            rf"|//{_AUTH}{_SEGS}|/(?:{_PCHAR}+{_SEGS})?|(?:[{_U}{_SUB}@]|{_PCT})+{_SEGS}|){_QF}$"
        ),
        "hostname": rf"^{_HOST}$",
        # RFC 5321 dot-atom local part at a host name (a subset: no quoted local parts, no literals)
        "email": rf"^[A-Za-z0-9!#$%&'*+/=?^_`{{|}}~-]+(?:\.[A-Za-z0-9!#$%&'*+/=?^_`{{|}}~-]+)*@{_HOST}$",
        # RFC 3339 appendix A
        "duration": rf"^P(?:(?:\d+D|\d+M(?:\d+D)?|\d+Y(?:\d+M(?:\d+D)?)?)(?:{_DUR_T})?|{_DUR_T}|\d+W)$",
        "json-pointer": r"^(?:/(?:[^~/]|~[01])*)*$",
        "relative-json-pointer": r"^(?:0|[1-9]\d*)(?:#|(?:/(?:[^~/]|~[01])*)*)$",
    }
)
# RFC 4291 text forms without an embedded IPv4 address or a zone (a subset)
_H = r"[0-9A-Fa-f]{1,4}"
FORMAT_PATTERNS["ipv6"] = (
    rf"^(?:(?:{_H}:){{7}}{_H}|(?:{_H}:){{1,7}}:|(?:{_H}:){{1,6}}:{_H}|(?:{_H}:){{1,5}}(?::{_H}){{1,2}}"
    rf"|(?:{_H}:){{1,4}}(?::{_H}){{1,3}}|(?:{_H}:){{1,3}}(?::{_H}){{1,4}}|(?:{_H}:){{1,2}}(?::{_H}){{1,5}}"
    rf"|{_H}:(?::{_H}){{1,6}}|:(?:(?::{_H}){{1,7}}|:))$"
)
# RFC 6570 URI Template, ASCII literals (a subset: no ucschar / iprivate characters in literals)
_TVAR = r"(?:[A-Za-z0-9_]|%[0-9A-Fa-f]{2})"
_TSPEC = rf"{_TVAR}(?:\.?{_TVAR})*(?::[1-9][0-9]{{0,3}}|\*)?"
FORMAT_PATTERNS["uri-template"] = (
    rf"^(?:[!#$&(-;=?-\[\]_a-z~]|%[0-9A-Fa-f]{{2}}|\{{[+#./;?&=,!@|]?{_TSPEC}(?:,{_TSPEC})*\}})*$"
)
# RFC 3987 IRIs and RFC 5890 internationalized names, as their ASCII subsets: every URI is an IRI, every
# (non-A-label) ASCII host name an IDN host name, every ASCII dot-atom address an internationalized one
for _idn, _ascii in (
    ("iri", "uri"),
    ("iri-reference", "uri-reference"),
    ("idn-hostname", "hostname"),
    ("idn-email", "email"),
):
    FORMAT_PATTERNS[_idn] = FORMAT_PATTERNS[_ascii]
FORMAT_PATTERNS["date-time"] = (
    FORMAT_PATTERNS["date"][:-1] + "T" + FORMAT_PATTERNS["time"][1:]
)  # RFC 3339 date-time: upper-case T


@dataclass(frozen=True)
class StrLang:
    """Decoded strings s with min_len <= len(s) <= max_len, every pattern found in s, every format
    matched, s in ``values`` (when given), s not in ``excluded`` and s in no language of ``negs``."""

    min_len: int = 0
    max_len: int | None = None
    patterns: frozenset[str] = frozenset()
    formats: frozenset[str] = frozenset()
    values: frozenset[str] | None = None
    excluded: frozenset[str] = frozenset()
    negs: frozenset[StrLang] = frozenset()

    def is_all(self) -> bool:
        return self == ALL_STRINGS

    def inter(self, o: StrLang) -> StrLang:
        vals = (
            self.values if o.values is None else (o.values if self.values is None else self.values & o.values)
        )
        hi = (
            self.max_len
            if o.max_len is None
            else (o.max_len if self.max_len is None else min(self.max_len, o.max_len))
        )
        out = StrLang(
            max(self.min_len, o.min_len),
            hi,
            self.patterns | o.patterns,
            self.formats | o.formats,
            vals,
            self.excluded | o.excluded,
            self.negs | o.negs,
        )
        if out.values is not None:
            out = StrLang(values=frozenset(v for v in out.values if out.accepts(v)))
        return out

    def accepts(self, s: str) -> bool:
        n = len(s)
        if n < self.min_len or (self.max_len is not None and n > self.max_len):
            return False
        if self.values is not None and s not in self.values:
            return False
        if s in self.excluded:
            return False
        for p in self.patterns:
            if not pattern_dfa(p).accepts(s):
                return False
        for f in self.formats:
            if not pattern_dfa(FORMAT_PATTERNS[f]).accepts(s):
                return False
        return not any(n_.accepts(s) for n_ in self.negs)

    def simple_ast(self) -> A.RNode | None:
        """A regex AST over decoded characters when no automaton construction is needed."""
        if self.negs or self.excluded:
            return None
        if self.values is not None:
            return A.alt(*(A.lit(v) for v in sorted(self.values)))
        regs = [pattern_ast(p) for p in sorted(self.patterns)] + [
            pattern_ast(FORMAT_PATTERNS[f]) for f in sorted(self.formats)
        ]
        has_len = self.min_len > 0 or self.max_len is not None
        if not regs:
            return A.rep(A.Chars(A.UNIVERSE), self.min_len, self.max_len)
        if len(regs) == 1 and not has_len:
            return regs[0]
        return None

    @cached_property
    def dfa(self) -> A.DFA:
        parts: list[A.DFA] = []
        if self.min_len > 0 or self.max_len is not None:
            parts.append(A.length_dfa(self.min_len, self.max_len))
        for p in sorted(self.patterns):
            parts.append(pattern_dfa(p))
        for f in sorted(self.formats):
            parts.append(pattern_dfa(FORMAT_PATTERNS[f]))
        if self.values is not None:
            parts.append(A.finite_dfa(self.values))
        if self.excluded:
            parts.append(A.finite_dfa(self.excluded).complement())
        for n in sorted(self.negs, key=repr):
            parts.append(n.dfa.complement())
        if not parts:
            return A.to_dfa(A.star(A.Chars(A.UNIVERSE)))
        if len(parts) == 1:
            return parts[0]
        return A.product(parts)

    def complement(self) -> list[StrLang]:
        """Union of languages equal to the complement (within strings)."""
        out: list[StrLang] = []
        if self.min_len > 0:
            out.append(StrLang(max_len=self.min_len - 1))
        if self.max_len is not None:
            out.append(StrLang(min_len=self.max_len + 1))
        for p in self.patterns:
            out.append(StrLang(negs=frozenset({StrLang(patterns=frozenset({p}))})))
        for f in self.formats:
            out.append(StrLang(negs=frozenset({StrLang(formats=frozenset({f}))})))
        if self.values is not None:
            out.append(StrLang(excluded=self.values))
        if self.excluded:
            out.append(StrLang(values=self.excluded))
        for n in self.negs:
            out.append(n)
        return out

    def is_empty(self) -> bool:
        if self.max_len is not None and self.max_len < self.min_len:
            return True
        if self.values is not None:
            return not self.values
        if self.is_all() or (
            not self.patterns
            and not self.formats
            and not self.negs
            and (self.max_len is None or self.max_len > 0 or "" not in self.excluded)
        ):
            return False
        try:
            return self.dfa.is_empty()
        except A.TooComplex:
            return False


ALL_STRINGS = StrLang()


@lru_cache(maxsize=256)
def pattern_dfa(p: str) -> A.DFA:
    return A.to_dfa(pattern_ast(p))
