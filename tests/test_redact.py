"""Secret redaction for shareable exports: every secret caught, ordinary text byte-identical."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hermes_es.redact import (
    RedactionStats,
    marker,
    redact,
    redact_value,
    redact_with_count,
    redact_with_stats,
)

# Fake secret material is assembled at runtime so no literal here looks like a real credential.
_MIX = "a1B2c3D4e5F6g7H8i9J0kLmN"


def fake(n: int, alphabet: str = _MIX) -> str:
    """Return a deterministic fake secret body of ``n`` characters."""
    return (alphabet * (n // len(alphabet) + 1))[:n]


HEX = "0123456789abcdef"
UPPER = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
JWT = (
    "eyJ" + "hbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9"
    "." + "eyJ" + "zdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ"
    "." + fake(43)
)

# (kind, secret) for every secret recognised by its own shape, wherever it appears.
PROVIDER_SECRETS: list[tuple[str, str]] = [
    ("openai_key", "sk-" + "a" * 48),
    ("openai_key", "sk-" + fake(48)),
    ("openai_key", "sk-proj-" + fake(40) + "_" + fake(20) + "-" + fake(30)),
    ("openai_key", "sk-svcacct-" + fake(64)),
    ("anthropic_key", "sk-ant-api03-" + fake(80) + "-" + fake(12) + "AA"),
    ("openrouter_key", "sk-or-v1-" + fake(64, HEX)),
    ("google_api_key", "AIza" + "Sy" + fake(33)),
    ("gcp_access_token", "ya29" + "." + fake(40) + "-" + fake(20) + "_" + fake(60)),
    ("gcp_access_token", "ya29" + "." + fake(20)),
    ("groq_key", "gsk_" + fake(52)),
    ("huggingface_token", "hf_" + fake(34)),
    ("stripe_key", "sk_" + "live_" + fake(24)),
    ("stripe_key", "rk_" + "live_" + fake(24)),
    ("stripe_key", "sk_" + "test_" + fake(24)),
    ("xai_key", "xai-" + fake(80)),
    ("github_token", "ghp_" + fake(36)),
    ("github_token", "gho_" + fake(36)),
    ("github_token", "ghu_" + fake(36)),
    ("github_token", "ghs_" + fake(36)),
    ("github_token", "ghr_" + fake(36)),
    ("github_token", "github_pat_" + fake(22) + "_" + fake(59)),
    ("gitlab_token", "glpat-" + fake(20)),
    ("npm_token", "npm_" + fake(36)),
    ("slack_token", "xoxb-" + "1234567890-1234567890123-" + fake(24)),
    ("slack_token", "xoxp-" + "1234567890-1234567890-1234567890123-" + fake(32, HEX)),
    ("aws_access_key_id", "AKIA" + fake(16, UPPER)),
    ("aws_access_key_id", "ASIA" + fake(16, UPPER)),
    ("jwt", JWT),
    ("telegram_bot_token", "123456789:AA" + fake(33)),
]

CONTEXTS: dict[str, Callable[[str], str]] = {
    "prose": lambda s: f"Sure! I found it in your notes: {s}. Rotate it after the demo.",
    "json": lambda s: json.dumps({"tool": "read_file", "result": {"credential_ref": s}}),
    "env": lambda s: f"# generated\nMODEL=gpt-4o\nPROVIDER_CREDENTIAL={s}\nDEBUG=1\n",
    "shell": lambda s: f"$ curl -s -H 'X-Custom: {s}' https://api.example.com/v1/models | jq .",
    "tool_output": lambda s: f"provider:\n  name: example\n  value: {s}\n  retries: 3\n",
    "markdown": lambda s: f"| name | value |\n|---|---|\n| key | `{s}` |\n",
}


@pytest.mark.parametrize("context", sorted(CONTEXTS))
@pytest.mark.parametrize(("kind", "secret"), PROVIDER_SECRETS)
def test_provider_secret_is_redacted_in_every_context(kind: str, secret: str, context: str) -> None:
    """A shape-recognised secret is replaced by its kind marker in prose, JSON, env, shell, ..."""
    text = CONTEXTS[context](secret)
    out = redact(text)
    assert secret not in out
    assert marker(kind) in out


@pytest.mark.parametrize(("kind", "secret"), PROVIDER_SECRETS)
def test_provider_secret_leaves_surrounding_text_intact(kind: str, secret: str) -> None:
    """Only the secret itself is replaced; the words around it are kept byte for byte."""
    text = f"before {secret} after"
    assert redact(text) == f"before {marker(kind)} after"


# (text, secret that must vanish, text that must survive, kind) for labelled and structured cases.
def _labelled_cases() -> list[tuple[str, str, str, str]]:
    """Build cases whose secret is only recognisable from its label or surroundings."""
    aws_secret = fake(40, _MIX + "/+")
    mistral = fake(32)
    pw = "Tr0ub4dor&3"
    pem_body = "\n".join(fake(64, _MIX + "+/") for _ in range(5))
    pem = f"-----BEGIN RSA PRIVATE KEY-----\n{pem_body}\n-----END RSA PRIVATE KEY-----"
    openssh = pem.replace("RSA", "OPENSSH")
    gcp = json.dumps(
        {
            "type": "service_account",
            "project_id": "demo-project",
            "private_key_id": fake(40, HEX),
            "private_key": f"-----BEGIN PRIVATE KEY-----\n{pem_body}\n-----END PRIVATE KEY-----\n",
            "client_email": "bot@demo-project.iam.gserviceaccount.com",
        },
        indent=2,
    )
    webhook = "T" + fake(8, UPPER) + "/B" + fake(8, UPPER) + "/" + fake(24)
    token = fake(40)
    return [
        (f"MISTRAL_API_KEY={mistral}", mistral, "MISTRAL_API_KEY=", "mistral_key"),
        (
            f"aws_secret_access_key = {aws_secret}",
            aws_secret,
            "aws_secret_access_key = ",
            "aws_secret_key",
        ),
        (
            f'{{"Credentials": {{"AccessKeyId": "x", "SecretAccessKey": "{aws_secret}"}}}}',
            aws_secret,
            '"SecretAccessKey": "',
            "aws_secret_key",
        ),
        (
            f"AWS_SECRET_ACCESS_KEY={aws_secret}\n",
            aws_secret,
            "AWS_SECRET_ACCESS_KEY=",
            "aws_secret_key",
        ),
        (
            f'curl -H "Authorization: Bearer {token}" https://api.example.com',
            token,
            "Authorization: Bearer ",
            "bearer_token",
        ),
        (f"authorization: token {token}", token, "authorization: token ", "bearer_token"),
        (
            f'{{"headers": {{"Authorization": "Basic {fake(24)}=="}}}}',
            fake(24),
            '"Authorization": "Basic ',
            "bearer_token",
        ),
        (f"sent request with Bearer {token}", token, "with Bearer ", "bearer_token"),
        (f"Authorization: Bearer {JWT}", JWT, "Authorization: Bearer ", "jwt"),
        (f"Here is the key:\n{pem}\nKeep it safe.", pem_body, "Keep it safe.", "private_key"),
        (f"cat ~/.ssh/id_ed25519\n{openssh}\n", pem_body, "cat ~/.ssh/id_ed25519\n", "private_key"),
        (
            json.dumps({"content": f"key file:\n{pem}"}),
            fake(64, _MIX + "+/"),
            '{"content": "key file:',
            "private_key",
        ),
        (gcp, fake(64, _MIX + "+/"), '"client_email": "bot@demo-project', "gcp_private_key"),
        (
            f"postgres://admin:{pw}@db.internal:5432/app",
            pw,
            "postgres://admin:",
            "url_password",
        ),
        (
            f"DATABASE_URL=mysql+pymysql://root:{pw}@127.0.0.1/shop",
            pw,
            "@127.0.0.1/shop",
            "url_password",
        ),
        (
            f"https://hooks.slack.com/services/{webhook}",
            webhook,
            "https://hooks.slack.com/",
            "slack_webhook",
        ),
        (f"DB_PASSWORD={pw}\n", pw, "DB_PASSWORD=", "password"),
        (f"export PGPASSWORD='{pw}'", pw, "export PGPASSWORD='", "password"),
        (f'{{"username": "alice", "password": "{pw}"}}', pw, '"username": "alice"', "password"),
        (f"database:\n  user: app\n  password: {pw}\n", pw, "  password: ", "password"),
        (f'password = "{pw}"  # toml', pw, "# toml", "password"),
        (f'client.login(user="bob", password="{pw}")', pw, 'password="', "password"),
        (f"mysql -u root --password={pw} shop", pw, "mysql -u root --password=", "password"),
        (f"mysql -u root --password {pw} shop", pw, " shop", "password"),
        (f"psql 'host=db user=app password={pw} dbname=x'", pw, " dbname=x'", "password"),
        (f"Server=db;User Id=sa;Password={pw};", pw, "User Id=sa;Password=", "password"),
        (f"api_key: {token}", token, "api_key: ", "api_key"),
        (f'{{"apiKey": "{token}"}}', token, '{"apiKey": "', "api_key"),
        (f"X-Api-Key: {token}", token, "X-Api-Key: ", "api_key"),
        (f"CLIENT_SECRET={token}", token, "CLIENT_SECRET=", "secret"),
        (f"secret: {token}", token, "secret: ", "secret"),
        (f"GET /callback?code=1&access_token={token}&state=x", token, "&state=x", "token"),
        (f"token={token}", token, "token=", "token"),
        (
            f'{{"refresh_token": "{token}", "expires_in": 3600}}',
            token,
            '"expires_in": 3600',
            "token",
        ),
        (f'{{\\"api_key\\": \\"{token}\\"}}', token, '{\\"api_key\\": \\"', "api_key"),
        (f"'password' => '{pw}',", pw, "'password' => '", "password"),
        (f"curl -fsS -u deploy:{pw} https://ci.example.com/api", pw, "-u deploy:", "password"),
        (f"mysqldump -uroot -p{pw} shop > dump.sql", pw, " shop > dump.sql", "password"),
        (f"sshpass -p '{pw}' ssh admin@10.0.0.5", pw, " ssh admin@10.0.0.5", "password"),
        (
            f"curl -H 'Cookie: sessionid={token}; theme=dark' https://app.example.com",
            token,
            "curl -H 'Cookie: ",
            "cookie",
        ),
    ]


LABELLED_CASES = _labelled_cases()


@pytest.mark.parametrize(("text", "secret", "kept", "kind"), LABELLED_CASES)
def test_labelled_secret_is_redacted_and_label_kept(
    text: str, secret: str, kept: str, kind: str
) -> None:
    """A secret known by its label or structure is replaced; the label or host around it stays."""
    out = redact(text)
    assert secret not in out
    assert kept in out
    assert marker(kind) in out


def test_gcp_access_token_in_authorization_header_keeps_scheme() -> None:
    """A ya29 token in a Bearer header becomes a gcp_access_token marker; the scheme stays."""
    token = "ya29" + "." + fake(30) + "-" + fake(90)
    for text in (
        f"Authorization: Bearer {token}",
        f'curl -H "Authorization: Bearer {token}" https://www.googleapis.com/drive/v3/files',
        json.dumps({"headers": {"Authorization": f"Bearer {token}"}}),
    ):
        out, stats = redact_with_stats(text)
        assert out == text.replace(token, marker("gcp_access_token"))
        assert dict(stats.by_kind) == {"gcp_access_token": 1}


def test_url_password_keeps_user_and_host() -> None:
    """``scheme://user:pass@host`` keeps the user, host, port and path; only the password goes."""
    url = "redis://cache:" + fake(20) + "@redis.internal:6379/0"
    assert redact(url) == "redis://cache:[REDACTED:url_password]@redis.internal:6379/0"


