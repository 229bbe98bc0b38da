"""The redaction corpus: secrets people paste (65+ kinds) and look-alikes that are not secrets.

Every secret is built at run time from a seeded generator (no literal credential in the
repository) and placed in four contexts: user text, assistant text, tool output, and the JSON
arguments of a tool call. A secret counts as caught when no 8-character window of it (the
whole of it when shorter) survives redaction; a look-alike counts as a false positive when
redaction changes its text at all. ``evaluate`` computes recall, misses per kind and false
positives for any ``str -> str`` redactor (tests assert thresholds; bench/bench_redact.py
reports the figures and compares a maintained detector's rule set).
"""

from __future__ import annotations

import base64
import json
import random
import string
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

HEX = "0123456789abcdef"
ALNUM = string.ascii_letters + string.digits
UPPER_NUM = string.ascii_uppercase + string.digits
B64 = ALNUM + "+/"
URLSAFE = ALNUM + "_-"


def gen(kind: str, n: int, alphabet: str = ALNUM, salt: str = "") -> str:
    """``n`` characters from ``alphabet``, the same on every run for the same kind and salt."""
    rng = random.Random(f"{kind}/{salt}/{n}")
    return "".join(rng.choice(alphabet) for _ in range(n))


@dataclass(frozen=True)
class Case:
    """One secret of one kind: the text it sits in and the secret part of it."""

    kind: str
    snippet: str
    secret: str


def _jwt(kind: str) -> str:
    head = base64.urlsafe_b64encode(b'{"alg":"HS256","typ":"JWT"}').decode().rstrip("=")
    body = base64.urlsafe_b64encode(b'{"sub":"1234567890","name":"Ana"}').decode().rstrip("=")
    return f"{head}.{body}.{gen(kind, 43, URLSAFE)}"


def _pem(kind: str, label: str) -> str:
    lines = "\n".join(gen(kind, 64, B64, salt=str(i)) for i in range(6))
    return f"-----BEGIN {label}-----\n{lines}\n-----END {label}-----"


