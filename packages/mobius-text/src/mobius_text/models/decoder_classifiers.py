"""Decoders with a sequence-classification head: ``LlamaForSequenceClassification``...

Reward models and guard classifiers are a causal LM's backbone with ``score``, a
Linear without bias onto ``num_labels``, read at one token per row: as transformers
picks it, the rightmost token that is not ``pad_token_id`` (left and right padding
alike), or, where the config has no pad token, the last real token of
``attention_mask`` (transformers then takes the last position, and refuses batches
of more than one row). The backbone runs as the text encoders' does
(:class:`~mobius_text.models.text_encoders.DecoderTextEncoder`: no cache, positions
``0..sequence-1``); the task is ``text-classification``
(:mod:`mobius_text.text_classification`). The checkpoint's ``architectures`` names
the registration key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import onnx_ir as ir

from mobius.components import Linear, last_real_token, module_scope
from mobius.errors import ConfigError
from mobius_text.models.arcee import ArceeForCausalLM
from mobius_text.models.exaone4 import Exaone4ForCausalLM
from mobius_text.models.gemma import GemmaForCausalLM
from mobius_text.models.gemma2 import Gemma2ForCausalLM
from mobius_text.models.glm import Glm4ForCausalLM, GlmForCausalLM
from mobius_text.models.helium import HeliumForCausalLM
from mobius_text.models.llama import LlamaForCausalLM
from mobius_text.models.mistral import MistralForCausalLM
from mobius_text.models.mixtral import MixtralForCausalLM
from mobius_text.models.nemotron import NemotronForCausalLM
from mobius_text.models.olmo import OlmoForCausalLM
from mobius_text.models.olmo2 import Olmo2ForCausalLM
from mobius_text.models.olmo3 import Olmo3ForCausalLM
from mobius_text.models.phi import PhiForCausalLM
from mobius_text.models.phi3 import Phi3ForCausalLM
from mobius_text.models.qwen import Qwen2ForCausalLM, Qwen3ForCausalLM
from mobius_text.models.qwen2_moe import Qwen2MoeForCausalLM
from mobius_text.models.qwen3_moe import Qwen3MoeForCausalLM
from mobius_text.models.seed_oss import SeedOssForCausalLM
from mobius_text.models.smollm3 import SmolLM3ForCausalLM
from mobius_text.models.stablelm import StableLmForCausalLM
from mobius_text.models.starcoder2 import Starcoder2ForCausalLM
from mobius_text.models.text_encoders import DecoderTextEncoder, TextEncoderFields


@dataclass
class ClassifierFields:
    """Mixin of a text-encoder config (before it in the bases): the labels of ``score``."""

    @classmethod
    def hf_fields(cls, hf_config: Any) -> dict[str, Any]:
        labels = getattr(hf_config, "num_labels", None)
        if not isinstance(labels, int) or isinstance(labels, bool) or labels < 1:
            raise ConfigError(f"num_labels must be a positive integer; got {labels!r}")
        fields = super().hf_fields(hf_config)
        pad = fields.get("pad_token_id")
        if pad is not None and (not isinstance(pad, int) or isinstance(pad, bool) or pad < 0):
            raise ConfigError(f"pad_token_id must be a token id or null; got {pad!r}")
        return {**fields, "num_labels": labels, "head": "sequence-classification"}


def last_scored_token(op, hidden, input_ids, attention_mask, pad_token_id: int | None):
    """``hidden [batch, seq, dim]`` at the token transformers scores: ``[batch, dim]``.

    The rightmost position whose id is not ``pad_token_id`` (a pad id inside the text
    moves it, as in transformers); without a pad id, the mask's last real token.
    """
    if pad_token_id is None:
        return last_real_token(op, hidden, attention_mask)
    pad = op.Constant(value=ir.tensor(pad_token_id, dtype=ir.DataType.INT64))
    kept = op.Cast(op.Not(op.Equal(input_ids, pad)), to=ir.DataType.INT64)
    return last_real_token(op, hidden, kept)  # the same argmax over positions, of ``kept``


class SequenceClassifier:
    """Mixin of a text encoder (before it in the bases): ``score`` on the scored token."""

    task = "text-classification"

    def __init__(self, config) -> None:
        super().__init__(config)
        self.score = Linear(config.hidden_size, config.num_labels, bias=False)

    def forward(self, op, input_ids, attention_mask, token_type_ids=None):
        with module_scope(op, self.model):  # the backbone's pieces keep their ``model.`` names
            hidden = self.token_states(op, input_ids, attention_mask)[-1]
        token = last_scored_token(op, hidden, input_ids, attention_mask, self.config.pad_token_id)
        return {"last_hidden_state": hidden, "logits": self.score(op, token)}

    def sanitize(self, weights: dict) -> dict:
        """The text encoder's names, ``score`` kept at the top level."""
        head = {k: v for k, v in weights.items() if k.startswith("score.")}
        body = super().sanitize({k: v for k, v in weights.items() if k not in head})
        return {**body, **head}


