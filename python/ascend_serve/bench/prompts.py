"""The prompts of ``ascend-serve bench``: a local tokenizer, random prompts, ShareGPT files.

Nothing is downloaded: the tokenizer is read from a local model directory, with the
``tokenizers`` package (``tokenizer.json``, fast to load) or else ``transformers``'
``AutoTokenizer`` with ``local_files_only``; neither installed, or no tokenizer there, raises a
:class:`PromptError` that says so.

Random prompts follow ``vllm bench serve --dataset-name random``: token ids drawn with a seeded
generator from the vocabulary less its added/special tokens and byte fragments, decoded,
re-encoded and trimmed or topped up (or drawn again) until the text is exactly ``input_len``
tokens *including* the special tokens the tokenizer adds (a BOS), so the server's
``usage.prompt_tokens`` is ``input_len`` on the completions endpoint (the chat template adds
its own tokens on the chat endpoint).

ShareGPT-style files: a JSON list, or JSON Lines, of objects with ``conversations`` (or
``messages``), a list of ``{"from": "human"|"gpt", "value": …}`` or ``{"role": "user"|
"assistant", "content": …}`` turns. The first human/user turn is the prompt; the first
gpt/assistant turn after it gives the output length (its token count, bounded to
``1..max_output_len``) unless a fixed output length is asked for. Entries without such a pair,
or with a prompt of fewer than 4 tokens, are skipped (as vLLM's ShareGPT loader does); the kept
ones are shuffled with the seed and cycled when fewer than the prompts asked for.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

MIN_DATASET_PROMPT_TOKENS = 4
DEFAULT_MAX_OUTPUT_LEN = 1024
# Rounds of decode → re-encode → adjust, and fresh draws, before a random prompt is taken as
# it is (its real length is then what is recorded).
_ADJUST_ROUNDS = 10
_DRAWS = 5
_REPLACEMENT = "\ufffd"  # what a lone byte of a multi-byte character decodes to

HUMAN_ROLES = frozenset({"human", "user"})
ASSISTANT_ROLES = frozenset({"gpt", "assistant", "chatgpt", "bot", "model"})


class PromptError(ValueError):
    """The prompts cannot be made: no usable tokenizer, an unreadable or empty dataset."""


class Tokenizer(Protocol):
    """What the bench needs of a tokenizer."""

    name: str
    vocab_size: int
    special_ids: frozenset[int]
    num_special_tokens: int  # tokens ``encode(…, add_special_tokens=True)`` adds (a BOS)

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` without special tokens."""
        ...

    def decode(self, ids: list[int]) -> str:
        ...

    def ordinary_ids(self) -> list[int]:
        """Ids of the vocabulary that are neither special/added tokens nor byte fragments."""
        ...


@dataclass(frozen=True)
class Prompt:
    """One request to send: the prompt text, its token count and the output tokens to ask."""

    text: str
    prompt_len: int
    output_len: int


class _LibraryTokenizer:
    """What the two tokenizer libraries' adapters below share; ``_tok`` is the library's own."""

    name: str
    vocab_size: int
    special_ids: frozenset[int]
    _tok: Any

    def decode(self, ids: list[int]) -> str:
        return str(self._tok.decode(ids, skip_special_tokens=False))

    def _decode_each(self, batch: list[list[int]]) -> list[str]:
        """The texts of several id lists at once (the library's batch decode)."""
        raise NotImplementedError

    def ordinary_ids(self) -> list[int]:
        ids = [i for i in range(self.vocab_size) if i not in self.special_ids]
        texts = self._decode_each([[i] for i in ids])
        return [i for i, text in zip(ids, texts, strict=True) if text and _REPLACEMENT not in text]