def test_pem_block_is_replaced_whole() -> None:
    """A PEM private key block, header and footer included, becomes one marker."""
    body = "\n".join(fake(64) for _ in range(3))
    text = f"A\n-----BEGIN EC PRIVATE KEY-----\n{body}\n-----END EC PRIVATE KEY-----\nB"
    assert redact(text) == "A\n[REDACTED:private_key]\nB"


def test_unterminated_pem_block_is_redacted_up_to_its_last_base64_line() -> None:
    """A truncated private key (no END line) still loses its body, and later prose stays."""
    body = "\n".join(fake(64) for _ in range(3))
    text = f"-----BEGIN PRIVATE KEY-----\n{body}\n(output truncated)"
    assert redact(text) == "[REDACTED:private_key]\n(output truncated)"


def test_public_key_and_certificate_are_left_alone() -> None:
    """Public keys and certificates are not secrets and are kept."""
    body = "\n".join(fake(64) for _ in range(2))
    for label in ("PUBLIC KEY", "CERTIFICATE"):
        text = f"-----BEGIN {label}-----\n{body}\n-----END {label}-----"
        assert redact(text) == text


ORDINARY_TEXT = [
    "Reset your password from the account settings page.",
    "The password must be at least 12 characters long.",
    "The token limit is 8192 tokens; usage: 512 prompt tokens.",
    "Use a bearer token for the Authorization header.",
    "The bearer authentication scheme is described in RFC 6750.",
    "Authorization: required for all endpoints",
    "Enter the password: (it will not echo)",
    "**Password:** must not be reused",
    "commit 3f2a9c0e1d4b5a6978695a4b3c2d1e0f9a8b7c6d (HEAD -> main)",
    "git checkout 3f2a9c0e1d4b5a6978695a4b3c2d1e0f9a8b7c6d",
    "request id 123e4567-e89b-12d3-a456-426614174000 failed",
    "resumed session 20250305_091523_a1b2c3 (parent 20250304_231501_ff00aa)",
    "session_id: 20250305_091523_a1b2c3",
    "/home/alice/.ssh/id_rsa and ~/.config/hermes/tokens.json",
    r"C:\Users\alice\AppData\Local\hermes\secrets.db",
    "GOOGLE_APPLICATION_CREDENTIALS=/etc/gcp/service-account.json",
    "PWD=/home/alice/project\nOLDPWD=/home/alice",
    "https://api.openai.com/v1/chat/completions",
    "https://github.com/NousResearch/hermes-agent/pull/123",
    "https://user@github.com/org/repo.git",
    "git@github.com:org/repo.git",
    "http://localhost:8080/search?q=token&page=2",
    "postgres://user:password@localhost/db is the example DSN",
    "redis://:$REDIS_PASSWORD@cache:6379",
    "ssh://git@example.com:22/srv/repo.git",
    "def get_api_key(self) -> str:",
    'api_key = os.environ["OPENAI_API_KEY"]',
    'token = os.getenv("GITHUB_TOKEN")',
    "token = self._token",
    "password_hash = bcrypt.hashpw(password, salt)",
    "client = OpenAI(api_key=api_key)",
    "conn = connect(host=host, password=db_password, port=5432)",
    "session = Session(token=token)",
    "if not api_key:\n    raise ConfigError('missing key')",
    "password: str",
    "api_key: str | None = None",
    "token: Optional[str] = None",
    "api_key: SecretStr",
    "max_tokens=4096, temperature=0.2",
    '{"max_tokens": 4096, "prompt_tokens": 12, "total_tokens": 40}',
    '{"token": " Hello", "logprob": -0.31}',
    '{"token": "world", "bytes": [119, 111]}',
    '{"token_type": "Bearer", "expires_in": 3600}',
    '{"password": "", "token": null, "secret": true}',
    "password: ${DB_PASSWORD}",
    "API_KEY=<your-api-key>",
    'api_key: "{{ vault_api_key }}"',
    "password=********",
    "Authorization: Bearer $TOKEN",
    'curl -H "Authorization: Bearer ${OPENAI_API_KEY}" https://api.openai.com',
    "Use the --password flag or pass --token to the CLI.",
    "hermes sessions export --redact --session-id 20250305_091523_a1b2c3",
    "task-management-system-design-document",
    "from huggingface_hub import hf_hub_download",
    "The gsk_ and hf_ prefixes identify Groq and Hugging Face keys.",
    "Keys start with sk- followed by random characters.",
    "AKIA is the prefix of an access key id.",
    "ya29 is the prefix of a Google OAuth access token.",
    "Tokens look like ya29.<random> and expire after an hour.",
    "ya29.short_token is too short to be one.",
    "the file ya29.json and the host ya29.example.com",
    "eyJ is base64 for the start of a JSON object.",
    "-----BEGIN PUBLIC KEY----- marks a public key.",
    "port: 5432, retries: 3, pin 1234",
    "Total: 42 items at 3.50 each = 147.00",
    "The quick brown fox jumps over the lazy dog.",
    "key: value\nname: demo\nmodel: gpt-4o",
    "keyboard shortcuts: ctrl+k",
    "tokenizer: cl100k_base",
    "passthrough=true",
    "Bearer tokens expire after an hour.",
    "Authorization: Bearer YOUR_API_KEY",
    'password = input("Password: ")',
    "const password = await bcrypt.hash(plain, 10);",
    "docker run --rm -u 1000:1000 -v $PWD:/src image",
    "docker run -u www-data:www-data nginx",
    "mysql -u root -p shop",
    "mkdir -p build/out && psql -p5432 -h db",
    "cookie: chocolate chip",
    "git push -u origin main",
]


