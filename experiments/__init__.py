"""The study: experiment specs (``*.toml``) and the code that turns their committed runs into FINDINGS.md.

``study`` assembles the rows (``build_rows``) from ``sampled_rows``, ``probe_rows``, ``organism_rows``
and ``corpus_rows`` (what they share: ``common``); ``headline`` draws the headline table and figure.
``python -m scripts.findings`` (``make findings``) writes them; ``e15_table`` and ``e15_repair`` print
tables of their own. Importable from the repository root as the package ``experiments``.
"""