class _FastTokenizer(_LibraryTokenizer):
    """A ``tokenizers.Tokenizer`` read from ``tokenizer.json``."""

    def __init__(self, path: Path) -> None:
        from tokenizers import Tokenizer as RawTokenizer

        self.name = str(path)
        self._tok = RawTokenizer.from_file(str(path))
        self.vocab_size = int(self._tok.get_vocab_size(with_added_tokens=True))
        self.special_ids = frozenset(int(i) for i in self._tok.get_added_tokens_decoder())
        self.num_special_tokens = len(self._tok.encode("", add_special_tokens=True).ids)

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def _decode_each(self, batch: list[list[int]]) -> list[str]:
        return list(self._tok.decode_batch(batch, skip_special_tokens=False))


class _HfTokenizer(_LibraryTokenizer):
    """``transformers.AutoTokenizer`` from a local directory (no download)."""

    def __init__(self, path: Path) -> None:
        from transformers import AutoTokenizer

        self.name = str(path)
        self._tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        self.vocab_size = len(self._tok)
        specials = set(self._tok.all_special_ids)
        specials.update(int(i) for i in getattr(self._tok, "added_tokens_decoder", {}))
        self.special_ids = frozenset(specials)
        self.num_special_tokens = int(self._tok.num_special_tokens_to_add())

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False))

    def _decode_each(self, batch: list[list[int]]) -> list[str]:
        return list(self._tok.batch_decode(batch, skip_special_tokens=False))


def load_tokenizer(path: str | Path) -> Tokenizer:
    """The tokenizer of a local model directory (or a ``tokenizer.json`` file).

    Raises :class:`PromptError` when the path holds none, or no tokenizer library is installed.
    """
    where = Path(path).expanduser()
    if not where.exists():
        raise PromptError(f"tokenizer path {where} does not exist")
    file = where if where.is_file() else where / "tokenizer.json"
    if file.is_file():
        try:
            return _FastTokenizer(file)
        except ImportError:
            pass  # try transformers below
        except Exception as exc:
            raise PromptError(f"cannot read the tokenizer {file}: {exc}") from exc
    if not where.is_dir():
        raise PromptError(f"{where} is not a model directory or a tokenizer.json file")
    try:
        return _HfTokenizer(where)
    except ImportError as exc:
        raise PromptError(
            "no tokenizer library: install 'tokenizers' or 'transformers' (the 'models' extra "
            "of ascend-serve) to make prompts") from exc
    except Exception as exc:
        raise PromptError(f"no usable tokenizer in {where}: {exc}") from exc


def _fit_length(tokenizer: Tokenizer, ids: list[int], target: int,
                allowed: np.ndarray, rng: np.random.Generator) -> tuple[str, int]:
    """Text that re-encodes to ``target`` tokens (or as close as a few rounds get)."""
    text = tokenizer.decode(ids)
    for _ in range(_ADJUST_ROUNDS):
        ids = tokenizer.encode(text)
        if len(ids) == target:
            return text, target
        if len(ids) > target:
            ids = ids[:target]
        else:
            ids = ids + [int(t) for t in rng.choice(allowed, size=target - len(ids))]
        text = tokenizer.decode(ids)
    return text, len(tokenizer.encode(text))


def random_prompts(tokenizer: Tokenizer, num_prompts: int, input_len: int, output_len: int,
                   seed: int = 0) -> list[Prompt]:
    """``num_prompts`` prompts of ``input_len`` tokens (special tokens included), each asking
    for ``output_len`` tokens; the same seed gives the same prompts."""
    if num_prompts < 1:
        raise PromptError(f"num_prompts must be at least 1, not {num_prompts}")
    if output_len < 1:
        raise PromptError(f"output_len must be at least 1, not {output_len}")
    body_len = input_len - tokenizer.num_special_tokens
    if body_len < 1:
        raise PromptError(f"input_len {input_len} leaves no room for text: the tokenizer adds "
                          f"{tokenizer.num_special_tokens} special token(s) of its own")
    allowed = np.array(tokenizer.ordinary_ids())
    if allowed.size == 0:
        raise PromptError(f"the tokenizer {tokenizer.name} has no ordinary tokens")
    rng = np.random.default_rng(seed)
    prompts = []
    for _ in range(num_prompts):
        best: tuple[str, int] | None = None
        for _draw in range(_DRAWS):
            ids = [int(t) for t in rng.choice(allowed, size=body_len)]
            text, length = _fit_length(tokenizer, ids, body_len, allowed, rng)
            if best is None or abs(length - body_len) < abs(best[1] - body_len):
                best = (text, length)
            if length == body_len:
                break
        assert best is not None
        prompts.append(Prompt(best[0], best[1] + tokenizer.num_special_tokens, output_len))
    return prompts