@pytest.mark.parametrize("text", ORDINARY_TEXT)
def test_ordinary_text_is_byte_identical(text: str) -> None:
    """Prose, code, ids, paths and credential-free URLs pass through unchanged."""
    assert redact(text) == text
    assert redact_with_count(text) == (text, 0)


ALL_SECRET_TEXTS = [CONTEXTS[c](s) for _k, s in PROVIDER_SECRETS for c in CONTEXTS] + [
    case[0] for case in LABELLED_CASES
]


@pytest.mark.parametrize("text", ALL_SECRET_TEXTS)
def test_redaction_is_idempotent(text: str) -> None:
    """Redacting already-redacted text changes nothing and counts nothing."""
    once = redact(text)
    assert redact_with_count(once) == (once, 0)


def test_count_and_stats_report_each_secret_by_kind() -> None:
    """redact_with_count and redact_with_stats count every replaced secret, by kind."""
    text = "a " + "ghp_" + fake(36) + " b " + "ghs_" + fake(36) + " c password=" + "hunter22"
    out, count = redact_with_count(text)
    assert count == 3
    assert (
        out == "a [REDACTED:github_token] b [REDACTED:github_token] c password=[REDACTED:password]"
    )
    _, stats = redact_with_stats(text)
    assert stats.total == 3
    assert dict(stats.by_kind) == {"github_token": 2, "password": 1}


