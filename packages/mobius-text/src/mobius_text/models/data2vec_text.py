"""data2vec-text: RoBERTa's architecture under the ``data2vec_text.`` checkpoint prefix."""

from __future__ import annotations

from mobius_text.models.roberta import RobertaForCausalLM, RobertaForFeatureExtraction


class Data2VecTextForFeatureExtraction(RobertaForFeatureExtraction):
    """RoBERTa, with the encoder named ``data2vec_text`` as ``Data2VecTextFor*`` checkpoints name it."""

    base_model_prefix = "data2vec_text"


class Data2VecTextForCausalLM(RobertaForCausalLM):
    base_model_prefix = "data2vec_text"


MODEL_TYPES = {
    "data2vec-text": Data2VecTextForFeatureExtraction,
    "Data2VecTextForCausalLM": Data2VecTextForCausalLM,
}
