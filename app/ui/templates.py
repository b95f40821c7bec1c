"""The HTML of the account pages: Jinja2 templates held here (a non-editable install ships
them with the code), every value escaped by the environment (``autoescape``), one
stylesheet inline and allowed by its hash, no script at all.

Account ids, grant names and GPU classes are the callers' data: they reach the page only
through ``{{ }}``, which escapes them, never through ``|safe`` (only the stylesheet, a
constant, is inserted as is).
"""

from __future__ import annotations

import base64
import hashlib
from typing import Any, Final

from jinja2 import DictLoader, Environment, StrictUndefined, select_autoescape
from markupsafe import Markup

from app.ui.chart import px

CSS: Final = """
:root { color-scheme: light; --ink: #1d2430; --muted: #5b6472; --line: #d7dce3;
  --good: #1f7a4d; --bad: #b3261e; --accent: #2457a6; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, sans-serif; color: var(--ink); background: #f6f7f9; }
header { display: flex; align-items: center; gap: 16px; padding: 12px 24px;
  background: #fff; border-bottom: 1px solid var(--line); }
header h1 { font-size: 18px; margin: 0; flex: 1; overflow-wrap: anywhere; }
main { max-width: 1040px; margin: 0 auto; padding: 16px 24px 48px; }
section { background: #fff; border: 1px solid var(--line); border-radius: 6px;
  padding: 12px 16px; margin: 16px 0; overflow-x: auto; }
h2 { font-size: 16px; margin: 0 0 8px; }
p.note { color: var(--muted); font-size: 13px; margin: 6px 0; }
dl.totals { display: grid; grid-template-columns: repeat(6, minmax(0, 1fr)); gap: 8px; margin: 0; }
dl.totals div { min-width: 0; }
dl.totals dt { color: var(--muted); font-size: 13px; }
dl.totals dd { margin: 0; font-size: 18px; font-variant-numeric: tabular-nums;
  overflow-wrap: anywhere; }
table { border-collapse: collapse; width: 100%; font-size: 14px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid var(--line);
  vertical-align: top; }
th { color: var(--muted); font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.text { overflow-wrap: anywhere; }
.negative { color: var(--bad); }
.provisional { color: var(--accent); }
svg.chart { width: 100%; height: auto; display: block; }
svg .axis { stroke: var(--muted); stroke-width: 1; }
svg .grid { stroke: var(--line); stroke-width: 1; }
svg .zero { stroke: var(--ink); stroke-width: 1; }
svg .available { fill: #cfe8da; stroke: none; }
svg .debt { fill: #f3d3d0; stroke: none; }
svg .balance { fill: none; stroke: var(--accent); stroke-width: 2; }
svg .point { fill: var(--accent); }
svg .point.expiration, svg .point.void { fill: var(--bad); }
svg text { font-size: 12px; fill: var(--muted); }
svg text.y { text-anchor: end; }
svg text.x { text-anchor: middle; }
.legend span { margin-right: 16px; font-size: 13px; color: var(--muted); }
.legend i { display: inline-block; width: 12px; height: 12px; margin-right: 4px;
  vertical-align: -1px; border-radius: 2px; }
.legend i.balance { background: var(--accent); }
.legend i.available { background: #cfe8da; }
.legend i.debt { background: #f3d3d0; }
form.login { display: grid; gap: 10px; max-width: 560px; }
label { display: grid; gap: 4px; font-weight: 600; }
input[type=text], input[type=password] { font: inherit; padding: 6px 8px;
  border: 1px solid var(--line); border-radius: 4px; width: 100%; }
button { font: inherit; padding: 6px 14px; border-radius: 4px; border: 1px solid var(--accent);
  background: var(--accent); color: #fff; cursor: pointer; justify-self: start; }
form.logout button { background: #fff; color: var(--accent); }
p.message { padding: 8px 12px; border-radius: 4px; background: #fdecea; color: var(--bad); }
code { font-size: 13px; }
""".strip()

_CSS_HASH: Final = base64.b64encode(hashlib.sha256(CSS.encode("utf-8")).digest()).decode("ascii")

# Nothing but this service's own pages: no script anywhere, the one inline stylesheet by its
# hash (no style attributes), an empty data: icon (so the browser asks for no favicon),
# forms posting here only, no framing (the pages act with the cookie's key), no <base>.
CONTENT_SECURITY_POLICY: Final = "; ".join(
    (
        "default-src 'none'",
        f"style-src 'sha256-{_CSS_HASH}'",
        "img-src data:",
        "form-action 'self'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
    )
)