def secret_cases() -> list[Case]:
    """One case per kind; the snippet is how the secret is typically pasted."""
    g = gen
    out: list[Case] = []

    def add(kind: str, secret: str, template: str = "{s}") -> None:
        out.append(Case(kind, template.format(s=secret), secret))

    # Provider keys with distinctive prefixes.
    add("openai_project", "sk-proj-" + g("oa", 74, URLSAFE), "OPENAI_API_KEY={s}")
    add("openai_legacy", "sk-" + g("ol", 48), "here's my key {s} thanks")
    add("openai_service_account", "sk-svcacct-" + g("osa", 64, URLSAFE), "use {s} for the bot")
    add("anthropic", "sk-ant-api03-" + g("an", 93, URLSAFE) + "AA", "ANTHROPIC_API_KEY={s}")
    add("anthropic_admin", "sk-ant-admin01-" + g("ana", 93, URLSAFE) + "AA", "admin key: {s}")
    add("openrouter", "sk-or-v1-" + g("or", 64, HEX), "key is {s}")
    add("google_api_key", "AIza" + g("gk", 35, URLSAFE), "GOOGLE_API_KEY={s}")
    add("gcp_access_token", "ya29." + g("ya", 120, URLSAFE), "gcloud printed {s}")
    add("groq", "gsk_" + g("gq", 52), "GROQ_API_KEY={s}")
    add("huggingface", "hf_" + g("hf", 34), "HF_TOKEN={s}")
    add("xai", "xai-" + g("xa", 80), "XAI_API_KEY={s}")
    add("perplexity", "pplx-" + g("pp", 48), "my perplexity key {s}")
    add("replicate", "r8_" + g("r8", 37), "REPLICATE_API_TOKEN={s}")
    add("stripe_secret", "sk_live_" + g("st", 99), "stripe key {s}")
    add("stripe_restricted", "rk_live_" + g("rk", 99), "restricted {s}")
    add("stripe_webhook", "whsec_" + g("wh", 32), "STRIPE_WEBHOOK_SECRET={s}")
    add("github_classic", "ghp_" + g("gh", 36), "git clone with {s}")
    add("github_oauth", "gho_" + g("go", 36), "oauth {s}")
    add("github_fine_grained", "github_pat_" + g("gp", 22) + "_" + g("gp2", 59), "PAT {s}")
    add("gitlab", "glpat-" + g("gl", 20, URLSAFE), "GITLAB_TOKEN={s}")
    add("npm", "npm_" + g("npm", 36), "//registry.npmjs.org/:_authToken={s}")
    add("pypi", "pypi-AgEIcHlwaS5vcmc" + g("py", 70, URLSAFE), "password = {s}")
    add("sendgrid", "SG." + g("sg", 22, URLSAFE) + "." + g("sg2", 43, URLSAFE), "SENDGRID={s}")
    add("slack_bot", "xoxb-" + g("sb", 12, string.digits) + "-" + g("sb2", 24), "bot {s}")
    add("slack_app", "xapp-1-A" + g("sa", 10, UPPER_NUM) + "-" + g("sa2", 64, HEX), "app {s}")
    add(
        "slack_webhook",
        "T" + g("sw", 10, UPPER_NUM) + "/B" + g("sw2", 10, UPPER_NUM) + "/" + g("sw3", 24),
        "https://hooks.slack.com/services/{s}",
    )
    add(
        "discord_webhook",
        g("dw", 18, string.digits) + "/" + g("dw2", 68, URLSAFE),
        "https://discord.com/api/webhooks/{s}",
    )
    add(
        "discord_bot",
        "MT" + g("db", 24, ALNUM) + "." + g("db2", 6, URLSAFE) + "." + g("db3", 38, URLSAFE),
        "DISCORD bot token: {s}",
    )
    add("telegram_bot", g("tg", 10, string.digits) + ":AA" + g("tg2", 33, URLSAFE), "bot {s}")
    add("twilio_api_key", "SK" + g("tw", 32, HEX), "twilio api key {s}")
    add("docker_pat", "dckr_pat_" + g("dk", 27, URLSAFE), "docker login -u ana -p {s}")
    add("digitalocean", "dop_v1_" + g("do", 64, HEX), "doctl auth init -t {s}")
    add("shopify", "shpat_" + g("sh", 32, HEX), "X-Shopify-Access-Token: {s}")
    add("databricks", "dapi" + g("dbx", 32, HEX), "use {s} for the workspace")
    add("mailgun", "key-" + g("mg", 32, HEX), "mailgun api {s}")
    add("linear", "lin_api_" + g("li", 40), "LINEAR_API_KEY={s}")
    add("notion", "ntn_" + g("nt", 46), "notion integration {s}")
    add("atlassian", "ATATT3xFfGF0" + g("at", 180, URLSAFE) + "=" + g("at2", 8, HEX), "{s}")
    add("new_relic", "NRAK-" + g("nr", 27, UPPER_NUM), "NEW_RELIC_API_KEY={s}")
    add("postman", "PMAK-" + g("pm", 24, HEX) + "-" + g("pm2", 34, HEX), "postman {s}")
    add("grafana", "glsa_" + g("gf", 32) + "_" + g("gf2", 8, HEX), "grafana sa {s}")
    add("vault", "hvs." + g("hv", 90, URLSAFE), "VAULT_TOKEN={s}")
    add("supabase", "sbp_" + g("sp", 40, HEX), "supabase {s}")
    add("age_secret_key", "AGE-SECRET-KEY-1" + g("age", 58, UPPER_NUM), "# {s}")
    add("square", "EAAA" + g("sq", 60, URLSAFE), "square token {s}")
    add("aws_access_key_id", "AKIA" + g("ak", 16, UPPER_NUM), "aws_access_key_id = {s}")
    add("aws_secret_key", g("as", 40, B64), "aws_secret_access_key = {s}")
    add("jwt", _jwt("jwt"), "id_token={s}")
    # Credentials recognised by their place: headers, URLs, command lines, config.
    add("bearer_header", g("be", 40, URLSAFE), "Authorization: Bearer {s}")
    add("basic_auth_header", g("ba", 28, B64) + "==", "Authorization: Basic {s}")
    add("x_api_key_header", g("xk", 32, HEX), "x-api-key: {s}")
    add("url_password", "Tr0ub4dor&3x", "postgres://admin:{s}@db.internal:5432/app")
    add("mongodb_srv", g("mo", 16), "mongodb+srv://app:{s}@cluster0.example.net/db")
    add("redis_url", g("re", 20), "REDIS_URL=redis://:{s}@cache.internal:6379/0")
    add("private_key_rsa", _pem("rsa", "RSA PRIVATE KEY"), "{s}")
    add("private_key_openssh", _pem("ossh", "OPENSSH PRIVATE KEY"), "cat ~/.ssh/id_ed25519\n{s}")
    add(
        "gcp_service_account",
        _pem("gsa", "PRIVATE KEY").replace("\n", "\\n"),
        '{{"type": "service_account", "private_key": "{s}\\n", "client_email": "x@y.iam"}}',
    )
    add("cookie", "session=" + g("ck", 48, URLSAFE), "Cookie: {s}")
    add("curl_user", g("cu", 14), "curl -u deploy:{s} https://ci.example.com/api")
    add("mysql_p", g("my", 14), "mysql -u root -p{s} shop")
    add("sshpass", g("ss", 14), "sshpass -p {s} ssh root@10.0.0.5")
    add("env_secret_key", g("sk", 50, URLSAFE), "DJANGO_SECRET_KEY={s}")
    add("yaml_api_key", g("ya2", 40), "provider:\n  api_key: {s}\n")
    add("json_password", "Zq9!mB2#rT7w", '{{"username": "ana", "password": "{s}"}}')
    add("password_flag", "Hx7-pLq2-Wm9", "pg_dump --password {s} app")
    add("azure_storage", g("az", 86, B64) + "==", "AccountName=x;AccountKey={s};Endpoint=y")
    add("twilio_auth_token", g("ta", 32, HEX), "TWILIO_AUTH_TOKEN={s}")
    add("cloudflare", g("cf", 40, URLSAFE), "CF_API_TOKEN={s}")
    # What people write in prose.
    add("my_password_is", "hunter2!Blue", "fyi my password is {s} so log in as me")
    add("password_in_json_string", "S3cr3t-Pa55", '{{"note": "db password: {s}"}}')
    add("token_after_word", g("tk", 40, ALNUM), "here is the token {s} for the api")
    add("netrc", "n3tRcPa55w0rd", "machine api.example.com login ana password {s}")
    return out


