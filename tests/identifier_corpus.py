"""Texts the identifier search tests of both backends share: an identifier, a longer one that
starts with it, its spaced and dashed forms, a path, and several punctuated identifiers."""

from __future__ import annotations

import random

IDENTIFIER_TEXTS = [
    "see fenlocalex_44364 in the log",
    "the token fenlocalex_4 alone",
    "spaced fenlocalex 4 is two words",
    "open /home/x/src/main.py now",
    "the (HTTP_404) error, then v1.2.3 and TKT-00123.",
    "dashed fenlocalex-4 is another identifier",
]


def seeded_identifier_texts() -> list[str]:
    """300 texts of seeded identifiers (``fen_123``, ``alpha_beta_7.4``, …) and plain words."""
    rng = random.Random(12)
    stems = ["fen", "fenloc", "tkt", "alpha_beta"]
    texts = []
    for _ in range(300):
        ident = f"{rng.choice(stems)}_{rng.randint(1, 999)}"
        if rng.random() < 0.3:
            ident += f".{rng.randint(0, 9)}"
        texts.append(f"note {ident} and more" if rng.random() < 0.8 else "plain words only")
    return texts


RECALL_QUERIES = ("fen_1", "fenloc_2", "alpha_beta_3", "tkt_99", "fen_12.3", "beta_4")
"""Identifier queries over ``seeded_identifier_texts`` (each matches at a token boundary)."""