def test_redact_value_walks_nested_structures() -> None:
    """Strings inside dicts, lists and tuples are redacted; keys and non-strings are kept."""
    key = "sk-proj-" + fake(48)
    pw = "Tr0ub4dor&3"
    message = {
        "role": "assistant",
        "content": [{"type": "text", "text": f"Using {key} now"}],
        "tool_calls": [
            {
                "id": "call_1",
                "function": {
                    "name": "shell",
                    "arguments": json.dumps({"cmd": f"mysql --password={pw} shop"}),
                },
            }
        ],
        "meta": ("ok", 3, None, 2.5, True),
    }
    out = redact_value(message)
    assert out == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Using [REDACTED:openai_key] now"}],
        "tool_calls": [
            {
                "id": "call_1",
                "function": {
                    "name": "shell",
                    "arguments": json.dumps({"cmd": "mysql --password=[REDACTED:password] shop"}),
                },
            }
        ],
        "meta": ("ok", 3, None, 2.5, True),
    }
    assert key in message["content"][0]["text"]  # type: ignore[index]  # input not mutated


def test_redact_value_replaces_unprefixed_secret_under_secret_key() -> None:
    """A plain string stored under a key such as ``api_key`` is replaced whole."""
    args = {"api_key": fake(32), "password": "hunter22", "model": "mistral-large", "n": 2}
    stats = RedactionStats()
    out = redact_value(args, stats)
    assert out == {
        "api_key": "[REDACTED:api_key]",
        "password": "[REDACTED:password]",
        "model": "mistral-large",
        "n": 2,
    }
    assert stats.total == 2
    assert redact_value(out) == out