LOOKALIKES: list[str] = [
    "commit 9f2c1e7b4a0d3f6e8c5b1a2d4e6f8a0b1c3d5e7f fixes the build",
    "request id 3f1e2d4c-5b6a-4978-8a1b-2c3d4e5f6a7b failed",
    "docker pull python@sha256:" + gen("img", 64, HEX),
    '"integrity": "sha512-' + gen("npm-int", 86, B64) + '=="',
    "reset your password in the account settings",
    "your password is incorrect, try again",
    "my password is too weak according to the checker",
    "the password field is required",
    "password = getpass.getpass()",
    'api_key = os.environ["OPENAI_API_KEY"]',
    "token = request.headers.get('X-Token')",
    "export OPENAI_API_KEY=sk-...",
    "API_KEY=YOUR_API_KEY",
    "GITHUB_TOKEN=${{ secrets.GITHUB_TOKEN }}",
    "password: <your password here>",
    "https://ana@github.com/org/repo.git",
    "postgres://localhost:5432/app",
    "the key-value store keeps key-frame data",
    "token count: 1234 tokens in, 56 tokens out",
    "the token expires in 3600 seconds",
    "use Bearer token authentication for the API",
    "/home/ana/.ssh/id_rsa.pub",
    "pip install scikit-learn # not sk-learn",
    "test_redaction_keeps_ordinary_text_byte_identical",
    "SKU12345 is out of stock",
    "machine learning models need a login page and a password reset flow",
    '{"password_min_length": 12, "token_type": "bearer", "secret": false}',
    '{"api_key_env": "OPENAI_API_KEY", "tokens_in": 50}',
    "color #ff8800, version 1.22.3, released 2025-03-05",
    "server 192.168.1.20:8080, ana@example.com, +1 555 0100",
    "secretName: my-tls-secret",
    "arn:aws:iam::123456789012:role/deploy",
    "tokens start with ghp_ and are 40 characters long",
    "the JWT header starts with eyJ",
    "dapi is the Databricks token prefix",
    "UUID 550e8400-e29b-41d4-a716-446655440000",
    "base64 of hello world is aGVsbG8gd29ybGQ=",
    "call tokenize(text) then count the tokens",
    "the password reset token was sent by email",
    "awk '{print $1}' access.log | sort | uniq -c",
    "the cache key is user:42:profile",
    "SELECT * FROM users WHERE token_id = 17",
    "lockfile hash: " + gen("lock", 40, HEX),
    "ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ ana@laptop is my public key",
    "NetworkConfigurationManager.Loader.InitializeDefaultServiceProviders()",
    "machine learning login page password reset",
    "my password is stored in the keychain",
    "the pin is 1234 for the demo board",
    "My password was changed on 2025-03-05",
    "the token budget is 128000 per request",
    "generate a token 2025-03-05T09:15:00Z",
    "the token_limit setting and max_tokens=4096",
    "cache entry user-profile-key expired",
    "password: hunter (a placeholder from the tutorial)",
    "AccountName=devstoreaccount1;Endpoint=http://127.0.0.1:10000",
    "Authorization header missing",
]


