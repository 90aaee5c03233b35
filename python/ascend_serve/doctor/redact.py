"""Remove secrets from text before it is shown, stored or put in a support bundle.

What is removed: API keys and tokens in ``KEY=value`` / ``key: value`` form (any key whose name
says key, token, secret, password or passwd: ``VLLM_API_KEY=...``, ``HF_TOKEN=...``,
``password: ...``), HTTP ``Authorization:`` / ``Proxy-Authorization:`` headers and bare
``Bearer ...`` tokens, Ansible Vault blocks (``$ANSIBLE_VAULT;...`` and the hex lines after it),
PEM private keys (the whole block), passwords in URLs (``scheme://user:password@host``) and
vLLM's ``--api-key VALUE`` flag. The name stays, so a reader still sees *that* a key is set.
"""

from __future__ import annotations

import re
from collections.abc import Callable

REDACTED = "<redacted>"

# A name that says "this is secret": VLLM_API_KEY, api-key, HF_TOKEN, password, db_passwd, ...
_SENSITIVE_NAME = (
    r"[A-Za-z0-9_.-]*?(?:api[_-]?key|apikey|access[_-]?key|secret|token|passw(?:or)?d|passphrase"
    r"|credentials?|private[_-]?key)(?![A-Za-z])[A-Za-z0-9_.-]*"
)

# A value: quoted (spaces allowed inside), or up to the next blank, quote, comma or brace.
_VALUE = r"\"[^\"\n]*\"|'[^'\n]*'|[^\s'\",}&]+"



def _keep_quotes(match: re.Match[str]) -> str:
    value = match.group(4)
    quote = value[0] if value[:1] in ("'", '"') else ""
    return f"{match.group(1)}{match.group(2)}{match.group(3)}{quote}{REDACTED}{quote}"


_PATTERNS: tuple[tuple[re.Pattern[str], str | Callable[[re.Match[str]], str]], ...] = (
    # PEM private keys: the whole block, whatever kind.
    (re.compile(r"-----BEGIN ([A-Z0-9 ]*)PRIVATE KEY-----.*?(?:-----END \1PRIVATE KEY-----|\Z)",
                re.DOTALL),
     f"-----BEGIN \\1PRIVATE KEY----- {REDACTED} -----END \\1PRIVATE KEY-----"),
    # Ansible Vault: the header line and the hex body lines below it (inline `!vault |` too).
    (re.compile(r"(\$ANSIBLE_VAULT;[^\n]*)(?:\n[ \t]*[0-9a-fA-F]{8,}[ \t]*)+"),
     f"$ANSIBLE_VAULT;{REDACTED}"),
    # HTTP authorization headers, in any quoting ("Authorization: Bearer x", 'authorization': 'x').
    (re.compile(r"((?:proxy-)?authorization['\"]?\s*[:=]\s*['\"]?)[^'\"\r\n,}]+", re.IGNORECASE),
     f"\\1{REDACTED}"),
    (re.compile(r"\b(Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=-]{8,}"), f"\\1 {REDACTED}"),
    # --api-key VALUE / --api-key=VALUE / --token ... on a command line.
    (re.compile(rf"(--{_SENSITIVE_NAME}(?:=|\s+))(?!{re.escape(REDACTED)})({_VALUE})",
                re.IGNORECASE), f"\\1{REDACTED}"),
    # KEY=value (env files, /proc/PID/environ, export lines), KEY: value (YAML), "key": "value";
    # a quoted value keeps its quotes (JSON stays JSON), true/false/null are not secrets.
    (re.compile(rf"(^|[\s;,{{(&?'\"]|export\s)({_SENSITIVE_NAME})(['\"]?[ \t]*[:=][ \t]*)"
                rf"(?!['\"]?{re.escape(REDACTED)})(?!!vault)(?!(?:true|false|null)\b)({_VALUE})",
                re.IGNORECASE | re.MULTILINE), _keep_quotes),
    # user:password@ in URLs.
    (re.compile(r"([a-z][a-z0-9+.-]*://[^/\s:@]+:)[^@\s/]+@", re.IGNORECASE), f"\\1{REDACTED}@"),
)


def redact(text: str) -> str:
    """``text`` with every secret this module recognises replaced by ``<redacted>``."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    return text


def redact_values(text: str, values: list[str]) -> str:
    """Also remove these exact strings (secrets known by value, e.g. read from a key file)."""
    for value in sorted({v for v in values if len(v) >= 4}, key=len, reverse=True):
        text = text.replace(value, REDACTED)
    return text
