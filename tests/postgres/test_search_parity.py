"""The same corpus and queries find the same messages on SQLite (FTS5) and PostgreSQL (tsvector)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from hermes_es.commands.engine import SessionEngine
from tests.identifier_corpus import IDENTIFIER_TEXTS
from tests.pg_server import PgServer

CORPUS = [
    "please run chat-send before the deploy",
    "chat send is not the same as chat-send? it is, for the index",
    "section P2.2 of the plan covers retries",
    "P2.25 is a different section entirely",
    "mail alice@example.com or bob.smith@example.org about it",
    "docs at https://example.com/path/to/page?q=1 and http://hermes.dev",
    "the quick brown fox jumps over the lazy dog",
    "Quick thinking: foxes are QUICK",
    "prefix tests: deploying deployment deployed redeploy",
    "東京都に住んでいます",
    "今日は東京で会議があります",
    "日本語の検索テスト",
    "한국어 문장을 검색합니다",
    "café crème and naïve résumé",
    "snake_case_identifier and CamelCaseIdentifier in code",
    "version 1.2.3 released; see v1.2.4 notes",
    "tool output: a.txt b.txt c.txt",
    "nothing interesting here",
    "北、京の地図",
    *IDENTIFIER_TEXTS,
    "inside a word: xfenlocalex_4 does not count",
    "long: alpha_beta_gamma_delta_epsilon_zeta_eta_theta_iota_kappa here",
    "reach carol.jones@mail.example.net or see https://docs.example.com/guide/install.html",
    "don't split it's",
]

QUERIES = [
    "quick",  # words, case-insensitive
    "fox",
    "quick brown",  # AND of words
    '"quick brown"',  # phrase
    '"brown quick"',  # phrase in the wrong order matches nothing
    "chat-send",  # identifiers
    "P2.2",
    "alice@example.com",
    "example.com",
    "https://example.com/path/to/page",
    "deploy*",  # prefixes
    "dep*",
    '"chat se"*',
    "東京",  # CJK
    "会議",
    "検索",
    "한국어",
    "北京",  # CJK characters apart in the text, adjacent as tokens
    "cafe",  # diacritics folded
    "résumé",
    "snake_case_identifier",
    "1.2.3",
    "a.txt",
    "nothing here",
    "absent",
    "-",  # nothing searchable
    "fenlocalex_4",  # identifiers: a prefix of the identifiers from a word boundary on
    "fenlocalex_44364",
    "fenlocalex-4",
    '"fenlocalex_4"',  # quoted: the phrase of its words
    "main.py",
    "src/main.py",
    "/home/x/src/main.py",
    "v1.2",
    "v1.2.3",
    "http_404",
    "TKT-001",
    "TKT-00123",
    "bob.smith@example.org",
    "carol.jones@mail",
    "example.org",
    "https://docs.example.com",
    "docs.example.com/guide",
    "alpha_beta_gamma_delta_epsilon_zeta_eta_theta_iota_kappa",  # over 48 characters
    "alpha_beta_gamma_delta_epsilon_zeta_eta_theta_io",  # 48 characters
    "alpha_beta",
    "don't",
    "fenlocalex_4 log",
    "v1.2 TKT-001",
]


@pytest.fixture(scope="module")
def engines(
    tmp_path_factory: pytest.TempPathFactory, pg_server: PgServer
) -> Iterator[tuple[SessionEngine, SessionEngine]]:
    """An engine on SQLite and one on PostgreSQL, both holding CORPUS (one message each)."""
    url = pg_server.database()
    sqlite = SessionEngine.open(tmp_path_factory.mktemp("parity") / "state.db", actor="test")
    pg = SessionEngine.open(url, actor="test")
    try:
        for eng in (sqlite, pg):
            sid = eng.start_session("cli", session_id="corpus", cwd="")
            for text in CORPUS:
                eng.append_message(sid, "user", text)
        yield sqlite, pg
    finally:
        sqlite.close()
        pg.close()
        pg_server.drop(url)


def _matches(engine: SessionEngine, query: str) -> set[int]:
    return {h.seq for h in engine.search(query, limit=100)}


@pytest.mark.parametrize("query", QUERIES)
def test_same_messages_match_on_both_backends(
    engines: tuple[SessionEngine, SessionEngine], query: str
) -> None:
    """Each query class matches the same messages on SQLite and on PostgreSQL (a bare
    identifier as a prefix of the identifiers that start with it on both: docs/search.md,
    "Identifiers")."""
    sqlite, pg = engines
    assert _matches(pg, query) == _matches(sqlite, query)


def test_parity_is_not_vacuous(engines: tuple[SessionEngine, SessionEngine]) -> None:
    """The corpus exercises every class: these queries find what a person expects."""
    _, pg = engines
    seqs = {q: _matches(pg, q) for q in QUERIES}
    assert seqs["chat-send"] == {0, 1}
    assert seqs["P2.2"] == {2, 3}
    assert seqs['"brown quick"'] == set()
    assert seqs["deploy*"] == {0, 8}
    assert seqs["東京"] == {9, 10}
    assert seqs["北京"] == {18}
    assert seqs["cafe"] == {13}
    assert seqs["alice@example.com"] == {4}
    assert seqs["-"] == set()
    assert seqs["fenlocalex_4"] == {19, 20}
    assert seqs["fenlocalex_44364"] == {19}
    assert seqs["fenlocalex-4"] == {24}
    assert seqs['"fenlocalex_4"'] == {20, 21, 24}
    assert seqs["main.py"] == seqs["src/main.py"] == seqs["/home/x/src/main.py"] == {22}
    assert seqs["v1.2"] == {15, 23}  # v1.2.4, v1.2.3
    assert seqs["http_404"] == seqs["TKT-001"] == seqs["v1.2.3"] == {23}
    assert seqs["v1.2 TKT-001"] == {23}
    assert seqs["fenlocalex_4 log"] == {19}
    assert seqs["carol.jones@mail"] == seqs["docs.example.com/guide"] == {27}
    assert seqs["example.com"] == {4, 5, 27}
    assert seqs["alpha_beta_gamma_delta_epsilon_zeta_eta_theta_iota_kappa"] == {26}
    assert seqs["alpha_beta_gamma_delta_epsilon_zeta_eta_theta_io"] == {26}
    assert seqs["don't"] == {28}


def test_postgres_snippets_mark_the_match(engines: tuple[SessionEngine, SessionEngine]) -> None:
    """Snippets on PostgreSQL wrap each hit in \\x02 … \\x03, as on SQLite."""
    sqlite, pg = engines
    for query in ("chat-send", "東京", "deploy*", "fenlocalex_4", "src/main.py", '"fenlocalex_4"'):
        assert next(h.snippet for h in pg.search(query, limit=1)).count("\x02") >= 1
        assert {h.snippet for h in pg.search(query, limit=100)} == {
            h.snippet for h in sqlite.search(query, limit=100)
        }


def test_postgres_ranks_better_matches_first(pg_url: str) -> None:
    """A message with more occurrences of the term ranks above one with a single mention."""
    with SessionEngine.open(pg_url, actor="test") as eng:
        sid = eng.start_session("cli", cwd="")
        eng.append_message(sid, "user", "retry once then give up, it is a long sentence here")
        eng.append_message(sid, "user", "retry retry retry")
        eng.append_message(sid, "user", "something else entirely")
        hits = eng.search("retry")
        assert [h.seq for h in hits] == [1, 0]
        assert hits[0].score < hits[1].score
