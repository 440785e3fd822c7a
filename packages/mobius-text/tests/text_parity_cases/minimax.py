"""MiniMax: attention and lightning layers alternate, 4 experts top-2, scaled residuals.

transformers' MiniMax only runs with its own ``MiniMaxCache`` (it rejects a
``DynamicCache``). PyTorch prefills a lightning layer block by block from the
checkpoint's (perturbed) decay tables and decodes by recurrence from
``slope_rate``: ``block_size=2`` splits the 7-token prompt into 4 blocks (decay
across blocks, a short last block), 4 gives 2 blocks, the default 256 one.
"""

from transformers.models.minimax.modeling_minimax import MiniMaxCache

OPTIONS = dict(torch_cache=lambda model, batch: MiniMaxCache())


class FirstLinearCache(MiniMaxCache):
    """``MiniMaxCache`` sizes attention masks from layer 0, which holds no keys when layer 0 is
    lightning (as in MiniMax-Text-01): decode masks then span only the new token and left
    padding leaks into attention. Size them from the first layer that holds keys instead."""

    def _attention_layer(self, layer_idx: int) -> int:
        held = [i for i, layer in enumerate(self.layers) if layer.is_initialized]
        return held[0] if held else layer_idx

    def get_mask_sizes(self, query_length: int, layer_idx: int):
        return super().get_mask_sizes(query_length, self._attention_layer(layer_idx))

    def get_query_offset(self, layer_idx: int):
        return super().get_query_offset(self._attention_layer(layer_idx))


BASE = dict(head_dim=16, num_local_experts=4, num_experts_per_tok=2, block_size=256)

CASES = {
    "minimax": ("minimax", BASE, OPTIONS),
    "minimax-blocks": (
        "minimax",
        dict(
            BASE,
            num_hidden_layers=4,
            block_size=2,
            full_attn_alpha_factor=0.7,
            full_attn_beta_factor=1.3,
            linear_attn_alpha_factor=1.2,
            linear_attn_beta_factor=0.8,
            mlp_alpha_factor=0.9,
            mlp_beta_factor=1.1,
        ),
        OPTIONS,
    ),
    "minimax-sliding": ("minimax", dict(BASE, block_size=4, sliding_window=4), OPTIONS),
    "minimax-linear-first": (
        "minimax",
        dict(
            BASE,
            num_hidden_layers=3,
            block_size=4,
            layer_types=["linear_attention", "full_attention", "linear_attention"],
        ),
        dict(torch_cache=lambda model, batch: FirstLinearCache()),
    ),
}