def _user(s: str) -> str:
    return s


def _assistant(s: str) -> str:
    return f"I see this in what you sent:\n\n{s}\n\nI'll use it for the next step."


def _tool_output(s: str) -> str:
    return f"$ cat config.txt\n# generated 2025-03-05\n{s}\nDEBUG=1\n[exit 0]"


def _tool_arguments(s: str) -> str:
    return json.dumps({"path": "/tmp/notes.txt", "content": s})


CONTEXTS: dict[str, Callable[[str], str]] = {
    "user": _user,
    "assistant": _assistant,
    "tool_output": _tool_output,
    "tool_arguments": _tool_arguments,
}


def leaked(secret: str, out: str, context: str) -> bool:
    """True when some 8-character window of ``secret`` (as the context encodes it) survives."""
    needle = json.dumps(secret)[1:-1] if context == "tool_arguments" else secret
    width = min(8, len(needle))
    return any(needle[i : i + width] in out for i in range(len(needle) - width + 1))


@dataclass
class Evaluation:
    """Corpus figures for one redactor."""

    total: int = 0
    caught: int = 0
    misses: Counter[str] = field(default_factory=Counter)
    missed_cases: list[tuple[str, str]] = field(default_factory=list)
    lookalikes: int = 0
    false_positives: list[tuple[str, str]] = field(default_factory=list)

    @property
    def recall(self) -> float:
        """Fraction of placed secrets with nothing of them left."""
        return self.caught / self.total if self.total else 0.0

    @property
    def kinds(self) -> int:
        """Number of secret kinds in the corpus."""
        return len({c.kind for c in secret_cases()})


def evaluate(redactor: Callable[[str], str]) -> Evaluation:
    """Run ``redactor`` over every secret in every context and every look-alike."""
    result = Evaluation()
    for case in secret_cases():
        for context, wrap in CONTEXTS.items():
            result.total += 1
            if leaked(case.secret, redactor(wrap(case.snippet)), context):
                result.misses[case.kind] += 1
                result.missed_cases.append((case.kind, context))
            else:
                result.caught += 1
    for text in LOOKALIKES:
        for context, wrap in CONTEXTS.items():
            result.lookalikes += 1
            original = wrap(text)
            if redactor(original) != original:
                result.false_positives.append((context, text))
    return result
