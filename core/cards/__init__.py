"""The words of the "how to read this" cards, filled with the selected step's own numbers.

Each builder takes records (never a widget) and returns an :class:`Explainer`: what the picture
shows, the live numbers, the phenomena those numbers show (computed in
:mod:`llm_lens.core.arithmetic`), and one thing to try. The desktop cards and the tour show them;
a notebook can print them.

One module per stage, named as the stage's own module in ``llm_lens.core`` (and its pane), so a
stage's teaching text sits beside it: :mod:`.tokens`, :mod:`.embeddings`, :mod:`.positions`,
:mod:`.attention`, :mod:`.layers`, :mod:`.kvcache`, :mod:`.experts`, :mod:`.logits`,
:mod:`.sampling`, with :mod:`.timing`, :mod:`.attribution` ("Why this token?") and :mod:`.whatif`;
what every card is (:class:`Explainer`, how a token and a probability are written) is
:mod:`.common`.
"""

from llm_lens.core.cards.attention import attention_card
from llm_lens.core.cards.attribution import attribution_card
from llm_lens.core.cards.common import Explainer, count, p3, pct, q
from llm_lens.core.cards.embeddings import embeddings_card
from llm_lens.core.cards.experts import DENSE_TRY, experts_card
from llm_lens.core.cards.kvcache import kvcache_card
from llm_lens.core.cards.layers import layers_card
from llm_lens.core.cards.logits import logits_card
from llm_lens.core.cards.positions import positions_card
from llm_lens.core.cards.sampling import sampling_card
from llm_lens.core.cards.timing import timing_card
from llm_lens.core.cards.tokens import tokens_card
from llm_lens.core.cards.whatif import whatif_card

__all__ = [
    "DENSE_TRY",
    "Explainer",
    "attention_card",
    "attribution_card",
    "count",
    "embeddings_card",
    "experts_card",
    "kvcache_card",
    "layers_card",
    "logits_card",
    "p3",
    "pct",
    "positions_card",
    "q",
    "sampling_card",
    "timing_card",
    "tokens_card",
    "whatif_card",
]