_LAYOUT: Final = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{% block title %}{% endblock %} - gpu-credits</title>
<link rel="icon" href="data:,">
<style>{{ css }}</style>
</head>
<body>
<header>
<h1>{% block heading %}gpu-credits{% endblock %}</h1>
{% if signed_in %}
<form class="logout" method="post" action="{{ root }}/ui/logout">
<button type="submit">Sign out</button>
</form>
{% endif %}
</header>
<main>
{% block main %}{% endblock %}
</main>
</body>
</html>
"""

_LOGIN: Final = """{% extends "layout.html" %}
{% block title %}Sign in{% endblock %}
{% block heading %}gpu-credits: open an account{% endblock %}
{% block main %}
<section>
{% if message %}<p class="message" id="message">{{ message }}</p>{% endif %}
<form class="login" method="post" action="{{ root }}/ui/login">
<label>Account id
<input type="text" name="account_id" value="{{ account_id }}" required maxlength="128"
 autocomplete="off" spellcheck="false">
</label>
<label>API key
<input type="password" name="key" required maxlength="128" autocomplete="off">
</label>
<button type="submit">Open</button>
</form>
<p class="note">A key with the <code>credits:read</code> scope. This browser keeps it in a
cookie for {{ cookie_hours }} hours or until you sign out; the cookie is sent to these pages
only and no script can read it. Never put a key in a URL.</p>
{% if not auth_enabled %}
<p class="note">Authentication is off on this service (no API key is configured): any key
opens any account.</p>
{% endif %}
</section>
{% endblock %}
"""

_ERROR: Final = """{% extends "layout.html" %}
{% block title %}{{ title }}{% endblock %}
{% block heading %}{{ status }} {{ title }}{% endblock %}
{% block main %}
<section>
<p class="message" id="message">{{ detail }}</p>
<p><a href="{{ root }}/ui/login">Open an account</a></p>
</section>
{% endblock %}
"""

_ACCOUNT: Final = """{% extends "layout.html" %}
{% block title %}{{ view.account_id }}{% endblock %}
{% block heading %}Account {{ view.account_id }}{% endblock %}
{% block main %}
<section id="totals">
<h2>At the account's clock</h2>
<dl class="totals">
<div><dt>Balance</dt>
<dd id="balance" class="{{ 'negative' if view.balance < 0 else '' }}">{{ view.balance }}</dd>
</div>
<div><dt>Available</dt><dd id="available">{{ view.available }}</dd></div>
<div><dt>Debt</dt><dd id="debt" class="{{ 'negative' if view.debt else '' }}">{{ view.debt }}</dd>
</div>
<div><dt>Clock</dt><dd id="clock">{{ view.timestamp }}</dd></div>
<div><dt>Watermark</dt><dd id="watermark">{{ view.watermark }}</dd></div>
<div><dt>Live grants</dt><dd id="live-grants">{{ live_grant_count }}</dd></div>
</dl>
<p class="note">The clock is the latest timestamp of the account's writes; entries before the
watermark are final, later ones provisional (a late write may still restate them).
Timestamps are in the callers' units.</p>
</section>

<section id="history">
<h2>Balance over time</h2>
<svg class="chart" id="chart" viewBox="0 0 {{ chart.width }} {{ chart.height }}"
 role="img" aria-labelledby="chart-title chart-desc">
<title id="chart-title">Balance of {{ view.account_id }} after each ledger entry</title>
<desc id="chart-desc">{{ chart.points | length }} entries from timestamp
{{ chart.points[0].timestamp }} to {{ chart.points[-1].timestamp }}.</desc>
{% for tick in chart.y_ticks %}
<line class="grid" x1="{{ chart.left }}" x2="{{ chart.right_edge }}"
 y1="{{ px(tick.at) }}" y2="{{ px(tick.at) }}"/>
<text class="y" x="{{ chart.left - 8 }}" y="{{ px(tick.at + 4) }}">{{ tick.label }}</text>
{% endfor %}
{% for tick in chart.x_ticks %}
<text class="x" x="{{ px(tick.at) }}" y="{{ chart.bottom_edge + 24 }}">{{ tick.label }}</text>
{% endfor %}
<path class="available" d="{{ chart.available_path }}"/>
<path class="debt" d="{{ chart.debt_path }}"/>
<line class="axis" x1="{{ chart.left }}" x2="{{ chart.left }}"
 y1="{{ chart.top }}" y2="{{ chart.bottom_edge }}"/>
