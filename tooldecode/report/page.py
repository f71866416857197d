"""``report.html``: one self-contained page (tables, figures as data URIs, samples with highlighted keys)."""

from __future__ import annotations

import html
import re
from collections.abc import Iterable
from typing import Any

from tooldecode import __version__
from tooldecode.report.data import RunData, Sample, payload_correct
from tooldecode.report.distortion import distortion_results, distortion_table, plot_distortion
from tooldecode.report.kinds import plot_kinds, summary_kind_bars
from tooldecode.report.plots import plot_probe, plot_rates, plot_zoo, png_data
from tooldecode.report.summary import Summary, freeze_arm
from tooldecode.report.tables import (
    Table,
    arms_table,
    common_line,
    probe_table,
    report_commands,
    runs_table,
    verdict_sections,
    zoo_table,
)
from tooldecode.report.tokens import CSS as TOKEN_CSS
from tooldecode.report.tokens import token_section

MAX_SAMPLE_ROWS = 500  # per run in report.html


# --- HTML ------------------------------------------------------------------------------------------

_CSS = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:1400px;padding:0 1em;color:#222}
h1{font-size:1.6em}h2{margin-top:1.8em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5em 0;font-size:13px}
th,td{border:1px solid #ddd;padding:3px 7px;text-align:left;vertical-align:top}
th{background:#f3f3f3}.note{color:#555;font-size:12px;max-width:1100px}
code{background:#f4f4f4;padding:0 3px}img{max-width:100%}
table.samples tr.s{cursor:pointer}table.samples tr.s:hover{background:#eef4ff}
tr.detail{display:none}tr.detail.open{display:table-row}
pre.raw{white-space:pre-wrap;word-break:break-all;max-width:1300px;margin:0;font-size:12px}
pre.raw .pf{color:#777;background:#f1f1f1}mark{background:#ffb3a7;font-weight:bold}
.v-valid{color:#17733a}.v-invented_key{color:#b3261e;font-weight:bold}
input.filter{margin:.3em 0;padding:2px 5px;width:22em}
"""

_JS = """
document.querySelectorAll('table.samples').forEach(function(t){
  t.addEventListener('click',function(e){var r=e.target.closest('tr.s');if(!r)return;
    var d=r.nextElementSibling;if(d&&d.classList.contains('detail'))d.classList.toggle('open');});
});
document.querySelectorAll('input.filter').forEach(function(inp){
  inp.addEventListener('input',function(){var q=inp.value.toLowerCase();
    var t=document.getElementById(inp.dataset.table);
    t.querySelectorAll('tr.s').forEach(function(r){var show=r.textContent.toLowerCase().indexOf(q)>=0;
      r.style.display=show?'':'none';var d=r.nextElementSibling;
      if(!show&&d&&d.classList.contains('detail'))d.classList.remove('open');});});
});
"""

_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """Text that encodes as UTF-8 (lone surrogates from undecodable model output become U+FFFD)."""
    return _SURROGATE.sub("\ufffd", text)


def _esc(text: Any) -> str:
    return html.escape(clean_text(str(text)), quote=True)


def _html_table(t: Table, cls: str = "") -> str:
    if not t.rows:
        return f"<p><em>{_esc(t.empty)}</em></p>"
    head = "".join(f"<th>{_esc(h)}</th>" for h in t.header)
    body = "".join("<tr>" + "".join(f"<td>{_esc(c)}</td>" for c in row) + "</tr>" for row in t.rows)
    note = f'<p class="note">{_esc(t.note)}</p>' if t.note else ""
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{note}'


def _md_to_html(text: str) -> str:
    """The small Markdown subset of other modules' summaries: paragraphs, ``-`` lists, pipe tables."""
    out = []
    for block in re.split(r"\n\s*\n", text.strip()):
        lines = [ln.strip() for ln in block.splitlines() if ln.strip()]
        if lines and all(ln.startswith("|") for ln in lines):
            cells = [
                [c.strip() for c in ln.strip("|").split("|")]
                for ln in lines
                if not re.fullmatch(r"\|[\s:|-]+\|", ln)
            ]
            out.append(_html_table(Table(cells[0], cells[1:])))
        elif lines and all(ln.startswith("- ") for ln in lines):
            out.append("<ul>" + "".join(f"<li>{_esc(ln[2:])}</li>" for ln in lines) + "</ul>")
        else:
            out.append(f"<p>{_esc(' '.join(lines))}</p>")
    return "".join(out)


def highlight(text: str, keys: Iterable[str]) -> str:
    """``text`` as escaped HTML with every quoted occurrence of the given keys wrapped in ``<mark>``."""
    keys = sorted({k for k in keys if k}, key=len, reverse=True)
    if not keys:
        return _esc(text)
    pattern = re.compile("([\"'])(?:" + "|".join(re.escape(k) for k in keys) + ")\\1")
    out, pos = [], 0
    for m in pattern.finditer(text):
        out.append(_esc(text[pos : m.start()]))
        out.append(f"<mark>{_esc(m.group())}</mark>")
        pos = m.end()
    out.append(_esc(text[pos:]))
    return "".join(out)


def _raw_html(s: Sample) -> str:
    keys = [str(i.get("key")) for i in s.verdict.get("invented_keys") or []]
    whole = s.prefill + s.text
    marked = highlight(whole, keys)
    if not s.prefill:
        return marked
    # Split the marked text back at the prefill boundary only when no mark straddles it.
    pre = highlight(s.prefill, keys)
    if marked.startswith(pre):
        return f'<span class="pf" title="prefill">{pre}</span>{marked[len(pre) :]}'
    return marked


def _sample_priority(s: Sample) -> int:
    v = s.verdict.get("verdict")
    return 0 if v == "invented_key" else 2 if v == "valid" else 1


def _samples_section(run: RunData, labels: dict[tuple[str, str], str], table_id: str) -> str:
    ordered = sorted(run.samples, key=_sample_priority)  # stable: file order within each class
    shown = ordered[:MAX_SAMPLE_ROWS]
    note = (
        f"Showing {len(shown)} of {len(run.samples)} samples: invented-key samples first, then other "
        "verdicts, then valid ones."
        if len(shown) < len(run.samples)
        else f"All {len(run.samples)} samples."
    )
    rows = []
    for s in shown:
        v = s.verdict
        verdict = v.get("verdict") or f"not scored ({s.error})"
        inv = ", ".join(str(i.get("path")) for i in v.get("invented_keys") or [])
        pay = "–" if not isinstance(v.get("payload"), dict) else ("yes" if payload_correct(v) else "no")
        label = labels.get((s.run, freeze_arm(s.arm)), "")
        rows.append(
            f'<tr class="s"><td>{_esc(s.key)}</td><td>{_esc(label)}</td><td>{_esc(s.scenario)}</td>'
            f'<td>{_esc(s.seed)}</td><td class="v-{_esc(v.get("verdict"))}">{_esc(verdict)}</td>'
            f"<td>{_esc(inv)}</td><td>{pay}</td><td>{_esc(s.finish_reason)}</td></tr>"
        )
        extra = []
        if v.get("flags"):
            extra.append("flags: " + ", ".join(map(str, v["flags"])))
        if v.get("errors"):
            extra.append("errors: " + "; ".join(map(str, v["errors"][:5])))
        info = "".join(f"<div>{_esc(e)}</div>" for e in extra)
        rows.append(
            f'<tr class="detail"><td colspan="8">{info}<pre class="raw">{_raw_html(s)}</pre></td></tr>'
        )
    head = "".join(
        f"<th>{h}</th>"
        for h in ("key", "arm", "scenario", "seed", "verdict", "invented keys", "payload correct", "finish")
    )
    return (
        f'<h3>{_esc(run.name)}</h3><p class="note">{_esc(note)} Click a row for the raw output '
        "(prefill grey, invented keys marked).</p>"
        f'<input class="filter" data-table="{table_id}" placeholder="filter rows (e.g. invented_key)">'
        f'<table class="samples" id="{table_id}"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}'
        "</tbody></table>"
    )


def _img(fig, alt: str) -> str:
    if fig is None:
        return ""
    return f'<img alt="{_esc(alt)}" src="data:image/png;base64,{png_data(fig)}">'


def summary_html(s: Summary, command: str | None = None) -> str:
    """``report.html``: one self-contained page of the summary's tables, figures and samples."""
    labels = {(a.run, freeze_arm(a.arm)): a.label for a in s.arms}
    cmds = "".join(f"<li><code>{_esc(n)}</code>: <code>{_esc(c)}</code></li>" for n, c in report_commands(s))
    common = common_line(s).strip()
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        "<title>tooldecode report</title>",
        f"<style>{_CSS}{TOKEN_CSS}</style></head><body>",
        "<h1>tooldecode report</h1>",
        f'<p class="note">Made by tooldecode {_esc(__version__)}'
        + (f" with <code>{_esc(command)}</code>" if command else "")
        + ".</p>",
        "<h2>Runs</h2>",
        _html_table(runs_table(s)),
        f"<p>Commands that re-create the runs:</p><ul>{cmds}</ul>",
        "<h2>Arms</h2>",
        f"<p>{_esc(common)}</p>" if common else "",
        _html_table(arms_table(s)),
    ]
    parts.append(_img(plot_rates(s), "rates per arm with 95% intervals"))
    kinds = plot_kinds(summary_kind_bars(s.runs))
    if kinds is not None:
        parts += [
            "<h2>What follows the gold newText</h2>",
            _img(kinds, "outcomes after newText per run and arm"),
        ]
    for title, table in verdict_sections(s):
        parts += [f"<h2>{title}</h2>", _html_table(table)]
    parts += [
        "<h2>Invented keys</h2>",
        _img(plot_zoo(s), "invented keys"),
        _html_table(zoo_table(s)),
    ]
    if s.probe:
        parts += [
            "<h2>Close-brace probe</h2>",
            _img(plot_probe(s), "P(continue) against newText length"),
            _html_table(probe_table(s)),
        ]
    rescues = [(run.name, run.rescue) for run in s.runs if run.rescue]
    if rescues:
        parts.append("<h2>Lenient-harness repair</h2>")
        parts += [f"<h3>{_esc(name)}</h3>{_md_to_html(text)}" for name, text in rescues]
    parts += distortion_parts(s)
    parts.append(token_section([run.path for run in s.runs]))
    parts.append("<h2>Samples</h2>")
    parts += [_samples_section(run, labels, f"samples-{i}") for i, run in enumerate(s.runs)]
    parts.append(f"<script>{_JS}</script></body></html>")
    return clean_text("\n".join(parts))


def distortion_parts(s: Summary) -> list[str]:
    """The HTML of the distortion section (empty without a masked arm)."""
    results = distortion_results(s)
    if not results:
        return []
    return [
        "<h2>Distortion of masked sampling</h2>",
        "<p>A token mask samples from Q(y) = Π P(y_t | y_&lt;t) / Z_t; the model conditioned on a valid call is "
        "P_L(y) ∝ P(y)·1[valid]. Importance weights w = Π Z_t give P(valid) = E_Q[w], KL(Q‖P_L) = log E_Q[w] − "
        "E_Q[log w] and the rates under P_L; loose samples the grammar accepts are exact draws of P_L "
        "(docs/distortion.md).</p>",
        _img(plot_distortion(results), "rates under the mask, under P_L and in the rejection reference"),
        _html_table(distortion_table(results)),
    ]
