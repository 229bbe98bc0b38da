"""The seeded chat workload both sides of ``bench_vs_hermes`` store: standard library only.

It runs in this project's interpreter and in the Hermes Agent virtual environment (which has
neither apsw nor hermes_es), so it imports nothing beyond ``bench.common``'s text generator.

Sessions come from several sources and hold turns of user text, assistant answers, assistant
tool calls with their tool results, identifiers (snake_case, dotted, dashed, CamelCase, rare
ticket-like ones), emails, URLs and CJK text (fixed sentences plus random runs of common Han
characters and kana, so two-character CJK queries have few matches).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from bench.common import TextGen

SOURCES = ("cli", "cli", "cli", "telegram", "discord", "cron", "subagent", "slack")
PER_SESSION = 10
"""Messages per session: user, assistant calling a tool, tool, assistant, then 3 plain pairs."""

_HAN = (
    "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说"
    "产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使"
    "点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明"
    "看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料"
)
_KANA = "あいうえおかきくけこさしすせそたちつてとなにぬねのアイウエオカキクケコサシスセソタチツテト"


@dataclass(frozen=True)
class Msg:
    """One stored message, as plain values both sides can take."""

    session: int
    role: str
    content: str
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    tool_call_id: str | None = None
    tool_name: str | None = None
    at: float = 0.0


class Workload:
    """``n`` messages in sessions of ``PER_SESSION``, reproducible from ``seed``."""

    def __init__(self, n: int, seed: int = 1, *, size: int = 280) -> None:
        self.n = n
        self.seed = seed
        self.size = size
        self.gen = TextGen(seed=seed)
        self.rng = random.Random(seed * 7919 + 1)
        self.start_at = 1_700_000_000.0
        self._cached: list[Msg] | None = None

    def cache(self) -> None:
        """Generate the messages once and keep them (large sizes pass over them several
        times: the text generator costs more than storing a message)."""
        self._cached = None
        self._cached = list(self.messages())

    @property
    def sessions(self) -> int:
        """How many sessions the messages fill."""
        return -(-self.n // PER_SESSION)

    def session_id(self, k: int) -> str:
        """The id both sides store session ``k`` under."""
        return f"bench{self.seed:02d}_{k:08d}"

    def source(self, k: int) -> str:
        """The source (platform) of session ``k``."""
        return SOURCES[k % len(SOURCES)]

    def _rare_identifier(self) -> str:
        rng, words = self.rng, self.gen.words
        kind = rng.randrange(4)
        w = rng.choice(words[200:6200])
        n = rng.randint(1, 99_999)
        if kind == 0:
            return f"{w}_{n:05d}"
        if kind == 1:
            return f"{w}-{n}.{rng.randint(1, 9)}"
        if kind == 2:
            return f"{w.capitalize()}{rng.choice(words[200:6200]).capitalize()}{n}"
        return f"TKT-{n:05d}"

    def _cjk_run(self) -> str:
        rng = self.rng
        alphabet = _HAN if rng.random() < 0.7 else _KANA
        return "".join(rng.choice(alphabet) for _ in range(rng.randint(4, 10)))

    def _text(self) -> str:
        rng = self.rng
        text = self.gen.message(self.size)
        extras = []
        if rng.random() < 0.15:
            extras.append(self._rare_identifier())
        if rng.random() < 0.04:
            extras.append(self._cjk_run())
        if not extras:
            return text
        words = text.split(" ")
        for extra in extras:
            words.insert(rng.randrange(len(words) + 1), extra)
        return " ".join(words)

    def messages(self) -> Iterator[Msg]:
        """Every message in order, lazily (the same sequence on every call)."""
        if self._cached is not None:
            yield from self._cached
            return
        self.gen = TextGen(seed=self.seed)
        self.rng = random.Random(self.seed * 7919 + 1)
        for i in range(self.n):
            k, j = divmod(i, PER_SESSION)
            at = self.start_at + k * 600.0 + j
            if j == 1:
                call_id = f"call_{k:08d}"
                args = {"path": f"src/{self.gen.words[200 + k % 3000]}.py", "line": k % 500}
                yield Msg(
                    session=k,
                    role="assistant",
                    content=self._text()[: self.size // 3],
                    tool_calls=[
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {"name": "read_file", "arguments": json.dumps(args)},
                        }
                    ],
                    at=at,
                )
            elif j == 2:
                yield Msg(
                    session=k,
                    role="tool",
                    content=self._text(),
                    tool_call_id=f"call_{k:08d}",
                    tool_name="read_file",
                    at=at,
                )
            else:
                yield Msg(
                    session=k,
                    role="user" if j % 2 == 0 else "assistant",
                    content=self._text(),
                    at=at,
                )


def recall_queries(texts: list[str], count: int = 12, seed: int = 3) -> dict[str, list[str]]:
    """Identifier and CJK queries taken from stored text, each with 1-300 substring matches."""
    rng = random.Random(seed)
    idents: list[str] = []
    cjk: list[str] = []
    han_kana = set(_HAN + _KANA)
    for text in rng.sample(texts, min(len(texts), 4000)):
        for token in text.split(" "):
            if len(idents) < count * 3 and _identifier_like(token):
                idents.append(token)
            if len(cjk) < count * 3 and len(token) >= 4 and all(c in han_kana for c in token):
                start = rng.randrange(len(token) - 1)
                cjk.append(token[start : start + rng.choice((2, 3))])
    out: dict[str, list[str]] = {"identifier": [], "cjk": []}
    for name, pool in (("identifier", idents), ("cjk", cjk)):
        for q in dict.fromkeys(pool):
            hits = substring_scan(texts, q)
            if 1 <= len(hits) <= 300:
                out[name].append(q)
            if len(out[name]) >= count:
                break
    return out


def _identifier_like(token: str) -> bool:
    """A rare-identifier shape: ``TKT-n``, ``word_n``, ``word-n.m``; no email or URL."""
    shaped = token.startswith("TKT-") or ("_" in token and token[-1].isdigit()) or "-" in token
    plain = token.isascii() and len(token) > 4 and "@" not in token and "/" not in token
    return shaped and plain


def substring_scan(texts: list[str], query: str) -> list[int]:
    """Indexes of the texts holding ``query`` (case-insensitive): the recall ground truth."""
    q = query.lower()
    return [i for i, t in enumerate(texts) if q in t.lower()]