<line class="axis" x1="{{ chart.left }}" x2="{{ chart.right_edge }}"
 y1="{{ chart.bottom_edge }}" y2="{{ chart.bottom_edge }}"/>
<line class="zero" x1="{{ chart.left }}" x2="{{ chart.right_edge }}"
 y1="{{ px(chart.zero_y) }}" y2="{{ px(chart.zero_y) }}"/>
<path class="balance" d="{{ chart.balance_path }}"/>
{% for p in chart.points %}
<circle class="point {{ p.kind }}" cx="{{ px(p.x) }}" cy="{{ px(p.y) }}" r="3"
 data-sequence="{{ p.sequence }}" data-timestamp="{{ p.timestamp }}"
 data-balance="{{ p.balance }}" data-available="{{ p.available }}" data-debt="{{ p.debt }}">
<title>#{{ p.sequence }} {{ p.kind }} at {{ p.timestamp }}: balance {{ p.balance }}
(available {{ p.available }}, debt {{ p.debt }})</title></circle>
{% endfor %}
</svg>
<p class="legend"><span><i class="balance"></i>balance</span>
<span><i class="available"></i>available</span>
<span><i class="debt"></i>debt (below 0)</span></p>
<p class="note">{% if older_entries %}The latest {{ chart.points | length }} entries; older
ones are in the ledger API (<code>GET /v1/accounts/…/ledger</code>).{% else %}Every entry of
the ledger.{% endif %}</p>
</section>

<section id="expirations">
<h2>Upcoming expirations</h2>
{% if grants %}
<table>
<thead><tr><th class="num">Expires at</th><th class="num">In</th><th class="num">Remaining</th>
<th class="num">Grant</th><th>Classes</th><th>Name</th></tr></thead>
<tbody>
{% for g in grants %}
<tr data-grant-id="{{ g.grant_id }}">
<td class="num">{{ g.expiry }}</td>
<td class="num">{{ g.expiry - view.timestamp }}</td>
<td class="num">{{ g.remaining }}</td>
<td class="num">{{ g.grant_id }}</td>
<td class="text">{{ classes(g.resources) }}</td>
<td class="text">{{ g.name or "" }}</td>
</tr>
{% endfor %}
</tbody>
</table>
<p class="note">Live grants in the order consumption draws them (earliest expiry first)
{%- if live_grant_count > grants | length %}: the first {{ grants | length }} of
{{ live_grant_count }}{% endif %}. "In" counts from the clock; what is left of a grant at its
expiry is recorded as expired once a write moves the clock there.</p>
{% else %}
<p class="note">No live grants: nothing is due to expire.</p>
{% endif %}
</section>

<section id="ledger">
<h2>Latest ledger entries</h2>
<table>
<thead><tr><th class="num">#</th><th class="num">Time</th><th>Kind</th>
<th class="num">Amount</th><th>Details</th><th class="num">Balance</th>
<th class="num">Available</th><th class="num">Debt</th><th>State</th></tr></thead>
<tbody>
{% for e in table %}
<tr data-sequence="{{ e.sequence }}">
<td class="num">{{ e.sequence }}</td>
<td class="num">{{ e.timestamp }}</td>
<td>{{ e.kind }}</td>
<td class="num">{{ e.amount }}</td>
<td class="text">{{ e.details }}</td>
<td class="num {{ 'negative' if e.balance < 0 else '' }}">{{ e.balance }}</td>
<td class="num">{{ e.available }}</td>
<td class="num">{{ e.debt }}</td>
<td class="{{ '' if e.final else 'provisional' }}">{{ 'final' if e.final else 'provisional' }}
{%- if e.revision %}, revision {{ e.revision }}{% endif %}</td>
</tr>
{% endfor %}
</tbody>
</table>
<p class="note">Newest first: the latest {{ table | length }}. The full history is the ledger
API's.</p>
</section>
{% endblock %}
"""


def classes(names: list[str] | None) -> str:
    """A grant's GPU classes as the pages show them ("any": unrestricted)."""
    return ", ".join(names) if names else "any"


_ENV: Final = Environment(
    loader=DictLoader(
        {
            "layout.html": _LAYOUT,
            "login.html": _LOGIN,
            "error.html": _ERROR,
            "account.html": _ACCOUNT,
        }
    ),
    autoescape=select_autoescape(default=True, default_for_string=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)
_ENV.globals["px"] = px
_ENV.globals["classes"] = classes
_ENV.globals["css"] = Markup(CSS)  # a constant: the one value inserted unescaped


def render(template: str, **values: Any) -> str:
    return _ENV.get_template(template).render(**values)
