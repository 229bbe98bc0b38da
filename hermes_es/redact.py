"""Secret redaction for shareable session exports (``hermes sessions export --redact``).

Each secret is replaced by a marker naming its kind, e.g. ``[REDACTED:openai_key]``, so a reader
knows something was there. Only the secret itself is replaced: the label of a
``password=...`` assignment, the user and host of a ``scheme://user:pass@host`` URL and the
``Bearer`` scheme of an ``Authorization`` header are kept. Rules run in a fixed order, most
specific first; a marker is never matched again, and passes repeat until nothing new is found,
so redacting twice gives the same text as redacting once. Patterns are compiled once at import,
use the stdlib ``re`` module only, and are written to scan in linear time (no nested unbounded
repeats), so a multi-megabyte tool output cannot stall an export.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

__all__ = [
    "RedactionStats",
    "marker",
    "redact",
    "redact_value",
    "redact_with_count",
    "redact_with_stats",
]

_MARKER_RE = re.compile(r"\[REDACTED:[a-z0-9_]+\]")


def marker(kind: str) -> str:
    """Return the replacement text for a secret of ``kind``."""
    return f"[REDACTED:{kind}]"


@dataclass
class RedactionStats:
    """How many secrets were redacted, by kind."""

    by_kind: Counter[str] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        """Number of secrets redacted in all."""
        return sum(self.by_kind.values())

    def add(self, kind: str) -> None:
        """Count one redacted secret of ``kind``."""
        self.by_kind[kind] += 1


# A classifier decides, given a match, the kind to redact it as, or None to leave it alone.
_Classifier = Callable[[re.Match[str]], str | None]


@dataclass(frozen=True, slots=True)
class _Rule:
    """One compiled pattern; its ``secret`` group is what gets replaced.

    ``needles``: lower-case strings one of which every match contains; a text holding none of
    them skips the rule without a regex pass (most rules start with a case-insensitive word or
    a class, which the ``re`` engine cannot scan for quickly).
    """

    pattern: re.Pattern[str]
    classify: _Classifier
    needles: tuple[str, ...] = ()


def _always(kind: str) -> _Classifier:
    """Classifier that accepts every match as ``kind``."""
    return lambda _m: kind


_LITERAL_HEAD = re.compile(r"[A-Za-z0-9_-]+")
_BOUNDARY = "(?<![A-Za-z0-9_-])"


def _literal_first(regex: str) -> str:
    """``(?<!class)lit…`` rewritten as ``lit(?<!class lit)…``: the same matches, but a pattern
    that starts with a literal lets ``re`` skip to each occurrence of it (~100x faster)."""
    if not regex.startswith(_BOUNDARY):
        return regex
    rest = regex[len(_BOUNDARY) :]
    head = _LITERAL_HEAD.match(rest)
    if head is None:
        return regex
    literal = head.group(0)
    if rest[head.end() : head.end() + 1] in ("{", "*", "+", "?"):
        literal = literal[:-1]  # its last character is quantified: not part of the literal
    if not literal:
        return regex
    return f"{literal}(?<![A-Za-z0-9_-]{literal}){rest[len(literal) :]}"


def _fixed(kind: str, regex: str, flags: int = 0, needles: tuple[str, ...] = ()) -> _Rule:
    """Rule whose whole match (or ``secret`` group) is always a secret of ``kind``."""
    regex = _literal_first(regex)
    if "(?P<secret>" not in regex:
        regex = f"(?P<secret>{regex})"
    return _Rule(re.compile(regex, flags), _always(kind), needles)


# --- classifying labels such as ``OPENAI_API_KEY``, ``"clientSecret"``, ``--password`` --------

_CAMEL_RE = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_KEY_SPLIT_RE = re.compile(r"[_.\-]+")
_PASSWORD_SUFFIXES = ("password", "passwd", "passphrase")
_PASSWORD_WORDS = frozenset({"pass", "pwd", "pw"})
_NOT_SECRET_KEYS = frozenset({"pwd", "oldpwd"})  # shell working-directory variables
_KEY_PAIRS: Mapping[str, str] = {
    "api": "api_key",
    "access": "secret",
    "secret": "secret",
    "private": "private_key",
    "signing": "secret",
    "master": "secret",
    "account": "secret",
    "auth": "secret",
    "encryption": "secret",
    "session": "secret",
    "client": "secret",
    "license": "secret",
}


def _key_parts(key: str) -> list[str]:
    """Split a label into lower-case words: ``clientSecret`` → ``["client", "secret"]``."""
    return [p for p in _KEY_SPLIT_RE.split(_CAMEL_RE.sub("_", key).lower()) if p]


def _key_family(key: str) -> str | None:
    """Return the secret family a label names (``password``, ``token``, ...), or None."""
    if key.lower() in _NOT_SECRET_KEYS:
        return None
    parts = _key_parts(key)
    if not parts:
        return None
    last = parts[-1]
    if last.endswith(_PASSWORD_SUFFIXES) or last in _PASSWORD_WORDS:
        return "password"
    if last == "key" and len(parts) >= 2:
        for prefix, family in _KEY_PAIRS.items():
            if parts[-2].endswith(prefix):
                return family
        return None
    if last.endswith("apikey"):
        return "api_key"
    if last.endswith("secret"):
        return "secret"
    if last.endswith("token"):
        return "token"
    if last in ("auth", "credential", "credentials"):
        return "credential"
    return None


# --- deciding whether a labelled value is a real secret or code, a placeholder, a path -------

_STOP_VALUES = frozenset(
    {
        "none",
        "null",
        "nil",
        "true",
        "false",
        "undefined",
        "yes",
        "no",
        "on",
        "off",
        "required",
        "optional",
        "str",
        "string",
        "bytes",
        "int",
        "secretstr",
        "secretbytes",
        "await",
        "new",
        "lambda",
        "function",
        "async",
        "yield",
        "not",
        "self",
        "this",
        "cls",
        "input",
        "getpass",
        "redacted",
        "hidden",
        "masked",
        "your_api_key",
        "your-api-key",
        "your_token",
        "your_password",
        "pass",
        "password",
        "passwd",
        "secret",
        "token",
    }
)
_MASKED_RE = re.compile(r"^[*xX.•#_-]+\Z")
_PLACEHOLDER_RE = re.compile(r"^\$|^%\w+%\Z|\$\{|\{\{|^<[^>]*>\Z|os\.environ|getenv|^\.\.\.\Z")
_PATH_RE = re.compile(r"^(?:~?/|\.{1,2}/|[A-Za-z]:\\)")
_CODE_CHARS_RE = re.compile(r"[()\[\]{}]")
_DOTTED_RE = re.compile(r"^[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+\Z")
_IDENT_RE = re.compile(r"^[A-Za-z_]\w*\Z")
_WORDLIKE_RE = re.compile(r"^(?:[a-z]+|[A-Z][a-z]+)\Z")


def _is_variable_name(value: str) -> bool:
    """True for identifiers that read as a variable, e.g. ``user_password`` or ``apiKey``."""
    if not _IDENT_RE.match(value):
        return False
    parts = _key_parts(value)
    return len(parts) >= 2 and _key_family(value) is not None


def _plausible(value: str, family: str, *, quoted: bool) -> bool:
    """True if ``value``, labelled as ``family``, looks like a real secret worth redacting."""
    stripped = value.strip()
    if not stripped or _MARKER_RE.search(value):
        return False
    if stripped.lower() in _STOP_VALUES or _MASKED_RE.match(stripped):
        return False
    if _PLACEHOLDER_RE.search(stripped) or _PATH_RE.match(stripped):
        return False
    if not quoted and (
        _CODE_CHARS_RE.search(stripped) or _DOTTED_RE.match(stripped) or _is_variable_name(stripped)
    ):
        return False
    if family == "password":
        return len(stripped) >= 3
    return len(stripped) >= 8 and " " not in value and not _WORDLIKE_RE.match(stripped)


def _after(m: re.Match[str], n: int = 2) -> str:
    """The ``n`` characters that follow the match."""
    return m.string[m.end() : m.end() + n]


def _labelled(*, quoted: bool) -> _Classifier:
    """Classifier for ``key = value`` assignments: key must name a secret, value must look real."""

    def classify(m: re.Match[str]) -> str | None:
        family = _key_family(m.group("key"))
        value = m.group("secret")
        if family is None or not _plausible(value, family, quoted=quoted):
            return None
        if not quoted and m.group("op") == ":" and not _ends_line(m):
            return None
        if not quoted and _IDENT_RE.match(value) and _after(m).startswith((")", ", ", "(")):
            return None  # a variable or call in code: f(password=pw, ...), password = ask()
        return family

    return classify


def _ends_line(m: re.Match[str]) -> bool:
    """True if only spaces, a comment, ``,`` or ``}`` follow the match on its line.

    Inside a JSON string (a config file or header pasted into tool arguments) the line ends at
    an escaped newline or at the closing quote, so ``\\n``, ``\\r``, ``\\"`` and ``"`` end it too.
    """
    rest = m.string[m.end() : m.end() + 200].split("\n", 1)[0].strip()
    return rest == "" or rest.startswith(("#", ",", "}", "\\n", "\\r", '\\"', '"'))


_PASSWORDISH_RE = re.compile(r"(?=.*[A-Za-z])(?=.*[^A-Za-z])")
_TRAILING_PUNCT = ".,;:!?)]}'\""


def _passwordish(value: str) -> bool:
    """True for a value that reads as a password, not a word: 6+ chars, letters and more."""
    core = value.rstrip(_TRAILING_PUNCT)
    return len(core) >= 6 and bool(_PASSWORDISH_RE.match(core)) and not _PLACEHOLDER_RE.search(core)


def _prose_password(m: re.Match[str]) -> str | None:
    """Classifier for "my password is X", netrc ``password X``: X must look like a password."""
    return "password" if _passwordish(m.group("secret")) else None


def _discord(m: re.Match[str]) -> str | None:
    """Classifier for Discord bot tokens: base64 of a numeric id (holds digits), then random
    parts with digits; a dotted ``Namespace.Member.Method`` name has none."""
    if any(ch.isdigit() for ch in m.group("uid")) and any(ch.isdigit() for ch in m.group("hmac")):
        return "discord_bot_token"
    return None


_TOKENISH_RE = re.compile(r"(?=[^\s]*[A-Za-z])(?=[^\s]*\d)")


def _bare_token(m: re.Match[str]) -> str | None:
    """Classifier for a long bare value after the word "token": letters and digits mixed."""
    value = m.group("secret")
    return (
        "token" if _TOKENISH_RE.match(value) and _plausible(value, "token", quoted=True) else None
    )


def _flag(m: re.Match[str]) -> str | None:
    """Classifier for ``--password value``: a secret flag whose value is not a plain word."""
    family = _key_family(m.group("key"))
    value = m.group("secret")
    if family is None or (value.isalpha() and value.islower()):
        return None
    return family if _plausible(value, family, quoted=bool(m.group("q"))) else None


def _labelled_value(family: str) -> _Classifier:
    """Classifier for a value whose position says it is a ``family`` secret."""
    return lambda m: family if _plausible(m.group("secret"), family, quoted=True) else None


_CURL_RE = re.compile(r"\bcurl\b")
_MYSQL_RE = re.compile(r"\b(?:mysql|mysqldump|mysqladmin|mariadb)\b")


def _on_command_line(command: re.Pattern[str], classify: _Classifier) -> _Classifier:
    """Classifier that applies ``classify`` only where ``command`` starts the same line."""

    def on_line(m: re.Match[str]) -> str | None:
        floor = max(0, m.start() - 400)
        start = m.string.rfind("\n", floor, m.start()) + 1 or floor
        if not command.search(m.string, start, m.start()):
            return None
        return classify(m)

    return on_line


def _user_password(kind: str) -> _Classifier:
    """Classifier for ``user:pass`` pairs: skip placeholders, env refs, ``:port`` and uid:gid."""

    def classify(m: re.Match[str]) -> str | None:
        value, user = m.group("secret"), m.group("user")
        if value.isdigit() and (not user or user.isdigit()):
            return None
        return kind if _plausible(value, "password", quoted=True) else None

    return classify


def _bearer(m: re.Match[str]) -> str | None:
    """Classifier for Authorization header values: skip env refs and placeholders."""
    value = m.group("secret")
    if len(value) < 8 or not _plausible(value, "token", quoted=True):
        return None
    return "bearer_token"


# --- the rules, most specific first ------------------------------------------------------------

_B = r"(?<![A-Za-z0-9_-])"  # a token starts here: not glued to a preceding word
_E = r"(?![A-Za-z0-9_-])"  # and ends here
_PEM_LABEL = r"[A-Z0-9 ]*PRIVATE KEY(?: BLOCK)?"
_PEM_TEXT = r"(?:[^-]|-(?!----(?:BEGIN|END) ))*+"  # up to the next BEGIN/END line, linearly
_PEM_BODY = r"(?:(?:\s|\\[nr])+[A-Za-z0-9+/=]{16,})*"  # an unterminated block: base64 lines
_KEY_HINT = r"(?=[\w.-]{0,64}?(?i:pass|pwd|pw\b|secret|token|key|auth|cred))"
_LABEL_NEEDLES = ("pass", "pwd", "pw", "secret", "token", "key", "auth", "cred")
"""A label holds one of these (``_KEY_HINT``), so text without any skips the label rules."""
_OP = r"[ \t]*(?P<op>=>|=(?!=)|:(?![:/]))[ \t]*"
_OP_EQ = r"[ \t]*(?P<op>=>|=(?!=))[ \t]*"
_OP_COLON = r"[ \t]*(?P<op>:(?![:/]))[ \t]*"
# A label starts a run of name characters (so scanning stays linear), optionally quoted.
_NAME = rf"(?<![\w.-])(?P<kq>\\?[\"']?){_KEY_HINT}(?P<key>[\w.-]{{1,64}})(?P=kq)"
_LABEL = _NAME + _OP
# An unquoted ``key=value`` value; ``&`` ends it only where a query parameter or ``&&`` follows.
_EQ_VALUE = r"(?:[^\s\"'`,;&|<>(){}\[\]\\]|&(?!&)(?![\w.-]+=))+"

_RULES: tuple[_Rule, ...] = (
    # Whole private-key blocks: a service-account JSON field, then any PEM block.
    _Rule(
        re.compile(
            r"(?P<kq>\\?\")private_key(?P=kq)\s*:\s*(?P=kq)"
            r"(?P<secret>-----BEGIN(?:[^\"\\]|\\[^\"])+)"
        ),
        _always("gcp_private_key"),
        ("private_key",),
    ),
    _fixed(
        "private_key",
        rf"-----BEGIN {_PEM_LABEL}-----(?:{_PEM_TEXT}-----END {_PEM_LABEL}-----|{_PEM_BODY})",
        needles=("-----begin",),
    ),
    # Provider keys with distinctive prefixes.
    _fixed("anthropic_key", rf"{_B}sk-ant-[A-Za-z0-9_-]{{20,}}"),
    _fixed("openrouter_key", rf"{_B}sk-or-[A-Za-z0-9_-]{{20,}}"),
    _fixed("openai_key", rf"{_B}sk-(?:proj|svcacct|admin|None)-[A-Za-z0-9_-]{{20,}}"),
    _fixed("openai_key", rf"{_B}sk-[A-Za-z0-9]{{32,}}{_E}"),
    _fixed("stripe_key", rf"{_B}sk_(?:live|test)_[A-Za-z0-9]{{16,}}{_E}"),
    _fixed("stripe_key", rf"{_B}rk_(?:live|test)_[A-Za-z0-9]{{16,}}{_E}"),
    _fixed("stripe_key", rf"{_B}whsec_[A-Za-z0-9]{{24,}}{_E}"),
    _fixed("google_api_key", rf"{_B}AIza[0-9A-Za-z_-]{{35}}{_E}"),
    _fixed("gcp_access_token", rf"{_B}ya29\.[A-Za-z0-9_-]{{20,}}"),
    _fixed("groq_key", rf"{_B}gsk_[A-Za-z0-9]{{20,}}{_E}"),
    _fixed("huggingface_token", rf"{_B}hf_[A-Za-z0-9]{{30,}}{_E}"),
    _fixed("xai_key", rf"{_B}xai-[A-Za-z0-9]{{40,}}{_E}"),
    _fixed("github_token", rf"{_B}gh[pousr]_[A-Za-z0-9]{{30,}}{_E}"),
    _fixed("github_token", rf"{_B}github_pat_[A-Za-z0-9_]{{22,}}{_E}"),
    _fixed("gitlab_token", rf"{_B}glpat-[A-Za-z0-9_-]{{20,}}{_E}"),
    _fixed("npm_token", rf"{_B}npm_[A-Za-z0-9]{{36}}{_E}"),
    _fixed("pypi_token", rf"{_B}pypi-AgE[A-Za-z0-9_-]{{50,}}"),
    _fixed("sendgrid_key", rf"{_B}SG\.[A-Za-z0-9_-]{{22}}\.[A-Za-z0-9_-]{{43}}{_E}"),
    _fixed("slack_token", rf"{_B}xox[abprse]-[A-Za-z0-9-]{{10,}}"),
    _fixed("slack_token", rf"{_B}xapp-[0-9]-[A-Za-z0-9-]{{10,}}"),
    _fixed(
        "slack_webhook",
        r"https://hooks\.slack\.com/(?P<secret>(?:services|workflows|triggers)/[A-Za-z0-9/_-]+)",
    ),
    _fixed(
        "discord_webhook",
        r"https://(?:ptb\.|canary\.)?discord(?:app)?\.com/api/webhooks/(?P<secret>\d+/[\w-]+)",
    ),
    _fixed("telegram_bot_token", r"(?<![\d:])\d{8,10}:AA[A-Za-z0-9_-]{33}(?![\w-])"),
    _fixed("perplexity_key", rf"{_B}pplx-[A-Za-z0-9]{{40,}}{_E}"),
    _fixed("twilio_api_key", r"SK(?<![A-Za-z0-9]SK)[0-9a-fA-F]{32}(?![A-Za-z0-9])"),
    _Rule(
        re.compile(
            rf"{_B}(?P<secret>(?P<uid>[MNO][A-Za-z0-9_-]{{23,27}})\.[A-Za-z0-9_-]{{6}}"
            rf"\.(?P<hmac>[A-Za-z0-9_-]{{27,40}})){_E}"
        ),
        _discord,
    ),
    _fixed("docker_token", rf"{_B}dckr_(?:pat|oat)_[A-Za-z0-9_-]{{20,}}"),
    _fixed("digitalocean_token", rf"{_B}do[opr]_v1_[a-f0-9]{{64}}{_E}"),
    _fixed("shopify_token", rf"{_B}shp(?:at|ss|ca|pa)_[a-fA-F0-9]{{32}}{_E}"),
    _fixed("databricks_token", rf"{_B}dapi[a-f0-9]{{32}}(?:-\d)?{_E}"),
    _fixed("mailgun_key", rf"{_B}key-[0-9a-f]{{32}}{_E}"),
    _fixed("linear_key", rf"{_B}lin_(?:api|oauth)_[A-Za-z0-9]{{40}}{_E}"),
    _fixed("notion_token", rf"{_B}ntn_[A-Za-z0-9]{{40,}}{_E}"),
    _fixed("notion_token", rf"{_B}secret_[A-Za-z0-9]{{43}}{_E}"),
    _fixed("atlassian_token", rf"{_B}ATATT3[A-Za-z0-9_=-]{{100,}}"),
    _fixed("new_relic_key", rf"{_B}NRA[KI]-[A-Z0-9]{{27}}{_E}"),
    _fixed("postman_key", rf"{_B}PMAK-[a-f0-9]{{24}}-[a-f0-9]{{34}}{_E}"),
    _fixed("grafana_token", rf"{_B}glsa_[A-Za-z0-9]{{32}}_[A-Fa-f0-9]{{8}}{_E}"),
    _fixed("grafana_token", rf"{_B}glc_[A-Za-z0-9+/]{{32,}}=*"),
    _fixed("vault_token", rf"{_B}hv[sbr]\.[A-Za-z0-9_-]{{24,}}"),
    _fixed("supabase_token", rf"{_B}sbp_[a-f0-9]{{40}}{_E}"),
    _fixed("age_secret_key", r"AGE-SECRET-KEY-1(?<![\w]AGE-SECRET-KEY-1)[0-9A-Z]{58}\b"),
    _fixed("square_token", rf"{_B}EAAA[A-Za-z0-9_-]{{60}}{_E}"),
    _fixed("square_token", rf"{_B}sq0(?:atp|csp)-[A-Za-z0-9_-]{{22,}}{_E}"),
    _fixed("replicate_token", rf"{_B}r8_[A-Za-z0-9]{{37}}{_E}"),
    _fixed(
        "aws_access_key_id", r"(?<![A-Za-z0-9])(?:AKIA|ASIA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Za-z0-9])"
    ),
    _fixed(
        "aws_secret_key",
        r"(?i:aws_?secret_?(?:access_?)?key|SecretAccessKey)[\"']?[ \t]*[:=][ \t]*[\"']?"
        r"(?P<secret>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])",
        needles=("aws", "secretaccesskey"),
    ),
    _fixed(
        "mistral_key",
        r"(?i:mistral[_-]?api[_-]?key)[\"']?[ \t]*[:=][ \t]*[\"']?(?P<secret>[A-Za-z0-9]{32})"
        r"(?![A-Za-z0-9])",
        needles=("mistral",),
    ),
    # Tokens that carry their own structure.
    _fixed("jwt", rf"{_B}eyJ[A-Za-z0-9_-]{{8,}}\.eyJ[A-Za-z0-9_-]{{8,}}\.[A-Za-z0-9_-]*{_E}"),
    _Rule(
        re.compile(
            r"(?i:authorization)[\"']?[ \t]*[:=][ \t]*[\"']?"
            r"(?:(?i:bearer|basic|token|bot|digest)[ \t]+)?"
            r"(?!(?i:bearer|basic|token|bot|digest)\b)(?P<secret>[\w.~+/:-]+=*)"
        ),
        _bearer,
        ("authorization",),
    ),
    _fixed(
        "bearer_token",
        r"\bBearer[ \t]+(?P<secret>(?=[\w.~+/-]*\d)[\w.~+/-]{16,}=*)",
        needles=("bearer",),
    ),
    _Rule(
        re.compile(
            r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]{0,31}://(?P<user>[^\s:/?#@\"'<>]*):"
            r"(?P<secret>[^\s/?#\"'<>]+)@(?=[A-Za-z0-9\[])"
        ),
        _user_password("url_password"),
        ("://",),
    ),
    _Rule(
        re.compile(
            r"(?<![\w-])(?i:(?:set-)?cookie)[\"']?[ \t]*:[ \t]*[\"']?"
            r"(?P<secret>(?=[^\r\n\"'=]{0,400}=)[^\r\n\"']{8,})"
        ),
        _always("cookie"),
        ("cookie",),
    ),
    # Passwords given to well-known command-line tools.
    _Rule(
        re.compile(
            r"(?<![\w-])(?:-u|--user)[ \t]*[\"']?"
            r"(?P<user>[^\s:\"']+):(?P<secret>[^\s\"']+)"
        ),
        _on_command_line(_CURL_RE, _user_password("password")),
        ("curl",),
    ),
    _Rule(
        re.compile(r"(?<=[ \t])-p(?P<secret>[^\s\"'-][^\s\"']*)"),
        _on_command_line(_MYSQL_RE, _labelled_value("password")),
        ("mysql", "mariadb"),
    ),
    _Rule(
        re.compile(r"\bsshpass[ \t]+-p[ \t]*[\"']?(?P<secret>[^\s\"']+)"),
        _labelled_value("password"),
        ("sshpass",),
    ),
    # Passwords and tokens written in prose or in a netrc file.
    _Rule(
        re.compile(r"\bmachine[ \t]+\S+\s+login[ \t]+\S+\s+password[ \t]+(?P<secret>[^\s\"'\\]+)"),
        _prose_password,
        ("machine",),
    ),
    _Rule(
        re.compile(
            r"(?i:\b(?:password|passphrase|passcode|passwd|pin)[ \t]+(?:is|was)[ \t]*:?[ \t]+)"
            r"(?P<secret>[^\s\"\\]+)"
        ),
        _prose_password,
        ("pass", "pin"),
    ),
    _Rule(
        re.compile(
            r"(?i:\btoken(?:[ \t]+(?:is|was))?[ \t]*:?[ \t]+)(?P<secret>[A-Za-z0-9_.~+/-]{20,}=*)"
        ),
        _bare_token,
        ("token",),
    ),
    # Generic labelled assignments in env, JSON, YAML, TOML, Python and shell style.
    _Rule(
        re.compile(rf"{_LABEL}(?P<vq>\\?\")(?P<secret>(?:[^\"\\\n]|\\[^\"\n])*)(?P=vq)"),
        _labelled(quoted=True),
        _LABEL_NEEDLES,
    ),
    _Rule(re.compile(rf"{_LABEL}'(?P<secret>[^'\n]*)'"), _labelled(quoted=True), _LABEL_NEEDLES),
    _Rule(
        re.compile(rf"{_NAME}{_OP_EQ}(?P<secret>{_EQ_VALUE})"),
        _labelled(quoted=False),
        _LABEL_NEEDLES,
    ),
    _Rule(  # YAML / header style: the value runs to the end of the line
        re.compile(rf"{_NAME}{_OP_COLON}(?P<secret>[^\s\"'`,<>(){{}}\[\]\\]+)"),
        _labelled(quoted=False),
        _LABEL_NEEDLES,
    ),
    _Rule(
        re.compile(
            r"(?<![\w-])--(?P<key>[A-Za-z][\w-]{0,63})[ \t]+(?P<q>[\"']?)"
            r"(?P<secret>[^\s\"'`;&|<>()$-][^\s\"'`;&|<>()]*)(?P=q)"
        ),
        _flag,
        ("--",),
    ),
)


def _apply(rule: _Rule, text: str, stats: RedactionStats) -> str:
    """Replace the ``secret`` group of each accepted match of ``rule`` with its marker."""

    def replace(m: re.Match[str]) -> str:
        whole = m.group(0)
        secret = m.group("secret")
        if not secret or _MARKER_RE.search(secret):
            return whole
        kind = rule.classify(m)
        if kind is None:
            return whole
        stats.add(kind)
        start, end = m.span("secret")
        base = m.start()
        return whole[: start - base] + marker(kind) + whole[end - base :]

    return rule.pattern.sub(replace, text)


_MAX_PASSES = 8


def redact_with_stats(text: str, stats: RedactionStats | None = None) -> tuple[str, RedactionStats]:
    """Redact secrets in ``text``; return the result and per-kind counts (added to ``stats``)."""
    stats = RedactionStats() if stats is None else stats
    # Replacing one secret can expose a neighbour it was glued to (``AIza...123:AA...``), so
    # repeat until a pass finds nothing: that makes redaction idempotent. Each pass that finds
    # something turns at least one character of plain text into a marker, so this terminates.
    for _ in range(_MAX_PASSES):
        before = stats.total
        lowered = text.lower()
        for rule in _RULES:
            if rule.needles and not any(n in lowered for n in rule.needles):
                continue
            text = _apply(rule, text, stats)
        if stats.total == before:
            break
    return text, stats


def redact_with_count(text: str) -> tuple[str, int]:
    """Redact secrets in ``text``; return the result and how many secrets were replaced."""
    redacted, stats = redact_with_stats(text)
    return redacted, stats.total


def redact(text: str) -> str:
    """Return ``text`` with every recognised secret replaced by a ``[REDACTED:kind]`` marker."""
    return redact_with_stats(text)[0]


def redact_value(value: object, stats: RedactionStats | None = None) -> object:
    """Redact strings anywhere inside ``value`` (dicts, lists, tuples); other values pass through.

    A string stored under a key that names a secret (``{"api_key": "..."}``) is replaced whole
    when it looks like a real secret, even without a recognisable provider prefix.
    """
    stats = RedactionStats() if stats is None else stats
    if isinstance(value, str):
        return redact_with_stats(value, stats)[0]
    if isinstance(value, dict):
        return {k: _redact_entry(k, v, stats) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_value(item, stats) for item in value]
    if isinstance(value, tuple):
        return tuple(redact_value(item, stats) for item in value)
    return value


def _redact_entry(key: object, value: object, stats: RedactionStats) -> object:
    """Redact one dict entry, treating a string under a secret-naming key as a secret."""
    if isinstance(key, str) and isinstance(value, str):
        redacted = redact_with_stats(value, stats)[0]
        family = _key_family(key)
        if redacted == value and family is not None and _plausible(value, family, quoted=True):
            stats.add(family)
            return marker(family)
        return redacted
    return redact_value(value, stats)
