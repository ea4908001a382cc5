# SPDX-License-Identifier: MIT
"""The one lookup of a channel among a model's channels (fitlib.hist, fitlib.results, fitlib.plot)."""

from __future__ import annotations

import numpy as np


def find(channels, which):
    """(index, channel, first bin) of the channel `which` among `channels` (in bin order): a name, or an index."""
    start = 0
    for i, c in enumerate(channels):
        if c.name == which or (isinstance(which, (int, np.integer)) and not isinstance(which, bool) and i == which):
            return i, c, start
        start += c.nbins
    names = ", ".join(repr(c.name) for c in channels)
    raise KeyError(f"the model has no channel {which!r}; its channels are {names}")