def _turns(entry: Any) -> list[tuple[str, str]]:
    """``(role, text)`` of an entry's turns; roles lower-cased; turns of other shapes skipped."""
    if not isinstance(entry, dict):
        return []
    turns = entry.get("conversations", entry.get("messages"))
    if not isinstance(turns, list):
        return []
    out = []
    for turn in turns:
        if not isinstance(turn, dict):
            continue
        role = turn.get("from", turn.get("role"))
        text = turn.get("value", turn.get("content"))
        if isinstance(role, str) and isinstance(text, str):
            out.append((role.strip().lower(), text))
    return out


def conversation_pair(entry: Any) -> tuple[str, str] | None:
    """The first human/user turn and the first gpt/assistant turn after it; None if absent."""
    turns = _turns(entry)
    for i, (role, text) in enumerate(turns):
        if role in HUMAN_ROLES:
            for later_role, answer in turns[i + 1:]:
                if later_role in ASSISTANT_ROLES:
                    return text, answer
            return None
    return None


def read_dataset(path: str | Path) -> list[Any]:
    """The entries of a JSON list or JSON Lines file."""
    file = Path(path).expanduser()
    try:
        text = file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PromptError(f"cannot read the dataset {file}: {exc}") from exc
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(stripped)
        except ValueError as exc:
            raise PromptError(f"the dataset {file} is not valid JSON: {exc}") from exc
        return list(data)
    entries: list[Any] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            entries.append(json.loads(line))
        except ValueError as exc:
            raise PromptError(f"{file} line {number} is not JSON (a JSON list or JSON Lines "
                              f"file is expected): {exc}") from exc
    return entries


def dataset_prompts(entries: Iterable[Any], tokenizer: Tokenizer, num_prompts: int, *,
                    seed: int = 0, output_len: int | None = None,
                    max_output_len: int = DEFAULT_MAX_OUTPUT_LEN,
                    max_total_len: int | None = None) -> list[Prompt]:
    """``num_prompts`` prompts from ShareGPT-style entries (see the module docstring).

    ``output_len`` fixes every request's output length; otherwise it is the answer turn's token
    count bounded to ``1..max_output_len``. With ``max_total_len`` (the server's max model
    length), pairs whose prompt and output do not fit are skipped.
    """
    if num_prompts < 1:
        raise PromptError(f"num_prompts must be at least 1, not {num_prompts}")
    pairs = [pair for pair in map(conversation_pair, entries) if pair is not None]
    if not pairs:
        raise PromptError("the dataset has no conversation with a human/user turn followed by "
                          "a gpt/assistant turn")
    random.Random(seed).shuffle(pairs)
    prompts: list[Prompt] = []
    for question, answer in pairs:
        prompt_len = len(tokenizer.encode(question)) + tokenizer.num_special_tokens
        if prompt_len - tokenizer.num_special_tokens < MIN_DATASET_PROMPT_TOKENS:
            continue
        wanted = output_len if output_len is not None else \
            max(1, min(len(tokenizer.encode(answer)), max_output_len))
        if max_total_len is not None and prompt_len + wanted > max_total_len:
            continue
        prompts.append(Prompt(question, prompt_len, wanted))
        if len(prompts) == num_prompts:
            return prompts
    if not prompts:
        limit = f" that fits {max_total_len} tokens" if max_total_len is not None else ""
        raise PromptError(f"no conversation of the dataset has a prompt of at least "
                          f"{MIN_DATASET_PROMPT_TOKENS} tokens{limit}")
    kept = len(prompts)
    while len(prompts) < num_prompts:
        prompts.append(prompts[len(prompts) % kept])
    return prompts