def test_redact_value_keeps_placeholders_under_secret_keys() -> None:
    """Empty, masked and env-reference values under secret keys are not secrets."""
    args = {"api_key": "", "token": "$GITHUB_TOKEN", "password": "****", "max_tokens": 100}
    assert redact_value(args) == args


def test_redact_value_passes_other_objects_through() -> None:
    """Non-container, non-string values come back as the very same object."""
    obj = object()
    assert redact_value(obj) is obj
    assert redact_value(42) == 42
    assert redact_value(None) is None


SAFE_ALPHABET = "abcdefghijklmnopqrstuvwxyz0123456789 \n,.!?'()"


@settings(max_examples=300)
@given(st.text(alphabet=SAFE_ALPHABET, max_size=400))
def test_text_without_secret_characters_is_unchanged(text: str) -> None:
    """Lower-case prose with no ``=:@_-/`` and no capitals cannot hold a secret and is kept."""
    assert redact(text) == text


@settings(max_examples=300)
@given(st.text(max_size=400))
def test_redact_never_raises_and_is_idempotent(text: str) -> None:
    """Any text at all is redacted without error, and a second pass changes nothing."""
    once = redact(text)
    assert redact(once) == once


_FRAGMENTS = [s for _k, s in PROVIDER_SECRETS] + [
    "password=",
    "api_key: ",
    '"token": "',
    "Authorization: Bearer ",
    "https://u:",
    "@host/",
    "-----BEGIN PRIVATE KEY-----\n",
    "-----END PRIVATE KEY-----",
    "--password ",
    " ",
    "\n",
    '"',
    "'",
    "=",
    fake(20),
]


@settings(max_examples=300)
@given(st.lists(st.sampled_from(_FRAGMENTS) | st.text(max_size=5), max_size=12))
def test_mixed_secret_fragments_redact_idempotently(parts: list[str]) -> None:
    """Text spliced from secrets, labels and noise redacts the same the second time."""
    once = redact("".join(parts))
    assert redact(once) == once