def classifier(causal_lm: type, name: str) -> type:
    """The class ``name``: ``causal_lm``'s backbone (called as :class:`LlamaModel` is) with
    ``score``, its config the family's with the text-encoder and classifier fields."""
    config = dataclass(
        type(f"{name}Config", (ClassifierFields, TextEncoderFields, causal_lm.config_class), {})
    )
    body = dict(config_class=config, backbone_class=causal_lm.model_class)
    body.update(__module__=__name__, __doc__=f"{causal_lm.__name__}'s backbone with ``score``.")
    return type(name, (SequenceClassifier, DecoderTextEncoder), body)


# Families whose backbone computes as LlamaModel does: one line each.
LlamaForSequenceClassification = classifier(LlamaForCausalLM, "LlamaForSequenceClassification")
Qwen2ForSequenceClassification = classifier(Qwen2ForCausalLM, "Qwen2ForSequenceClassification")
Qwen3ForSequenceClassification = classifier(Qwen3ForCausalLM, "Qwen3ForSequenceClassification")
MistralForSequenceClassification = classifier(
    MistralForCausalLM, "MistralForSequenceClassification"
)
Gemma2ForSequenceClassification = classifier(Gemma2ForCausalLM, "Gemma2ForSequenceClassification")
GlmForSequenceClassification = classifier(GlmForCausalLM, "GlmForSequenceClassification")
GemmaForSequenceClassification = classifier(GemmaForCausalLM, "GemmaForSequenceClassification")
Glm4ForSequenceClassification = classifier(Glm4ForCausalLM, "Glm4ForSequenceClassification")
Phi3ForSequenceClassification = classifier(Phi3ForCausalLM, "Phi3ForSequenceClassification")
PhiForSequenceClassification = classifier(PhiForCausalLM, "PhiForSequenceClassification")
OlmoForSequenceClassification = classifier(OlmoForCausalLM, "OlmoForSequenceClassification")
Olmo2ForSequenceClassification = classifier(Olmo2ForCausalLM, "Olmo2ForSequenceClassification")
Olmo3ForSequenceClassification = classifier(Olmo3ForCausalLM, "Olmo3ForSequenceClassification")
HeliumForSequenceClassification = classifier(HeliumForCausalLM, "HeliumForSequenceClassification")
SmolLM3ForSequenceClassification = classifier(
    SmolLM3ForCausalLM, "SmolLM3ForSequenceClassification"
)
StableLmForSequenceClassification = classifier(
    StableLmForCausalLM, "StableLmForSequenceClassification"
)
Starcoder2ForSequenceClassification = classifier(
    Starcoder2ForCausalLM, "Starcoder2ForSequenceClassification"
)
Exaone4ForSequenceClassification = classifier(
    Exaone4ForCausalLM, "Exaone4ForSequenceClassification"
)
SeedOssForSequenceClassification = classifier(
    SeedOssForCausalLM, "SeedOssForSequenceClassification"
)
ArceeForSequenceClassification = classifier(ArceeForCausalLM, "ArceeForSequenceClassification")
NemotronForSequenceClassification = classifier(
    NemotronForCausalLM, "NemotronForSequenceClassification"
)
MinistralForSequenceClassification = classifier(
    MistralForCausalLM, "MinistralForSequenceClassification"
)
MixtralForSequenceClassification = classifier(
    MixtralForCausalLM, "MixtralForSequenceClassification"
)
Qwen2MoeForSequenceClassification = classifier(
    Qwen2MoeForCausalLM, "Qwen2MoeForSequenceClassification"
)
Qwen3MoeForSequenceClassification = classifier(
    Qwen3MoeForCausalLM, "Qwen3MoeForSequenceClassification"
)

MODEL_TYPES = {
    name: cls
    for name, cls in list(globals().items())
    if name.endswith("ForSequenceClassification") and isinstance(cls, type)
}
