"""NLLB-MoE: M2M-100 stacks with top-2 expert layers; capacity drops, batch-prioritised routing.

transformers 5.24's ``NllbMoeExperts.forward`` one-hot encodes the 0/1 top-1 mask as
if it held expert indices, so only ``expert_0`` (weighted by every non-top-1 gate)
and ``expert_1`` (by the top-1 gate) ever run, whatever the router chose. The
reference here is the routing transformers 4.x and fairseq compute, each expert
on the tokens whose gate is non-zero: :func:`routed_experts` replaces that one
method (the router, capacity and everything else stay transformers' own).
"""

from transformers.models.nllb_moe import modeling_nllb_moe


def routed_experts(self, hidden_states, router_mask, router_probs):
    """``sum_e gate[:, e] * expert_e(x)``, scaled by ``1 - moe_token_dropout`` at inference.

    Every expert runs on every token; a zero gate adds an exact zero.
    """
    out = sum(
        self[f"expert_{e}"](hidden_states) * router_probs[:, e, None]
        for e in range(self.num_experts)
    )
    if self.moe_token_dropout > 0 and not self.training:
        out = out * (1 - self.moe_token_dropout)
    return out.to(hidden_states.dtype)


modeling_nllb_moe.NllbMoeExperts.forward = routed_experts

NLLB_MOE = dict(
    vocab_size=99,
    d_model=32,
    encoder_layers=2,
    decoder_layers=2,
    encoder_attention_heads=4,
    decoder_attention_heads=4,
    encoder_ffn_dim=37,
    decoder_ffn_dim=37,
    max_position_embeddings=64,
    num_experts=4,
    encoder_sparse_step=2,  # layer 1 of each stack sparse
    decoder_sparse_step=2,
    # capacity ceil(0.4 * tokens): 6 of the 14 source tokens, 1 of a decode step's 2
    moe_eval_capacity_token_fraction=0.4,
    pad_token_id=1,
    bos_token_id=0,
    eos_token_id=2,
    decoder_start_token_id=2,
)

CASES = {
    "nllb_moe": ("nllb-moe", NLLB_MOE),
    # every layer sparse, a fixed capacity of 2 per call, the most confident tokens
    # first, normalised before the drops, a router bias, no token-dropout scale
    "nllb_moe-prioritized": (
        "nllb-moe",
        dict(
            NLLB_MOE,
            encoder_sparse_step=1,
            decoder_sparse_step=1,
            moe_eval_capacity_token_fraction=0.0,
            expert_capacity=2,
            batch_prioritized_routing=True,
            normalize_router_prob_before_dropping=True,
            router_bias=True,
            moe_token_dropout=0.0,
        ),
    ),
}
