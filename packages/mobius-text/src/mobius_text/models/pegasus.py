"""Pegasus: Blenderbot's layout (pre-norm BART layers, final norms, no embedding LayerNorm,
positions from row 0) with fixed split sinusoids for positions."""

from __future__ import annotations

from mobius_text.models._sinusoids import split_sinusoids, supply_position_tables
from mobius_text.models.blenderbot import BlenderbotForCausalLM, BlenderbotForConditionalGeneration


class PegasusForConditionalGeneration(BlenderbotForConditionalGeneration):
    def sanitize(self, weights: dict) -> dict:
        """BART's mapping, plus the position tables transformers computes at load."""
        weights = super().sanitize(weights)
        table = split_sinusoids(self.config.max_position_embeddings, self.config.hidden_size)
        return supply_position_tables(weights, table)


class PegasusForCausalLM(BlenderbotForCausalLM):
    def sanitize(self, weights: dict) -> dict:
        """BART's mapping, plus the decoder's position table."""
        weights = super().sanitize(weights)
        table = split_sinusoids(self.config.max_position_embeddings, self.config.hidden_size)
        return supply_position_tables(weights, table, stacks=("decoder",))


MODEL_TYPES = {"pegasus": PegasusForConditionalGeneration, "PegasusForCausalLM": PegasusForCausalLM}
