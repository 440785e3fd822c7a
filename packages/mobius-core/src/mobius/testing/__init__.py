"""The synthetic-parity kit every domain package reuses (needs torch and transformers: test-only).

A tiny HF model is made from a config, every parameter perturbed with seeded
noise, saved with ``save_pretrained``, built through the same path as
``mobius build``, and compared in ONNX Runtime against PyTorch at fp32.
"""

from mobius.testing._blocks import run_kept_blocks
from mobius.testing._cases import collect_cases
from mobius.testing._encoder_parity import (
    EncoderParity,
    check_encoder_parity,
    make_random_encoder,
    pool_like_sentence_transformers,
    random_boxes,
    random_ids,
    right_padded_batch,
)
from mobius.testing._generation import genai_greedy, torch_greedy
from mobius.testing._graph import module_graph, run_module
from mobius.testing._parity import (
    PARITY_ATOL,
    CausalLMParity,
    OnnxCausalLM,
    build_with_cli,
    check_causal_lm_parity,
    left_padded_batch,
    make_random_model,
    perturb_parameters,
    text_forward,
)
from mobius.testing._parity_log import record_parity
from mobius.testing._seq2seq_parity import (
    OnnxSeq2Seq,
    Seq2SeqParity,
    check_seq2seq_parity,
    decode_greedy_through_both,
    make_random_seq2seq,
    torch_decoder_step,
)
from mobius.testing._tokenizer import tiny_tokenizer
from mobius.testing._validation import assert_smoke_passes, assert_validation_fails, broken_copy

__all__ = [
    "collect_cases",
    "pool_like_sentence_transformers",
    "text_forward",
    "assert_smoke_passes",
    "assert_validation_fails",
    "broken_copy",
    "run_kept_blocks",
    "record_parity",
    "tiny_tokenizer",
    "OnnxSeq2Seq",
    "Seq2SeqParity",
    "check_seq2seq_parity",
    "decode_greedy_through_both",
    "torch_decoder_step",
    "make_random_seq2seq",
    "EncoderParity",
    "check_encoder_parity",
    "make_random_encoder",
    "right_padded_batch",
    "random_boxes",
    "random_ids",
    "genai_greedy",
    "torch_greedy",
    "PARITY_ATOL",
    "CausalLMParity",
    "OnnxCausalLM",
    "build_with_cli",
    "check_causal_lm_parity",
    "left_padded_batch",
    "make_random_model",
    "module_graph",
    "perturb_parameters",
    "run_module",
]
