# SPDX-License-Identifier: MIT
"""A Markdown table on stdout, its columns padded: what compare_scipy.py and compare_rabbit.py print for
docs/benchmarks.md."""

from __future__ import annotations


def markdown_table(header: tuple, rows: list[tuple]) -> None:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

    def line(cells) -> str:
        return "| " + " | ".join(c.ljust(w) for c, w in zip(cells, widths)) + " |"

    print(line(header))
    print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
    for r in rows:
        print(line(r))
